"""Field helpers of the config dataclasses: choices and bounds, checked by ``validate``."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def choices(*values: str, default: str) -> Any:
    """A string field restricted to ``values`` (checked by ``validate``)."""
    return field(default=default, metadata={"choices": values})


def bounded(default: Any, *, min: float | None = None, max: float | None = None,
            gt: float | None = None) -> Any:
    """A numeric field with bounds: ``min``/``max`` inclusive, ``gt`` exclusive."""
    return field(default=default, metadata={"min": min, "max": max, "gt": gt})
