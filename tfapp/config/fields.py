"""Field helpers of the config dataclasses: choices and bounds (checked by ``validate``),
and each key's resume rule.

Every leaf key of a task's config says what a rerun of an interrupted or finished run may
do with it (``resume=``); ``training/resume_rules.py`` reads the rule, and
``tests/test_resume_rules.py`` fails on a key without one, so a new key is never silently
"safe to change".
"""

from __future__ import annotations

from dataclasses import MISSING, field
from typing import Any

#: the key does not touch the trained state (where the run lives, logging, caching,
#: serving): a resume, or a finished run trained again, may change it
FREE = "may_change"
#: how long the run trains: a resume may change it; a finished run is not trained again
#: under another value (it has no backup: it would start over)
LONGER = "may_extend"
#: the trained state depends on it: a resume under another value needs --resume-anyway
MATCH = "must_match"
#: the backup is meaningless under another value (its weights belong to another encoder
#: or task, its slots to another optimizer): never resumed, --resume-anyway or not
NEVER = "never"
RESUME_RULES = (FREE, LONGER, MATCH, NEVER)


def setting(default: Any = MISSING, *, resume: str, factory: Any = MISSING,
            **metadata: Any) -> Any:
    """A config key with its resume rule; ``factory`` for a mutable default; ``metadata``
    as ``choices``/``bounded`` set it (``type_name``: how the reference prints its type)."""
    if resume not in RESUME_RULES:
        raise ValueError(f"resume={resume!r}: one of {RESUME_RULES}")
    return field(default=default, default_factory=factory,
                 metadata={"resume": resume, **metadata})


def choices(*values: str, default: str, resume: str) -> Any:
    """A string field restricted to ``values`` (checked by ``validate``)."""
    return setting(default, resume=resume, choices=values)


def bounded(default: Any, *, resume: str, min: float | None = None,
            max: float | None = None, gt: float | None = None) -> Any:
    """A numeric field with bounds: ``min``/``max`` inclusive, ``gt`` exclusive."""
    return setting(default, resume=resume, min=min, max=max, gt=gt)
