"""Parquet files of plain string columns read for ``prepare`` column-wise: a batch of rows
at a time (``parquet.batches``), checked by CSV's Arrow checks (``arrow_rows.arrow_values``)
so the rows, messages and label counts are those of the Python readers, which read every
other Parquet file (numbers, binary, lists: ``rows.python_rows``) and the rare rows these
checks cannot decide.
"""

from __future__ import annotations

from collections.abc import Iterator

from tfapp.data import parquet, sources
from tfapp.data.arrow_rows import Fallback, arrow_values, count_arrow_labels, is_blank
from tfapp.data.records import large_binary
from tfapp.data.rows import Batcher, Rows, RowSpec, SourceLog, convert

import numpy as np
import pyarrow as pa

__all__ = ["parquet_rows"]


def parquet_rows(path: str, spec: RowSpec, log_: SourceLog) -> Iterator[Rows]:
    """Rows of a Parquet file whose columns are all plain strings, a batch at a time,
    checked by ``arrow_values`` as CSV rows are; the rare rows with a null or with only
    blank values (which CSV's checks take for a blank line) go through ``convert``, the
    Python readers' checks. Raises Fallback for other kinds or column types."""
    if spec.kind not in ("labelled", "texts", "pairs"):
        raise Fallback(f"rows of kind {spec.kind}")
    columns = spec.columns
    with parquet.open_parquet(path) as pf:
        schema = pf.schema_arrow
        sources._check_parquet_columns(path, schema, columns, spec.hint,
                                       spec.label_column if spec.kind == "labelled" else None)
        if not all(pa.types.is_string(schema.field(c).type) for c in columns):
            raise Fallback("columns other than plain strings")
        if pf.metadata.num_rows == 0:
            log_.bad(1, "empty file (no rows)")
            return
        start = 1
        for batch in parquet.batches(pf, path, columns):
            yield from _parquet_batch(batch, start, spec, log_)
            start += batch.num_rows


def _parquet_batch(batch: pa.RecordBatch, start: int, spec: RowSpec, log_: SourceLog
                   ) -> Iterator[Rows]:
    """Check and convert one batch of Parquet rows numbered from ``start``; yields its
    good rows (see ``parquet_rows``)."""
    n, columns = batch.num_rows, spec.columns
    cols = [large_binary(batch.column(i).fill_null("")) for i in range(len(columns))]
    special = np.zeros(n, bool)
    blank = np.ones(n, bool)
    for i, col in enumerate(cols):
        special |= batch.column(i).is_null().to_numpy(zero_copy_only=False)
        try:
            blank &= is_blank(col.view(pa.large_string()))
        except pa.ArrowInvalid as err:  # bytes that are not UTF-8: the Python checks decide
            raise Fallback(str(err)) from None
    special |= blank
    lines = np.arange(start, start + n, dtype=np.int64)
    problems: list[tuple[int, str]] = []
    batcher = Batcher(spec)
    for k in np.flatnonzero(special):
        fields = {c: batch.column(i)[int(k)].as_py() for i, c in enumerate(columns)}
        problem, values = convert(fields, spec)
        if problem is not None:
            problems.append((int(lines[k]), problem))
        elif values is not None:  # a pair of blank texts is a row
            batcher.add(int(lines[k]), values)
    rest = np.flatnonzero(~special)
    good_rows = None
    if len(rest):
        taken = pa.array(rest, pa.int64())
        sub = pa.RecordBatch.from_arrays([c.take(taken) for c in cols], names=columns)
        good, values, row_problems, _ = arrow_values(sub, columns, spec)
        problems += [(int(lines[rest[i]]), p) for i, p in row_problems]
        if len(good):
            good_rows = Rows(lines[rest[good]], values)
    for number, problem in sorted(problems):
        log_.bad(number, problem)
    if good_rows is not None:
        if spec.kind == "labelled":
            count_arrow_labels(good_rows.columns["labels"], good_rows.lines, log_)
        yield good_rows
    extra = batcher.flush()
    if extra is not None:
        yield extra
