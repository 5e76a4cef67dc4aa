"""Read text data from files (or TFDS) with precise, one-line data errors.

The row readers of every format, and the bad-row policy, shared by every task and
command: ``tfapp.data.prepare`` reads training data through them (the classifier's
labelled rows, corpora, pairs; CSV/TSV through pyarrow first, these readers naming the
line when it cannot), and the small readers here serve commands that read a file whole:
``iter_examples`` (evaluate, streamed) and ``read_texts`` (``build-bert``'s corpus).

Formats: CSV and TSV (header row names the columns; TSV has no quoting: a ``"`` is just a
character), JSON Lines (one object per line), plain text lines (one example per line;
fastText-style ``__label__X`` prefixes carry the labels), TFRecord files of
``tf.train.Example``, and a TFDS dataset (``NAME[:SPLIT]``) when tensorflow-datasets is
installed. Text is UTF-8 (a BOM is dropped) and lines end at "\n" only, as csv and json
define them (``tfapp.textio``). Paths are local paths, globs or ``gs://`` URLs, read
through ``tf.io.gfile`` as streams; several may be joined with commas; ``.gz`` files are
decompressed as they are read.

Rows are checked in Python: that is what lets a bad row be reported as ``file:line:
problem`` instead of an opaque TensorFlow error from deep inside tf.data.
``data.on_bad_rows=fail`` raises ``DataError`` at the first bad row; ``skip`` drops bad
rows and records them in a ``BadRowReport``. Problems of a whole file (missing file,
missing column, unreadable file) always fail.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import difflib
import gzip
import json
import logging
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from tfapp.atomic import write_text
from tfapp.config import DataConfig
from tfapp.data import parquet
from tfapp.demo import DEMO_DIR
from tfapp.errors import DataError, Setting
from tfapp.textio import (
    NOT_UTF8,
    csv_text_stream,
    decode,
    has_undecodable,
    iter_lines,
    json_line,
)

import numpy as np
import tensorflow as tf

__all__ = ["BadRow", "BadRowPolicy", "BadRowReport", "ExampleSet", "read_text", "open_source",
           "RawExample", "resolve_files", "detect_format", "iter_examples",
           "read_texts", "demo_file", "LabelVocab", "stream_rows", "read_label_vocab",
           "write_label_vocab", "SKIP_OPTION", "COLUMNS_HINT", "kept_value"]

log = logging.getLogger("tfapp.data")

FORMATS = ("csv", "tsv", "jsonl", "parquet", "text", "tfrecord", "tfds")
_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl",
               ".ndjson": "jsonl", ".json": "jsonl", ".txt": "text", ".text": "text",
               ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfrec": "tfrecord",
               **{ext: "parquet" for ext in parquet.EXTENSIONS}}
_FASTTEXT_LABEL = "__label__"
MAX_REPORTED = 5
# Long documents are valid input: no limit on a field's length (csv's default is 128 KiB).
csv.field_size_limit(sys.maxsize)


def demo_file(split: str) -> str:
    """Path of the classification demo CSV shipped inside the package (train/validation/test)."""
    return str(DEMO_DIR / f"reviews_{split}.csv")


# ------------------------------------------------------------------------------ bad rows
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

    def add(self, split: str, bad: BadRow) -> None:
        self.count += 1
        self.per_split[split] = self.per_split.get(split, 0) + 1
        if len(self.examples) < MAX_REPORTED:
            self.examples.append(bad)

    def summary(self) -> str:
        if not self.count:
            return "no bad rows"
        where = ", ".join(f"{k} {v}" for k, v in self.per_split.items())
        first = "; ".join(str(b) for b in self.examples)
        return f"skipped {self.count} bad row(s) ({where}); first: {first}"

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "per_split": dict(self.per_split),
                "examples": [dataclasses.asdict(b) for b in self.examples]}


SKIP_OPTION = "data.on_bad_rows=skip"
TRAIN_FILES = Setting("data.train_files")  # what a reader names in messages by default


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
            if self.skip_option:
                raise DataError(f"{bad} (fix the data, or ", _skip_advice(self.skip_option),
                                " to drop such rows)")
            raise DataError(f"{bad} (fix the data)")
        self.report.add(self.split, bad)


def _show(value: Any, limit: int = 60) -> str:
    """A short one-line rendering of a field value for messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 4] + "...'"


