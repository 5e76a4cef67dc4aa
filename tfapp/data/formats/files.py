"""User data files: which files a setting names, which format each is, how one is opened,
and the checks of the columns a file names (header row, Parquet schema, first object).

Formats: CSV and TSV (a header row names the columns), JSON Lines (one object per line),
Parquet, plain text lines (one example per line), TFRecord files of ``tf.train.Example``,
a TFDS dataset (``NAME[:SPLIT]``) when tensorflow-datasets is installed, and CoNLL
columns of tagged words. Text is UTF-8 (a BOM is dropped) and lines end at "\\n" only, as
csv and json define them (``tfapp.textio``). Paths are local paths, globs or ``gs://``
URLs, read through ``tf.io.gfile`` as streams; several may be joined with commas; ``.gz``
files are decompressed as they are read.

A reader yields ``Parsed`` rows, ``(line, fields, problem)``: the line is a 1-based line
number (a row number for Parquet, "record N" for TFRecord/TFDS), ``fields`` the row's
columns by name, ``problem`` what makes it a bad row (then ``fields`` is None). Problems of
a whole file (missing file, missing column, unreadable file) raise ``DataError``.
"""

from __future__ import annotations

import contextlib
import difflib
import gzip
import os
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from tfapp.errors import DataError, Setting
from tfapp.textio import iter_lines

import tensorflow as tf

__all__ = ["FORMATS", "TAGGED_FORMATS", "Fallback", "Hint", "Parsed", "TRAIN_FILES",
           "check_columns", "detect_format", "nonblank_lines", "open_source", "python_value",
           "resolve_files"]

FORMATS = ("csv", "tsv", "jsonl", "parquet", "text", "tfrecord", "tfds")
#: the formats of tagged words (NER)
TAGGED_FORMATS = ("conll", "jsonl")
_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl",
               ".ndjson": "jsonl", ".json": "jsonl", ".txt": "text", ".text": "text",
               ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfrec": "tfrecord",
               ".parquet": "parquet", ".pq": "parquet"}
TRAIN_FILES = Setting("data.train_files")  # what a reader names in messages by default

#: ``(line, fields | None, problem | None)``: one row as a reader parses it
Parsed = tuple[int | str, dict[str, Any] | None, str | None]
#: How to fix a missing column, in a message: text, or text and the settings it names.
Hint = str | tuple[str | Setting, ...]


class Fallback(Exception):
    """A column-wise reader (pyarrow) cannot read this file as the row readers would:
    read it row by row instead."""


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


def detect_format(path: str, configured: str, kind: str = "") -> str:
    """The format ``path`` is read in as rows of ``kind`` (``RowSpec.kind``): ``configured``
    unless it is auto, else from the file extension.

    Tagged words are ``configured`` (conll or jsonl), else JSON Lines by the extension and
    CoNLL columns otherwise. A corpus of texts (``texts``) reads a ``.conll`` file's
    sentences as texts, and a file whose extension names no format as text lines; for
    other rows such an extension is an error.
    """
    ext = Path(path.removesuffix(".gz")).suffix.lower()
    if kind == "tagged":
        if configured in TAGGED_FORMATS:
            return configured
        return "jsonl" if _EXTENSIONS.get(ext) == "jsonl" else "conll"
    if configured != "auto":
        return configured
    if kind == "texts":
        return "conll" if ext == ".conll" else _EXTENSIONS.get(ext, "text")
    if ext not in _EXTENSIONS:
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


def nonblank_lines(path: str) -> Iterator[tuple[int, str | None]]:
    """``(number, line)`` of every non-blank line of ``path``; ``(1, None)`` for a file
    without any."""
    blank = True
    with open_source(path) as fh:
        for number, line in enumerate(iter_lines(fh), start=1):
            if line.strip():
                blank = False
                yield number, line
    if blank:
        yield 1, None


def python_value(value: Any) -> Any:
    """A parsed value as the text readers give it: bytes as text (bytes that are not UTF-8
    kept as surrogates, so the row is flagged), NumPy values and lists element by element."""
    if hasattr(value, "tolist"):  # a NumPy array or scalar (TFDS)
        value = value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="surrogateescape")
    if isinstance(value, list):
        return [python_value(v) for v in value]
    return value


def missing_column(path: str, column: str, available: list[str], where: str,
                   hint: Hint) -> DataError:
    """The one line for a column the ``where`` (header row, first JSON object, ...) lacks."""
    close = difflib.get_close_matches(column, available, n=1)
    guess = f"; did you mean '{close[0]}'?" if close else ""
    return DataError(f"{path}: no column '{column}' in the {where} (has: "
                     f"{', '.join(available) or 'nothing'}){guess} -- ",
                     *((hint,) if isinstance(hint, str) else hint))


def check_columns(path: str, columns: list[str], names: list[str], where: str,
                  hint: Hint) -> None:
    """Each of ``columns`` is among the ``names`` the ``where`` of a file gives, once: a
    name given twice leaves which one is meant open (a dict would keep the last)."""
    for column in columns:
        if column not in names:
            raise missing_column(path, column, names, where, hint)
        if names.count(column) > 1:
            raise DataError(f"{path}: the {where} names column '{column}' "
                            f"{names.count(column)} times; rename all but one")
