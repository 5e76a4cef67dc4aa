"""TensorBoard extras every run gets next to Keras's own ``TensorBoard`` callback.

Keras's callback writes the per-epoch loss/metrics (``logs/train``, ``logs/validation``),
the learning rate when it follows a schedule, the model graph and the profiler capture
(``trainer.profile_steps``). These callbacks add what it does not:

* ``Throughput``: ``epoch_examples_per_second`` and ``epoch_step_time_ms`` (train run);
* ``hparams_callback``: the run's hyperparameters for the HParams dashboard;
* ``ConfusionMatrixImage``: the classifier's validation confusion matrix (Images tab);
* ``ProfilerServer``: the profiler server for on-demand capture (``trainer.profiler_port``,
  read by ``python -m tfapp.profile capture``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import time
from pathlib import Path
from typing import Any

from tfapp import compat
from tfapp.config import ExperimentConfig
from tfapp.run_layout import RunLayout
from tfapp.runtime import read_tf_config
from tfapp.training.metrics import ConfusionMatrix

import numpy as np
import tensorflow as tf

log = logging.getLogger("tfapp")

#: config groups whose values describe the experiment (runtime/tracking describe the machine).
HPARAM_GROUPS = ("data", "model", "optimizer", "trainer")


class Throughput(tf.keras.callbacks.Callback):
    """Per epoch: examples/second and mean step time, written to ``log_dir`` (the train run).

    Timed from the end of the epoch's first batch call to the end of its last, so the first
    call's tracing/compilation (and validation, which runs after the last batch) are left
    out. Batch indices count steps, so ``steps_per_execution > 1`` is accounted for.
    """

    def __init__(self, log_dir: str | Path, per_replica_batch: int):
        super().__init__()
        self.log_dir = str(log_dir)
        self.per_replica_batch = per_replica_batch
        self._writer = None
        self._first: tuple[int, float] | None = None
        self._last: tuple[int, float] | None = None
        self._epoch_start = 0.0
        self.history: list[dict] = []
        compat.accept_tensor_logs(self)  # times batches, reads no logs

    def on_epoch_begin(self, epoch, logs=None):
        self._first = self._last = None
        self._epoch_start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        if self._first is None:
            self._first = (batch, now)
        self._last = (batch, now)

    def on_epoch_end(self, epoch, logs=None):
        if self._first is None or self._last is None:
            return
        steps = self._last[0] - self._first[0]
        if steps > 0:
            step_time = (self._last[1] - self._first[1]) / steps
        else:  # one call per epoch: the whole epoch so far, first call included
            step_time = (self._last[1] - self._epoch_start) / (self._last[0] + 1)
        global_batch = self.per_replica_batch * self.model.distribute_strategy \
            .num_replicas_in_sync
        row = {"examples_per_second": global_batch / step_time,
               "step_time_ms": 1000.0 * step_time}
        self.history.append(row)
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        with self._writer.as_default():
            for name, value in row.items():
                tf.summary.scalar(f"epoch_{name}", value, step=epoch)
        self._writer.flush()


def hparams(cfg: ExperimentConfig) -> dict[str, bool | int | float | str]:
    """The scalar config values of HPARAM_GROUPS plus ``task``, as dotted keys."""
    out: dict[str, bool | int | float | str] = {"task": cfg.task}
    for group in HPARAM_GROUPS:
        for key, value in _flatten(getattr(cfg, group), group):
            if value is None:  # "auto" fields; HParams has no null and types must not mix
                continue
            if isinstance(value, dict):  # data.class_weight's {label: weight}
                value = ",".join(f"{k}:{v:g}" for k, v in value.items())
            out[key] = ",".join(map(str, value)) if isinstance(value, list | tuple) else value
    return out


def _flatten(node: Any, prefix: str):
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            yield from _flatten(value, f"{prefix}.{f.name}")
        else:
            yield f"{prefix}.{f.name}", value


def hparams_callback(cfg: ExperimentConfig, log_dir: str | Path) -> tf.keras.callbacks.Callback:
    """HParams session for this run, in the logs root so ``train``/``validation`` are its
    metric groups (the dashboard finds ``epoch_loss``, ``epoch_accuracy``... itself)."""
    from tensorboard.plugins.hparams import api as hp_api

    # No trial_id: the dashboard then groups runs by their hyperparameter values, so repeats
    # that differ only in runtime.seed (tuner executions) form one group.
    return hp_api.KerasCallback(str(log_dir), hparams(cfg))


def log_scalars(log_dir: str | Path, step: int, values: dict[str, float]) -> None:
    """Scalars at ``step`` in their own TensorBoard run."""
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default():
        for name, value in values.items():
            tf.summary.scalar(name, float(value), step=step)
    writer.close()


def exported_epoch(layout: RunLayout) -> int:
    """The epoch index (from 0, Keras's step of its epoch scalars) the exported weights
    are from: the best checkpoint's, else the last epoch in the history log."""
    best = layout.best()
    if best and best.get("epoch"):
        return int(best["epoch"]) - 1
    try:
        with layout.history.open(newline="") as fh:
            return max(0, sum(1 for _ in csv.DictReader(fh)) - 1)
    except OSError:
        return 0


def log_test_metrics(layout: RunLayout, values: dict[str, float]) -> None:
    """The export's test metrics where TensorBoard overlays them on the train and
    validation curves: run ``logs/test``, Keras's tag names (``epoch_accuracy``...), at
    the epoch the exported weights are from (one point on each chart)."""
    log_scalars(layout.task_logs("test"), exported_epoch(layout),
                {f"epoch_{name}": value for name, value in values.items()})


class ConfusionMatrixImage(tf.keras.callbacks.Callback):
    """After each epoch with validation: the validation confusion matrix, plotted and
    written to TensorBoard's Images tab (the share report's comes from the exported model
    instead: the task's ``finish``).

    The counts are ``metric``'s (a compiled ``ConfusionMatrix``): fit's own validation
    pass made them, on every replica, from the predictions that gave ``val_accuracy``;
    nothing is predicted again. Keras resets the metrics when the evaluation begins, so at
    ``on_epoch_end`` they hold the evaluation's alone.
    """

    def __init__(self, metric: ConfusionMatrix, label_names: list[str], log_dir: str | Path):
        super().__init__()
        self.metric = metric
        self.label_names = list(label_names)
        self.log_dir = str(log_dir)
        self._writer = None
        self.matrix: np.ndarray | None = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or "val_loss" not in logs:  # no evaluation this epoch
            return
        self.matrix = self.metric.counts()
        png = plot_confusion_matrix(self.matrix, self.label_names,
                                    title=f"validation, epoch {epoch + 1}")
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        with self._writer.as_default():
            tf.summary.image("confusion_matrix", tf.image.decode_png(png, channels=4)[None],
                             step=epoch)
        self._writer.flush()


def plot_confusion_matrix(matrix: np.ndarray, label_names: list[str], title: str) -> bytes:
    """Counts with row-normalised colour (recall per true class), as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(label_names)
    size = 2.5 + 0.5 * n
    fig, ax = plt.subplots(figsize=(size, size))
    rows = matrix.sum(axis=1, keepdims=True)
    share = np.divide(matrix, rows, out=np.zeros(matrix.shape), where=rows > 0)
    ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(n), label_names, rotation=45, ha="right")
    ax.set_yticks(range(n), label_names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    for i in range(n):
        for j in range(n):
            ax.text(j, i, str(matrix[i, j]), ha="center", va="center",
                    color="white" if share[i, j] > 0.5 else "black")
    fig.tight_layout()
    buf = io.BytesIO()
    # "tight" grows the canvas to all that is drawn: with two labels the figure is narrower
    # than "validation, exported model (epoch 2)", which was cut at its edges.
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight", pad_inches=0.1)
    plt.close(fig)
    return buf.getvalue()


def _task_offset() -> int:
    """0 for the chief (or a single process), else this worker's position after it, so
    several workers on one host do not compete for one port."""
    tf_config = read_tf_config()
    if tf_config.task_type == "worker":
        return (tf_config.task_index or 0) + (1 if "chief" in tf_config.cluster else 0)
    return 0


class ProfilerServer(tf.keras.callbacks.Callback):
    """Starts TensorFlow's profiler server when training begins (once per process); in a
    multi-worker job, worker ``i`` listens on ``port + i`` (the chief on ``port``).

    TensorFlow offers no bind address: the server listens on every interface
    (``[::]:port``) with no authentication, which is why ``config.validate`` demands
    ``trainer.profiler_listen_all=true`` with ``trainer.profiler_port``.
    """

    _started: set[int] = set()

    def __init__(self, port: int):
        super().__init__()
        self.port = port + _task_offset()

    def on_train_begin(self, logs=None):
        if self.port in ProfilerServer._started:
            return
        tf.profiler.experimental.server.start(self.port)
        ProfilerServer._started.add(self.port)
        log.info("profiler server on port %d, listening on all interfaces ([::]:%d) with no "
                 "authentication; capture with: python -m tfapp.profile capture "
                 "--address localhost:%d --duration-ms 2000 --logdir RUN_DIR/logs",
                 self.port, self.port, self.port)


def run_callbacks(cfg: ExperimentConfig, log_dir: Path) -> list[tf.keras.callbacks.Callback]:
    """The callbacks above that every task gets (``callbacks.standard_callbacks`` adds them)."""
    cbs: list[tf.keras.callbacks.Callback] = []
    if cfg.trainer.profiler_port:
        cbs.append(ProfilerServer(cfg.trainer.profiler_port))
    if cfg.tracking.tensorboard:
        cbs.append(Throughput(log_dir / "train", cfg.data.batch_size))
        cbs.append(hparams_callback(cfg, log_dir))
    return cbs
