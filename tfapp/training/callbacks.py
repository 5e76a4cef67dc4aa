"""The standard callbacks every run gets, and the training-curves plot."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

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
    """

    def __init__(self):
        super().__init__()
        self.bad_batch: int | None = None

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not tf.math.is_finite(float(loss)):
            self.bad_batch = batch
            self.model.stop_training = True


def standard_callbacks(cfg: ExperimentConfig, layout: RunLayout, *, backup: Path,
                       monitor: str, has_validation: bool
                       ) -> tuple[list[tf.keras.callbacks.Callback], NonFiniteLossStop]:
    """Callbacks for ``cfg`` writing into ``layout``, and the NaN stop among them (the loop
    asks it whether training broke).

    Every worker of a multi-worker run gets them all (saves are collective); a non-chief's
    ``layout`` is its own scratch copy. ``backup`` is the run directory's for every worker:
    each restores from the chief's (Keras points non-chiefs' writes at temporary folders).
    """
    t = cfg.trainer
    nan_stop = NonFiniteLossStop()
    cbs: list[tf.keras.callbacks.Callback] = [
        nan_stop,
        # Epoch-end backups + save-and-stop on SIGTERM; a rerun resumes (epoch, step).
        ResumableBackup(backup),
    ]
    if not has_validation:
        monitor = monitor.removeprefix("val_")
    mode = monitor_mode(monitor, t.monitor_mode)
    cbs.append(tf.keras.callbacks.CSVLogger(str(layout.history), append=True))
    if cfg.tracking.tensorboard:
        cbs.append(tf.keras.callbacks.TensorBoard(
            log_dir=str(layout.logs), histogram_freq=0, write_graph=True,
            # log_every_steps counts optimizer steps; Keras's update_freq counts batches.
            update_freq=t.log_every_steps * t.gradient_accumulation_steps or "epoch",
            profile_batch=parse_profile_steps(t.profile_steps)))
    # Throughput, HParams and the on-demand profiler server (trainer.profiler_port).
    cbs += run_callbacks(cfg, layout.logs)
    cbs.append(tf.keras.callbacks.ModelCheckpoint(
        str(layout.best_checkpoint), monitor=monitor, mode=mode, save_best_only=True,
        save_weights_only=True, verbose=0))
    if t.early_stopping_patience > 0:
        cbs.append(tf.keras.callbacks.EarlyStopping(
            monitor=monitor, mode=mode, patience=t.early_stopping_patience,
            restore_best_weights=True, verbose=1))
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
