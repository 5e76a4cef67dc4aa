"""The KerasTuner ``BaseTuner`` subclass whose trials are ordinary tfapp training runs.

KerasTuner's ``Tuner`` rejects tf-keras models (it uses Keras 3 whenever Keras 3 is
installed), but its oracles and ``BaseTuner`` are framework-agnostic: ``BaseTuner`` asks
the oracle for a trial, calls ``run_trial``, reports the returned metrics and saves the
oracle state after every trial. So every search algorithm, resume and distributed tuning
(workers talking to a chief oracle over gRPC) come from KerasTuner, and each trial is
``tfapp.training.driver.train(cfg)`` on the sampled config.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from tfapp import compat
from tfapp.atomic import read_state, write_text
from tfapp.config import ConfigError, ExperimentConfig
from tfapp.run_layout import RunLayout
from tfapp.runtime import Runtime
from tfapp.runtime import setup as setup_runtime
from tfapp.tasks import get_task
from tfapp.training.driver import train
from tfapp.tuning import distributed
from tfapp.tuning.space import (
    build_hyperparameters,
    config_values,
    trial_config,
    trial_run_name,
)

import keras_tuner as kt
import tensorflow as tf
from keras_tuner import errors as kt_errors
from keras_tuner.engine import base_tuner

RECORD = "tfapp_trial.json"
# Trials failing in a row that end a search (one bad setting fails every trial alike).
MAX_FAILED_IN_A_ROW = 3


class SearchError(kt_errors.FatalError):
    """A mistake that would fail every trial alike (e.g. an objective no run logs): it stops
    the search instead of being recorded as one failed trial."""


def build_oracle(cfg: ExperimentConfig, objective: kt.Objective) -> kt.Oracle:
    t = cfg.tune
    common = dict(objective=objective, hyperparameters=build_hyperparameters(t.space),
                  seed=t.seed or cfg.runtime.seed,
                  # The space is the config's, complete up front.
                  allow_new_entries=False, tune_new_entries=False,
                  # tfapp stops the search itself (_StopsAfterFailures): KerasTuner's check
                  # raises inside end_trial, before the trial is saved or let go.
                  max_consecutive_failed_trials=None)
    if t.tuner == "hyperband":
        return _stops_after_failures(kt.oracles.HyperbandOracle)(
            max_epochs=t.epochs or cfg.trainer.epochs, factor=t.hyperband_factor, **common)
    oracle_cls = {"random": kt.oracles.RandomSearchOracle,
                  "bayesian": kt.oracles.BayesianOptimizationOracle,
                  "grid": kt.oracles.GridSearchOracle}[t.tuner]
    return _stops_after_failures(oracle_cls)(max_trials=t.max_trials, **common)


class _StopsAfterFailures:
    """Mixed into an oracle class: once ``MAX_FAILED_IN_A_ROW`` trials in a row have
    failed, it hands out no new trial, so the search ends as at ``max_trials`` (a chief
    tells every worker, the results are written) and ``stopped_after`` says why.

    KerasTuner's own check raises RuntimeError inside ``end_trial`` before the trial is
    saved; on a chief that is inside an RPC, leaving the trial running for good."""

    counted_from = 0  # end_order entries of earlier runs: re-running the search tries again
    stopped_after: tuple[int, Any] | None = None  # (failed in a row, the last of them)

    def reload(self) -> None:
        super().reload()
        self.counted_from = len(self.end_order)

    def populate_space(self, trial_id: str) -> dict[str, Any]:
        failed, last = failed_in_a_row(self)
        if failed >= MAX_FAILED_IN_A_ROW:
            self.stopped_after = self.stopped_after or (failed, last)
            return {"status": "STOPPED", "values": None}
        return super().populate_space(trial_id)


@functools.cache
def _stops_after_failures(oracle_cls: type) -> type:
    return type(oracle_cls.__name__, (_StopsAfterFailures, oracle_cls), {})


def failed_in_a_row(oracle: kt.Oracle) -> tuple[int, Any]:
    """How many of the trials this process saw end, counting back from the last one,
    failed; and the last trial that did (or None)."""
    failed, last = 0, None
    for trial_id in reversed(oracle.end_order[getattr(oracle, "counted_from", 0):]):
        trial = oracle.trials[trial_id]
        if trial.status != "FAILED":
            break
        failed, last = failed + 1, last or trial
    return failed, last


def best_epoch_metrics(history: dict[str, list], final: dict[str, Any],
                       objective: kt.Objective) -> dict[str, float]:
    """Every logged metric at the epoch where the objective was best (what KerasTuner's own
    ``Tuner`` reports), plus the run's end-of-training metrics (e.g. val_report_macro_f1)."""
    finals = {k: float(v) for k, v in final.items()
              if k not in history and isinstance(v, int | float)}
    if objective.name in history and history[objective.name]:
        values = history[objective.name]
        pick = max if objective.direction == "max" else min
        best = values.index(pick(values))
        return {**{k: float(v[best]) for k, v in history.items() if len(v) > best}, **finals}
    if objective.name in finals:
        return {**{k: float(v[-1]) for k, v in history.items() if v}, **finals}
    logged = ", ".join(sorted({*history, *finals}))
    raise SearchError(f"tune.objective: '{objective.name}' is not a metric the runs log; "
                      f"choose one of: {logged}")


