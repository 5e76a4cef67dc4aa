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
    since the last evaluation, as Keras reports them), learning rate, examples/s."""

    def __init__(self, every: int, total_steps: int, examples_per_step: int):
        super().__init__()
        self.every, self.total, self.examples_per_step = every, total_steps, examples_per_step
        self._last_step = 0
        self._last_time = 0.0

    def on_train_begin(self, logs=None):
        self._last_step = _iterations(self.model)
        self._last_time = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = _iterations(self.model)
        if now // self.every == self._last_step // self.every:
            return
        elapsed = time.perf_counter() - self._last_time
        rate = (now - self._last_step) * self.examples_per_step / max(elapsed, 1e-9)
        shown = "  ".join(f"{k}={float(v):.4g}" for k, v in (logs or {}).items()
                          if np.ndim(v) == 0)
        lr = float(self.model.optimizer.learning_rate)
        log.info("step %d/%d  %s  lr=%.3g  %.1f examples/s", now, self.total, shown, lr, rate)
        self._last_step, self._last_time = now, time.perf_counter()
