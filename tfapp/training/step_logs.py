"""Logs counted in optimizer steps: the learning rate of every step to TensorBoard
(written per epoch), and a console line every ``trainer.log_every_steps`` steps.

Both read ``optimizer.iterations`` (applied updates), so they count optimizer steps with
gradient accumulation and stay exact with ``steps_per_execution > 1``, where Keras calls
batch callbacks only once per execution: the steps in between are filled in.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from tfapp import compat

import numpy as np
import tensorflow as tf

log = logging.getLogger("tfapp")


def _iterations(model: tf.keras.Model) -> int:
    return int(model.optimizer.iterations.numpy())


class LearningRateLogger(tf.keras.callbacks.Callback):
    """Writes scalar ``learning_rate`` for every optimizer step (x axis = optimizer step)
    into ``log_dir`` (e.g. RUN_DIR/logs/train, next to Keras's own train scalars).

    ``schedule`` is the optimizer's LearningRateSchedule; without one the optimizer's
    current (constant) learning rate is logged. Other callbacks may reuse ``lr_at``.

    The rate of a step is a function of the step, so the steps since the last write are
    written together at each (fit) epoch end and when training ends: a write per batch
    made Keras warn that ``on_train_batch_end`` is slow compared to the batch time.
    """

    def __init__(self, log_dir: str | Path,
                 schedule: tf.keras.optimizers.schedules.LearningRateSchedule | None = None,
                 tag: str = "learning_rate"):
        super().__init__()
        self.log_dir, self.schedule, self.tag = str(log_dir), schedule, tag
        self._writer = None
        self._logged = 0

    def lr_at(self, first: int, stop: int) -> np.ndarray:
        """Learning rates of optimizer steps first .. stop - 1."""
        if self.schedule is None:
            return np.full(stop - first, float(self.model.optimizer.learning_rate))
        return np.asarray(self.schedule(tf.range(first, stop, dtype=tf.int64)))

    def on_train_begin(self, logs=None):
        self._writer = tf.summary.create_file_writer(self.log_dir)
        self._logged = _iterations(self.model)  # a resumed run continues, no duplicates

    def _write_until_now(self) -> None:
        now = _iterations(self.model)
        if now <= self._logged or self._writer is None:
            return
        # record_if(True): Keras's TensorBoard callback may leave its own update_freq
        # condition set.
        with self._writer.as_default(), tf.summary.record_if(True):
            for step, lr in zip(range(self._logged, now), self.lr_at(self._logged, now),
                                strict=True):
                tf.summary.scalar(self.tag, float(lr), step=step)
        self._writer.flush()
        self._logged = now

    def on_epoch_end(self, epoch, logs=None):
        self._write_until_now()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._write_until_now()  # a run stopped inside an epoch (max_steps, NaN, SIGTERM)
            self._writer.close()


class StepLogger(tf.keras.callbacks.Callback):
    """One log line every ``every`` optimizer steps: step, loss and metrics (running means
    since the last evaluation, as Keras reports them), learning rate, examples/s.

    No device-to-host copy between lines: the logs stay tensors
    (``compat.accept_tensor_logs``) and the optimizer step is counted on the host from
    Keras's batch indices (a batch index counts batches, ``steps_per_execution`` included;
    gradient accumulation runs ``model.accumulation_steps`` of them per optimizer step).
    ``optimizer.iterations`` and the logged values are read only when a line is due, and
    once at the first execution of a fit (a resumed fit starts inside an epoch, at a
    batch index this callback is not told).
    """

    def __init__(self, every: int, total_steps: int, examples_per_step: int):
        super().__init__()
        self.every, self.total, self.examples_per_step = every, total_steps, examples_per_step
        self._last_step = 0  # the optimizer step of the last line (or of the fit's start)
        self._last_time = 0.0
        self._read = 0  # the optimizer step last read from the device ...
        self._batches = 0  # ... and the batches run since
        self._prev_batch: int | None = None  # last batch index of this epoch; None: unknown
        compat.accept_tensor_logs(self)

    def on_train_begin(self, logs=None):
        self._last_step = self._read = _iterations(self.model)
        self._batches = 0
        self._prev_batch = None
        self._last_time = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        if self._prev_batch is not None:  # not the fit's first epoch: it starts at batch 0
            self._prev_batch = -1

    def _due(self, batch: int) -> bool:
        """Whether the host's count says a line may be due (then the device is asked)."""
        if self._prev_batch is None:
            return True
        self._batches += batch - self._prev_batch
        accumulation = int(getattr(self.model, "accumulation_steps", 1))
        estimate = (self._read * accumulation + self._batches) // accumulation
        return estimate // self.every != self._last_step // self.every

    def on_train_batch_end(self, batch, logs=None):
        due = self._due(batch)
        self._prev_batch = batch
        if not due:
            return
        now = _iterations(self.model)
        self._read, self._batches = now, 0
        if now // self.every == self._last_step // self.every:
            return  # an accumulation left half done by a resume: the step is not there yet
        elapsed = time.perf_counter() - self._last_time
        rate = (now - self._last_step) * self.examples_per_step / max(elapsed, 1e-9)
        # len(shape), not np.ndim: np.ndim would copy a tensor to the host to ask.
        shown = "  ".join(f"{k}={float(v):.4g}" for k, v in (logs or {}).items()
                          if len(getattr(v, "shape", ())) == 0)
        lr = float(self.model.optimizer.learning_rate)
        log.info("step %d/%d  %s  lr=%.3g  %.1f examples/s", now, self.total, shown, lr, rate)
        self._last_step, self._last_time = now, time.perf_counter()
