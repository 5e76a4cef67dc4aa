"""Prepare input files once: rows -> TFRecord shards of ``tf.train.Example`` + a manifest.

Training streams prepared shards (``tfapp.data.stream``): nothing is parsed in Python or
held in memory at run time, workers read their own shards, and the manifest
(``tfapp.data.manifest``) gives every count without a pass over the data. A run given raw
files prepares them into tfapp's cache on first use (``prepared``), keyed by the files'
identity (path, size, modification time), and reuses that next time;
``python -m tfapp.prepare`` does it ahead of time into a folder of your choice, in
parallel over hosts with ``--shard i/N``.

How rows are read, per format:

* CSV and TSV: pyarrow's streaming C++ parser, and NumPy/Arrow over whole batches for the
  checks (blank texts, labels, UTF-8); a file pyarrow cannot parse (a malformed quote,
  say) is read again by Python's csv module, which names the exact line;
* JSONL, text lines (fastText labels), TFRecord, TFDS and CoNLL: the readers of
  ``tfapp.data.sources`` / ``tfapp.data.tagged``, streaming line by line.

Either way a bad row is reported as ``FILE:LINE: problem`` under ``data.on_bad_rows``
(fail: the first one stops; skip: counted and listed in the manifest), exactly as the
readers report it. Rows become records column-wise (``tfapp.data.records``).

Each source is prepared on its own (sources run in parallel threads): its shards are
written under temporary names and renamed when complete, then a part file records them
(``.parts/source-NNNNN.json``). A rerun after a kill redoes only the sources without a
part, and refuses a source whose size or modification time changed since its part was
written. The manifest is written when every source has its part.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import csv
import dataclasses
import hashlib
import json
import logging
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tfapp.data import sources
from tfapp.data.manifest import (
    BUCKETS,
    FORMAT_VERSION,
    MANIFEST,
    Manifest,
    ShardInfo,
    SourceInfo,
    damaged_shard,
    file_checksum,
    held_out_selectors,
    read_manifest,
    row_buckets,
)
from tfapp.data.records import BytesList, encode_examples, large_binary
from tfapp.data.tagged import tagged_rows
from tfapp.data.tags import EntityCounts
from tfapp.errors import DataError

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import tensorflow as tf

__all__ = ["RowSpec", "prepare", "prepared", "KINDS"]

log = logging.getLogger("tfapp.data")

KINDS = ("labelled", "texts", "pairs", "tagged")
#: what a shard holds: every split's rows (""), or one split's
SPLITS = ("", "train", "validation", "test")
PARTS = ".parts"
#: shards are cut near this size, so files (the unit workers shard by) stay many
SHARD_BYTES = 64 << 20
#: rows per encoded batch (and per pyarrow block of short rows)
BATCH_ROWS = 16384
_ARROW_BLOCK = 16 << 20
# Python's str.strip() removes exactly these: a blank text is one made of them only.
_PY_WHITESPACE = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
# A row number is unique within its source; the source's index goes above it.
_SOURCE_SHIFT = 40


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


# ------------------------------------------------------------------------------- rows
@dataclass
class _Rows:
    """Good rows of one source: their line numbers and column values."""

    lines: np.ndarray
    columns: dict[str, Any]

    def __len__(self) -> int:
        return len(self.lines)


class _SourceLog:
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


class _Batcher:
    """Good rows (Python values) gathered into ``_Rows`` of ``BATCH_ROWS``."""

    def __init__(self, spec: RowSpec):
        self.spec, self.lines, self.values = spec, [], []

    def add(self, line: int | str, values: tuple) -> _Rows | None:
        self.lines.append(line)
        self.values.append(values)
        return self.flush() if len(self.lines) >= BATCH_ROWS else None

    def flush(self) -> _Rows | None:
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
        return _Rows(lines, out)


def _convert(fields: dict[str, Any], spec: RowSpec) -> tuple[str | None, tuple | None]:
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


def _python_rows(path: str, fmt: str, spec: RowSpec, log_: _SourceLog) -> Iterator[_Rows]:
    """Rows of one file through the Python readers of ``tfapp.data.sources``/``tagged``."""
    batcher = _Batcher(spec)
    if spec.kind == "tagged":
        yield from _tagged_rows(path, spec, log_, batcher)
        return
    if fmt in ("csv", "tsv"):
        rows = sources._read_delimited(path, "," if fmt == "csv" else "\t", spec.columns,
                                       spec.hint)
    elif fmt == "jsonl":
        rows = sources._read_jsonl(path, spec.columns, spec.hint)
    elif fmt == "text":
        if spec.kind == "pairs" or (spec.kind == "labelled" and spec.text_pair_column):
            raise DataError(f"{path}: plain text lines hold one text; rows of "
                            f"{' and '.join(spec.columns)} need csv, tsv, jsonl or tfrecord")
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
            problem, values = _convert(fields, spec)
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


def _tagged_rows(path: str, spec: RowSpec, log_: _SourceLog, batcher: _Batcher
                 ) -> Iterator[_Rows]:
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


# ------------------------------------------------------------------------- CSV with Arrow
class _Fallback(Exception):
    """pyarrow cannot read this file as Python's csv would: read it with csv instead."""


