"""Search spaces from config: ``tune.space`` -> KerasTuner ``HyperParameters``, and a
trial's sampled values -> the ordinary ``ExperimentConfig`` that ``train`` runs.

Hyperparameters are named by their dotted config key (``optimizer.learning_rate``), so a
trial's values are config overrides as they stand. KerasTuner's own bookkeeping values
(``tuner/epochs`` ... set by Hyperband) are read here and never reach the config.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tfapp.config import ExperimentConfig, HyperParamConfig, with_values
from tfapp.training.callbacks import monitor_mode

import keras_tuner as kt


def build_hyperparameters(space: dict[str, HyperParamConfig]) -> kt.HyperParameters:
    """The whole space, declared up front (a Hyperband oracle given an empty space and left
    to discover it inside ``run_trial`` ran 0 trials)."""
    hps = kt.HyperParameters()
    for key, hp in space.items():
        if hp.type == "float":
            hps.Float(key, hp.min, hp.max, step=hp.step, sampling=hp.sampling)
        elif hp.type == "int":
            hps.Int(key, int(hp.min), int(hp.max), step=int(hp.step) if hp.step else None,
                    sampling=hp.sampling)
        elif hp.type == "choice":
            hps.Choice(key, list(hp.values))
        else:
            hps.Boolean(key)
    return hps


def config_values(values: dict[str, Any]) -> dict[str, Any]:
    """A trial's values without KerasTuner's own ``tuner/...`` entries."""
    return {k: v for k, v in values.items() if not k.startswith("tuner/")}


def objective(cfg: ExperimentConfig, default_monitor: str) -> kt.Objective:
    """``tune.objective`` (or the trainer's monitor, or the task's) with its direction."""
    name = cfg.tune.objective or cfg.trainer.monitor or default_monitor
    direction = cfg.tune.direction if cfg.tune.direction != "auto" else monitor_mode(name, "auto")
    return kt.Objective(name, direction=direction)


def search_dir(cfg: ExperimentConfig) -> Path:
    """Where the search keeps its oracle state, trials and results: output_dir/name."""
    return cfg.run_dir


def trial_run_name(execution: int) -> str:
    """The run directory's name of one execution of a trial, inside SEARCH_DIR/trial_ID."""
    return f"run_{execution}"


def _with_keys(group: Any, **values: Any) -> Any:
    """A copy of a config group with those of ``values`` that are keys of its task's class
    (the masked-LM task's has no data.snapshot or trainer.monitor: it stores nothing and
    is judged by its training loss)."""
    keys = {f.name for f in dataclasses.fields(group)}
    return dataclasses.replace(group, **{k: v for k, v in values.items() if k in keys})


def trial_config(cfg: ExperimentConfig, values: dict[str, Any], trial_id: str, execution: int,
                 obj: kt.Objective) -> ExperimentConfig:
    """The config one execution of one trial trains: ``cfg`` with the sampled values, run in
    ``SEARCH_DIR/trial_ID/run_EXECUTION`` (a stable directory, so an interrupted trial
    resumes from its own BackupAndRestore checkpoint)."""
    trial = with_values(cfg, config_values(values))
    t = cfg.tune
    epochs = values.get("tuner/epochs") or t.epochs or trial.trainer.epochs
    root = search_dir(cfg)
    return dataclasses.replace(
        trial,
        output_dir=str(root / f"trial_{trial_id}"), name=trial_run_name(execution),
        runtime=dataclasses.replace(trial.runtime, seed=trial.runtime.seed + execution),
        # One snapshot of the preprocessed data for every trial: its key covers what decides
        # the preprocessed values (data, seq_length, preprocessor), so trials that vary those
        # write their own and all others read the shared one.
        data=_with_keys(trial.data, snapshot=trial.data.snapshot or str(root / "snapshot")),
        trainer=_with_keys(
            trial.trainer, epochs=int(epochs), monitor=obj.name, monitor_mode=obj.direction,
            early_stopping_patience=t.early_stopping_patience
            or trial.trainer.early_stopping_patience),
        tracking=dataclasses.replace(trial.tracking, wandb=dataclasses.replace(
            trial.tracking.wandb, tags=[*trial.tracking.wandb.tags, f"search:{cfg.name}"])),
    )


def best_config(cfg: ExperimentConfig, values: dict[str, Any], obj: kt.Objective
                ) -> ExperimentConfig:
    """The best trial's config as a standalone training run: output_dir/NAME_best."""
    trial = trial_config(cfg, values, "best", 0, obj)
    return dataclasses.replace(trial, output_dir=cfg.output_dir, name=f"{cfg.name}_best")
