"""Local files written whole or not at all: a unique temporary file next to the target,
flushed to disk, then renamed over it. A reader sees the old file or the new one, never
half of one; an error (or a kill) while writing leaves the old file as it was; two writers
of the same file never share a temporary name (the last rename wins, whole)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["atomic_open", "write_text"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, *, newline: str | None = None) -> Iterator[IO[str]]:
    """A text file (UTF-8) to write; it replaces ``path`` when the block ends cleanly.
    The parent folder is created if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Replace ``path`` with ``text``, atomically."""
    with atomic_open(path) as fh:
        fh.write(text)
    return Path(path)