def _binary_view(column: pa.Array) -> pa.Array:
    return column.view(pa.large_binary()) if pa.types.is_large_string(column.type) else column


def _line_breaks(column: pa.Array) -> np.ndarray:
    """Line ends inside each value, as csv counts lines ("\\r", "\\n" or "\\r\\n")."""
    count = lambda s: pc.count_substring(column, s).to_numpy(  # noqa: E731
        zero_copy_only=False).astype(np.int64)
    return count("\n") + count("\r") - count("\r\n")


def _arrow_header(path: str, delimiter: str, spec: RowSpec) -> list[str]:
    """The header row, read by csv from the file's first line; _Fallback when that line
    is not a plain one-line header (blank, quoted)."""
    with sources.open_source(path) as fh:
        head = fh.read(1 << 16)
    first = head[:head.find(b"\n") + 1] if b"\n" in head else b""
    if not first.endswith(b"\n") or (delimiter == "," and b'"' in first) or b"\r" in \
            first.rstrip(b"\r\n"):
        raise _Fallback("no plain header line")
    row = next(csv.reader([_decode(first.lstrip(b"\xef\xbb\xbf"))], delimiter=delimiter,
                          quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL),
               [])
    if not row or all(not f.strip() for f in row) or sources.has_undecodable(
            "".join(row)):
        raise _Fallback("blank header line")
    header = [h.strip() for h in row]
    for col in spec.columns:
        if col not in header:
            raise sources._missing_column(path, col, header, "header row", spec.hint)
        if header.count(col) > 1:
            raise DataError(f"{path}: the header row names column '{col}' "
                            f"{header.count(col)} times; rename all but one")
    return header


