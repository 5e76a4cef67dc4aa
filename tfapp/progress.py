"""A progress line for long commands that stream rows: rows done, rows/s and, when the total
is known, the share done and the time left (ETA).

On a terminal the line is rewritten in place a few times a second; elsewhere (a log file,
a CI job) it is printed as a new line every ``every`` seconds, so logs stay short. The
final line is always printed.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tfapp.console import stderr_is_terminal

__all__ = ["Progress"]


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """``update(rows, position)`` after each batch: ``rows`` scored so far, ``position``
    the input records passed (scored, skipped or bad) against ``total`` records (None:
    unknown, no ETA)."""

    def __init__(self, what: str, total: int | None, *, stream: TextIO | None = None,
                 terminal: bool | None = None, every: float = 30.0, enabled: bool = True):
        self.what, self.total, self.enabled = what, total, enabled
        self.stream = stream or sys.stderr
        if terminal is None:
            terminal = stderr_is_terminal() and self.stream is sys.stderr
        self.terminal, self.every = terminal, 0.25 if terminal else every
        self.start = self.shown = time.monotonic()
        self.rows = self.position = 0

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        text = f"{self.what}: {self.rows:,} rows  {self.rows / elapsed:,.0f} rows/s"
        if self.total and self.position:
            share = min(self.position / self.total, 1.0)
            left = elapsed * (1 - share) / share if share < 1 else 0.0
            text += f"  {share:.0%}  ETA {_clock(left)}"
        return text + f"  elapsed {_clock(elapsed)}"

    def update(self, rows: int, position: int) -> None:
        self.rows, self.position = rows, position
        now = time.monotonic()
        if not self.enabled or now - self.shown < self.every:
            return
        self.shown = now
        self._show(final=False)

    def close(self) -> None:
        if self.enabled:
            self._show(final=True)

    def _show(self, *, final: bool) -> None:
        if self.terminal:
            self.stream.write("\r" + self.line() + ("\n" if final else "\x1b[K"))
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()
