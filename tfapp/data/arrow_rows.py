"""CSV and TSV rows parsed by pyarrow's streaming C++ parser, checked column-wise with
NumPy/Arrow over whole batches (blank texts, labels, UTF-8), with the messages and line
numbers of the Python readers (``rows.convert``, ``sources``); ``parquet_rows`` checks
Parquet batches the same way. A file pyarrow cannot read as Python's csv would (a malformed
quote, say) raises ``Fallback`` and is read again by ``rows.python_rows``, which names the
exact line.
"""

from __future__ import annotations

import contextlib
import csv
import sys
import threading
from collections.abc import Iterator
from typing import Any

from tfapp.data import sources
from tfapp.data.records import BytesList, large_binary
from tfapp.data.rows import Rows, RowSpec, SourceLog, convert
from tfapp.errors import DataError

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

__all__ = ["Fallback", "arrow_input", "arrow_rows", "arrow_values", "count_arrow_labels",
           "decode_bytes", "is_blank"]

_ARROW_BLOCK = 16 << 20
# Python's str.strip() removes exactly these: a blank text is one made of them only.
_PY_WHITESPACE = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())


class Fallback(Exception):
    """pyarrow cannot read this file as Python's csv would: read it with csv instead."""


def _line_breaks(column: pa.Array) -> np.ndarray:
    """Line ends inside each value, as csv counts lines ("\\r", "\\n" or "\\r\\n")."""
    count = lambda s: pc.count_substring(column, s).to_numpy(  # noqa: E731
        zero_copy_only=False).astype(np.int64)
    return count("\n") + count("\r") - count("\r\n")


def _arrow_header(path: str, delimiter: str, spec: RowSpec) -> list[str]:
    """The header row, read by csv from the file's first line; Fallback when that line
    is not a plain one-line header (blank, quoted)."""
    with sources.open_source(path) as fh:
        head = fh.read(1 << 16)
    first = head[:head.find(b"\n") + 1] if b"\n" in head else b""
    if not first.endswith(b"\n") or (delimiter == "," and b'"' in first) or b"\r" in \
            first.rstrip(b"\r\n"):
        raise Fallback("no plain header line")
    row = next(csv.reader([decode_bytes(first.lstrip(b"\xef\xbb\xbf"))], delimiter=delimiter,
                          quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL),
               [])
    if not row or all(not f.strip() for f in row) or sources.has_undecodable(
            "".join(row)):
        raise Fallback("blank header line")
    header = [h.strip() for h in row]
    for col in spec.columns:
        if col not in header:
            raise sources._missing_column(path, col, header, "header row", spec.hint)
        if header.count(col) > 1:
            raise DataError(f"{path}: the header row names column '{col}' "
                            f"{header.count(col)} times; rename all but one")
    return header


def arrow_rows(path: str, delimiter: str, spec: RowSpec, log_: SourceLog
                ) -> Iterator[Rows]:
    """Rows of a CSV/TSV file parsed by pyarrow, checked column-wise; see the module
    docstring. Line numbers are counted as csv counts them: each record's own line ends
    plus those inside its quoted values. Raises Fallback (before or while reading)
    where csv must decide."""
    header = _arrow_header(path, delimiter, spec)
    names = [f"c{i}" for i in range(len(header))]
    invalid: list[tuple[int, str]] = []

    def on_invalid(row) -> str:
        if row.number is None:
            raise Fallback("no row numbers")
        invalid.append((row.number, row.text))
        return "skip"

    tsv = delimiter == "\t"
    with arrow_input(path) as stream, _quiet_row_decoding():
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
                raise Fallback("empty") from None
            raise Fallback(str(err)) from None
        record, line, rows = 2, 2, 0  # record 1 is the header, on line 1
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except pa.ArrowInvalid as err:
                raise Fallback(str(err)) from None
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
                 line: int, header: list[str], spec: RowSpec, log_: SourceLog, path: str,
                 tsv: bool):
    """Check and convert one batch; yields its good rows. Returns (next record number,
    next line, rows with the header's field count that are not blank)."""
    n_valid = batch.num_rows if batch is not None else 0
    total = n_valid + len(invalid)
    numbers = np.arange(record, record + total)
    if invalid and not all(record <= num < record + total for num, _ in invalid):
        raise Fallback("invalid rows out of order")
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
        good, values, row_problems, kept = arrow_values(batch, header, spec)
        problems += [(int(lines[i]), p) for i, p in row_problems]
        good_rows = kept
        for number, problem in sorted(problems):
            log_.bad(number, problem)
        problems = []
        if len(good):
            good_lines = lines[good]
            if spec.kind == "labelled":
                count_arrow_labels(values["labels"], good_lines, log_)
            yield Rows(good_lines, values)
    for number, problem in sorted(problems):
        log_.bad(number, problem)
    return record + total, next_line, good_rows


def arrow_values(batch: pa.RecordBatch, header: list[str], spec: RowSpec
                  ) -> tuple[np.ndarray, dict[str, Any], list[tuple[int, str]], int]:
    """(indices of good rows, their feature columns, (index, problem) of bad rows, rows
    that are not blank) of one pyarrow batch, with the checks and messages of
    ``convert``; rows whose bytes are not UTF-8 (rare) go through ``convert`` itself."""
    n = batch.num_rows
    cols = [batch.column(i) for i in range(batch.num_columns)]
    broken = np.zeros(n, bool)
    blank_of: list[np.ndarray] = []
    for col in cols:
        try:
            view = col.view(pa.large_string())
            view.validate(full=True)
            blank_of.append(is_blank(view))
        except pa.ArrowInvalid:
            raw = col.to_pylist()
            broken |= np.array([not _utf8(b) for b in raw])
            blank_of.append(np.array([not decode_bytes(b).strip() for b in raw]))
    blank = np.logical_and.reduce(blank_of) & ~broken
    column = {name: i for i, name in enumerate(header)}
    wanted = {c: column[c] for c in spec.columns}
    problems: list[tuple[int, str]] = []
    bad = np.zeros(n, bool)
    for k in np.flatnonzero(broken):  # the Python checks decide, message and all
        fields = {h: decode_bytes(cols[i][int(k)].as_py()) for i, h in enumerate(header)}
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


def decode_bytes(raw: bytes) -> str:
    return raw.decode("utf-8", errors="surrogateescape")


def is_blank(texts: pa.Array) -> np.ndarray:
    """Whether each text is empty or Python-whitespace only (``not text.strip()``)."""
    trimmed = pc.utf8_trim(texts, characters=_PY_WHITESPACE)
    return (pc.binary_length(trimmed).to_numpy(zero_copy_only=False) == 0)


def _arrow_labels(column: pa.Array, spec: RowSpec, rows: np.ndarray
                  ) -> tuple[BytesList, list[tuple[int, str]]]:
    """The labels of each row (``sources._clean_labels`` on each distinct value) and the
    (row, problem) of bad ones among ``rows``."""
    encoded = column.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    cleaned = [sources._clean_labels(decode_bytes(v), spec.label_column, spec.multi_label,
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


def count_arrow_labels(labels: BytesList, lines: np.ndarray, log_: SourceLog) -> None:
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
def arrow_input(path: str):
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
