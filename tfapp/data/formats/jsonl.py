"""JSON Lines files: one JSON value per line, rows of named columns or tagged sentences.

Lines end at "\\n" only (JSON strings may hold U+2028, \\x0c, ...). A line that is not
UTF-8 or not valid JSON is a bad row; blank lines are passed over. A row is an object with
the columns as keys (the first object decides: a key it lacks is a wrong column name, not
a bad row); a tagged sentence is ``{"tokens": [...], "tags": [...]}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tfapp.data.formats.files import Hint, Parsed, missing_column, nonblank_lines
from tfapp.textio import NOT_UTF8, has_undecodable, json_line

__all__ = ["rows", "sentences"]


def _values(path: str) -> Iterator[tuple[int, Any, str | None]]:
    """(line, value, problem) of every non-blank line, or of an empty file."""
    for number, line in nonblank_lines(path):
        if line is None:
            yield 1, None, "empty file (no JSON lines)"
        elif has_undecodable(line):
            yield number, None, NOT_UTF8
        else:
            try:
                yield number, json_line(line), None
            except json.JSONDecodeError as err:
                yield number, None, f"not valid JSON ({err.msg} at column {err.colno})"


def rows(path: str, columns: list[str], hint: Hint) -> Iterator[Parsed]:
    """Every object of the file with ``columns`` among its keys."""
    first = True
    for number, obj, problem in _values(path):
        if problem is None and not isinstance(obj, dict):
            problem = f"expected a JSON object per line, got {type(obj).__name__}"
        if problem is not None:
            yield number, None, problem
            continue
        missing = [c for c in columns if c not in obj]
        if missing:
            if first:  # the first object decides: a wrong key name, not a bad row
                raise missing_column(path, missing[0], list(obj), "first JSON object", hint)
            yield number, None, (f"no key '{missing[0]}' (has: {', '.join(obj) or 'nothing'})")
            continue
        first = False
        yield number, obj, None


def sentences(path: str) -> Iterator[tuple[int, list[str], list[str], tuple[int, str] | None]]:
    """``(line, words, tags, problem)`` of every sentence, tags as written; a problem is
    ``(line, why)``."""
    for number, obj, problem in _values(path):
        if problem is None:
            words, tags = (obj.get("tokens"), obj.get("tags")) if isinstance(obj, dict) \
                else (0, 0)
            if not (isinstance(words, list) and isinstance(tags, list)
                    and all(isinstance(x, str) for x in words + tags)):
                problem = 'expected {"tokens": [strings], "tags": [strings]}'
            elif len(words) != len(tags):
                problem = f"{len(words)} tokens but {len(tags)} tags"
            elif any(not w.strip() or len(w.split()) > 1 for w in words):
                problem = "a token is empty or holds whitespace"
            else:
                yield number, words, tags, None
                continue
        yield number, [], [], (number, problem)
