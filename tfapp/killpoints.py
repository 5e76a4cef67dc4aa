"""Named points where the crash test kills a run (``tests/test_kill_points.py``).

``TFAPP_KILL_AT=NAME`` (or ``NAME@N``) makes this process SIGKILL itself the first (the
``N``-th) time it reaches ``NAME``: the same death as an OOM kill or a pulled plug, at a
place the test chooses instead of wherever a timer happens to land. ``NAME@N:TERM`` sends
SIGTERM instead (a scheduler's notice: the run saves and stops at the end of its step).
The points sit where a kill would do the most harm: just before a finished file or
directory is renamed into place (``rename:<name>``), after an epoch's backup, between
training batches and validation batches, and before the backup is dropped at the end of a
run.

Unset -- always, outside that test -- ``reached`` is one truth test.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter

__all__ = ["ARMED", "reached"]

_SETTING = os.environ.get("TFAPP_KILL_AT", "")
_POINT, _, _SIGNAL = _SETTING.rpartition(":")
if _SIGNAL not in ("TERM", "KILL", "INT"):  # a point's own name may hold ":"
    _POINT, _SIGNAL = _SETTING, ""
_TARGET, _, _NTH = _POINT.partition("@")
ARMED = bool(_TARGET)
_seen: Counter[str] = Counter()


def reached(name: str) -> None:
    """Die here if this is the point (and the time) ``TFAPP_KILL_AT`` names."""
    if not ARMED or name != _TARGET:
        return
    _seen[name] += 1
    if _seen[name] == int(_NTH or 1):
        sent = signal.Signals[f"SIG{_SIGNAL or 'KILL'}"]
        print(f"tfapp: kill point {name}@{_seen[name]}: {sent.name}", file=sys.stderr,
              flush=True)
        os.kill(os.getpid(), sent)