# ------------------------------------------------------------------------------- files
def resolve_files(spec: str | Sequence[str | os.PathLike],
                  what: str | Setting = TRAIN_FILES) -> list[str]:
    """Expand paths/globs (local or gs://) to existing files, each glob sorted.

    ``spec`` is a config value, several joined with commas, or a list of paths/globs (a
    command line's file arguments; each item is one path, commas and all).
    """
    parts = spec.split(",") if isinstance(spec, str) else [os.fspath(p) for p in spec]
    files: list[str] = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        if any(ch in part for ch in "*?["):
            try:
                matches = sorted(tf.io.gfile.glob(part))
            except tf.errors.OpError as err:
                raise DataError(what, f": cannot list '{part}' "
                                f"({err.message.splitlines()[0]})") from None
            if not matches:
                raise DataError(what, f": no files match '{part}'; check the path and glob")
            files.extend(m for m in matches if not tf.io.gfile.isdir(m))
        elif not tf.io.gfile.exists(part):
            raise DataError(what, f": file not found: {part}; check the path (local, glob "
                            "or gs://)")
        elif tf.io.gfile.isdir(part):
            raise DataError(what, f": '{part}' is a directory; give files or a glob such as "
                            f"'{part.rstrip('/')}/*.csv'")
        else:
            files.append(part)
    if not files:
        raise DataError(what, ": no input files given")
    return files


def detect_format(path: str, configured: str, default: str | None = None) -> str:
    """The file format: ``configured`` unless it is auto, else from the file extension.

    An extension that names no format is an error, or ``default`` where the reader has a
    natural one (a corpus of texts: plain text lines).
    """
    if configured != "auto":
        return configured
    name = path[:-3] if path.endswith(".gz") else path
    ext = Path(name).suffix.lower()
    if ext not in _EXTENSIONS:
        if default:
            return default
        raise DataError(f"cannot tell the format of '{path}' from its extension; set ",
                        Setting("data.format"), f" to one of: {', '.join(FORMATS)}")
    return _EXTENSIONS[ext]


@contextlib.contextmanager
def open_source(path: str) -> Iterator[BinaryIO]:
    """``path`` (local, glob match or URL) opened for reading bytes, ``.gz`` decompressed
    as it is read; a DataError line when it cannot be opened or read."""
    try:
        with tf.io.gfile.GFile(path, "rb") as fh:
            yield gzip.GzipFile(fileobj=fh, mode="rb") if path.endswith(".gz") else fh
    except tf.errors.OpError as err:
        raise DataError(f"{path}: cannot read ({err.message.splitlines()[0]})") from None
    except (OSError, EOFError, zlib.error) as err:
        if path.endswith(".gz"):
            raise DataError(f"{path}: not a valid gzip file ({err})") from None
        raise DataError(f"{path}: cannot read ({err})") from None


def read_text(path: str) -> str:
    """The whole file as text, BOM dropped; undecodable bytes survive as surrogates so that
    rows can be flagged (``textio.decode``). For small files only: readers of data files
    stream them (``open_source``)."""
    with open_source(path) as fh:
        raw = fh.read()
    return decode(raw)


# ------------------------------------------------------------------------------ readers
# Each reader yields (line, fields | None, problem | None); the line is a 1-based line
# number for text formats and "record N" for TFRecord/TFDS.
Row = tuple[int | str, dict[str, Any] | None, str | None]


#: How to fix a missing column, in a message: text, or text and the settings it names.
Hint = str | tuple[str | Setting, ...]