def _arrow_rows(path: str, delimiter: str, spec: RowSpec, log_: _SourceLog
                ) -> Iterator[_Rows]:
    """Rows of a CSV/TSV file parsed by pyarrow, checked column-wise; see the module
    docstring. Line numbers are counted as csv counts them: each record's own line ends
    plus those inside its quoted values. Raises _Fallback (before or while reading)
    where csv must decide."""
    header = _arrow_header(path, delimiter, spec)
    names = [f"c{i}" for i in range(len(header))]
    invalid: list[tuple[int, str]] = []

    def on_invalid(row) -> str:
        if row.number is None:
            raise _Fallback("no row numbers")
        invalid.append((row.number, row.text))
        return "skip"

    tsv = delimiter == "\t"
    with _arrow_input(path) as stream, _quiet_row_decoding():
        try:
            reader = pa_csv.open_csv(
                stream,
                read_options=pa_csv.ReadOptions(use_threads=False, skip_rows=1,
                                                column_names=names, block_size=_ARROW_BLOCK),
                parse_options=pa_csv.ParseOptions(
                    delimiter=delimiter, quote_char=False if tsv else '"', double_quote=True,
                    escape_char=False, newlines_in_values=not tsv, ignore_empty_lines=False,
                    invalid_row_handler=on_invalid),
                convert_options=pa_csv.ConvertOptions(
                    column_types={n: pa.large_binary() for n in names},
                    strings_can_be_null=False, quoted_strings_can_be_null=False))
        except pa.ArrowInvalid as err:
            if "Empty CSV file" in str(err):
                raise _Fallback("empty") from None
            raise _Fallback(str(err)) from None
        record, line, rows = 2, 2, 0  # record 1 is the header, on line 1
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except pa.ArrowInvalid as err:
                raise _Fallback(str(err)) from None
            found, invalid[:] = sorted(invalid), []
            record, line, n_rows = yield from _arrow_batch(
                batch, found, record, line, header, spec, log_, path, tsv)
            rows += n_rows
        for number, text in sorted(invalid):  # a last invalid row after the last batch
            _, line, _ = yield from _arrow_batch(None, [(number, text)], record, line, header,
                                                 spec, log_, path, tsv)
    if rows == 0:
        log_.bad(2, "empty file (a header row but no data rows)")


def _arrow_batch(batch: pa.RecordBatch | None, invalid: list[tuple[int, str]], record: int,
                 line: int, header: list[str], spec: RowSpec, log_: _SourceLog, path: str,
                 tsv: bool):
    """Check and convert one batch; yields its good rows. Returns (next record number,
    next line, rows with the header's field count that are not blank)."""
    n_valid = batch.num_rows if batch is not None else 0
    total = n_valid + len(invalid)
    numbers = np.arange(record, record + total)
    if invalid and not all(record <= num < record + total for num, _ in invalid):
        raise _Fallback("invalid rows out of order")
    is_invalid = np.isin(numbers, [num for num, _ in invalid])
    # Lines each record spans: 1 + the line ends inside it.
    spans = np.ones(total, np.int64)
    if n_valid:
        extra = sum(_line_breaks(batch.column(i)) for i in range(batch.num_columns)) \
            if not tsv else np.zeros(n_valid, np.int64)
        spans[~is_invalid] += extra
    for k, (_, text) in zip(np.flatnonzero(is_invalid), invalid, strict=True):
        spans[k] += text.count("\n") + text.count("\r") - text.count("\r\n")
    starts = line + np.concatenate([[0], np.cumsum(spans)[:-1]])
    next_line = int(line + spans.sum())
    problems: list[tuple[int, str]] = []
    fix = ("a TSV field cannot hold a tab; use csv or jsonl for such texts" if tsv
           else "quote fields that contain ','")
    for k, (_, text) in zip(np.flatnonzero(is_invalid), invalid, strict=True):
        fields = next(csv.reader([text], delimiter="\t" if tsv else ",",
                                 quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL), [])
        if fields and not all(not f.strip() for f in fields):
            problems.append((int(starts[k]), f"has {len(fields)} field(s) but the header has "
                                             f"{len(header)} ({fix})"))
    good_rows = 0
    if n_valid:
        lines = starts[~is_invalid]
        good, values, row_problems, kept = _arrow_values(batch, header, spec)
        problems += [(int(lines[i]), p) for i, p in row_problems]
        good_rows = kept
        for number, problem in sorted(problems):
            log_.bad(number, problem)
        problems = []
        if len(good):
            good_lines = lines[good]
            if spec.kind == "labelled":
                _count_arrow_labels(values["labels"], good_lines, log_)
            yield _Rows(good_lines, values)
    for number, problem in sorted(problems):
        log_.bad(number, problem)
    return record + total, next_line, good_rows


