"""The run context: what every part of a run reads, built once by the entry point.

``RunContext.create(cfg, task=...)`` sets up the runtime (seeds, strategy, precision policy; on a
TPU the TPU system) unless one is handed in, decides XLA for the task (one place:
``training.plan.resolve_jit_compile`` with the task's ``recompiles_under_xla`` trait; settled
from the built model by ``settle_jit_compile``, as the BERT encoder built decides it),
and names the run directory's files (``RunLayout``). The training loop and the tasks
receive it; nothing else reads ``TF_CONFIG`` for the run's role or spells a run-directory
file name.

``python -m tfapp.tune`` sets the runtime up once per process and hands it to every
trial's context (``create(trial_cfg, runtime=rt)``): a strategy, and a TPU system, is
not built again per trial; each trial only re-seeds.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tfapp import compat, killpoints
from tfapp import runtime as runtime_lib
from tfapp.atomic import read_state, remove_leftovers
from tfapp.config import (
    ConfigError,
    ExperimentConfig,
    RuntimeConfig,
    load_config,
    save_params,
)
from tfapp.run_layout import RunLayout, aside_path
from tfapp.run_status import write_status
from tfapp.training.plan import resolve_jit_compile_choice

if TYPE_CHECKING:
    from tfapp.training.task import Task

log = logging.getLogger("tfapp")

__all__ = ["RunContext"]

# What a handed-in runtime must have been built with (the seed may differ per run).
_RUNTIME_KEYS = ("strategy", "tpu", "cpu_devices", "precision", "deterministic")


@dataclass
class RunContext:
    """One run's configuration, runtime and file layout.

    Attributes:
      cfg: the validated experiment config.
      task: the task's class (``tfapp.training.task.Task``), handed in by the command.
      runtime: strategy, precision and cluster role (``tfapp.runtime.Runtime``).
      jit_compile: whether the train step is compiled with XLA (decided here, and
        settled by ``settle_jit_compile`` once the model is built).
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

    def settle_jit_compile(self, model: Any) -> None:
        """XLA decided again with the model built (``fit.build_model`` calls it): a BERT
        task's answer depends on the encoder actually built, tfapp's native encoder
        (compiles once) or a restored Hub SavedModel (recompiles every step)."""
        jit, self.jit_reason = resolve_jit_compile_choice(
            self.cfg, self.runtime,
            recompiles_under_xla=self.task.recompiles_under_xla(self.cfg, model))
        if jit != self.jit_compile:
            log.info("XLA %s for the model built (%s)", "on" if jit else "off",
                     self.jit_reason)
        self.jit_compile = jit

    @property
    def is_chief(self) -> bool:
        return self.runtime.is_chief

    def describe(self) -> str:
        return (f"{self.runtime.describe(self.cfg.data.batch_size)} "
                f"xla={'on' if self.jit_compile else 'off'}")

    def begin(self, *, start_over: bool = False, resume_anyway: bool = False) -> Path:
        """Check the run directory is a run's (or new) and writable and take it (one
        process at a time); write params.yaml and status ``running``. Returns
        params.yaml's path.

        A backup is resumed only under the config it was made under (``backup_params``),
        but for keys that do not touch the trained state; ``resume_anyway`` resumes it
        under changed keys too, unless a key makes the backup meaningless (another
        encoder, optimizer, task). A finished run is trained again only under its own
        config. ``start_over`` moves the run directory aside (never deletes it) and starts
        a new run in its place. ``changed_since_backup`` says what a resume changed."""
        root = self.layout.root
        self.changed_since_backup: list[str] = []
        if self.is_chief:
            _check_is_a_run(root)  # before anything is written into it
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = root / f".write_probe_{os.getpid()}"
            probe.write_bytes(b"x" * 4096)
            probe.unlink()
        except OSError as err:
            raise ConfigError(f"output directory {root} is not writable ({err.strerror}); "
                              "set output_dir= to a writable place") from None
        self._lock = _hold(self.layout.lock)
        try:
            for folder in (root, self.layout.checkpoints):  # a killed run's half-writes
                for name in remove_leftovers(folder):
                    log.info("removed %s, left half-written by an interrupted run",
                             folder / name)
            if self.is_chief:
                if start_over:
                    self._move_aside()
                elif self.resuming:
                    self.changed_since_backup = _check_resumable(self.run, self.cfg,
                                                                 resume_anyway)
                else:
                    _check_finished_same(self.run, self.cfg)
            params = save_params(self.cfg, root)
            # Time trained before a resume counts too (the status of the run resumed).
            previous = (read_state(self.layout.status, "run status") or {}
                        if self.resuming else {})
            self._seconds_before = float(previous.get("train_seconds") or 0.0)
            self._started = time.time()
            self.status("running")
        except BaseException:
            self.release()
            raise
        return params

    def keep_config_with_backup(self) -> None:
        """Record this run's config as the one its backup is made under (the chief's).
        The loop calls it once the first backup of this process is written: until then
        the backup on disk, if any, is still the one made under the stored config."""
        if self.is_chief:
            save_params(self.cfg, self.run.root, path=self.run.backup_params,
                        note="The config this run's backup was made under; resume it as it "
                             "was with")

    def _move_aside(self) -> None:
        """Rename the run directory (when it holds a run) to a free ``<name>.old-<time>``
        and take the new, empty one: starting over never deletes a run."""
        root = self.layout.root
        if not any(p.name != self.layout.lock.name for p in root.iterdir()):
            return
        aside = aside_path(root)
        old_lock = self._lock
        root.rename(aside)  # the lock we hold moves with it; nobody else can hold it
        root.mkdir()
        self._lock = _hold(self.layout.lock)
        old_lock.close()
        log.warning("--start-over: the earlier run in %s was moved to %s (nothing was "
                    "deleted)", root, aside)

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

    def release(self) -> None:
        """Let go of the run directory (``begin`` took it); idempotent."""
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.close()
            self._lock = None

    def status(self, state: str, **extra) -> None:
        """``status.json`` of this process's directory (see ``training.status``), with the
        seconds trained so far (``train_seconds``)."""
        write_status(self.layout.root, state, train_seconds=round(self.train_seconds(), 2),
                     **extra)

    def train_seconds(self) -> float:
        """Seconds this run has trained: this process since ``begin``, plus the processes
        before a resume (as far as their last status says)."""
        started = getattr(self, "_started", None)
        if started is None:
            return 0.0
        return self._seconds_before + time.time() - started

    def end(self) -> None:
        """After a finished run, its export and reports written: drop the backup (the
        chief's; until now a kill resumed at the end of training), and a non-chief's whole
        scratch copy."""
        self.release()
        killpoints.reached("drop-backup")
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


