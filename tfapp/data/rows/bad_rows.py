"""The bad-row policy, ``data.on_bad_rows``, in one place.

``fail`` raises ``DataError`` at the first bad row, naming it as ``file:line: problem``
and the switch that would skip such rows; ``skip`` drops bad rows and records them in a
``BadRowReport`` (a count per split and the first few). Problems of a whole file (missing
file, missing column, unreadable file) always fail. ``SourceLog`` is one source's share
of it while ``prepare`` reads the source (with its label counts); the report a run or a
command prints is merged from those (``BadRowReport.merge``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tfapp.data.text.tags import EntityCounts
from tfapp.errors import DataError, Setting

__all__ = ["BadRow", "BadRowPolicy", "BadRowReport", "MAX_REPORTED", "SKIP_OPTION", "SourceLog"]

MAX_REPORTED = 5
SKIP_OPTION = "data.on_bad_rows=skip"


@dataclass
class BadRow:
    """One dropped row: where it was and what was wrong with it."""

    file: str
    line: int | str
    problem: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.problem}"


@dataclass
class BadRowReport:
    """Rows dropped with ``on_bad_rows=skip``: total count and the first few, per split."""

    count: int = 0
    examples: list[BadRow] = field(default_factory=list)
    per_split: dict[str, int] = field(default_factory=dict)

    def add(self, split: str, bad: BadRow | None, count: int = 1) -> None:
        """``count`` rows of ``split`` dropped, ``bad`` the first of them."""
        if count:
            self.count += count
            self.per_split[split] = self.per_split.get(split, 0) + count
        if bad is not None and len(self.examples) < MAX_REPORTED:
            self.examples.append(bad)

    def merge(self, other: dict[str, Any], split: str | None = None) -> None:
        """Add a report saved as ``to_dict`` (a source's, a prepared folder's), its rows
        counted as of ``split`` (None: of the splits it names)."""
        for bad in other.get("examples", []):
            if len(self.examples) < MAX_REPORTED:
                self.examples.append(BadRow(**bad))
        count = other.get("count", 0)
        per_split = other.get("per_split", {}) if split is None else \
            ({split: count} if count else {})
        for name, n in per_split.items():
            self.per_split[name] = self.per_split.get(name, 0) + n
        self.count += count

    def summary(self) -> str:
        if not self.count:
            return "no bad rows"
        where = ", ".join(f"{k} {v}" for k, v in self.per_split.items())
        first = "; ".join(str(b) for b in self.examples)
        return f"skipped {self.count} bad row(s) ({where}); first: {first}"

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "per_split": dict(self.per_split),
                "examples": [dataclasses.asdict(b) for b in self.examples]}


def _skip_advice(option: str) -> str | Setting:
    """``option`` (``KEY=VALUE``, or a command's own words) as the advice in a message:
    a config setting stays a ``Setting``, so that a command can name its flag instead."""
    key, eq, value = option.partition("=")
    return Setting(key, value) if eq and " " not in key else f"set {option}"


class BadRowPolicy:
    """Applies ``on_bad_rows``: raise at once (fail) or record (skip).

    ``skip_option`` is how the user asks for skipping, for the message (``None``: the
    command has no such switch, so the message only says to fix the data).
    """

    def __init__(self, mode: str, report: BadRowReport, split: str,
                 skip_option: str | None = SKIP_OPTION):
        self.mode, self.report, self.split = mode, report, split
        self.skip_option = skip_option

    def __call__(self, file: str, line: int | str, problem: str) -> None:
        bad = BadRow(file, line, problem)
        if self.mode == "fail":
            raise self.error(bad)
        self.report.add(self.split, bad)

    def good(self, rows: Iterable[Any]) -> Iterator[Any]:
        """The good ``rows`` (``Row``s) of a stream; the policy applied to the bad ones."""
        for row in rows:
            if row.problem is None:
                yield row
            else:
                self(row.file, row.line, row.problem)

    def error(self, bad: BadRow | str) -> DataError:
        """The one line that stops a run at ``bad`` (a row, or one already written out)."""
        if self.skip_option:
            return DataError(f"{bad} (fix the data, or ", _skip_advice(self.skip_option),
                             " to drop such rows)")
        return DataError(f"{bad} (fix the data)")


class SourceLog:
    """Bad rows and label counts of one source, in file order, as ``prepare`` reads it
    (tagged rows: its entity counts too)."""

    def __init__(self, path: str, mode: str, split: str, skip_option: str | None):
        self.path, self.mode, self.split = path, mode, split
        self.report = BadRowReport()
        self.policy = BadRowPolicy(mode, self.report, split, skip_option)
        self.labels: dict[str, int] = {}
        self.first_seen: dict[str, str] = {}
        self.entities = EntityCounts()  # tagged rows: what was read, converted, refused

    def bad(self, line: int | str, problem: str) -> None:
        self.policy(self.path, line, problem)

    def count_label(self, name: str, line: int | str, count: int = 1) -> None:
        """``count`` more rows (words) of the label (tag) ``name``, the first on ``line``."""
        if name not in self.labels:
            self.labels[name] = 0
            self.first_seen[name] = f"{self.path}:{line}"
        self.labels[name] += count
