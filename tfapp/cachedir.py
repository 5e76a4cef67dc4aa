"""tfapp's cache root, where built modules and prepared data are kept between runs.

``cache_dir()`` is only the path; whatever writes there asks ``usable_cache_dir()`` first, so
a cache root that cannot be written (HOME or ``TFAPP_CACHE_DIR`` a file, a folder without
write permission, a read-only file system) is one line naming it and the fix, and
``python -m tfapp.doctor`` names the same problem (``cache_problem``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tfapp.config import ConfigError

__all__ = ["cache_dir", "cache_problem", "unwritable_reason", "usable_cache_dir"]


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$TFAPP_CACHE_DIR``, or ``~/.cache/tfapp``."""
    env = os.environ if env is None else env
    if env.get("TFAPP_CACHE_DIR"):
        return Path(env["TFAPP_CACHE_DIR"])
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".cache" / "tfapp"


def unwritable_reason(path: str | os.PathLike) -> str | None:
    """Why ``path`` (a folder, created if missing) cannot be written, or None when it can:
    read from its nearest existing folder, creating nothing."""
    p = Path(path).expanduser()
    existing = p
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # a path under a regular file does not exist either
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    # os.access answers for this user (root writes anywhere) and says no on a read-only mount.
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} cannot be written (no write permission, or a read-only file system)"
    return None


def _named(env: Mapping[str, str]) -> tuple[str, str]:
    """How the cache root was chosen and what to change, for messages."""
    if env.get("TFAPP_CACHE_DIR"):
        return "TFAPP_CACHE_DIR", "set TFAPP_CACHE_DIR to a writable folder"
    return (f"from HOME={env['HOME']}" if env.get("HOME") else "in the home folder",
            "set TFAPP_CACHE_DIR to a writable folder (or HOME to your home folder)")


def cache_problem(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(what is wrong, how to fix it) when the cache root cannot be written, else None."""
    env = os.environ if env is None else env
    root = cache_dir(env)
    reason = unwritable_reason(root)
    if reason is None:
        return None
    source, fix = _named(env)
    return f"the tfapp cache {root} ({source}) is unusable: {reason}", fix


def usable_cache_dir() -> Path:
    """``cache_dir()``, created; a ConfigError naming the problem and its fix when it cannot
    be written."""
    problem = cache_problem()
    root = cache_dir()
    if problem is None:
        try:
            root.mkdir(parents=True, exist_ok=True)
            return root
        except OSError as err:  # what the check above cannot see (a full disk, a race)
            source, fix = _named(os.environ)
            problem = (f"the tfapp cache {root} ({source}) is unusable: "
                       f"{err.strerror or err}", fix)
    raise ConfigError(f"{problem[0]}; {problem[1]}")