def _arrow_values(batch: pa.RecordBatch, header: list[str], spec: RowSpec
                  ) -> tuple[np.ndarray, dict[str, Any], list[tuple[int, str]], int]:
    """(indices of good rows, their feature columns, (index, problem) of bad rows, rows
    that are not blank) of one pyarrow batch, with the checks and messages of
    ``_convert``; rows whose bytes are not UTF-8 (rare) go through ``_convert`` itself."""
    n = batch.num_rows
    cols = [batch.column(i) for i in range(batch.num_columns)]
    broken = np.zeros(n, bool)
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
    blank = np.logical_and.reduce(blank_of) & ~broken
    column = {name: i for i, name in enumerate(header)}
    wanted = {c: column[c] for c in spec.columns}
    problems: list[tuple[int, str]] = []
    bad = np.zeros(n, bool)
    for k in np.flatnonzero(broken):  # the Python checks decide, message and all
        fields = {h: _decode(cols[i][int(k)].as_py()) for i, h in enumerate(header)}
        problem, _ = _convert(fields, spec)
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
        labels, label_problems = _arrow_labels(cols[wanted[spec.label_column]], spec,
                                               ~(bad | blank))
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
    problems.sort()
    good = np.flatnonzero(~(bad | blank | skipped))
    out: dict[str, Any] = {}
    for name in spec.features():
        value = values[name]
        out[name] = value.take(good) if isinstance(value, BytesList) else \
            large_binary(value.take(pa.array(good, pa.int64())))
    return good, out, problems, int((~blank).sum())


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


def _arrow_labels(column: pa.Array, spec: RowSpec, rows: np.ndarray
                  ) -> tuple[BytesList, list[tuple[int, str]]]:
    """The labels of each row (``sources._clean_labels`` on each distinct value) and the
    (row, problem) of bad ones among ``rows``."""
    encoded = column.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    cleaned = [sources._clean_labels(_decode(v), spec.label_column, spec.multi_label,
                                     spec.label_separator)
               for v in encoded.dictionary.to_pylist()]
    lists = [labels or [] for labels, _ in cleaned]
    bad_code = np.array([problem is not None for _, problem in cleaned], bool)
    problems = [(int(k), cleaned[codes[k]][1]) for k in np.flatnonzero(bad_code[codes] & rows)]
    sizes = np.array([len(x) for x in lists], np.int64)
    flat = [v.encode("utf-8") for x in lists for v in x]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    row_sizes = sizes[codes]
    offsets = np.concatenate([[0], np.cumsum(row_sizes)])
    index = np.repeat(starts[codes] - offsets[:-1], row_sizes) + np.arange(offsets[-1])
    values = pa.array(flat, pa.large_binary()).take(pa.array(index, pa.int64())) \
        if len(index) else pa.array([], pa.large_binary())
    return BytesList(offsets, values), problems


def _count_arrow_labels(labels: BytesList, lines: np.ndarray, log_: _SourceLog) -> None:
    encoded = labels.values.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    names = [v.decode("utf-8") for v in encoded.dictionary.to_pylist()]
    counts = np.bincount(codes, minlength=len(names))
    row_of = np.repeat(np.arange(len(labels)), np.diff(labels.offsets))
    first = {}
    for code in range(len(names)):
        where = np.flatnonzero(codes == code)
        first[code] = int(lines[row_of[where[0]]]) if len(where) else 0
    for code, name in enumerate(names):
        if name not in log_.labels:
            log_.labels[name] = 0
            log_.first_seen[name] = f"{log_.path}:{first[code]}"
        log_.labels[name] += int(counts[code])


_hook_lock = threading.Lock()