class ConfigTuner(base_tuner.BaseTuner):
    """Runs each trial as ``executions_per_trial`` tfapp training runs of the trial's config.

    The oracle state, ``trial_*/trial.json`` and the runs all live in the search directory
    ``output_dir/name``; each run in ``trial_ID/run_N``, a stable place, so a killed trial
    resumes from its BackupAndRestore checkpoint when the oracle hands it out again.
    """

    def __init__(self, cfg: ExperimentConfig, oracle: kt.Oracle):
        self.cfg = cfg
        self.last_value: float | None = None
        # Set up at the first trial this process runs (the chief only serves the oracle),
        # then shared by every trial: no new strategy, or TPU initialisation, per trial.
        self.runtime: Runtime | None = None
        # KerasTuner prints every failed trial's traceback; on_trial_end prints one line for
        # the expected failures (FailedTrialError) and the traceback only for the others.
        compat.quiet_tuner_tracebacks()
        super().__init__(oracle=oracle, directory=cfg.output_dir, project_name=cfg.name)
        if distributed.role() == "worker":  # self.oracle is KerasTuner's client for the chief
            distributed.route_client(self.oracle)

    def search(self, *args, **kwargs) -> None:
        if distributed.serves_oracle():
            # The chief only serves the oracle (BaseTuner.search would too, but polls for
            # the end every 20 s).
            self.oracle.verbose = 0
            self.save()
            if distributed.serve_oracle(self.oracle, self.cfg.tune.worker_timeout_s):
                return
        heartbeat = None
        if distributed.role() == "worker":
            heartbeat = distributed.start_heartbeat(self.cfg.tune.worker_timeout_s)
        try:
            # verbose=0: KerasTuner's own display; the tuner prints one line per trial.
            super().search(*args, verbose=0, **kwargs)
        finally:
            if heartbeat is not None:
                heartbeat.set()

    def on_trial_begin(self, trial) -> None:
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in config_values(
            trial.hyperparameters.values).items())
        epochs = trial.hyperparameters.values.get("tuner/epochs")
        first_run = Path(self.get_trial_dir(trial.trial_id)) / trial_run_name(0)
        resumed = RunLayout(first_run).has_backup()
        print(f"trial {trial.trial_id} [{self.tuner_id}]: {shown}"
              + (f" ({epochs} epochs)" if epochs else "")
              + (" -- resuming from its checkpoint" if resumed else ""), flush=True)

    def on_trial_end(self, trial) -> None:
        if trial.status != "COMPLETED":
            # A chief learns a trial's status but not its message (KerasTuner's Trial
            # proto has no message field): the trial's record tells it why.
            write_text(Path(self.get_trial_dir(trial.trial_id)) / RECORD, json.dumps(
                {"trial_id": trial.trial_id, "tuner_id": self.tuner_id,
                 "values": config_values(trial.hyperparameters.values),
                 "error": last_line(failure(trial.message))}, indent=1, default=str))
        super().on_trial_end(trial)
        if trial.status == "COMPLETED":
            print(f"trial {trial.trial_id} done: {self.oracle.objective.name}="
                  f"{_fmt(self.last_value)}", flush=True)
        else:
            print(f"trial {trial.trial_id} {trial.status}: {failure(trial.message)}", flush=True)

    def run_trial(self, trial, *args, **kwargs) -> list[dict[str, float]]:
        values = trial.hyperparameters.values
        objective = self.oracle.objective
        results, runs, seconds = [], [], 0.0
        for execution in range(self.cfg.tune.executions_per_trial):
            try:
                run_cfg = trial_config(self.cfg, values, trial.trial_id, execution, objective)
                if self.runtime is None:
                    self.runtime = setup_runtime(run_cfg.runtime)
                result = train(run_cfg, task=get_task(run_cfg.task), runtime=self.runtime)
            except ConfigError as err:  # e.g. a NaN loss at this learning rate
                raise kt_errors.FailedTrialError(str(err)) from None
            finally:
                tf.keras.backend.clear_session()  # free the last model before the next
            # Each run's TensorBoard logs already hold an HParams session with its config
            # values (tfapp.training.tb_logging), so `tensorboard --logdir SEARCH_DIR`
            # compares the trials in the HParams tab.
            # The whole run's history and time, a resume's earlier part included.
            metrics = best_epoch_metrics(result.history, result.metrics, objective)
            seconds += result.seconds
            results.append(metrics)
            runs.append({"run_dir": str(result.run_dir), "metrics": metrics,
                         "exported": str(result.paths.get("exported", "")) or None})
        self.last_value = float(sum(r[objective.name] for r in results) / len(results))
        record = {"trial_id": trial.trial_id, "tuner_id": self.tuner_id,
                  "values": config_values(values), "objective": objective.name,
                  "value": self.last_value, "seconds": round(seconds, 2),
                  "runs": runs}
        write_text(Path(self.get_trial_dir(trial.trial_id)) / RECORD,
                   json.dumps(record, indent=1, default=str))
        return results


def failure(message: str | None) -> str:
    """A failed trial's message: the reason for expected failures, else the traceback."""
    lines = (message or "").strip().splitlines()
    prefix = f"{kt_errors.FailedTrialError.__module__}.FailedTrialError: "
    if lines and lines[-1].startswith(prefix):
        return lines[-1][len(prefix):]
    return "\n".join(lines)


def last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else "?"


def read_record(search_dir: Path, trial_id: str) -> dict:
    path = Path(search_dir) / f"trial_{trial_id}" / RECORD
    return read_state(path, "trial record") or {}


def _fmt(value: Any) -> str:
    if isinstance(value, float) and not math.isnan(value):
        return f"{value:.4g}"
    return str(value)
