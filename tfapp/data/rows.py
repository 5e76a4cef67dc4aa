"""What a row of a source file is (``RowSpec``) and how the Python readers' rows become
prepared columns: one source's bad rows and label counts (``SourceLog``), the checks of a
parsed row (``convert``), and the rows read by the Python readers (``python_rows``:
JSONL, Parquet, text lines, TFRecord, TFDS, CoNLL, and CSV/TSV files pyarrow's CSV parser
cannot read as Python's csv would). ``tfapp.data.prepare`` writes them into shards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tfapp.data import sources
from tfapp.data.records import BytesList
from tfapp.data.tagged import tagged_rows
from tfapp.data.text.tags import EntityCounts
from tfapp.errors import DataError

import numpy as np
import pyarrow as pa

__all__ = ["KINDS", "BATCH_ROWS", "RowSpec", "Rows", "SourceLog", "Batcher", "convert",
           "python_rows"]

KINDS = ("labelled", "texts", "pairs", "tagged")
#: rows per encoded batch (and per pyarrow block of short rows)
BATCH_ROWS = 16384


@dataclass(frozen=True)
class RowSpec:
    """What a row is and how it is read: the settings that decide the prepared records.

    ``kind``: labelled (text[, text_pair], labels: the classifier), texts (one text: the
    generator's corpus, masked-LM corpora), pairs (source, target: the generator's pairs),
    tagged (words, tags in IOB2: NER).
    """

    kind: str
    format: str = "auto"
    text_column: str = "text"
    text_pair_column: str = ""
    label_column: str = "label"
    multi_label: bool = False
    label_separator: str = "|"
    source_column: str = "source"
    target_column: str = "target"
    tag_column: int = -1
    tag_scheme: str = "iob2"
    #: how a missing column's message says to fix it ("": the config keys of the kind)
    column_hint: str = dataclasses.field(default="", compare=False)
    #: (seed, validation fraction, test fraction) when held-out splits are taken from
    #: these rows: each split's rows then go to shards of their own
    #: (``manifest.held_out_selectors``), so a held-out split reads only its own rows
    held_out: tuple = ()

    _KEYS = {"labelled": ("text_column", "text_pair_column", "label_column", "multi_label",
                          "label_separator"),
             "texts": ("text_column",), "pairs": ("source_column", "target_column"),
             "tagged": ("tag_column", "tag_scheme")}

    @classmethod
    def from_config(cls, kind: str, data_cfg: Any) -> RowSpec:
        """The spec of ``kind`` with the reading settings of a task's data config (which
        holds only the keys its task reads: the others keep the defaults here)."""
        names = [f.name for f in dataclasses.fields(cls) if f.name not in (
            "kind", "column_hint", "held_out")]
        return cls(kind=kind, **{n: getattr(data_cfg, n) for n in names
                                 if hasattr(data_cfg, n)})

    def settings(self) -> dict[str, Any]:
        return {"kind": self.kind, "format": self.format,
                **{k: getattr(self, k) for k in self._KEYS[self.kind]},
                **({"held_out": list(self.held_out)} if self.held_out else {})}

    def with_held_out(self, seed: int, validation: float, test: float) -> RowSpec:
        """This spec preparing the shards of held-out fractions apart (none: as it is)."""
        if not (validation or test):
            return self
        return dataclasses.replace(self, held_out=(int(seed), float(validation), float(test)))

    @property
    def columns(self) -> list[str]:
        """The columns (or JSON keys, TFRecord features) a row must have."""
        if self.kind == "labelled":
            return [c for c in (self.text_column, self.text_pair_column, self.label_column)
                    if c]
        if self.kind == "pairs":
            return [self.source_column, self.target_column]
        return [self.text_column]

    @property
    def hint(self) -> str:
        return self.column_hint or {
            "labelled": sources.COLUMNS_HINT, "texts": "set data.text_column",
            "pairs": "set data.source_column / data.target_column",
            "tagged": "set data.tag_column"}[self.kind]

    def features(self) -> list[str]:
        """The features of this kind's records (besides ``id`` and ``bucket``)."""
        return {"labelled": ["text", *(["text_pair"] if self.text_pair_column else []),
                             "labels"],
                "texts": ["text"], "pairs": ["source", "target"],
                "tagged": ["words", "tags"]}[self.kind]



@dataclass
class Rows:
    """Good rows of one source: their line numbers and column values."""

    lines: np.ndarray
    columns: dict[str, Any]

    def __len__(self) -> int:
        return len(self.lines)


class SourceLog:
    """Bad rows and label counts of one source, in file order."""

    def __init__(self, path: str, mode: str, split: str, skip_option: str | None):
        self.path, self.mode, self.split = path, mode, split
        self.report = sources.BadRowReport()
        self.policy = sources.BadRowPolicy(mode, self.report, split, skip_option)
        self.first: str | None = None
        self.labels: dict[str, int] = {}
        self.first_seen: dict[str, str] = {}
        self.entities = EntityCounts()  # tagged rows: what was read, converted, refused

    def bad(self, line: int | str, problem: str) -> None:
        if self.first is None:
            self.first = str(sources.BadRow(self.path, line, problem))
        self.policy(self.path, line, problem)

    def count_labels(self, names: list[str], lines: list[int | str]) -> None:
        for name, line in zip(names, lines, strict=True):
            if name not in self.labels:
                self.labels[name] = 0
                self.first_seen[name] = f"{self.path}:{line}"
            self.labels[name] += 1