@contextlib.contextmanager
def _quiet_row_decoding() -> Iterator[None]:
    """pyarrow decodes an invalid row's text as UTF-8 before calling the handler; on bytes
    that are not UTF-8 it reports the UnicodeDecodeError as "unraisable" (to stderr) and
    fails the read, which falls back to csv. Keep that report off the console."""
    with _hook_lock:
        previous = sys.unraisablehook

        def hook(unraisable):
            if not isinstance(unraisable.exc_value, UnicodeDecodeError):
                previous(unraisable)

        sys.unraisablehook = hook
    try:
        yield
    finally:
        with _hook_lock:
            if sys.unraisablehook is hook:
                sys.unraisablehook = previous


@contextlib.contextmanager
def _arrow_input(path: str):
    """A pyarrow input stream of ``path``: native for local files, the TensorFlow file
    system (gs://, ...) otherwise; ``.gz`` decompressed."""
    if "://" not in path:
        stream = pa.OSFile(path, "rb")
        if path.endswith(".gz"):
            stream = pa.CompressedInputStream(stream, "gzip")
        with stream:
            yield stream
        return
    with sources.open_source(path) as fh:
        yield pa.PythonFile(fh, mode="r")


# --------------------------------------------------------------------------- writing
class _ShardWriter:
    """Records of one source into shards of about ``SHARD_BYTES``: each shard's rows are
    gathered in memory (one shard at a time), permuted, written under a temporary name
    and renamed when complete, with its size and checksum for the manifest."""

    def __init__(self, out: str, source: int, token: str, shard_bytes: int = SHARD_BYTES,
                 split: str = ""):
        self.out, self.source, self.token = out, source, token
        self.shard_bytes = shard_bytes
        self.split = split  # "": the rows of every split
        self.shards: list[ShardInfo] = []
        self._pending: list[bytes] = []  # the rows of the shard being filled
        self._tmp = ""
        self._bytes = 0
        self._buckets = np.zeros(BUCKETS, np.int64)

    def _name(self) -> str:
        split = f"{self.split}-" if self.split else ""
        return f"{self.source:05d}-{split}{len(self.shards):04d}.tfrecord"

    def write(self, records: pa.Array, buckets: np.ndarray) -> None:
        sizes = pc.binary_length(records).to_numpy(zero_copy_only=False)
        data = records.to_pylist()
        start = 0
        while start < len(data):
            room = self.shard_bytes - self._bytes
            end = start + max(1, int(np.searchsorted(np.cumsum(sizes[start:]), room)))
            end = min(end, len(data))
            self._pending.extend(data[start:end])
            self._bytes += int(sizes[start:end].sum())
            self._buckets += np.bincount(buckets[start:end], minlength=BUCKETS)
            start = end
            if self._bytes >= self.shard_bytes:
                self._close()

    def _close(self) -> None:
        """Write the pending rows as one shard, in an order drawn from the shard's name:
        a source sorted by label, date or length never reaches a shard sorted."""
        if not self._pending:
            return
        name = self._name()
        tmp = f"{self.out}/.{name}.tmp-{self.token}"
        self._tmp = tmp
        order = np.random.default_rng(
            [self.source, len(self.shards), SPLITS.index(self.split)]).permutation(
            len(self._pending))
        with tf.io.TFRecordWriter(tmp) as writer:
            for i in order:
                writer.write(self._pending[i])
        size, crc = file_checksum(tmp)
        tf.io.gfile.rename(tmp, f"{self.out}/{name}", overwrite=True)
        self.shards.append(ShardInfo(name, self.source, len(self._pending),
                                     self._buckets.tolist(), size, crc, self.split))
        self._pending, self._bytes = [], 0
        self._buckets = np.zeros(BUCKETS, np.int64)

    def finish(self) -> list[ShardInfo]:
        self._close()
        return self.shards

    def abandon(self) -> None:
        if self._tmp:
            with contextlib.suppress(tf.errors.OpError):
                tf.io.gfile.remove(self._tmp)
        for shard in self.shards:
            with contextlib.suppress(tf.errors.OpError):
                tf.io.gfile.remove(f"{self.out}/{shard.file}")
        self.__init__(self.out, self.source, self.token, self.shard_bytes, self.split)


