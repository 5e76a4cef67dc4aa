"""Rows to score, streamed: the input of ``predict --data`` (and of the scoring API), read
in file and row order, each row with the place it came from.

The rows come through the readers training uses (``tfapp.data.sources``: csv, tsv, jsonl,
text lines, tfrecord; ``.gz`` and ``gs://`` too), from Parquet files (pyarrow, a record
batch at a time) and from prepared folders (``tfapp prepare``'s TFRecord shards, in the
manifest's order). Nothing is held but the row being read: a file of any size streams at
flat memory.

A ``Record`` is one row: its file and line (``record N`` / ``row N`` where a format has no
lines), the model's input texts and the columns to carry through (``--keep``), or the
problem that makes it a bad row. Whole-file problems (a missing file, a missing column,
an unreadable file) raise ``DataError`` as training's readers do.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tfapp.data import parquet
from tfapp.data.manifest import find_manifest, read_manifest
from tfapp.data.sources import detect_format, kept_value, resolve_files, stream_rows
from tfapp.errors import DataError
from tfapp.textio import has_undecodable

__all__ = ["InputRows", "Record", "describe_files", "describe_input"]



@dataclass
class Record:
    """One input row: where it is, its texts (``texts[0]`` the text, ``texts[1]`` the
    pair's second text if the model reads pairs) and kept columns, or its ``problem``."""

    file: str
    line: int | str
    texts: tuple[str, ...] = ()
    kept: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None


def _text(value: Any, column: str) -> tuple[str | None, str | None]:
    """(text, problem) of a model input field. A blank text is scored as it is (a row of
    the output for every row of the input); only what is no text is a bad row."""
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else None
    if value is None:
        return None, f"column '{column}' is null"
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="surrogateescape")
    if not isinstance(value, str):
        value = str(value)
    if has_undecodable(value):
        return None, f"column '{column}' is not valid UTF-8 (re-save the file as UTF-8)"
    return value, None