class Batcher:
    """Good rows (Python values) gathered into ``Rows`` of ``BATCH_ROWS``."""

    def __init__(self, spec: RowSpec):
        self.spec, self.lines, self.values = spec, [], []

    def add(self, line: int | str, values: tuple) -> Rows | None:
        self.lines.append(line)
        self.values.append(values)
        return self.flush() if len(self.lines) >= BATCH_ROWS else None

    def flush(self) -> Rows | None:
        if not self.lines:
            return None
        lines = np.array([int(str(x).split()[-1]) for x in self.lines], np.int64)
        cols = list(zip(*self.values, strict=True))
        out: dict[str, Any] = {}
        for name, col in zip(self.spec.features(), cols, strict=True):
            if name in ("labels", "words", "tags"):
                out[name] = BytesList.from_lists([[v.encode("utf-8") for v in row]
                                                  for row in col])
            else:
                out[name] = pa.array([v.encode("utf-8") for v in col], pa.large_binary())
        self.lines, self.values = [], []
        return Rows(lines, out)


def convert(fields: dict[str, Any], spec: RowSpec) -> tuple[str | None, tuple | None]:
    """(problem, values) of one parsed row: values in the order of ``spec.features()``,
    None with no problem for a row that is no example (a blank corpus text)."""
    clean = sources._clean_text
    if spec.kind == "labelled":
        text, problem = clean(fields.get(spec.text_column), spec.text_column)
        if problem:
            return problem, None
        values: list[Any] = [text]
        if spec.text_pair_column:
            pair, problem = clean(fields.get(spec.text_pair_column), spec.text_pair_column)
            if problem:
                return problem, None
            values.append(pair)
        labels, problem = sources._clean_labels(fields.get(spec.label_column),
                                                spec.label_column, spec.multi_label,
                                                spec.label_separator)
        if problem:
            return problem, None
        return None, (*values, labels)
    if spec.kind == "texts":
        text, problem = clean(fields.get(spec.text_column), spec.text_column, allow_empty=True)
        if problem:
            return problem, None
        return None, ((text,) if text.strip() else None)
    source, problem = clean(fields.get(spec.source_column), spec.source_column,
                            allow_empty=True)
    if problem:
        return problem, None
    target, problem = clean(fields.get(spec.target_column), spec.target_column,
                            allow_empty=True)
    if problem:
        return problem, None
    return None, (source, target)


def python_rows(path: str, fmt: str, spec: RowSpec, log_: SourceLog) -> Iterator[Rows]:
    """Rows of one file through the Python readers of ``tfapp.data.sources``/``tagged``."""
    batcher = Batcher(spec)
    if spec.kind == "tagged":
        yield from _tagged_rows(path, spec, log_, batcher)
        return
    if fmt in ("csv", "tsv"):
        rows = sources._read_delimited(path, "," if fmt == "csv" else "\t", spec.columns,
                                       spec.hint)
    elif fmt == "jsonl":
        rows = sources._read_jsonl(path, spec.columns, spec.hint)
    elif fmt == "parquet":
        rows = sources._read_parquet(path, spec.columns, spec.hint,
                                     spec.label_column if spec.kind == "labelled" else None)
    elif fmt == "text":
        if spec.kind == "pairs" or (spec.kind == "labelled" and spec.text_pair_column):
            raise DataError(f"{path}: plain text lines hold one text; rows of "
                            f"{' and '.join(spec.columns)} need csv, tsv, jsonl, parquet or "
                            "tfrecord")
        label = spec.label_column if spec.kind == "labelled" else None
        rows = sources._read_text_lines(path, spec.text_column, label,
                                        verbatim=spec.kind == "texts")
    elif fmt == "tfrecord":
        rows = sources._read_tfrecord(path, spec.columns, spec.hint)
    elif fmt == "tfds":
        rows = sources._read_tfds(path, "train", spec.columns, spec.hint)
    else:
        raise DataError(f"data.format={fmt} cannot be prepared from files")
    for line, fields, problem in rows:
        values = None
        if problem is None:
            problem, values = convert(fields, spec)
        if problem is not None:
            log_.bad(line, problem)
            continue
        if values is None:
            continue
        if spec.kind == "labelled":
            log_.count_labels(values[-1], [line] * len(values[-1]))
        done = batcher.add(line, values)
        if done is not None:
            yield done
    done = batcher.flush()
    if done is not None:
        yield done


def _tagged_rows(path: str, spec: RowSpec, log_: SourceLog, batcher: Batcher
                 ) -> Iterator[Rows]:
    for start, words, tags, problem in tagged_rows(path, spec.format, spec.tag_column,
                                                   spec.tag_scheme, log_.entities):
        if problem is not None:
            log_.bad(problem[0], problem[1])
            continue
        log_.count_labels(tags, [start] * len(tags))  # a sentence is one row: its line
        done = batcher.add(start, (words, tags))
        if done is not None:
            yield done
    done = batcher.flush()
    if done is not None:
        yield done
