"""The standard callbacks every run gets, and the training-curves plot."""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import math
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from tfapp import compat, killpoints
from tfapp.atomic import write_text
from tfapp.config import ExperimentConfig
from tfapp.run_layout import RunLayout
from tfapp.training.preemption import ResumableBackup
from tfapp.training.tb_logging import run_callbacks

import tensorflow as tf

log = logging.getLogger("tfapp")


def monitor_mode(monitor: str, configured: str) -> str:
    if configured != "auto":
        return configured
    return "min" if "loss" in monitor or "perplexity" in monitor else "max"


def parse_profile_steps(spec: str) -> tuple[int, int] | int:
    """"10,12" -> (10, 12); "10" -> 10 (the TensorBoard callback's profile_batch)."""
    if not spec:
        return 0
    parts = [int(p) for p in spec.split(",")]
    return (parts[0], parts[1]) if len(parts) == 2 else parts[0]


class NonFiniteLossStop(tf.keras.callbacks.Callback):
    """Stop at the first non-finite loss with a message saying what to try.

    Like TerminateOnNaN, but it records the failure so the driver can report it and
    never export weights from the broken step.

    Keras calls it once per execution (``trainer.steps_per_execution`` batches), with the
    logs as tensors (``compat.accept_tensor_logs``): the loss is the only value copied to
    the host, once per execution, and a non-finite loss stops training at the end of the
    execution it appeared in.
    """

    def __init__(self):
        super().__init__()
        self.bad_batch: int | None = None
        compat.accept_tensor_logs(self)

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        # math, not tf.math: a TensorFlow op's first eager call costs ~30 ms, in the first
        # batch Keras times its callbacks on. float() of a tensor is its one host copy.
        if loss is not None and not math.isfinite(float(loss)):
            self.bad_batch = batch
            self.model.stop_training = True


class BestCheckpoint(tf.keras.callbacks.Callback):
    """The weights of the best evaluation on ``monitor`` so far, safe against a kill.

    Keras's ModelCheckpoint rewrites one ``best`` checkpoint in place, so a kill while it
    writes leaves no good copy. Here each new best is written under a new name, then
    ``best.json`` (which names it, its epoch and its value) is switched to it in one
    atomic rename, and only then is the previous one deleted: whenever the process dies,
    ``best.json`` names a complete checkpoint. A resumed run reads the value back, so it
    only replaces the killed run's best with a better one.
    """

    def __init__(self, layout: RunLayout, monitor: str, mode: str):
        super().__init__()
        self.layout = layout
        self.directory, self.record_path = layout.checkpoints, layout.best_record
        self.monitor, self.mode = monitor, mode
        self.record: dict | None = None

    def _better(self, value: float) -> bool:
        if self.record is None:
            return value == value  # not NaN
        best = self.record["value"]
        return value < best if self.mode == "min" else value > best

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None or not self._better(float(value)):
            return
        name = f"best-{epoch + 1:03d}-{uuid.uuid4().hex[:6]}"
        with averaged_weights(self.model):  # what validation scored (optimizer.ema_decay)
            self.model.save_weights(str(self.directory / name))
        record = {"checkpoint": name, "epoch": epoch + 1, "monitor": self.monitor,
                  "value": float(value)}
        write_text(self.record_path, json.dumps(record, indent=1))
        self.record = record
        self._prune()

    def on_train_begin(self, logs=None):
        self.record = self.layout.best()
        self._prune()  # a checkpoint a kill left unrecorded

    def _prune(self) -> None:
        keep = self.record["checkpoint"] if self.record else None
        for path in self.directory.glob("best-*"):
            if path.name.split(".")[0] != keep:
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


class HistoryLog(tf.keras.callbacks.CSVLogger):
    """``history.csv``, one row per epoch, in step with the backup a rerun resumes from.

    Rows are appended at each epoch end, before that epoch's backup; a kill between the two
    leaves a row the backup does not cover. So when training (re)starts at epoch E, rows
    of epoch E and later (and a row cut short by a kill) are dropped before new ones are
    appended: the file never holds an epoch twice, nor one whose weights were lost.
    """

    def __init__(self, path: Path):
        super().__init__(str(path), append=True)
        self._open = False

    def on_train_begin(self, logs=None):
        pass  # opened at the first epoch, once its number is known

    def on_epoch_begin(self, epoch, logs=None):
        if not self._open:
            _drop_rows_from(Path(self.filename), epoch)
            super().on_train_begin(logs)
            self._open = True

    def on_train_end(self, logs=None):
        if self._open:  # a resumed run with no epoch left opens nothing
            super().on_train_end(logs)
            self._open = False


