"""The run context: what every part of a run reads, built once by the entry point.

``RunContext.create(cfg, task=...)`` sets up the runtime (seeds, strategy, precision policy; on a
TPU the TPU system) unless one is handed in, decides XLA for the task (one place:
``training.plan.resolve_jit_compile`` with the task's ``recompiles_under_xla`` trait; settled
from the built model by ``for_model``, as the BERT encoder built decides it),
and names the run directory's files (``RunLayout``). The training loop and the tasks
receive it; nothing else reads ``TF_CONFIG`` for the run's role or spells a run-directory
file name.

The context is frozen: what a run holds while it trains (the run directory's lock, its
status and the time trained) is a ``training.run_directory.RunDirectory``, taken by the
loop; which config changes a resume may make is ``training.resume_rules``.

``python -m tfapp.tune`` sets the runtime up once per process and hands it to every
trial's context (``create(trial_cfg, runtime=rt)``): a strategy, and a TPU system, is
not built again per trial; each trial only re-seeds.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfapp import compat
from tfapp import runtime as runtime_lib
from tfapp.atomic import read_state
from tfapp.config import ConfigError, ExperimentConfig, RuntimeConfig
from tfapp.run_layout import RunLayout
from tfapp.training.plan import resolve_jit_compile_choice

if TYPE_CHECKING:
    from tfapp.training.task import Task

log = logging.getLogger("tfapp")

__all__ = ["RunContext"]

# What a handed-in runtime must have been built with (the seed may differ per run).
_RUNTIME_KEYS = ("strategy", "tpu", "cpu_devices", "precision", "deterministic")


@dataclass(frozen=True)
class RunContext:
    """One run's configuration, runtime and file layout.

    Attributes:
      cfg: the validated experiment config.
      task: the task's class (``tfapp.training.task.Task``), handed in by the command.
      runtime: strategy, precision and cluster role (``tfapp.runtime.Runtime``).
      jit_compile: whether the train step is compiled with XLA (decided here; the context
        of the built model, ``for_model``, has it settled).
      run: the run directory's layout (``output_dir/name``); backups live there for every
        worker, as each worker restores from the chief's.
      layout: where *this process* writes: ``run`` on the chief, a scratch copy of it on
        other workers of a multi-worker run (every worker must take part in saves).
    """

    cfg: ExperimentConfig
    task: type[Task]
    runtime: runtime_lib.Runtime
    jit_compile: bool
    run: RunLayout
    layout: RunLayout
    jit_reason: str = ""  # why jit_compile (the run header's line)

    @classmethod
    def create(cls, cfg: ExperimentConfig, *, task: type[Task],
               runtime: runtime_lib.Runtime | None = None,
               run_dir: str | os.PathLike | None = None) -> RunContext:
        """The context for ``cfg`` and its ``task`` class (the caller looks it up:
        ``tfapp.tasks.get_task``; the loop never imports tasks); ``runtime`` reuses one
        already set up (tune's trials), ``run_dir`` replaces ``output_dir/name`` (the LR
        finder's scratch directory)."""
        if runtime is None:
            runtime = runtime_lib.setup(cfg.runtime)
        else:
            _check_same_runtime(runtime.config, cfg.runtime)
            runtime_lib.seed(cfg.runtime)
        jit, jit_reason = resolve_jit_compile_choice(
            cfg, runtime, recompiles_under_xla=task.recompiles_under_xla(cfg))
        run = RunLayout(Path(run_dir) if run_dir is not None else cfg.run_dir)
        layout = (run if runtime.is_chief
                  else run.worker_scratch(runtime.task_type, runtime.task_id))
        return cls(cfg=cfg, task=task, runtime=runtime, jit_compile=jit, run=run,
                   layout=layout, jit_reason=jit_reason)

    def for_model(self, model: Any) -> RunContext:
        """This context with XLA decided again for the model built (``fit.build_model``
        returns it): a BERT task's answer depends on the encoder actually built, tfapp's
        native encoder (compiles once) or a restored Hub SavedModel (recompiles every
        step)."""
        jit, reason = resolve_jit_compile_choice(
            self.cfg, self.runtime,
            recompiles_under_xla=self.task.recompiles_under_xla(self.cfg, model))
        if jit != self.jit_compile:
            log.info("XLA %s for the model built (%s)", "on" if jit else "off", reason)
        return dataclasses.replace(self, jit_compile=jit, jit_reason=reason)

    @property
    def is_chief(self) -> bool:
        return self.runtime.is_chief

    def describe(self) -> str:
        return (f"{self.runtime.describe(self.cfg.data.batch_size)} "
                f"xla={'on' if self.jit_compile else 'off'}")

    def resumed_batches(self) -> int:
        """Global batches the training stream had delivered when the backup this run
        resumes was written (0 when it starts afresh): its input resumes after them.

        The backup gives (epoch, step); ``input_state.json`` of the interrupted run gives
        how many batches its fit epochs had (they may differ from this run's when
        ``trainer.max_steps`` changed)."""
        if not self.resuming:
            return 0
        position = compat.saved_backup_position(self.run.backup)
        state = read_state(self.run.input_state, "input state") or {}
        per_epoch = state.get("fit_steps_per_epoch")
        if position is None or not per_epoch:
            log.warning("the backup does not say where its input stopped; the resumed run "
                        "reads its data from the start of a pass")
            return 0
        epoch, step = position
        return (epoch + 1) * per_epoch if step < 0 else epoch * per_epoch + step + 1

    @property
    def resuming(self) -> bool:
        """Whether a backup of this run exists (fit will resume from it)."""
        return self.run.has_backup()


def _check_same_runtime(built: RuntimeConfig | None, wanted: RuntimeConfig) -> None:
    if built is None:
        return
    for key in _RUNTIME_KEYS:
        if getattr(built, key) != getattr(wanted, key):
            raise ConfigError(f"runtime.{key}: this process set its runtime up with "
                              f"{getattr(built, key)!r}; it cannot change to "
                              f"{getattr(wanted, key)!r} between runs of one process")