TEXT_COLUMN_HINT: Hint = ("set ", Setting("data.text_column"))
# How the classifier names its columns; other readers name their own settings.
COLUMNS_HINT: Hint = ("set ", Setting("data.text_column"), " / ",
                      Setting("data.text_pair_column"), " / ", Setting("data.label_column"))


def _missing_column(path: str, column: str, available: list[str], where: str,
                    hint: Hint) -> DataError:
    close = difflib.get_close_matches(column, available, n=1)
    guess = f"; did you mean '{close[0]}'?" if close else ""
    return DataError(f"{path}: no column '{column}' in the {where} (has: "
                     f"{', '.join(available) or 'nothing'}){guess} -- ",
                     *((hint,) if isinstance(hint, str) else hint))


def _read_delimited(path: str, delimiter: str, columns: list[str], hint: Hint
                    ) -> Iterator[Row]:
    with open_source(path) as fh:
        yield from _delimited_rows(path, fh, delimiter, columns, hint)


def _delimited_rows(path: str, fh: BinaryIO, delimiter: str, columns: list[str], hint: Hint
                    ) -> Iterator[Row]:
    # TSV has no quoting: a '"' is just a character (with csv's quoting, one opening a field
    # would swallow the tabs and lines after it up to the next '"').
    tsv = delimiter == "\t"
    reader = csv.reader(csv_text_stream(fh), delimiter=delimiter,
                        quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
    header: list[str] | None = None
    start, rows = 1, 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            yield start, None, f"malformed row ({err})"
            start = reader.line_num + 1
            continue
        line, start = start, reader.line_num + 1
        if not row or all(not f.strip() for f in row):
            continue  # blank line
        if header is None:
            if has_undecodable("".join(row)):  # a header is no row to skip: the file fails
                raise DataError(f"{path}:{line}: {NOT_UTF8}")
            header = [h.strip() for h in row]
            for col in columns:
                if col not in header:
                    raise _missing_column(path, col, header, "header row", hint)
                if header.count(col) > 1:  # which one is meant? (a dict would keep the last)
                    raise DataError(f"{path}: the header row names column '{col}' "
                                    f"{header.count(col)} times; rename all but one")
            continue
        if len(row) != len(header):
            fix = ("a TSV field cannot hold a tab; use csv or jsonl for such texts" if tsv
                   else "quote fields that contain ','")
            yield line, None, (f"has {len(row)} field(s) but the header has {len(header)} "
                               f"({fix})")
            continue
        rows += 1
        yield line, dict(zip(header, row, strict=True)), None
    if header is None:
        yield 1, None, "empty file (no header row and no data)"
    elif rows == 0:
        yield 2, None, "empty file (a header row but no data rows)"


def _read_jsonl(path: str, columns: list[str], hint: Hint) -> Iterator[Row]:
    with open_source(path) as fh:
        yield from _jsonl_rows(path, iter_lines(fh), columns, hint)


def _jsonl_rows(path: str, lines: Iterator[str], columns: list[str], hint: Hint
                ) -> Iterator[Row]:
    # Lines end at "\n" only: JSON strings may hold U+2028, \x0c, ...
    first, blank = True, True
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        blank = False
        if has_undecodable(line):
            yield number, None, NOT_UTF8
            continue
        try:
            obj = json_line(line)
        except json.JSONDecodeError as err:
            yield number, None, f"not valid JSON ({err.msg} at column {err.colno})"
            continue
        if not isinstance(obj, dict):
            yield number, None, f"expected a JSON object per line, got {type(obj).__name__}"
            continue
        missing = [c for c in columns if c not in obj]
        if missing:
            if first:  # the first object decides: a wrong key name, not a bad row
                raise _missing_column(path, missing[0], list(obj), "first JSON object", hint)
            yield number, None, (f"no key '{missing[0]}' (has: {', '.join(obj) or 'nothing'})")
            continue
        first = False
        yield number, obj, None
    if blank:
        yield 1, None, "empty file (no JSON lines)"


def _read_parquet(path: str, columns: list[str], hint: Hint, label_column: str | None = None,
                  kept: Sequence[str] = ()) -> Iterator[Row]:
    """The ``columns`` of every row of a Parquet file, a batch at a time
    (``data/parquet.py``); rows are numbered from 1. A missing column, or one whose type
    holds no text (``label_column``: no labels either; a ``kept`` column, carried through
    as it is, may hold any type), fails the file in one line."""
    with parquet.open_parquet(path) as pf:
        _check_parquet_columns(path, pf.schema_arrow, columns, hint, label_column, kept)
        if pf.metadata.num_rows == 0:
            yield 1, None, "empty file (no rows)"
            return
        for number, fields in parquet.rows(pf, path, columns):
            yield number, fields, None


def _check_parquet_columns(path: str, schema: Any, columns: list[str], hint: Hint,
                           label_column: str | None, kept: Sequence[str] = ()) -> None:
    """Each of ``columns`` is in a Parquet file's schema once, of a type that holds text
    (``label_column``: or labels); else one line: the whole file is wrong, not a row."""
    for column in columns:
        if column not in schema.names:
            raise _missing_column(path, column, schema.names, "Parquet schema", hint)
        if schema.names.count(column) > 1:
            raise DataError(f"{path}: the Parquet schema names column '{column}' "
                            f"{schema.names.count(column)} times; rename all but one")
        if column in kept:
            continue
        problem = parquet.type_problem(schema.field(column), label=column == label_column)
        if problem:
            raise DataError(f"{path}: {problem}; write the column as strings, or name "
                            "another -- ", *((hint,) if isinstance(hint, str) else hint))


def _read_text_lines(path: str, text_column: str, label_column: str | None,
                     verbatim: bool = False) -> Iterator[Row]:
    """One row per non-blank line: fastText ``__label__`` prefixes give the labels, or
    ``verbatim`` the line is the text exactly as written (a corpus: no labels, and
    filters such as the generator's ``data.drop_regex`` see the raw line)."""
    with open_source(path) as fh:  # lines end at "\n" only: they may hold U+2028, \x0c, ...
        blank = True
        for number, line in enumerate(iter_lines(fh), start=1):
            if not line.strip():
                continue
            blank = False
            yield _text_line_row(number, line, text_column, label_column, verbatim)
        if blank:
            yield 1, None, "empty file (no text lines)"


def _text_line_row(number: int, line: str, text_column: str, label_column: str | None,
                   verbatim: bool) -> Row:
    if has_undecodable(line):
        return number, None, NOT_UTF8
    if verbatim:
        return number, {text_column: line}, None
    labels: list[str] = []
    words = line.split()
    while words and words[0].startswith(_FASTTEXT_LABEL):
        labels.append(words.pop(0)[len(_FASTTEXT_LABEL):])
    fields: dict[str, Any] = {text_column: " ".join(words)}
    if label_column:
        if not labels:
            return number, None, (f"no label: start the line with {_FASTTEXT_LABEL}LABEL "
                                  "(fastText style)")
        fields[label_column] = labels if len(labels) > 1 else labels[0]
    return number, fields, None


def _feature_value(feature: tf.train.Feature) -> Any:
    kind = feature.WhichOneof("kind")
    values = list(getattr(feature, kind).value) if kind else []
    if kind == "bytes_list":
        values = [v.decode("utf-8", errors="surrogateescape") for v in values]
    return values[0] if len(values) == 1 else values


def _read_tfrecord(path: str, columns: list[str], hint: Hint) -> Iterator[Row]:
    compression = "GZIP" if path.endswith(".gz") else ""
    dataset = tf.data.TFRecordDataset(path, compression_type=compression)
    number = 0
    try:
        for number, raw in enumerate(dataset.as_numpy_iterator(), start=1):
            try:
                example = tf.train.Example.FromString(raw)
            except Exception:  # protobuf DecodeError
                yield f"record {number}", None, "not a tf.train.Example"
                continue
            feats = example.features.feature
            missing = [c for c in columns if c not in feats]
            if missing:
                if number == 1:
                    raise _missing_column(path, missing[0], sorted(feats), "first record",
                                          hint)
                yield f"record {number}", None, f"no feature '{missing[0]}'"
                continue
            yield f"record {number}", {c: _feature_value(feats[c]) for c in columns}, None
    except tf.errors.OpError as err:
        raise DataError(f"{path}: record {number + 1}: not a readable TFRecord file "
                        f"({err.message.splitlines()[0]})") from None
    if number == 0:
        yield "record 1", None, "empty file (no records)"


def _read_tfds(spec: str, default_split: str, columns: list[str], hint: Hint
               ) -> Iterator[Row]:
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DataError("data.format=tfds needs tensorflow-datasets; pip install "
                        "'tfapp[datasets]' (or tensorflow-datasets) or use local files"
                        ) from None
    name, _, split = spec.partition(":")
    try:
        dataset = tfds.load(name, split=split or default_split)
    except Exception as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DataError(f"cannot load TFDS dataset '{spec}' ({first[:200]})") from None
    for number, element in enumerate(tfds.as_numpy(dataset), start=1):
        missing = [c for c in columns if c not in element]
        if missing:
            raise _missing_column(spec, missing[0], sorted(element), "dataset features",
                                  hint)
        fields = {}
        for c in columns:
            value = element[c]
            if isinstance(value, bytes):
                value = value.decode("utf-8", errors="surrogateescape")
            elif isinstance(value, np.ndarray):
                value = value.tolist()
            elif isinstance(value, np.generic):
                value = value.item()
            fields[c] = value
        yield f"record {number}", fields, None


# ----------------------------------------------------------------------------- examples
@dataclass
class RawExample:
    """A validated row before label encoding."""

    text: str
    text_pair: str | None
    labels: list[str]  # one label, or several for multi-label (possibly none)
    origin: tuple[str, int | str]
    #: the columns ``iter_examples`` was asked to carry through (evaluate's ``--keep``)
    kept: dict[str, Any] = field(default_factory=dict)


def kept_value(value: Any) -> Any:
    """A kept column's value as JSON can hold it (TFRecord/Parquet give bytes, lists):
    what ``--keep`` carries into predict's and evaluate's output."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if hasattr(value, "tolist"):  # a NumPy scalar or array (a prepared folder's id)
        return kept_value(value.tolist())
    if isinstance(value, list):
        return [kept_value(v) for v in value]
    return value


def _clean_text(value: Any, column: str, allow_empty: bool = False
                ) -> tuple[str | None, str | None]:
    """(text, problem) for one text field; ``allow_empty`` returns a blank text as is."""
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else None
    if value is None:
        return None, f"column '{column}' is null"
    if not isinstance(value, str):
        value = str(value)
    if has_undecodable(value):
        return None, f"column '{column}' is not valid UTF-8 (re-save the file as UTF-8)"
    if not value.strip() and not allow_empty:
        return None, f"empty text in column '{column}'"
    return value, None


_INTEGRAL_DECIMAL = re.compile(r"^\s*([+-]?\d+)\.0+\s*$")


def _clean_labels(value: Any, column: str, multi_label: bool,
                  separator: str) -> tuple[list[str] | None, str | None]:
    if value is None:
        return None, f"column '{column}' (label) is null"
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    values = value if isinstance(value, list) else [value]
    labels: list[str] = []
    for v in values:
        v = str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)
        # "1.0" and 1 are one class (a CSV column written from floats, next to JSON ints).
        v = _INTEGRAL_DECIMAL.sub(r"\1", v)
        if has_undecodable(v):
            return None, f"label column '{column}' is not valid UTF-8"
        parts = v.split(separator) if multi_label and separator else [v]
        labels.extend(p.strip() for p in parts if p.strip())
    if not multi_label:
        if len(labels) != 1:
            what = "empty label" if not labels else f"{len(labels)} labels"
            return None, (f"{what} in column '{column}' (a single-label task needs exactly "
                          "one; set data.multi_label=true for several)")
    return sorted(set(labels)) if multi_label else labels, None


def _row_sources(spec: str | Sequence[str | os.PathLike], columns: list[str], *, fmt: str,
                 split: str, what: str | Setting, hint: Hint,
                 text_lines: Callable[[str], Iterator[Row]] | None,
                 default_format: str | None = None, label_column: str | None = None,
                 kept: Sequence[str] = ()) -> list[tuple[str, Iterator[Row]]]:
    """(file, its rows) for every file of ``spec`` (or the TFDS dataset it names);
    ``label_column``: the column of ``columns`` holding labels (typed files check it so);
    ``kept``: columns of ``columns`` carried through as they are (of any type).

    Files are resolved and their formats told (``fmt``, else the extension, else
    ``default_format``) before any is read, so a missing file or an unknown extension
    fails first. ``text_lines(path)`` reads a plain text file; ``None`` when ``columns``
    need more than one text per row, which a text line cannot hold.
    """
    if fmt == "tfds":
        if not isinstance(spec, str):
            raise DataError(what, ": data.format=tfds takes one dataset name, not files")
        return [(spec, _read_tfds(spec, split, columns, hint))]
    sources: list[tuple[str, Iterator[Row]]] = []
    for path in resolve_files(spec, what):
        kind = detect_format(path, fmt, default_format)
        if kind == "tfds":
            raise DataError("data.format=tfds takes a dataset name, not files")
        if kind in ("csv", "tsv"):
            rows = _read_delimited(path, "," if kind == "csv" else "\t", columns, hint)
        elif kind == "jsonl":
            rows = _read_jsonl(path, columns, hint)
        elif kind == "parquet":
            rows = _read_parquet(path, columns, hint, label_column, kept)
        elif kind == "text":
            if text_lines is None:
                raise DataError(f"{path}: plain text lines hold one text; rows of "
                                f"{' and '.join(columns)} need csv, tsv, jsonl, parquet or "
                                "tfrecord")
            rows = text_lines(path)
        else:
            rows = _read_tfrecord(path, columns, hint)
        sources.append((path, rows))
    return sources


def _shown(spec: str | Sequence[str | os.PathLike]) -> str:
    return spec if isinstance(spec, str) else ", ".join(os.fspath(p) for p in spec)


def iter_examples(spec: str, data_cfg: DataConfig, *, split: str, mode: str,
                  report: BadRowReport, with_labels: bool = True,
                  keep: Sequence[str] = ()) -> Iterator[RawExample]:
    """Read and check every row of the files in ``spec`` (one split), one example at a
    time as the files are read (a streaming evaluation holds none of them). Bad rows raise
    ``DataError`` (``mode='fail'``) or are recorded in ``report`` (``mode='skip'``); an
    empty result is the caller's to refuse. ``keep``: columns carried through as each
    example's ``kept`` (plain text lines, which have no such columns, are refused)."""
    what = Setting(f"data.{split}_files")
    columns = [data_cfg.text_column]
    if data_cfg.text_pair_column:
        columns.append(data_cfg.text_pair_column)
    if with_labels:
        columns.append(data_cfg.label_column)
    extra = [c for c in keep if c not in columns]
    columns += extra
    bad = BadRowPolicy(mode, report, split)
    label_column = data_cfg.label_column if with_labels else None
    text_lines = None if data_cfg.text_pair_column or keep else (
        lambda path: _read_text_lines(path, data_cfg.text_column, label_column))
    sources = _row_sources(spec, columns, fmt=data_cfg.format, split=split, what=what,
                           hint=COLUMNS_HINT, text_lines=text_lines, label_column=label_column,
                           kept=extra)
    for path, rows in sources:
        for line, fields, problem in rows:
            if problem is None:
                problem, ex = _to_example(fields, data_cfg, with_labels, (path, line))
                if ex is not None:
                    ex.kept = {c: kept_value(fields.get(c)) for c in keep}
                    yield ex
                    continue
            bad(path, line, problem)


def stream_rows(path: str, columns: list[str], *, fmt: str, what: str | Setting,
                hint: Hint = TEXT_COLUMN_HINT, text_column: str | None = None
                ) -> Iterator[Row]:
    """The rows of one file as ``(line, fields | None, problem | None)``, read as it goes
    (no list): for commands that stream a file of any size (``tfapp.data.rows``). A plain
    text file gives each non-blank line, exactly as written, as ``text_column`` (None: a
    text file is refused, the rows need columns it cannot hold)."""
    text_lines = None if text_column is None else (
        lambda p: _read_text_lines(p, text_column, None, verbatim=True))
    [(_, rows)] = _row_sources([path], columns, fmt=fmt, split="test", what=what, hint=hint,
                               text_lines=text_lines)
    yield from rows


def read_texts(spec: str | Sequence[str | os.PathLike], *, text_column: str = "text",
               fmt: str = "auto", mode: str = "fail", report: BadRowReport | None = None,
               split: str = "train", what: str = "data.train_files",
               column_hint: Hint = "set data.text_column",
               skip_option: str | None = SKIP_OPTION) -> list[str]:
    """The texts of a corpus, in file and row order, blank texts left out.

    The files and formats of ``iter_examples`` (paths, globs, ``gs://``, ``.gz``; ``spec``
    a comma-joined config value or a list of paths): a text file gives one text per
    non-blank line, exactly as written; csv/tsv/jsonl/tfrecord rows (and TFDS) give their
    ``text_column``. A file whose extension names no format is read as text lines.
    Malformed rows (and empty files) fail or, with ``mode='skip'``, are recorded in
    ``report`` (a new one, logged here, when none is given). ``what`` names the setting
    in messages, ``column_hint`` the fix for a missing column and ``skip_option`` the
    switch that skips bad rows (``None``: the command has none). Raises when no text
    remains.
    """
    own_report = report is None
    report = BadRowReport() if report is None else report
    rows = _read_columns(
        spec, [text_column], fmt=fmt, mode=mode, report=report, log_report=own_report,
        split=split, what=what,
        hint=column_hint, skip_option=skip_option,
        text_lines=lambda path: _read_text_lines(path, text_column, None, verbatim=True),
        default_format="text")
    texts = [text for (text,) in rows if text.strip()]  # a blank text is no example
    if not texts:
        skipped = f" ({report.summary()})" if report.count else ""
        raise DataError(what, f": '{_shown(spec)}' holds no text{skipped}; give files with "
                        "at least one non-empty text")
    return texts


def _read_columns(spec: str | Sequence[str | os.PathLike], columns: list[str], *, fmt: str,
                  mode: str, report: BadRowReport, log_report: bool, split: str,
                  what: str | Setting,
                  hint: Hint, skip_option: str | None, text_lines: Callable | None,
                  default_format: str | None = None) -> list[tuple[str, ...]]:
    """The ``columns`` of every good row as text (blank values kept), in file and row
    order; bad rows go to the policy of ``mode`` (recorded in ``report``; logged here when
    ``log_report``, i.e. no caller collects them)."""
    bad = BadRowPolicy(mode, report, split, skip_option)
    sources = _row_sources(spec, columns, fmt=fmt, split=split, what=what, hint=hint,
                           text_lines=text_lines, default_format=default_format)
    out: list[tuple[str, ...]] = []
    for path, rows in sources:
        for line, fields, problem in rows:
            values: list[str] = []
            if problem is None:
                assert fields is not None
                for column in columns:
                    value, problem = _clean_text(fields.get(column), column, allow_empty=True)
                    if problem is not None:
                        break
                    values.append(value)
            if problem is None:
                out.append(tuple(values))
            else:
                bad(path, line, problem)
    if log_report and report.count:
        log.warning("data: %s", report.summary())
    return out


def _to_example(fields: dict[str, Any] | None, cfg: DataConfig, with_labels: bool,
                origin: tuple[str, int | str]) -> tuple[str | None, RawExample | None]:
    assert fields is not None
    text, problem = _clean_text(fields.get(cfg.text_column), cfg.text_column)
    if problem:
        return problem, None
    pair = None
    if cfg.text_pair_column:
        pair, problem = _clean_text(fields.get(cfg.text_pair_column), cfg.text_pair_column)
        if problem:
            return problem, None
    labels: list[str] = []
    if with_labels:
        labels, problem = _clean_labels(fields.get(cfg.label_column), cfg.label_column,
                                        cfg.multi_label, cfg.label_separator)
        if problem:
            return problem, None
    return None, RawExample(text, pair, labels, origin)


# ------------------------------------------------------------------------------- labels
@dataclass
class LabelVocab:
    """Label names in id order; saved with the run as ``labels.json``."""

    names: list[str]
    multi_label: bool

    def index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}


