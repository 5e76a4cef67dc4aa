"""Rows a batch at a time, as columns: what ``prepare`` writes (``RowBatch``), and its fast
path for CSV/TSV and Parquet files of plain strings (``fast_rows``).

The fast path parses with pyarrow (``tfapp.data.formats``) and checks whole columns with
NumPy/Arrow (blank texts, labels, UTF-8), with the messages, line numbers and label
counts of the row-by-row checks (``tfapp.data.rows.spec.convert``), which still decide
the rare rows out of the ordinary (bytes that are not UTF-8, nulls). A file these checks
cannot take raises ``Fallback`` and is read row by row (``tfapp.data.rows.read``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tfapp.data.formats import delimited, parquet
from tfapp.data.formats.files import Fallback
from tfapp.data.rows.bad_rows import SourceLog
from tfapp.data.rows.spec import RowSpec, clean_labels, convert

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Batcher", "BytesList", "RowBatch", "fast_rows", "large_binary"]

#: rows per encoded batch (and per pyarrow block of short rows)
BATCH_ROWS = 16384
_BIN = pa.large_binary()
# Python's str.strip() removes exactly these: a blank text is one made of them only.
_PY_WHITESPACE = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())


class BytesList:
    """A feature of several byte strings per row: row ``i`` holds ``values`` ``offsets[i]``
    to ``offsets[i + 1]`` (as an Arrow list array keeps them)."""

    def __init__(self, offsets: np.ndarray, values: pa.Array):
        self.offsets = np.asarray(offsets, np.int64)
        self.values = large_binary(values)

    @classmethod
    def from_lists(cls, rows: list[list[bytes]]) -> BytesList:
        lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        return cls(offsets, pa.array([v for r in rows for v in r], _BIN))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def take(self, rows: np.ndarray) -> BytesList:
        """The lists of ``rows``, in that order."""
        rows = np.asarray(rows, np.int64)
        sizes = np.diff(self.offsets)[rows]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        index = np.repeat(self.offsets[:-1][rows] - offsets[:-1], sizes) + np.arange(offsets[-1])
        return BytesList(offsets, self.values.take(pa.array(index, pa.int64())))


def large_binary(values: pa.Array | pa.ChunkedArray | list) -> pa.Array:
    """``values`` as one ``large_binary`` array starting at its buffers' row 0 (strings
    keep their UTF-8 bytes)."""
    if isinstance(values, list):
        return pa.array(values, _BIN)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_string(values.type):
        values = values.view(pa.binary())
    elif pa.types.is_large_string(values.type):
        values = values.view(_BIN)
    values = values.cast(_BIN)
    if values.offset:
        values = pa.concat_arrays([values])
    return values


@dataclass
class RowBatch:
    """Good rows of one source: their line numbers and their values, a column per
    feature of the ``RowSpec`` (binary, or a ``BytesList`` for labels, words, tags)."""

    lines: np.ndarray
    columns: dict[str, Any]

    def __len__(self) -> int:
        return len(self.lines)


class Batcher:
    """Good rows (Python values, ``convert``'s) gathered into ``RowBatch``es of
    ``BATCH_ROWS``."""

    def __init__(self, spec: RowSpec):
        self.spec, self.lines, self.values = spec, [], []

    def add(self, line: int | str, values: tuple) -> RowBatch | None:
        self.lines.append(line)
        self.values.append(values)
        return self.flush() if len(self.lines) >= BATCH_ROWS else None

    def flush(self) -> RowBatch | None:
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
                out[name] = pa.array([v.encode("utf-8") for v in col], _BIN)
        self.lines, self.values = [], []
        return RowBatch(lines, out)


def fast_rows(path: str, fmt: str, spec: RowSpec, log: SourceLog) -> Iterator[RowBatch]:
    """The rows of a CSV/TSV file, or a Parquet file of plain string columns, checked a
    batch at a time; Fallback (before or while reading) for any other file, where the
    row-by-row readers must decide."""
    if spec.kind not in ("labelled", "texts", "pairs") or fmt not in ("csv", "tsv",
                                                                      "parquet"):
        raise Fallback(f"{fmt} rows of kind {spec.kind}")
    if fmt == "parquet":
        yield from _parquet_rows(path, spec, log)
        return
    delimiter = "," if fmt == "csv" else "\t"
    header = delimited.arrow_header(path, delimiter, spec.columns, spec.hint)
    rows = 0
    for lines, batch, problems in delimited.arrow_batches(path, delimiter, header):
        good = None
        if batch is not None:
            good, row_problems, nonblank = _checked(batch, lines, header, spec)
            problems += row_problems
            rows += nonblank
        yield from _logged(good, problems, spec, log)
    if rows == 0:
        log.bad(2, "empty file (a header row but no data rows)")


def _logged(good: RowBatch | None, problems: list[tuple[int, str]], spec: RowSpec,
            log: SourceLog) -> Iterator[RowBatch]:
    """A batch's bad rows to ``log`` (in line order), then its good rows counted (labels)
    and given."""
    for number, problem in sorted(problems):
        log.bad(number, problem)
    if good is not None:
        if spec.kind == "labelled":
            _count_labels(good.columns["labels"], good.lines, log)
        yield good


def _parquet_rows(path: str, spec: RowSpec, log: SourceLog) -> Iterator[RowBatch]:
    """The rows of a Parquet file whose columns are all plain strings, numbered from 1."""
    columns = spec.columns
    with parquet.open_parquet(path) as pf:
        schema = pf.schema_arrow
        parquet.check_schema(path, schema, columns, spec.hint,
                             spec.label_column if spec.kind == "labelled" else None)
        if not all(pa.types.is_string(schema.field(c).type) for c in columns):
            raise Fallback("columns other than plain strings")
        if pf.metadata.num_rows == 0:
            log.bad(1, "empty file (no rows)")
            return
        start = 1
        for batch in parquet.batches(pf, path, columns):
            lines = np.arange(start, start + batch.num_rows, dtype=np.int64)
            good, problems, _ = _checked(batch, lines, columns, spec, blank_lines=False)
            yield from _logged(good, problems, spec, log)
            start += batch.num_rows


def _checked(batch: pa.RecordBatch, lines: np.ndarray, header: list[str], spec: RowSpec,
             blank_lines: bool = True) -> tuple[RowBatch | None, list[tuple[int, str]], int]:
    """(the good rows, the (line, problem) of the bad rows, how many rows are not blank)
    of one pyarrow batch whose row ``i`` is on ``lines[i]``, with the checks and messages
    of ``convert``; rows with a null or with bytes that are not UTF-8 (rare) go through
    ``convert`` itself. ``blank_lines``: a row of blank values only is a blank line,
    passed over (CSV); else such a row is checked as any other (Parquet)."""
    n = batch.num_rows
    nulls = [col.is_null().to_numpy(zero_copy_only=False) for col in batch.columns]
    cols = [large_binary(col.fill_null("")) for col in batch.columns]
    broken = np.logical_or.reduce(nulls)
    blank_of: list[np.ndarray] = []
    for col in cols:
        try:
            view = col.view(pa.large_string())
            view.validate(full=True)
            blank_of.append(_is_blank(view))
        except pa.ArrowInvalid:
            raw = col.to_pylist()
            broken |= np.array([not _utf8(b) for b in raw])
            blank_of.append(np.array([not _decode(b).strip() for b in raw]))
    blank = np.logical_and.reduce(blank_of) & ~broken & blank_lines
    column = {name: i for i, name in enumerate(header)}
    wanted = {c: column[c] for c in spec.columns}
    problems: list[tuple[int, str]] = []
    bad = np.zeros(n, bool)
    for k in np.flatnonzero(broken):  # the Python checks decide, message and all
        fields = {h: None if nulls[i][k] else _decode(cols[i][int(k)].as_py())
                  for i, h in enumerate(header)}
        problem, _ = convert(fields, spec)
        if problem is not None:  # else a column it does not read is broken: the row is fine
            problems.append((int(k), problem))
            bad[k] = True
    skipped = np.zeros(n, bool)
    values: dict[str, Any] = {}
    if spec.kind == "labelled":
        for name in (spec.text_column, spec.text_pair_column):
            if not name:
                continue
            empty = blank_of[wanted[name]] & ~blank & ~bad
            problems += [(int(k), f"empty text in column '{name}'") for k in np.flatnonzero(empty)]
            bad |= empty
        labels, label_problems = _labels(cols[wanted[spec.label_column]], spec, ~(bad | blank))
        problems += label_problems
        for k, _ in label_problems:
            bad[k] = True
        values = {"text": cols[wanted[spec.text_column]], "labels": labels}
        if spec.text_pair_column:
            values["text_pair"] = cols[wanted[spec.text_pair_column]]
    elif spec.kind == "texts":
        skipped = blank_of[wanted[spec.text_column]]  # a blank text is no example
        values = {"text": cols[wanted[spec.text_column]]}
    else:
        values = {"source": cols[wanted[spec.source_column]],
                  "target": cols[wanted[spec.target_column]]}
    good = np.flatnonzero(~(bad | blank | skipped))
    out: dict[str, Any] = {}
    for name in spec.features():
        value = values[name]
        out[name] = value.take(good) if isinstance(value, BytesList) else \
            large_binary(value.take(pa.array(good, pa.int64())))
    kept = RowBatch(lines[good], out) if len(good) else None
    return kept, [(int(lines[k]), p) for k, p in problems], int((~blank).sum())


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="surrogateescape")


def _is_blank(texts: pa.Array) -> np.ndarray:
    """Whether each text is empty or Python-whitespace only (``not text.strip()``)."""
    trimmed = pc.utf8_trim(texts, characters=_PY_WHITESPACE)
    return (pc.binary_length(trimmed).to_numpy(zero_copy_only=False) == 0)


def _labels(column: pa.Array, spec: RowSpec, rows: np.ndarray
            ) -> tuple[BytesList, list[tuple[int, str]]]:
    """The labels of each row (``clean_labels`` on each distinct value) and the
    (row, problem) of bad ones among ``rows``."""
    encoded = column.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    cleaned = [clean_labels(_decode(v), spec.label_column, spec.multi_label,
                            spec.label_separator)
               for v in encoded.dictionary.to_pylist()]
    lists = [[v.encode("utf-8") for v in labels or []] for labels, _ in cleaned]
    bad_code = np.array([problem is not None for _, problem in cleaned], bool)
    problems = [(int(k), cleaned[codes[k]][1]) for k in np.flatnonzero(bad_code[codes] & rows)]
    return BytesList.from_lists(lists).take(codes), problems


def _count_labels(labels: BytesList, lines: np.ndarray, log: SourceLog) -> None:
    encoded = labels.values.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    names = [v.decode("utf-8") for v in encoded.dictionary.to_pylist()]
    counts = np.bincount(codes, minlength=len(names))
    row_of = np.repeat(np.arange(len(labels)), np.diff(labels.offsets))
    _, first = np.unique(codes, return_index=True)  # every code occurs: its first row
    for code, name in enumerate(names):
        log.count_label(name, int(lines[row_of[first[code]]]), int(counts[code]))
