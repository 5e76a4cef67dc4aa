"""The run directory held by the one process training into it: the lock, the status and
the time trained.

``RunDirectory.take(ctx)`` checks the directory is a run's (or new) and writable, takes its
lock (one process at a time; the kernel lets go when the process dies, however it dies),
applies the resume rules (``training/resume_rules.py``), writes ``params.yaml`` and status
``running``. Everything it decides is set when it is taken; ``release`` (or leaving a
``with`` block) lets the directory go.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tfapp import killpoints
from tfapp.atomic import read_state, remove_leftovers
from tfapp.config import ConfigError, ExperimentConfig, save_params
from tfapp.run_layout import RunLayout, aside_path
from tfapp.run_status import write_status
from tfapp.training.resume_rules import check_finished_same, check_resumable

if TYPE_CHECKING:
    from tfapp.training.context import RunContext

log = logging.getLogger("tfapp")

__all__ = ["RunDirectory"]


@dataclass(frozen=True)
class RunDirectory:
    """A run directory this process has taken for one run.

    Attributes:
      cfg: the run's config (kept with the backup by ``keep_config_with_backup``).
      run: the run directory's layout (the chief's: backups live there for every worker).
      layout: where this process writes (``run``, or a non-chief worker's scratch copy).
      is_chief: whether this process is the chief (it alone checks and writes ``run``).
      params: the ``params.yaml`` written.
      changed_since_backup: what a resume changed (``--resume-anyway``), described.
      started: when this process took the directory (``time.time()``).
      seconds_before: seconds trained before a resume (the status of the run resumed).
    """

    cfg: ExperimentConfig
    run: RunLayout
    layout: RunLayout
    is_chief: bool
    params: Path
    changed_since_backup: tuple[str, ...]
    started: float
    seconds_before: float
    lock: IO[str] = field(repr=False, compare=False)

    @classmethod
    def take(cls, ctx: RunContext, *, start_over: bool = False,
             resume_anyway: bool = False) -> RunDirectory:
        """Take ``ctx``'s run directory (``ctx.layout``) for this process.

        A backup is resumed only under the config it was made under (``backup_params``),
        but for keys whose rule lets a resume change them; ``resume_anyway`` resumes it
        under changed keys too, unless a key makes the backup meaningless. A finished run is
        trained again only under its own config. ``start_over`` moves the run directory
        aside (never deletes it) and starts a new run in its place."""
        layout, cfg = ctx.layout, ctx.cfg
        root = layout.root
        if ctx.is_chief:
            _check_is_a_run(root)  # before anything is written into it
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = root / f".write_probe_{os.getpid()}"
            probe.write_bytes(b"x" * 4096)
            probe.unlink()
        except OSError as err:
            raise ConfigError(f"output directory {root} is not writable ({err.strerror}); "
                              "set output_dir= to a writable place") from None
        lock = _hold(layout.lock)
        try:
            for folder in (root, layout.checkpoints):  # a killed run's half-writes
                for name in remove_leftovers(folder):
                    log.info("removed %s, left half-written by an interrupted run",
                             folder / name)
            changed: tuple[str, ...] = ()
            if ctx.is_chief:
                if start_over:
                    lock = _move_aside(layout, lock)
                elif ctx.resuming:
                    changed = check_resumable(ctx.run, cfg, resume_anyway)
                else:
                    check_finished_same(ctx.run, cfg)
            params = save_params(cfg, root)
            # Time trained before a resume counts too (the status of the run resumed).
            previous = (read_state(layout.status, "run status") or {}
                        if ctx.resuming else {})
            taken = cls(cfg=cfg, run=ctx.run, layout=layout, is_chief=ctx.is_chief,
                        params=params, changed_since_backup=changed, started=time.time(),
                        seconds_before=float(previous.get("train_seconds") or 0.0),
                        lock=lock)
            taken.status("running")
        except BaseException:
            lock.close()
            raise
        return taken

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def status(self, state: str, **extra: Any) -> None:
        """``status.json`` of this process's directory (see ``run_status``), with the
        seconds trained so far (``train_seconds``)."""
        write_status(self.layout.root, state, train_seconds=round(self.train_seconds(), 2),
                     **extra)

    def train_seconds(self) -> float:
        """Seconds this run has trained: this process since it took the directory, plus
        the processes before a resume (as far as their last status says)."""
        return self.seconds_before + time.time() - self.started

    def keep_config_with_backup(self) -> None:
        """Record this run's config as the one its backup is made under (the chief's).
        The loop calls it once the first backup of this process is written: until then
        the backup on disk, if any, is still the one made under the stored config."""
        if self.is_chief:
            save_params(self.cfg, self.run.root, path=self.run.backup_params,
                        note="The config this run's backup was made under; resume it as it "
                             "was with")

    def release(self) -> None:
        """Let go of the run directory; idempotent (closing a closed file is a no-op)."""
        self.lock.close()

    def end(self) -> None:
        """After a finished run, its export and reports written: let go, and drop the
        backup (the chief's; until now a kill resumed at the end of training), and a
        non-chief's whole scratch copy."""
        self.release()
        killpoints.reached("drop-backup")
        if self.is_chief:
            shutil.rmtree(self.run.backup, ignore_errors=True)
        else:
            self.layout.remove_worker_scratch()


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


def _move_aside(layout: RunLayout, lock: IO[str]) -> IO[str]:
    """Rename the run directory (when it holds a run) to a free ``<name>.old-<time>`` and
    take the new, empty one: starting over never deletes a run. Returns the lock held."""
    root = layout.root
    if not any(p.name != layout.lock.name for p in root.iterdir()):
        return lock
    aside = aside_path(root)
    root.rename(aside)  # the lock we hold moves with it; nobody else can hold it
    root.mkdir()
    new_lock = _hold(layout.lock)
    lock.close()
    log.warning("--start-over: the earlier run in %s was moved to %s (nothing was "
                "deleted)", root, aside)
    return new_lock


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