class _SplitWriters:
    """One ``_ShardWriter`` per split when the rows of held-out splits go to shards of
    their own (``RowSpec.held_out``), else one for all rows; the same interface."""

    def __init__(self, out: str, source: int, token: str, shard_bytes: int,
                 held_out: tuple):
        self.selectors = held_out_selectors(*held_out) if held_out else {}
        self.writers = {name: _ShardWriter(out, source, token, shard_bytes, name)
                        for name in (self.selectors or [""])}

    def write(self, records: pa.Array, buckets: np.ndarray) -> None:
        if not self.selectors:
            self.writers[""].write(records, buckets)
            return
        for name, selector in self.selectors.items():
            mine = selector.mask()[buckets]
            if mine.any():
                self.writers[name].write(records.filter(pa.array(mine)), buckets[mine])

    def finish(self) -> list[ShardInfo]:
        return [s for w in self.writers.values() for s in w.finish()]

    def abandon(self) -> None:
        for w in self.writers.values():
            w.abandon()


def _prefetch(rows: Iterator[_Rows], depth: int = 2) -> Iterator[_Rows]:
    """``rows`` read ahead in a thread: parsing (which releases the GIL in pyarrow)
    overlaps the encoding and writing of the previous batch."""
    q: queue.Queue = queue.Queue(depth)
    done = object()

    def run():
        try:
            for item in rows:
                q.put(item)
            q.put(done)
        except BaseException as err:  # handed to the consumer
            q.put(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while True:
        item = q.get()
        if item is done:
            break
        if isinstance(item, BaseException):
            raise item
        yield item


def _identity(path: str, fmt: str = "") -> SourceInfo:
    """Path, size and modification time of a source file (a TFDS dataset: its name; TFDS
    versions its own data)."""
    if fmt == "tfds":
        return SourceInfo(path=path, size=0, mtime_ns=0)
    try:
        stat = tf.io.gfile.stat(path)
    except tf.errors.OpError as err:
        raise DataError(f"{path}: cannot read ({err.message.splitlines()[0]})") from None
    return SourceInfo(path=path, size=int(stat.length), mtime_ns=int(stat.mtime_nsec))


def _prepare_source(index: int, path: str, spec: RowSpec, out: str, *, mode: str,
                    split: str, skip_option: str | None,
                    shard_bytes: int = SHARD_BYTES) -> dict[str, Any]:
    """Read one source into shards; its part (see the module docstring)."""
    info = _identity(path, spec.format)
    fmt = sources.detect_format(path, spec.format, "text" if spec.kind == "texts" else None) \
        if spec.kind != "tagged" else spec.format
    token = uuid.uuid4().hex[:8]
    writer = _SplitWriters(out, index, token, shard_bytes, spec.held_out)
    log_ = _SourceLog(path, mode, split, skip_option)

    def run(rows: Iterator[_Rows]) -> None:
        for batch in _prefetch(rows):
            ids = (np.int64(index) << _SOURCE_SHIFT) | batch.lines
            buckets = row_buckets(path, batch.lines)
            records = encode_examples({**batch.columns, "id": ids, "bucket": buckets})
            writer.write(records, buckets)

    try:
        if fmt in ("csv", "tsv") and spec.kind != "tagged":
            try:
                run(_arrow_rows(path, "," if fmt == "csv" else "\t", spec, log_))
            except _Fallback as why:
                log.debug("data: %s: read by csv (%s)", path, why)
                writer.abandon()
                log_ = _SourceLog(path, mode, split, skip_option)
                run(_python_rows(path, fmt, spec, log_))
        else:
            run(_python_rows(path, fmt, spec, log_))
        shards = writer.finish()
    except BaseException:
        writer.abandon()
        raise
    info.rows = sum(s.count for s in shards)
    info.bad_rows = log_.report.count
    if spec.kind == "tagged":
        info.entities = dataclasses.asdict(log_.entities)
    return {"source": dataclasses.asdict(info), "index": index, "settings": spec.settings(),
            "version": FORMAT_VERSION, "shards": [dataclasses.asdict(s) for s in shards],
            "labels": log_.labels, "first_seen": log_.first_seen,
            "bad_rows": {**log_.report.to_dict(), "first": log_.first}}


# --------------------------------------------------------------------------- public
def _part_path(out: str, index: int) -> str:
    return f"{out}/{PARTS}/source-{index:05d}.json"


def _read_part(out: str, index: int) -> dict[str, Any] | None:
    path = _part_path(out, index)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as fh:
        return json.loads(fh.read().decode("utf-8"))


def _write_json(path: str, data: Any) -> None:
    """Whole or not at all (a temporary name, then a rename), on any file system."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with tf.io.gfile.GFile(tmp, "wb") as fh:
        fh.write((json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
    tf.io.gfile.rename(tmp, path, overwrite=True)


def _check_part(part: dict[str, Any], path: str, spec: RowSpec, out: str) -> bool:
    """Whether a part can be reused: same settings and format version; a DataError when
    its source changed since."""
    if part.get("version") != FORMAT_VERSION or part.get("settings") != spec.settings():
        return False
    then, now = SourceInfo(**part["source"]), _identity(path, spec.format)
    if (then.size, then.mtime_ns) != (now.size, now.mtime_ns) or then.path != now.path:
        raise DataError(f"{path} changed since it was prepared into {out} (size "
                        f"{then.size} -> {now.size}, modified since); prepare into a new "
                        f"folder, or delete {_part_path(out, part['index'])} to prepare it "
                        "again")
    return True


def prepare(files: list[str], out: str, spec: RowSpec, *, mode: str = "fail",
            split: str = "train", shard: tuple[int, int] = (0, 1), workers: int = 0,
            skip_option: str | None = sources.SKIP_OPTION,
            progress: Callable[[str], None] | None = None,
            shard_bytes: int = SHARD_BYTES) -> Manifest | None:
    """Prepare ``files`` (resolved paths, in order) into ``out``; the manifest once every
    source has its part (None while other ``--shard`` hosts still have sources to do).

    ``shard=(i, N)`` prepares the sources ``i::N`` only; ``workers`` threads run sources
    side by side (0: one per core, at most the sources); shards are cut near
    ``shard_bytes``. Bad rows fail or are skipped per ``mode``; under fail the first one
    raises ``DataError`` with ``FILE:LINE``.
    """
    tf.io.gfile.makedirs(f"{out}/{PARTS}")
    mine = [i for i in range(len(files)) if i % shard[1] == shard[0]]
    todo = []
    for i in mine:
        part = _read_part(out, i)
        if part is None or not _check_part(part, files[i], spec, out):
            todo.append(i)
    workers = workers or min(len(todo), os.cpu_count() or 1) or 1
    started = time.time()

    def one(i: int) -> dict[str, Any]:
        part = _prepare_source(i, files[i], spec, out, mode=mode, split=split,
                               skip_option=skip_option, shard_bytes=shard_bytes)
        _write_json(_part_path(out, i), part)
        if progress:
            entities = part["source"].get("entities")
            progress(f"prepared {files[i]}: {part['source']['rows']} rows in "
                     f"{len(part['shards'])} shard(s)" + (
                         "; " + EntityCounts(**entities).describe(files[i], spec.tag_scheme)
                         if entities else ""))
        return part

    if todo:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(one, i) for i in todo]
            try:
                for future in futures:  # in source order: the first bad file's error wins
                    future.result()
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        log.debug("data: prepared %d source file(s) into %s in %.1fs", len(todo), out,
                 time.time() - started)
    return merge(files, out, spec, split=split)


def merge(files: list[str], out: str, spec: RowSpec, *, split: str = "train"
          ) -> Manifest | None:
    """Write ``out``'s manifest from the parts of ``files``' sources; None while a part
    is missing."""
    parts = [_read_part(out, i) for i in range(len(files))]
    if any(p is None for p in parts):
        return None
    report = sources.BadRowReport()
    labels: dict[str, int] = {}
    first_seen: dict[str, str] = {}
    first_bad = None
    for part in parts:
        for bad in part["bad_rows"]["examples"]:
            if len(report.examples) < sources.MAX_REPORTED:
                report.examples.append(sources.BadRow(**bad))
        report.count += part["bad_rows"]["count"]
        if part["bad_rows"]["count"]:
            report.per_split[split] = report.per_split.get(split, 0) + \
                part["bad_rows"]["count"]
        first_bad = first_bad or part["bad_rows"].get("first")
        for name, count in part["labels"].items():
            labels[name] = labels.get(name, 0) + count
            first_seen.setdefault(name, part["first_seen"][name])
    manifest = Manifest(
        root=out, kind=spec.kind, settings=spec.settings(),
        sources=[SourceInfo(**p["source"]) for p in parts],
        shards=[ShardInfo(**s) for p in parts for s in p["shards"]],
        labels=dict(sorted(labels.items())), first_seen=first_seen,
        bad_rows={**report.to_dict(), "first": first_bad})
    _write_json(f"{out}/{MANIFEST}", json.loads(manifest.to_json()))
    return manifest


def cache_key(files: list[str], spec: RowSpec) -> str:
    """The cache entry of ``files`` read as ``spec``: their identities and the settings."""
    blob = json.dumps({"v": FORMAT_VERSION, "spec": spec.settings(),
                       "files": [list(_identity(f, spec.format).identity) for f in files]},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class Prepared:
    """A split's prepared data and how it came to be."""

    manifest: Manifest
    prepared_now: bool = False
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def prepared(files: list[str], spec: RowSpec, *, cache: str, mode: str, split: str,
             skip_option: str | None = sources.SKIP_OPTION) -> Prepared:
    """The manifest of ``files`` prepared into ``cache`` (one folder per ``cache_key``):
    reused when complete, else prepared now (under a lock: one process prepares, others
    wait). Bad rows recorded by a run with ``skip`` fail a run with ``fail``."""
    out = f"{cache.rstrip('/')}/{cache_key(files, spec)}"
    path = f"{out}/{MANIFEST}"
    started = time.time()
    now = False
    if not tf.io.gfile.exists(path):
        with _locked(out):
            if not tf.io.gfile.exists(path):
                now = True
                prepare(files, out, spec, mode=mode, split=split, skip_option=skip_option)
    manifest = read_manifest(path)
    damage = None if now else damaged_shard(manifest)  # shards just written are whole
    if damage:
        log.warning("data: the prepared cache %s is damaged (%s); preparing it again", out,
                    damage)
        with _locked(out):
            for part in range(len(files)):
                with contextlib.suppress(tf.errors.NotFoundError):
                    tf.io.gfile.remove(_part_path(out, part))
            tf.io.gfile.remove(path)
            now = True
            prepare(files, out, spec, mode=mode, split=split, skip_option=skip_option)
        manifest = read_manifest(path)
    if mode == "fail" and manifest.bad_rows.get("count"):
        first = manifest.bad_rows.get("first") or manifest.bad_rows["examples"][0]
        fix = (f"fix the data, or set {skip_option} to drop such rows" if skip_option
               else "fix the data")
        raise DataError(f"{first} ({fix})")
    return Prepared(manifest, now, time.time() - started)


@contextlib.contextmanager
def _locked(out: str) -> Iterator[None]:
    """An exclusive lock on preparing ``out`` (local caches; others need none: a folder
    prepared twice ends the same)."""
    if "://" in out:
        yield
        return
    import fcntl

    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out + ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
