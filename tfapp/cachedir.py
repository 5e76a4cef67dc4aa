"""tfapp's cache root, where built modules and prepared data are kept between runs."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """``$TFAPP_CACHE_DIR``, or ``~/.cache/tfapp``."""
    return Path(os.environ.get("TFAPP_CACHE_DIR") or Path.home() / ".cache" / "tfapp")
