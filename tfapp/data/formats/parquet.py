"""Parquet files, read through pyarrow a batch of rows at a time
(``ParquetFile.iter_batches``: a row group is the most held in memory, never the whole file).

``rows`` gives them as every reader's rows (training, ``prepare``, ``evaluate``,
``predict``); ``prepare`` checks files of plain string columns column-wise instead, a
batch at a time (``batches``, ``tfapp.data.rows.columnar``), with the same checks.
Rows are numbered from 1 in file order, so a bad row reads ``FILE:ROW: problem``. A file
that is no readable Parquet file (truncated, or another format), a missing column and a
column of the wrong type are one line each: the whole file is wrong, not a row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from tfapp.data.formats.files import Hint, Parsed, check_columns, python_value
from tfapp.errors import DataError

import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow as tf

__all__ = ["READ_ROWS", "batches", "check_schema", "open_parquet", "rows", "type_problem"]

#: rows converted to Python values at a time
READ_ROWS = 4096


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]


def _unreadable(path: str, err: BaseException, where: str = "") -> DataError:
    return DataError(f"{path}{where}: not a readable Parquet file ({_first_line(err)}); "
                     "write it again, or check that it was copied whole")


@contextlib.contextmanager
def open_parquet(path: str) -> Iterator[pq.ParquetFile]:
    """``path`` (local, or on any file system TensorFlow reads: gs://, ...) opened as a
    Parquet file: only its footer (the schema and row groups) is read here."""
    with contextlib.ExitStack() as stack:
        try:
            source: Any = path
            if "://" in path:
                source = pa.PythonFile(stack.enter_context(tf.io.gfile.GFile(path, "rb")),
                                       mode="r")
            parquet = stack.enter_context(pq.ParquetFile(source))
        except tf.errors.OpError as err:
            raise DataError(f"{path}: cannot read ({err.message.splitlines()[0]})") from None
        except (pa.ArrowException, OSError) as err:
            raise _unreadable(path, err) from None
        yield parquet


def _is_text(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def type_problem(field: pa.Field, *, label: bool = False) -> str | None:
    """Why a column's type cannot be read as text (``label``: as labels: text, numbers,
    or a list of them for several labels), or None. A dictionary-encoded column is read
    as its values' type."""
    t = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
    if label and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        t = t.value_type
    if _is_text(t) or (label and (pa.types.is_integer(t) or pa.types.is_boolean(t)
                                  or pa.types.is_floating(t))):
        return None
    want = ("text (string), a number or a list of them" if label
            else "text (a string or binary column)")
    return f"column '{field.name}' holds {field.type}, not {want}"


def batches(parquet: pq.ParquetFile, path: str, columns: list[str]
            ) -> Iterator[pa.RecordBatch]:
    """``columns`` of every row, ``READ_ROWS`` rows at a time; a row group that cannot be
    read (a damaged page) is one line naming the first row not read."""
    number = 0
    reader = parquet.iter_batches(batch_size=READ_ROWS, columns=columns, use_threads=False)
    while True:
        try:
            batch = next(reader)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as err:
            raise _unreadable(path, err, f":{number + 1}") from None
        number += batch.num_rows
        yield batch


def check_schema(path: str, schema: pa.Schema, columns: list[str], hint: Hint,
                 label_column: str | None, kept: Sequence[str] = ()) -> None:
    """Each of ``columns`` is in a Parquet file's schema once, of a type that holds text
    (``label_column``: or labels; a ``kept`` column, carried through as it is, may hold any
    type); else one line: the whole file is wrong, not a row."""
    for column in columns:
        check_columns(path, [column], schema.names, "Parquet schema", hint)
        if column in kept:
            continue
        problem = type_problem(schema.field(column), label=column == label_column)
        if problem:
            raise DataError(f"{path}: {problem}; write the column as strings, or name "
                            "another -- ", *((hint,) if isinstance(hint, str) else hint))


def rows(path: str, columns: list[str], hint: Hint, label_column: str | None = None,
         kept: Sequence[str] = ()) -> Iterator[Parsed]:
    """The ``columns`` of every row, numbered from 1 (see ``check_schema``)."""
    with open_parquet(path) as pf:
        check_schema(path, pf.schema_arrow, columns, hint, label_column, kept)
        if pf.metadata.num_rows == 0:
            yield 1, None, "empty file (no rows)"
            return
        number = 0
        for batch in batches(pf, path, columns):
            for values in batch.to_pylist():
                number += 1
                yield number, {k: python_value(v) for k, v in values.items()}, None
