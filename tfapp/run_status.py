"""``RUN_DIR/status.json``: what a run is doing, written by the run, read by reports.

A run writes ``running`` when it starts and ``finished``, ``failed`` or ``interrupted``
when it ends. Nothing can write after a SIGKILL or an out-of-memory kill, so the file
keeps saying ``running``; ``read_status`` tells that apart by the writer's pid and host
and reports such a run as ``died``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from tfapp.atomic import read_state, write_text
from tfapp.run_layout import RunLayout

__all__ = ["write_status", "read_status"]


def write_status(run_dir: Path, state: str, **extra: Any) -> None:
    """Replace ``status.json`` atomically (a reader never sees half a file)."""
    status = {"state": state, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "pid": os.getpid(),
              "host": socket.gethostname(), **extra}
    write_text(RunLayout(run_dir).status, json.dumps(status, indent=1))


def read_status(run_dir: Path) -> dict[str, Any]:
    """The run's status, ``{}`` if it has none. A ``running`` status whose writer is gone
    (same host, pid no longer alive) reads as ``died``, with the reason in ``error``."""
    status = read_state(RunLayout(run_dir).status, "run status")
    if status is None:
        return {}
    pid = status.get("pid")
    if (status.get("state") == "running" and isinstance(pid, int)
            and status.get("host") == socket.gethostname() and not _alive(pid)):
        status.update(state="died", error=f"process {pid} ended without writing a final "
                      "status (killed: SIGKILL or out of memory?); rerun the same command "
                      "to resume from its last backup")
    return status


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: existence check only
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