def write_label_vocab(vocab: LabelVocab, path: str | Path) -> Path:
    return write_text(path, json.dumps({"labels": vocab.names, "multi_label": vocab.multi_label},
                                       indent=2, ensure_ascii=False) + "\n")


def read_label_vocab(path: str | Path) -> LabelVocab:
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
        return LabelVocab([str(n) for n in obj["labels"]], bool(obj.get("multi_label")))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(f"{path}: not a readable labels.json ({err}); delete it to rebuild "
                        "the label vocabulary from the training data") from None


# ------------------------------------------------------------------------------- arrays
@dataclass
class ExampleSet:
    """Encoded examples of one split, ready for ``tf.data.Dataset.from_tensor_slices``.

    Attributes:
      texts: first text of each example.
      text_pairs: second text (sentence-pair tasks) or None.
      labels: int32 class ids ``[n]``, or float32 multi-hot ``[n, num_classes]``.
      name: split name (train/validation/test), for messages.
    """

    texts: list[str]
    text_pairs: list[str] | None
    labels: np.ndarray
    name: str = "train"

    def __len__(self) -> int:
        return len(self.texts)


def to_example_set(examples: list[RawExample], vocab: LabelVocab, *, split: str, mode: str,
                   report: BadRowReport, known_from: str) -> ExampleSet:
    """Map label names to ids (or multi-hot rows); unknown labels are bad rows."""
    index = vocab.index()
    bad = BadRowPolicy(mode, report, split)
    kept: list[RawExample] = []
    for ex in examples:
        unknown = [label for label in ex.labels if label not in index]
        if unknown:
            shown = ", ".join(vocab.names[:10]) + (" ..." if len(vocab.names) > 10 else "")
            bad(ex.origin[0], ex.origin[1], f"unknown label {_show(unknown[0])} (not among "
                                            f"the labels of {known_from}: {shown})")
            continue
        kept.append(ex)
    if not kept:
        raise DataError(Setting(f"data.{split}_files"), ": no usable examples left after dropping "
                        f"{report.per_split.get(split, 0)} bad row(s): {report.summary()}")
    if vocab.multi_label:
        labels = np.zeros((len(kept), len(vocab.names)), np.float32)
        for i, ex in enumerate(kept):
            labels[i, [index[name] for name in ex.labels]] = 1.0
    else:
        labels = np.array([index[ex.labels[0]] for ex in kept], np.int32)
    pairs = [ex.text_pair for ex in kept] if kept[0].text_pair is not None else None
    return ExampleSet([ex.text for ex in kept], pairs, labels, split)