def _hold(lock_path: Path) -> IO[str]:
    """An exclusive flock on ``lock_path`` (released when the file closes or the process
    dies, however it dies), or one line naming the process that holds it."""
    fh = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 (held for the whole run)
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise ConfigError(f"{lock_path.parent} is in use by {holder}; wait for it to end, or "
                          "set name= for another run") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()} on {socket.gethostname()}")
    fh.flush()
    return fh


#: what may change between a run and the rerun that resumes it: how long it trains, and
#: what does not touch the trained state (where the run directory was moved, where data is
#: cached or served from, logging, tracking, the TPU's address)
_RESUMABLE_CHANGES = ("output_dir", "name",
                      "trainer.epochs", "trainer.max_steps", "trainer.log_every_steps",
                      "trainer.profile_steps", "trainer.profiler_port",
                      "trainer.profiler_listen_all", "data.service",
                      "data.cache", "data.snapshot", "data.prefetch", "tracking", "runtime.tpu",
                      "mlm.overwrite")
#: what may change before a finished run is trained again without --overwrite: as for a
#: resume, but not how long it trains (a finished run has no backup: it starts over)
_FINISHED_CHANGES = tuple(k for k in _RESUMABLE_CHANGES
                          if k not in ("trainer.epochs", "trainer.max_steps"))


def _check_is_a_run(root: Path) -> None:
    """A run directory is new, empty, or one tfapp made (params.yaml or status.json in it);
    a folder of other files is refused, --start-over or not: training would write over it
    or move it away."""
    if not root.is_dir() or RunLayout(root).params.exists() or RunLayout(root).status.exists():
        return
    # lr_find's plot may come before the run's first training (python -m tfapp.lr_find).
    lr_find = {RunLayout(root).lr_range_test_png.name,
               RunLayout(root).lr_range_test_png.with_suffix(".json").name}
    theirs = sorted(p.name for p in root.iterdir()
                    if not p.name.startswith(".") and p.name not in lr_find)
    if theirs:
        shown = ", ".join(theirs[:3]) + (", ..." if len(theirs) > 3 else "")
        raise ConfigError(f"{root} is not a tfapp run directory (no params.yaml) and holds "
                          f"other files ({shown}); nothing was changed; set name= or "
                          "output_dir= to a new or empty folder")