class EpochStatus(tf.keras.callbacks.Callback):
    """Rewrites ``status.json`` (``running``) at every epoch end through ``write``
    (``RunDirectory.status``), so the time trained so far survives a kill: a resumed run
    counts it."""

    def __init__(self, write: Callable[..., None]):
        super().__init__()
        self._write = write

    def on_epoch_end(self, epoch, logs=None):
        self._write("running", epoch=epoch + 1)


class ResumableEarlyStopping(tf.keras.callbacks.EarlyStopping):
    """Keras's ``EarlyStopping`` whose patience survives a resume.

    Keras keeps the best value and the epochs waited in memory only, so a resumed run would
    start counting patience afresh. At the first epoch (its number known), this one replays
    the monitored values of the epochs before it from ``history.csv``.
    """

    def __init__(self, history_csv: Path, **kwargs):
        super().__init__(**kwargs)
        self._history_csv = history_csv
        self._replayed = False

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self._replayed = False

    def on_epoch_begin(self, epoch, logs=None):
        if not self._replayed:
            self._replayed = True
            for done in range(epoch):
                value = history_row(self._history_csv, done + 1).get(self.monitor)
                if value is None:
                    continue
                self.wait += 1
                if self.monitor_op(value - self.min_delta, self.best):  # as Keras decides
                    self.best, self.best_epoch, self.wait = value, done, 0


def _drop_rows_from(history_csv: Path, epoch: int) -> None:
    if not history_csv.is_file():
        return
    lines = history_csv.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = lines[:1] + [line for line in lines[1:] if line.endswith("\n")
                        and line.split(",", 1)[0].isdigit()
                        and int(line.split(",", 1)[0]) < epoch]
    if kept != lines:
        write_text(history_csv, "".join(kept))


def read_history(history_csv: Path) -> dict[str, list[float]]:
    """history.csv as Keras's ``History.history`` (metric -> one value per epoch): the
    whole run's, the epochs before a resume included; empty when there is none."""
    if not history_csv.is_file():
        return {}
    with history_csv.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    missing = ("", "NA", None)
    # A column empty in every row is not a metric: Keras's CSVLogger adds a val_ column for
    # each metric when an epoch's logs have none (a run without validation, as pretraining).
    keys = [k for k in (rows[0] if rows else {})
            if k != "epoch" and any(r.get(k) not in missing for r in rows)]
    return {k: [float(r[k]) if r.get(k) not in missing else math.nan for r in rows]
            for k in keys}


def history_row(history_csv: Path, epoch: int) -> dict[str, float]:
    """history.csv's row of ``epoch`` (1-based) as numbers; empty when it has none."""
    if not history_csv.is_file():
        return {}
    with history_csv.open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row.get("epoch") == str(epoch - 1):
                return {k: float(v) for k, v in row.items()
                        if k != "epoch" and v not in ("", "NA", None)}
    return {}


@contextlib.contextmanager
def averaged_weights(model) -> Iterator[None]:
    """With ``optimizer.ema_decay``: the model holds its weights' moving average inside the
    block, its raw weights again after it (without: nothing changes). The averages are
    optimizer variables, so backups keep them and a resumed run goes on averaging."""
    variables = model.trainable_variables
    averages = compat.ema_averages(model.optimizer, variables)
    if averages is None:
        yield
        return
    raw = [tf.identity(v) for v in variables]
    for var, average in zip(variables, averages, strict=True):
        var.assign(average)
    try:
        yield
    finally:
        for var, value in zip(variables, raw, strict=True):
            var.assign(value)


class AveragedWeightsForValidation(tf.keras.callbacks.Callback):
    """Validation scores the weights' moving average (``optimizer.ema_decay``)."""

    def __init__(self):
        super().__init__()
        self._block: contextlib.AbstractContextManager | None = None

    def on_test_begin(self, logs=None):
        self._block = averaged_weights(self.model)
        self._block.__enter__()

    def on_test_end(self, logs=None):
        if self._block is not None:
            self._block.__exit__(None, None, None)
            self._block = None


class KillPoints(tf.keras.callbacks.Callback):
    """The crash test's points inside ``fit`` (``tfapp.killpoints``); added only when armed."""

    def __init__(self):
        super().__init__()
        compat.accept_tensor_logs(self)  # reads no logs

    def on_train_batch_end(self, batch, logs=None):
        killpoints.reached("train-batch")

    def on_test_batch_end(self, batch, logs=None):
        killpoints.reached("validation-batch")


