"""Rows to score, streamed: the input of ``predict --data`` (and of the scoring API), read
in file and row order, each row with the place it came from.

The rows come through the one reader every command uses (``tfapp.data.rows.read``), or
from prepared folders (``tfapp prepare``'s shards, in the manifest's order), as ``Row``s
of kind ``inputs`` (a blank text is scored as it is). Nothing is held but the row being
read: a file of any size streams at flat memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from tfapp.data.formats.read import estimated_rows
from tfapp.data.input.parse import split_rows
from tfapp.data.input.splits import SplitData
from tfapp.data.prepare.manifest import find_manifest, read_manifest
from tfapp.data.rows.read import file_formats, iter_rows
from tfapp.data.rows.spec import Row, RowSpec, convert, kept_value
from tfapp.errors import DataError

__all__ = ["InputRows", "describe_files", "describe_input"]


class InputRows:
    """The rows of ``spec`` (paths, globs, comma-joined, or a prepared folder) holding the
    ``columns`` a model reads and the ``keep`` columns carried through.

    ``what`` names the flag in messages. Files are resolved and checked when this is made,
    so a wrong path fails before a model loads.
    """

    def __init__(self, spec: str, columns: list[str], keep: list[str], *,
                 fmt: str = "auto", what: str = "--data"):
        self.spec, self.columns, self.keep, self.fmt, self.what = spec, columns, keep, fmt, what
        self.rows = RowSpec(kind="inputs", format=fmt, text_column=columns[0],
                            text_pair_column=columns[1] if len(columns) > 1 else "")
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
            self.sources = file_formats(spec, self.rows, what)
            self.files = [path for path, _ in self.sources]
            for path, fmt in self.sources:
                if fmt == "text" and keep:
                    raise DataError(f"--keep {','.join(keep)}: {path} is plain text lines, "
                                    "which have no columns to keep; give csv, tsv, jsonl or "
                                    "parquet rows")

    def estimated_rows(self) -> int | None:
        """About how many rows there are, read without parsing (for a progress bar's ETA):
        a prepared folder's or Parquet files' own counts, else the newlines of local
        uncompressed files less their header lines; None when it cannot be told cheaply."""
        if self.manifest is not None:
            return self.manifest.rows
        counts = [estimated_rows(path, fmt) for path, fmt in self.sources]
        return None if None in counts else sum(counts)

    def __iter__(self) -> Iterator[Row]:
        if self.manifest is not None:
            yield from self._prepared()
            return
        yield from iter_rows(self.sources, self.rows, split="test", kept=self.keep)

    def _prepared(self) -> Iterator[Row]:
        """The rows of a prepared folder, shard by shard (``record N`` of each shard)."""
        import tensorflow as tf

        pair = len(self.columns) > 1
        if pair and not self.manifest.settings.get("text_pair_column"):
            raise DataError(f"{self.what} {self.spec}: this model reads sentence pairs; the "
                            "prepared rows hold one text")
        texts = ["text", "text_pair"] if pair else ["text"]
        rows = split_rows(SplitData("input", self.manifest),
                          {k: tf.io.FixedLenFeature([], tf.string) for k in texts}, 1024)
        for j, path in enumerate(self.files):
            dataset = rows(tf.constant(path), tf.constant(j, tf.int64))
            number = 0
            for batch in dataset.as_numpy_iterator():
                for i in range(len(batch["id"])):
                    number += 1
                    fields = {k: v[i] for k, v in batch.items()}
                    problem, values = convert(fields, self.rows)
                    if problem is not None:
                        yield Row(path, f"record {number}", problem=problem)
                    else:
                        yield Row(path, f"record {number}", values,
                                  {c: kept_value(fields.get(c)) for c in self.keep})


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