class InputRows:
    """The rows of ``spec`` (paths, globs, comma-joined, or a prepared folder) holding the
    ``columns`` a model reads and the ``keep`` columns carried through.

    ``what`` names the flag in messages. Files are resolved and checked when this is made,
    so a wrong path fails before a model loads.
    """

    def __init__(self, spec: str, columns: list[str], keep: list[str], *,
                 fmt: str = "auto", what: str = "--data"):
        self.spec, self.columns, self.keep, self.fmt, self.what = spec, columns, keep, fmt, what
        self.manifest = None
        named = find_manifest(spec)
        if named is not None:
            self.manifest = read_manifest(named)
            if self.manifest.kind not in ("labelled", "texts"):
                raise DataError(f"{what} {spec}: a prepared folder of {self.manifest.kind} "
                                "rows; predict reads one of texts (tfapp prepare of a "
                                "classifier's data)")
            extra = sorted(set(keep) - {"id", "text", "text_pair"})
            if extra:
                raise DataError(f"--keep {','.join(keep)}: a prepared folder's rows hold "
                                "only text, text_pair and id; keep those, or read the raw "
                                "files")
            self.files = self.manifest.files()
        else:
            self.files = resolve_files(spec, what)
            for path in self.files:
                if self._kind(path) == "text" and keep:
                    raise DataError(f"--keep {','.join(keep)}: {path} is plain text lines, "
                                    "which have no columns to keep; give csv, tsv, jsonl or "
                                    "parquet rows")

    def _kind(self, path: str) -> str:
        return detect_format(path, self.fmt)

    def estimated_rows(self) -> int | None:
        """About how many rows there are, read without parsing (for a progress bar's ETA):
        a prepared folder's or Parquet files' own counts, else the newlines of local
        uncompressed files less their header lines; None when it cannot be told cheaply."""
        if self.manifest is not None:
            return self.manifest.rows
        total = 0
        for path in self.files:
            kind = self._kind(path)
            if kind == "parquet":
                with parquet.open_parquet(path) as handle:
                    total += handle.metadata.num_rows
                continue
            if "://" in path or path.endswith(".gz") or kind == "tfrecord":
                return None
            lines = 0
            with open(path, "rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 22), b""):
                    lines += block.count(b"\n")
            total += max(0, lines - (kind in ("csv", "tsv")))
        return total

    def __iter__(self) -> Iterator[Record]:
        wanted = [*self.columns, *(c for c in self.keep if c not in self.columns)]
        if self.manifest is not None:
            yield from self._prepared()
            return
        for path in self.files:
            kind = self._kind(path)
            if kind == "parquet":
                rows = _parquet_rows(path, wanted)
            else:
                rows = stream_rows(path, wanted, fmt=kind, what=self.what,
                                   text_column=self.columns[0] if len(self.columns) == 1
                                   else None)
            for line, fields, problem in rows:
                yield self._record(path, line, fields, problem)

    def _record(self, path: str, line: int | str, fields: dict[str, Any] | None,
                problem: str | None) -> Record:
        if problem is not None:
            return Record(path, line, problem=problem)
        texts = []
        for column in self.columns:
            text, problem = _text(fields.get(column), column)
            if problem is not None:
                return Record(path, line, problem=problem)
            texts.append(text)
        return Record(path, line, tuple(texts), {c: kept_value(fields.get(c)) for c in self.keep})

    def _prepared(self) -> Iterator[Record]:
        """The rows of a prepared folder, shard by shard (``record N`` of each shard)."""
        import tensorflow as tf

        pair = len(self.columns) > 1
        if pair and not self.manifest.settings.get("text_pair_column"):
            raise DataError(f"{self.what} {self.spec}: this model reads sentence pairs; the "
                            "prepared rows hold one text")
        spec = {"text": tf.io.FixedLenFeature([], tf.string),
                "id": tf.io.FixedLenFeature([], tf.int64)}
        if pair:
            spec["text_pair"] = tf.io.FixedLenFeature([], tf.string)
        for path in self.files:
            dataset = tf.data.TFRecordDataset(path).batch(1024).map(
                lambda r: tf.io.parse_example(r, spec))
            number = 0
            for batch in dataset.as_numpy_iterator():
                for i in range(len(batch["id"])):
                    number += 1
                    fields = {k: v[i] for k, v in batch.items()}
                    yield self._record(path, f"record {number}", fields, None)


def _parquet_rows(path: str, columns: list[str]
                  ) -> Iterator[tuple[int | str, dict[str, Any] | None, str | None]]:
    """The rows of one Parquet file, a record batch at a time (``tfapp.data.parquet``), as
    ``row N`` (1-based). Kept columns may be of any type (an integer id), so only the
    columns' presence is checked here; the texts are checked row by row."""
    with parquet.open_parquet(path) as handle:
        names = handle.schema_arrow.names
        for column in columns:
            if column not in names:
                raise DataError(f"{path}: no column '{column}' in the Parquet schema (has: "
                                f"{', '.join(names) or 'nothing'}); set --text-column / --keep")
        number = 0
        for number, row in parquet.rows(handle, path, columns):
            yield f"row {number}", row, None
        if number == 0:
            yield "row 1", None, "empty file (no rows)"


def describe_files(files: list[str]) -> list[list[Any]]:
    """Each file's path, size and modification time: what says an output was made from
    the same input."""
    import tensorflow as tf

    out = []
    for path in files:
        stat = tf.io.gfile.stat(path)
        out.append([os.path.abspath(path) if "://" not in path else path, stat.length,
                    stat.mtime_nsec])
    return out


def describe_input(rows: InputRows) -> dict[str, Any]:
    """The identity of the input (its files, ``describe_files``, columns and format): a
    rerun resumes an output only over the same input."""
    return {"files": describe_files(rows.files), "columns": rows.columns, "keep": rows.keep,
            "format": rows.fmt}
