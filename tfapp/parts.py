"""Rows written as they come, in part files that appear whole: the output of ``predict
--data ... --output OUT``.

``OUT`` ends in ``.jsonl``, ``.csv`` or ``.parquet``. Written as a file, its rows go first
into part files in ``OUT.parts/`` and are joined into ``OUT`` (written whole, then renamed)
when every part is there; written as a folder (``OUT`` ending in ``/``, as
``preds.parquet/``), the part files are the output. Part ``k`` holds the rows of input
records ``[k * part_rows, (k + 1) * part_rows)``, in input order, and is written to a
temporary name and renamed: a reader (or a rerun after a kill) sees a part whole or not
at all. A rerun skips the parts that are there, so each input row is written once; and
several processes (``--shard I/N``) can fill one folder, each writing its own parts.

The folder's marker (``_tfapp_output.json``) records the job (model, input, columns,
part size, format): a rerun resumes only the same job, and a folder or file of anything
else is refused, never overwritten.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfapp import killpoints
from tfapp.atomic import atomic_open, read_state, remove_leftovers, write_bytes, write_text
from tfapp.errors import ConfigError

__all__ = ["FORMATS", "MARKER", "SUCCESS", "Output", "RowParts", "encode", "flat_row",
           "keep_columns"]

FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
MARKER = "_tfapp_output.json"
SUCCESS = "_SUCCESS"
_WRITING = re.compile(r"^\..+\.tmp$")  # atomic.write_*'s temporary names
_PART = re.compile(r"^part-(\d{6})\.(jsonl|csv|parquet)$")


def keep_columns(text: str | None) -> list[str]:
    """The columns ``--keep`` names, in order (blanks between commas left out)."""
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def flat_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as one CSV line holds it: a dict value becomes a column per key
    (``probabilities.positive``), a list value its JSON text (NER's entities)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        elif isinstance(value, list):
            out[key] = json.dumps(value, ensure_ascii=False)
        else:
            out[key] = value
    return out


def encode(rows: Sequence[dict[str, Any]], fmt: str) -> bytes:
    """The bytes of one part file of ``rows`` in ``fmt`` (a CSV part has its header)."""
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    if fmt == "csv":
        if not rows:
            return b""
        text = io.StringIO()
        flat = [flat_row(r) for r in rows]
        writer = csv.DictWriter(text, fieldnames=list(flat[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(flat)
        return text.getvalue().encode()
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(list(rows)), sink)
    return sink.getvalue()


class Output:
    """Where a scoring job writes (see the module docstring): ``open`` checks (or makes)
    the folder and says which parts are done, ``write`` adds a part, ``finish`` joins the
    parts into ``OUT`` once all are there."""

    def __init__(self, output: str, job: dict[str, Any]):
        self.given, self.job = output, job
        folder = output.endswith(("/", os.sep))
        path = Path(output.rstrip("/" + os.sep))
        self.fmt = FORMATS.get(path.suffix.lower())
        if self.fmt is None or "://" in output:
            raise ConfigError(f"--output {output}: give a local path ending in "
                              f"{', '.join(FORMATS)} (a file), or such a name ending in / for "
                              "a folder of part files (preds.parquet/)")
        self.file = None if folder else path
        self.folder = path if folder else path.with_name(path.name + ".parts")
        #: ``open`` found the output already complete (joined before a kill)
        self.complete = False

    def _refuse(self, why: str) -> ConfigError:
        return ConfigError(f"--output {self.given}: {why}; nothing was written or "
                           "overwritten; give another --output, or remove it yourself")

    def precheck(self) -> None:
        """The refusals that need no job (a file that exists, a folder of someone else's
        files), before anything slow: a command checks them before it loads a model."""
        marker = self.folder / MARKER
        if self.file is not None and self.file.exists() and not marker.is_file():
            raise self._refuse("the file exists")
        if self.folder.exists() and not self.folder.is_dir():
            raise self._refuse(f"{self.folder} is a file, not a folder of parts")
        if self.folder.is_dir() and not marker.is_file() and any(
                not _WRITING.match(p.name) for p in self.folder.iterdir()):
            raise self._refuse(f"{self.folder} holds files that tfapp did not write")

    def open(self, *, sole_writer: bool) -> set[int]:
        """The parts already written for this job; makes the folder and its marker for a
        new one. Refuses an ``OUT`` that holds something else, or another job's output.
        ``sole_writer``: no other process writes here now (the leftovers of a killed
        write can be removed)."""
        marker = read_state(self.folder / MARKER, "the output marker") \
            if (self.folder / MARKER).is_file() else None
        if self.file is not None and self.file.exists():
            if marker is not None and marker.get("joined") and marker.get("job") == self.job:
                shutil.rmtree(self.folder, ignore_errors=True)  # a kill after the join
                self.complete = True
                return set()
            raise self._refuse("the file exists")
        if self.folder.exists() and not self.folder.is_dir():
            raise self._refuse(f"{self.folder} is a file, not a folder of parts")
        if marker is None:
            # Another shard's marker being written (a temporary name) is no stranger's file.
            if self.folder.is_dir() and any(not _WRITING.match(p.name)
                                            for p in self.folder.iterdir()):
                raise self._refuse(f"{self.folder} holds files that tfapp did not write")
            self.folder.mkdir(parents=True, exist_ok=True)
            write_text(self.folder / MARKER, json.dumps({"job": self.job}, indent=1) + "\n")
            return set()
        if marker.get("job") != self.job:
            old, new = marker.get("job") or {}, self.job
            differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            raise self._refuse(f"{self.folder} holds the output of another job (its "
                               f"{', '.join(differ) or 'marker'} differ from this one's)")
        if sole_writer:
            remove_leftovers(self.folder)
        return self.done()

    def done(self) -> set[int]:
        """The indexes of the parts written so far (by any process)."""
        return {int(m.group(1)) for name in os.listdir(self.folder)
                if (m := _PART.match(name)) and m.group(2) == self.fmt}

    def part(self, index: int) -> Path:
        return self.folder / f"part-{index:06d}.{self.fmt}"

    def write(self, index: int, rows: Sequence[dict[str, Any]]) -> None:
        """Part ``index`` of ``rows``, whole (a temporary file renamed into place)."""
        killpoints.reached("predict-part")  # the crash test's SIGKILL between parts
        write_bytes(self.part(index), encode(rows, self.fmt))

    def finish(self, parts: int) -> bool:
        """When all ``parts`` are there: join them into ``OUT`` (a file) or mark the folder
        complete (``_SUCCESS``); returns whether the output is complete."""
        if not set(range(parts)) <= self.done():
            return False
        if self.file is None:
            write_text(self.folder / SUCCESS, json.dumps({"parts": parts}) + "\n")
            return True
        paths = [self.part(k) for k in range(parts)]
        if self.fmt == "parquet":
            self._join_parquet(paths)
        else:
            with atomic_open(self.file, newline="") as out:
                header = None
                for path in paths:
                    text = path.read_text(encoding="utf-8")
                    if self.fmt == "csv" and text:
                        first, _, text = text.partition("\n")
                        if header is None:
                            header = first
                            out.write(first + "\n")
                        elif first != header:
                            raise ConfigError(f"{path}: its columns ({first}) differ from "
                                              f"the first part's ({header})")
                    out.write(text)
        write_text(self.folder / MARKER, json.dumps({"job": self.job, "joined": True}) + "\n")
        shutil.rmtree(self.folder, ignore_errors=True)
        return True

    def _join_parquet(self, paths: list[Path]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schemas = [pq.read_schema(p) for p in paths]
        schema = pa.unify_schemas([s for s in schemas if s.names] or [pa.schema([])],
                                  promote_options="permissive")
        tmp = self.file.with_name(f".{self.file.name}.join.tmp")
        with pq.ParquetWriter(tmp, schema) as writer:
            for path, own in zip(paths, schemas, strict=True):
                if own.names:
                    writer.write_table(pq.read_table(path).cast(schema))
        os.replace(tmp, self.file)


class RowParts:
    """Rows of a command that reads its whole input once, in order (``evaluate
    --output``: its metrics need every row, so a rerun reads from the start), written to
    ``out`` as they come: part ``k`` is output rows ``[k * part_rows, (k + 1) *
    part_rows)``. A rerun of the same job after a kill does not write again the parts
    that are there (the same input gives the same parts). ``add`` takes each batch's
    rows, ``close`` writes the last part and joins or marks the output. ``out`` is opened
    when the first part is written: a command refused before then (a flag its model does
    not take, a bad row) leaves no folder whose job a corrected rerun would not match."""

    def __init__(self, out: Output, part_rows: int):
        self.out, self.part_rows = out, part_rows
        self.done: set[int] | None = None
        self.buffer: list[dict[str, Any]] = []
        self.parts = self.rows = 0

    def add(self, rows: Sequence[dict[str, Any]]) -> None:
        self.buffer.extend(rows)
        self.rows += len(rows)
        while len(self.buffer) >= self.part_rows:
            self._write(self.buffer[:self.part_rows])
            del self.buffer[:self.part_rows]

    def _write(self, rows: Sequence[dict[str, Any]]) -> None:
        if self.done is None:
            self.done = self.out.open(sole_writer=True)
        if not self.out.complete and self.parts not in self.done:
            self.out.write(self.parts, rows)
        self.parts += 1

    def close(self) -> bool:
        """The last rows written; returns whether the output is complete (joined into
        ``OUT``, or the folder marked)."""
        if self.buffer or not self.parts:
            self._write(self.buffer)
            self.buffer = []
        return True if self.out.complete else self.out.finish(self.parts)