class TensorBoardLogs(tf.keras.callbacks.TensorBoard):
    """Keras's ``TensorBoard`` callback, but the train graph is written when the first
    epoch ends instead of after its first batch (``compat.defer_train_graph``), and the
    summary ops are loaded before the first batch: inside the batches Keras times, both
    made it warn that ``on_train_batch_end`` is slow."""

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self.write_train_graph = compat.defer_train_graph(self)
        # Keras calls tf.summary.scalar after every batch (a no-op without update_freq
        # steps); its first call loads TensorBoard's summary module (0.1-0.5 s): done here,
        # before the batches Keras times.
        with tf.summary.record_if(False):
            tf.summary.scalar("load_summary_ops", 0.0, step=0)

    def on_epoch_end(self, epoch, logs=None):
        if getattr(self, "write_train_graph", None) is not None:
            self.write_train_graph()
            self.write_train_graph = None
        super().on_epoch_end(epoch, logs)


def standard_callbacks(cfg: ExperimentConfig, layout: RunLayout, *, backup: Path,
                       monitor: str, has_validation: bool, changed: tuple[str, ...] = (),
                       on_backup: Callable[[], None] | None = None
                       ) -> tuple[list[tf.keras.callbacks.Callback], NonFiniteLossStop]:
    """Callbacks for ``cfg`` writing into ``layout``, and the NaN stop among them (the loop
    asks it whether training broke).

    Every worker of a multi-worker run gets them all (saves are collective); a non-chief's
    ``layout`` is its own scratch copy. ``backup`` is the run directory's for every worker:
    each restores from the chief's (Keras points non-chiefs' writes at temporary folders).
    ``changed``: the config keys a resume changed (``RunDirectory.changed_since_backup``);
    ``on_backup`` runs after the first backup written (``ResumableBackup``).
    """
    t = cfg.trainer
    nan_stop = NonFiniteLossStop()
    cbs: list[tf.keras.callbacks.Callback] = [
        nan_stop,
        HistoryLog(layout.history),  # before the backup: see HistoryLog
        # Epoch-end backups + save-and-stop on SIGTERM; a rerun resumes (epoch, step).
        ResumableBackup(backup, changed=changed, on_backup=on_backup),
    ]
    if not has_validation:
        monitor = monitor.removeprefix("val_")
    mode = monitor_mode(monitor, t.monitor_mode)
    if cfg.tracking.tensorboard:
        cbs.append(TensorBoardLogs(
            log_dir=str(layout.logs), histogram_freq=0, write_graph=True,
            # log_every_steps counts optimizer steps; Keras's update_freq counts batches.
            update_freq=t.log_every_steps * t.gradient_accumulation_steps or "epoch",
            profile_batch=parse_profile_steps(t.profile_steps)))
    # Throughput, HParams and the on-demand profiler server (trainer.profiler_port).
    cbs += run_callbacks(cfg, layout.logs)
    cbs.append(BestCheckpoint(layout, monitor, mode))
    if cfg.optimizer.ema_decay > 0:
        cbs.append(AveragedWeightsForValidation())
    if t.early_stopping_patience > 0:
        cbs.append(ResumableEarlyStopping(
            # The loop restores the best weights from BestCheckpoint, stopped early or not.
            layout.history, monitor=monitor, mode=mode, patience=t.early_stopping_patience,
            verbose=1))
    if killpoints.ARMED:
        cbs.append(KillPoints())
    return cbs, nan_stop


def plot_curves(history_csv: Path, out_png: Path) -> Path | None:
    """Loss and each metric per epoch, train vs validation, into one PNG."""
    if not history_csv.is_file():
        return None
    with history_csv.open() as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    names = [k for k in rows[0] if k not in ("epoch", "lr", "learning_rate")
             and not k.startswith("val_")]
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    epochs = [int(r["epoch"]) + 1 for r in rows]
    for ax, name in zip(axes[0], names, strict=True):
        ax.plot(epochs, [float(r[name]) for r in rows], "o-", label="train")
        # CSVLogger writes val_ columns of "NA" when a run has no validation data.
        if f"val_{name}" in rows[0] and all(r[f"val_{name}"] != "NA" for r in rows):
            ax.plot(epochs, [float(r[f"val_{name}"]) for r in rows], "s-", label="validation")
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
