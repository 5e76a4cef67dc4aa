"""The run context: what every part of a run reads, built once by the entry point.

``RunContext.create(cfg)`` sets up the runtime (seeds, strategy, precision policy; on a
TPU the TPU system) unless one is handed in, decides XLA for the task (one place:
``training.plan.resolve_jit_compile`` with the task's ``recompiles_under_xla`` trait),
and names the run directory's files (``RunLayout``). The training loop and the tasks
receive it; nothing else reads ``TF_CONFIG`` for the run's role or spells a run-directory
file name.

``python -m tfapp.tune`` sets the runtime up once per process and hands it to every
trial's context (``create(trial_cfg, runtime=rt)``): a strategy, and a TPU system, is
not built again per trial; each trial only re-seeds.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tfapp import runtime as runtime_lib
from tfapp.config import ConfigError, ExperimentConfig, RuntimeConfig, save_params
from tfapp.run_layout import RunLayout
from tfapp.training.status import write_status

log = logging.getLogger("tfapp")

__all__ = ["RunContext"]

# What a handed-in runtime must have been built with (the seed may differ per run).
_RUNTIME_KEYS = ("strategy", "tpu", "cpu_devices", "precision", "deterministic")


@dataclass
class RunContext:
    """One run's configuration, runtime and file layout.

    Attributes:
      cfg: the validated experiment config.
      runtime: strategy, precision and cluster role (``tfapp.runtime.Runtime``).
      jit_compile: whether the train step is compiled with XLA (decided once, here).
      run: the run directory's layout (``output_dir/name``); backups live there for every
        worker, as each worker restores from the chief's.
      layout: where *this process* writes: ``run`` on the chief, a scratch copy of it on
        other workers of a multi-worker run (every worker must take part in saves).
    """

    cfg: ExperimentConfig
    runtime: runtime_lib.Runtime
    jit_compile: bool
    run: RunLayout
    layout: RunLayout

    @classmethod
    def create(cls, cfg: ExperimentConfig, *, runtime: runtime_lib.Runtime | None = None,
               run_dir: str | os.PathLike | None = None) -> RunContext:
        """The context for ``cfg``; ``runtime`` reuses one already set up (tune's trials),
        ``run_dir`` replaces ``output_dir/name`` (the LR finder's scratch directory)."""
        from tfapp.tasks import get_task
        from tfapp.training.plan import resolve_jit_compile

        task_cls = get_task(cfg.task)  # unknown task: a ConfigError before any set-up
        if runtime is None:
            runtime = runtime_lib.setup(cfg.runtime)
        else:
            _check_same_runtime(runtime.config, cfg.runtime)
            runtime_lib.seed(cfg.runtime)
        jit = resolve_jit_compile(cfg, runtime,
                                  recompiles_under_xla=task_cls.recompiles_under_xla(cfg))
        run = RunLayout(Path(run_dir) if run_dir is not None else cfg.run_dir)
        layout = (run if runtime.is_chief
                  else run.worker_scratch(runtime.task_type, runtime.task_id))
        return cls(cfg=cfg, runtime=runtime, jit_compile=jit, run=run, layout=layout)

    @property
    def is_chief(self) -> bool:
        return self.runtime.is_chief

    def describe(self) -> str:
        return (f"{self.runtime.describe(self.cfg.data.batch_size)} "
                f"xla={'on' if self.jit_compile else 'off'}")

    def begin(self) -> Path:
        """Check the run directory is writable, write params.yaml and status ``running``;
        returns params.yaml's path."""
        root = self.layout.root
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = root / f".write_probe_{os.getpid()}"
            probe.write_bytes(b"x" * 4096)
            probe.unlink()
        except OSError as err:
            raise ConfigError(f"output directory {root} is not writable ({err.strerror}); "
                              "set output_dir= to a writable place") from None
        params = save_params(self.cfg, root)
        self.status("running")
        return params

    def status(self, state: str, **extra) -> None:
        """``status.json`` of this process's directory (see ``training.status``)."""
        write_status(self.layout.root, state, **extra)

    def end(self) -> None:
        """After a finished run, its export and reports written: drop the backup (the
        chief's; until now a kill resumed at the end of training), and a non-chief's whole
        scratch copy."""
        if self.is_chief:
            shutil.rmtree(self.run.backup, ignore_errors=True)
        else:
            self.layout.remove_worker_scratch()


def _check_same_runtime(built: RuntimeConfig | None, wanted: RuntimeConfig) -> None:
    if built is None:
        return
    for key in _RUNTIME_KEYS:
        if getattr(built, key) != getattr(wanted, key):
            raise ConfigError(f"runtime.{key}: this process set its runtime up with "
                              f"{getattr(built, key)!r}; it cannot change to "
                              f"{getattr(wanted, key)!r} between runs of one process")

