"""CSV and TSV files: a header row names the columns.

Two readers of the same rows: ``rows`` (Python's csv module, a row at a time: what every
command reads, and the one that names the exact line of a row pyarrow cannot read) and
``arrow_batches`` (pyarrow's streaming C++ parser, a block of rows at a time: the fast path
``prepare`` checks column-wise, ``tfapp.data.rows.columnar``). Both count lines as csv
does and report a row's field count in the same words; a file pyarrow cannot read as
Python's csv would (a malformed quote, say) raises ``Fallback`` and is read by ``rows``.

TSV has no quoting: a ``"`` is just a character (with csv's quoting, one opening a field
would swallow the tabs and lines after it up to the next ``"``).
"""

from __future__ import annotations

import contextlib
import csv
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from tfapp.data.formats.files import Fallback, Hint, Parsed, check_columns, open_source
from tfapp.errors import DataError
from tfapp.textio import NOT_UTF8, csv_text_stream, has_undecodable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

__all__ = ["arrow_batches", "arrow_header", "rows"]

_ARROW_BLOCK = 16 << 20
# Long documents are valid input: no limit on a field's length (csv's default is 128 KiB).
csv.field_size_limit(sys.maxsize)


def _reader(lines: Iterable[str], delimiter: str) -> Any:
    return csv.reader(lines, delimiter=delimiter,
                      quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)


def _header(path: str, row: list[str], line: int, columns: list[str], hint: Hint
            ) -> list[str]:
    if has_undecodable("".join(row)):  # a header is no row to skip: the file fails
        raise DataError(f"{path}:{line}: {NOT_UTF8}")
    header = [h.strip() for h in row]
    check_columns(path, columns, header, "header row", hint)
    return header


def _field_count(fields: int, header: int, tsv: bool) -> str:
    fix = ("a TSV field cannot hold a tab; use csv or jsonl for such texts" if tsv
           else "quote fields that contain ','")
    return f"has {fields} field(s) but the header has {header} ({fix})"


def _blank(row: list[str]) -> bool:
    return not row or all(not f.strip() for f in row)


def rows(path: str, delimiter: str, columns: list[str], hint: Hint) -> Iterator[Parsed]:
    """Every row of a CSV/TSV file, read by Python's csv module (see the module docstring)."""
    with open_source(path) as fh:
        reader = _reader(csv_text_stream(fh), delimiter)
        header: list[str] | None = None
        start, count = 1, 0
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
            if _blank(row):
                continue
            if header is None:
                header = _header(path, row, line, columns, hint)
            elif len(row) != len(header):
                yield line, None, _field_count(len(row), len(header), delimiter == "\t")
            else:
                count += 1
                yield line, dict(zip(header, row, strict=True)), None
    if header is None:
        yield 1, None, "empty file (no header row and no data)"
    elif count == 0:
        yield 2, None, "empty file (a header row but no data rows)"


def _line_breaks(column: pa.Array) -> np.ndarray:
    """Line ends inside each value, as csv counts lines ("\\r", "\\n" or "\\r\\n")."""
    count = lambda s: pc.count_substring(column, s).to_numpy(  # noqa: E731
        zero_copy_only=False).astype(np.int64)
    return count("\n") + count("\r") - count("\r\n")


def arrow_header(path: str, delimiter: str, columns: list[str], hint: Hint) -> list[str]:
    """The header row, read by csv from the file's first line, checked as ``rows`` checks
    it; Fallback when that line is not a plain one-line header (blank, quoted)."""
    with open_source(path) as fh:
        head = fh.read(1 << 16)
    first = head[:head.find(b"\n") + 1] if b"\n" in head else b""
    if not first or (delimiter != "\t" and b'"' in first) or b"\r" in \
            first.rstrip(b"\r\n"):
        raise Fallback("no plain header line")
    row = next(_reader([first.lstrip(b"\xef\xbb\xbf").decode("utf-8", "surrogateescape")],
                       delimiter), [])
    if _blank(row) or has_undecodable("".join(row)):
        raise Fallback("blank header line")
    return _header(path, row, 1, columns, hint)


#: a block of rows: the line of each row read, the rows (one binary column per header
#: field, None when the block held only rows of another field count) and the
#: (line, problem) of the rows of another field count
ArrowBatch = tuple[np.ndarray, pa.RecordBatch | None, list[tuple[int, str]]]


def arrow_batches(path: str, delimiter: str, header: list[str]) -> Iterator[ArrowBatch]:
    """The rows after the header (``arrow_header``) parsed by pyarrow, a block at a time.
    Line numbers are counted as csv counts them: each record's own line ends plus those
    inside its quoted values. Raises Fallback (before or while reading) where csv must
    decide. Blank rows are in the batches: what is blank is the checks' to say."""
    names = [f"c{i}" for i in range(len(header))]
    invalid: list[tuple[int, str]] = []

    def on_invalid(row) -> str:
        if row.number is None:
            raise Fallback("no row numbers")
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
        except pa.ArrowInvalid as err:  # "Empty CSV file", ...
            raise Fallback(str(err)) from None
        record, line = 2, 2  # record 1 is the header, on line 1
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except pa.ArrowInvalid as err:
                raise Fallback(str(err)) from None
            found, invalid[:] = sorted(invalid), []
            out, record, line = _lines(batch, found, record, line, len(header), tsv)
            yield out
        for number, text in sorted(invalid):  # a last invalid row after the last batch
            out, record, line = _lines(None, [(number, text)], record, line, len(header), tsv)
            yield out


def _lines(batch: pa.RecordBatch | None, invalid: list[tuple[int, str]], record: int,
           line: int, fields: int, tsv: bool) -> tuple[ArrowBatch, int, int]:
    """One batch's ``ArrowBatch``, the next record number and the next line."""
    n_valid = batch.num_rows if batch is not None else 0
    total = n_valid + len(invalid)
    numbers = np.arange(record, record + total)
    if invalid and not all(record <= num < record + total for num, _ in invalid):
        raise Fallback("invalid rows out of order")
    is_invalid = np.isin(numbers, [num for num, _ in invalid])
    # Lines each record spans: 1 + the line ends inside it.
    spans = np.ones(total, np.int64)
    if n_valid and not tsv:
        spans[~is_invalid] += sum(_line_breaks(batch.column(i))
                                  for i in range(batch.num_columns))
    for k, (_, text) in zip(np.flatnonzero(is_invalid), invalid, strict=True):
        spans[k] += text.count("\n") + text.count("\r") - text.count("\r\n")
    starts = line + np.concatenate([[0], np.cumsum(spans)[:-1]])
    problems = []
    for k, (_, text) in zip(np.flatnonzero(is_invalid), invalid, strict=True):
        row = next(_reader([text], "\t" if tsv else ","), [])
        if not _blank(row):
            problems.append((int(starts[k]), _field_count(len(row), fields, tsv)))
    return ((starts[~is_invalid], batch, problems), record + total,
            int(line + spans.sum()))


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
    with open_source(path) as fh:
        yield pa.PythonFile(fh, mode="r")