#: changes a backup cannot be resumed under even when asked to (--resume-anyway): its
#: weights would belong to another encoder or task, or its optimizer state to another
#: optimizer (slots that do not exist, or are silently left unrestored)
_NEVER_RESUMED = ("task", "model.kind", "model.hub_handle", "model.hub_preprocessor",
                  "optimizer.name", "optimizer.ema_decay",
                  "trainer.gradient_accumulation_steps")

_WAYS_FORWARD = ("to resume it as it was, rerun with --config {stored}; to start over, pass "
                 "--start-over (the run is moved to {aside}, nothing is deleted); or set "
                 "name= for a new run")


def _ways_forward(run: RunLayout, stored: Path) -> str:
    aside = run.root.with_name(f"{run.root.name}.old-<date>-<time>")
    return _WAYS_FORWARD.format(stored=stored, aside=aside)


def _check_finished_same(run: RunLayout, cfg: ExperimentConfig) -> None:
    """Training a finished run again starts from scratch and replaces its export and
    checkpoints: done silently only under the same config (but for logging, caching or
    serving); under another one it is refused unless --start-over, which moves the
    finished run aside."""
    status = read_state(run.status, "run status") or {}
    if status.get("state") != "finished" or not run.params.is_file():
        return
    try:
        changed = _describe(_differences(load_config(run.params), cfg, _FINISHED_CHANGES))
    except ConfigError:
        changed = "its params.yaml is unreadable"
    if changed:
        aside = run.root.with_name(f"{run.root.name}.old-<date>-<time>")
        raise ConfigError(f"{run.root} holds a finished run with another config ({changed}); "
                          "nothing was changed; pass --start-over to train it again (the "
                          f"finished run is moved to {aside}, nothing is deleted), or set "
                          "name= for a new run")


def _check_resumable(run: RunLayout, cfg: ExperimentConfig,
                     resume_anyway: bool) -> list[str]:
    """Resuming a backup is only right under the config that made it (but for a longer
    run, or other logging, caching or serving). Another config is refused in one line
    naming every key that differs and each way forward; with ``resume_anyway`` it is
    resumed (returns the changes), unless a key makes the backup meaningless."""
    stored = run.backup_params if run.backup_params.is_file() else run.params
    if not stored.is_file():
        return []
    try:
        changes = _differences(load_config(stored), cfg)
    except ConfigError as err:
        raise ConfigError(f"{stored}, the config {run.root}'s backup was made under, cannot "
                          f"be read ({err}); pass --start-over to start the run again (it "
                          "is moved aside, nothing is deleted)") from None
    if not changes:
        return []
    if not resume_anyway:
        raise ConfigError(f"{run.root} holds a backup made under another config "
                          f"({_describe(changes)}); nothing was changed; to resume it with "
                          "these changes, pass --resume-anyway; "
                          + _ways_forward(run, stored))
    never = [c for c in changes if c[0] in _NEVER_RESUMED]
    if never:
        raise ConfigError(f"--resume-anyway: {_describe(never)} since the backup was made, "
                          f"and a backup cannot be resumed under another {never[0][0]}; "
                          + _ways_forward(run, stored))
    log.warning("resuming %s under a changed config: %s", run.root, _describe(changes))
    return [_describe([c]) for c in changes]


def _describe(changes: list[tuple[str, Any, Any]]) -> str:
    """``key: old -> new`` for each change, joined."""
    def short(value: Any) -> str:
        text = repr(value) if isinstance(value, str) else str(value)
        return text if len(text) <= 40 else text[:37] + "..."

    return ", ".join(f"{key}: {short(old)} -> {short(new)}" for key, old, new in changes)


def _differences(a: Any, b: Any, allowed: tuple[str, ...] = _RESUMABLE_CHANGES,
                 prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Every (dotted key, a's value, b's value) that differs, ``allowed`` changes aside."""
    found = []
    for f in dataclasses.fields(a):
        key = f"{prefix}{f.name}"
        # under another task, b's class may lack a's key (the task differs too)
        x, y = getattr(a, f.name), getattr(b, f.name, None)
        if x == y or key in allowed:
            continue
        if dataclasses.is_dataclass(x):
            found += _differences(x, y, allowed, key + ".")
        else:
            found.append((key, x, y))
    return found
