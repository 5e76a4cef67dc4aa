"""The end of a search: results table (printed, CSV, JSON) and best_params.yaml."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from tfapp.atomic import atomic_open
from tfapp.config import ExperimentConfig, to_yaml
from tfapp.tuning.space import best_config, config_values
from tfapp.tuning.tuner import read_record

import keras_tuner as kt


def collect(oracle: kt.Oracle, search_dir: Path) -> list[dict[str, Any]]:
    """One row per trial, best first (completed trials by objective, then the others)."""
    rows = []
    for trial in oracle.get_best_trials(len(oracle.trials)):
        record = read_record(search_dir, trial.trial_id)
        score = trial.score if trial.status == "COMPLETED" else None
        rows.append({
            "trial": trial.trial_id, "status": trial.status,
            "objective": None if score is None or math.isnan(score) else float(score),
            "values": config_values(trial.hyperparameters.values),
            "epochs": trial.hyperparameters.values.get("tuner/epochs"),
            "seconds": record.get("seconds"),
            "runs": record.get("runs", []),
            "error": record.get("error"),  # why a trial failed
        })
    return rows


def format_table(rows: list[dict[str, Any]], objective: kt.Objective, top: int = 10) -> str:
    keys = sorted({k for r in rows for k in r["values"]})
    epochs = any(r["epochs"] for r in rows)  # hyperband: epochs differ between trials
    header = ["trial", "status", f"{objective.name} ({objective.direction})", *keys,
              *(["epochs"] if epochs else []), "seconds"]
    body = [[r["trial"], r["status"], _cell(r["objective"]),
             *(_cell(r["values"].get(k)) for k in keys),
             *([_cell(r["epochs"])] if epochs else []), _cell(r["seconds"])] for r in rows[:top]]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body, strict=True)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
             for line in [header, *body]]
    more = f"\n... and {len(rows) - top} more trials" if len(rows) > top else ""
    return "\n".join(lines) + more


def write_results(rows: list[dict[str, Any]], objective: kt.Objective,
                  search_dir: Path) -> dict[str, Path]:
    keys = sorted({k for r in rows for k in r["values"]})
    csv_path, json_path = search_dir / "results.csv", search_dir / "results.json"
    with atomic_open(csv_path, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["trial", "status", objective.name, *keys, "epochs", "seconds"])
        for r in rows:
            writer.writerow([r["trial"], r["status"], r["objective"],
                             *(r["values"].get(k) for k in keys), r["epochs"], r["seconds"]])
    with atomic_open(json_path, newline="") as fh:
        json.dump({"objective": objective.name, "direction": objective.direction,
                   "trials": rows}, fh, indent=1, default=str)
    return {"csv": csv_path, "json": json_path}


def write_best_params(cfg: ExperimentConfig, rows: list[dict[str, Any]],
                      objective: kt.Objective, search_dir: Path) -> Path | None:
    """The best trial's complete config; ``python -m tfapp.train --config`` runs it as is."""
    best = next((r for r in rows if r["objective"] is not None), None)
    if best is None:
        return None
    values = dict(best["values"])
    if best["epochs"]:
        values["tuner/epochs"] = best["epochs"]
    best_cfg = best_config(cfg, values, objective)
    path = search_dir / "best_params.yaml"
    with atomic_open(path, newline="") as fh:
        fh.write(f"# Best of search {cfg.name}: trial {best['trial']}, {objective.name}="
                 f"{best['objective']:.6g}\n# Train it with: python -m tfapp.train --config "
                 f"{path}\n")
        fh.write(to_yaml(best_cfg))
    return path


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


