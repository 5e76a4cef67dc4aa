"""Preemption: step-exact backups, resume on restart, and a clean exit on SIGTERM.

``ResumableBackup`` is Keras's ``BackupAndRestore`` with two additions:

* the backup records the epoch *and* the step it was written at, so a run resumes exactly
  where it stopped -- model weights, optimizer slots and ``optimizer.iterations`` (which
  is the learning-rate schedule's position), the epoch and the step within it;
* SIGTERM -- what spot VMs, Cloud TPU maintenance, Kubernetes and Slurm send before they
  kill a job -- makes training stop at the end of the current step (or
  ``steps_per_execution`` block), write a backup and raise ``Preempted``: the run
  directory says ``interrupted`` and the process exits with ``EXIT_PREEMPTED`` (143, the
  shell's 128 + SIGTERM). Running the same command again resumes.

A SIGKILL (no warning at all) loses only the work since the last backup: one is written
at every epoch end.

Step backups read and write tf-keras's training state, which has no public API
(``compat.step_backups_supported``). Where that is missing, this is Keras's own
epoch-level ``BackupAndRestore``: SIGTERM still stops the run cleanly, and the rerun
resumes from the last epoch end.

Multi-worker runs: every worker must write the backup together (saves are collective),
so at each step end the workers all-reduce "has anyone been signalled" -- one scalar --
and all stop at the same step even when only one of them got SIGTERM. TF's
``tf.distribute.experimental.PreemptionCheckpointHandler`` does this agreement through the
coordination service but drives its own training loop (``handler.run(step_fn)``); tf-keras
wires it into ``fit`` only for MultiWorkerMirroredStrategy on GCP
(``BackupAndRestore(save_before_preemption=True)`` is a silent no-op elsewhere), so tfapp
does the equivalent in this callback for every strategy ``fit`` supports.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from tfapp import compat, killpoints
from tfapp.config import ConfigError
from tfapp.run_layout import RunLayout

import tensorflow as tf

log = logging.getLogger("tfapp")

EXIT_PREEMPTED = 128 + signal.SIGTERM  # 143: what shells and schedulers expect for SIGTERM


class Preempted(KeyboardInterrupt):
    """Training stopped on SIGTERM or Ctrl-C after writing a backup to resume from.

    A KeyboardInterrupt, like a plain Ctrl-C: the driver marks the run ``interrupted`` and
    the entry point exits with ``exit_code`` (128 + the signal: 143 for SIGTERM, 130 for
    Ctrl-C) after one line, instead of printing a traceback.
    """

    exit_code = EXIT_PREEMPTED

    def __init__(self, message: str, signum: int = signal.SIGTERM):
        super().__init__(message)
        self.exit_code = 128 + signum


def _signal_name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else "a termination signal"


class ResumableBackup(tf.keras.callbacks.BackupAndRestore):
    """Back up at every epoch end and on SIGTERM or Ctrl-C; restore (epoch, step) on restart.

    The first Ctrl-C, like SIGTERM, stops training at the end of the step with a backup; a
    second one stops at once (Python's KeyboardInterrupt), keeping the last backup.

    Args:
      backup_dir: where backups live (``<run>/backup``); kept after fit (the training loop
        deletes it once the run's outputs are written).
      signals: the signals that mean "save and stop" (SIGTERM and SIGINT).
      changed: the config keys changed since the backup was made (``--resume-anyway``):
        a backup whose weights no longer fit the model is refused naming them.
      on_backup: called after the first backup this process writes (the loop records the
        config the backup is now made under).
    """

    def __init__(self, backup_dir: str | os.PathLike,
                 signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT),
                 changed: tuple[str, ...] = (),
                 on_backup: Callable[[], None] | None = None):
        # An integer save_freq makes Keras resume at the saved *step* (a string "epoch"
        # makes it resume at the next epoch); when to save is decided below, not by it.
        self._steps = compat.step_backups_supported()
        # delete_checkpoint=False: Keras would delete the backup when fit ends, before the
        # export and report exist; the loop deletes it after them (RunContext.end), so a
        # kill in between resumes at the end of training instead of from scratch.
        super().__init__(str(backup_dir), save_freq=1 if self._steps else "epoch",
                         delete_checkpoint=False)
        self._epoch = 0
        self._signals = signals
        self._signalled = threading.Event()
        self._signum = signal.SIGTERM
        self._previous: dict[int, object] = {}
        self._active = False
        self._changed = changed
        self._on_backup = on_backup

    # -- signals ---------------------------------------------------------------------
    def _on_signal(self, signum, frame):  # noqa: ARG002
        if self._active and signum == signal.SIGINT and self._signalled.is_set():
            self._restore_handlers()  # a second Ctrl-C: stop now, keep the last backup
            raise KeyboardInterrupt
        if self._active:
            again = " (Ctrl-C again to stop at once)" if signum == signal.SIGINT else ""
            log.warning("received %s: saving a backup at the end of this step, then "
                        "stopping%s", _signal_name(signum), again)
            self._signum = signum
            self._signalled.set()
            return
        self._restore_handlers()  # a fit that ended abnormally: behave as if never here
        os.kill(os.getpid(), signum)

    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # Python delivers signals to the main thread only
        for sig in self._signals:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        self._active = True

    def _restore_handlers(self) -> None:
        self._active = False
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _stop_requested(self) -> bool:
        strategy = self.model.distribute_strategy
        if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return self._signalled.is_set()
        # All workers reach this point at the same step; agree on whether to stop.
        flag = 1.0 if self._signalled.is_set() else 0.0
        votes = strategy.reduce(tf.distribute.ReduceOp.SUM,
                                strategy.run(lambda: tf.constant(flag)), axis=None)
        return float(votes) > 0

    # -- training hooks ----------------------------------------------------------------
    def on_train_begin(self, logs=None):
        try:
            super().on_train_begin(logs)  # restores the latest backup, if there is one
        except (ValueError, tf.errors.InvalidArgumentError) as err:
            # A variable of another shape: the model this config builds is not the one
            # backed up (a changed model key, or a changed vocabulary or label set).
            detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            changed = (f"; changed since the backup: {', '.join(self._changed)}"
                       if self._changed else "")
            raise ConfigError(
                f"the backup in {self.backup_dir} does not fit the model this config builds "
                f"({detail}){changed}; resume it under the config it was made under "
                f"(--config {RunLayout(Path(self.backup_dir).parent).backup_params}) or pass "
                "--start-over") from None
        self._install_handlers()
        if not self._steps:
            return
        epoch, step = compat.backup_position(self)
        if epoch >= 0:
            steps = self.params.get("steps") or 0
            next_epoch, next_step = (epoch + 1, 0) if step >= steps - 1 else (epoch, step + 1)
            optimizer = self.model.optimizer
            iterations = int(optimizer.iterations.numpy())
            lr = compat.current_learning_rate(optimizer)
            log.info("resuming from the backup in %s at epoch %d step %d (optimizer step %d, "
                     "learning rate %.3g)", self.backup_dir, next_epoch + 1, next_step,
                     iterations, lr)

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        pass  # the step is recorded when a backup is written, not at every step

    def on_train_batch_end(self, batch, logs=None):
        # ``batch`` is the last step this call covered (steps_per_execution > 1 included).
        if self._stop_requested():
            self._restore_handlers()
            why = _signal_name(self._signum)
            if not self._steps:
                raise Preempted(f"stopped by {why} at epoch {self._epoch + 1} step "
                                f"{batch + 1}; the last backup, in {self.backup_dir}, is from "
                                "the previous epoch end", self._signum)
            self._save(self._epoch, batch)
            self._backed_up()
            raise Preempted(f"stopped by {why} at epoch {self._epoch + 1} step {batch + 1} "
                            f"and saved a backup of that step in {self.backup_dir}",
                            self._signum)

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            return  # never back up weights a non-finite loss has broken
        if self._steps:
            self._save(epoch, self.params["steps"] - 1)
        else:
            super().on_epoch_end(epoch, logs)
        self._backed_up()
        killpoints.reached("backup-saved")

    def on_train_end(self, logs=None):
        # A signal during the last validation: keep the final backup (a rerun then only
        # exports) instead of deleting it and exporting into a kill.
        stop = self._stop_requested()
        self._restore_handlers()
        if stop:
            raise Preempted(f"stopped by {_signal_name(self._signum)} after the last epoch, "
                            f"with its backup in {self.backup_dir}", self._signum)
        super().on_train_end(logs)

    def _backed_up(self) -> None:
        if self._on_backup is not None:
            self._on_backup()
            self._on_backup = None  # once: the config does not change during fit

    def _save(self, epoch: int, step: int) -> None:
        compat.write_backup(self, epoch, step)
