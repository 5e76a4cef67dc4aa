"""Prepare input files once: rows -> TFRecord shards of ``tf.train.Example`` + a manifest.

Training streams prepared shards (``tfapp.data.input.stream``): nothing is parsed in Python or
held in memory at run time, workers read their own shards, and the manifest
(``tfapp.data.prepare.manifest``) gives every count without a pass over the data. A run given raw
files prepares them into tfapp's cache on first use (``prepared``), keyed by the files'
identity (path, size, modification time), and reuses that next time;
``python -m tfapp.prepare`` does it ahead of time into a folder of your choice, in
parallel over hosts with ``--shard i/N``.

Rows are read column-wise where they can be (CSV/TSV and Parquet of plain strings:
``rows.columnar.fast_rows``), else row by row (``rows.read.python_rows``), with the same
checks and ``FILE:LINE: problem`` messages either way under ``data.on_bad_rows`` (fail: the
first one stops; skip: counted and listed in the manifest); they become records
column-wise (``tfapp.data.prepare.records``).

Each source is prepared on its own (sources run in parallel threads): its shards
(``data/prepare/shards.py``) are written under temporary names and renamed when complete, then a
part file records them (``.parts/source-NNNNN.json``). A rerun after a kill redoes only
the sources without a part, and refuses a source whose size or modification time changed
since its part was written. The manifest is written when every source has its part.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tfapp.data.formats.files import Fallback, detect_format
from tfapp.data.prepare.manifest import (
    FORMAT_VERSION,
    MANIFEST,
    Manifest,
    ShardInfo,
    SourceInfo,
    damaged_shard,
    read_manifest,
    row_buckets,
)
from tfapp.data.prepare.records import encode_examples
from tfapp.data.prepare.shards import SHARD_BYTES, SplitWriters
from tfapp.data.rows.bad_rows import SKIP_OPTION, BadRowPolicy, BadRowReport, SourceLog
from tfapp.data.rows.columnar import RowBatch, fast_rows
from tfapp.data.rows.read import python_rows
from tfapp.data.rows.spec import RowSpec
from tfapp.data.text.tags import EntityCounts
from tfapp.errors import DataError

import numpy as np
import tensorflow as tf

__all__ = ["SOURCE_SHIFT", "Prepared", "cache_key", "merge", "prepare", "prepared"]

log = logging.getLogger("tfapp.data")

PARTS = ".parts"
# A row number is unique within its source; the source's index goes above it.
SOURCE_SHIFT = 40


def _prefetch(rows: Iterator[RowBatch]) -> Iterator[RowBatch]:
    """``rows`` read a batch ahead in a thread: parsing (which releases the GIL in pyarrow)
    overlaps the encoding and writing of the previous batch."""
    with concurrent.futures.ThreadPoolExecutor(1) as reader:
        ahead = reader.submit(next, rows, None)
        while (batch := ahead.result()) is not None:
            ahead = reader.submit(next, rows, None)
            yield batch


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
    fmt = detect_format(path, spec.format, spec.kind)
    token = uuid.uuid4().hex[:8]
    writer = SplitWriters(out, index, token, shard_bytes, spec.held_out)
    log_ = SourceLog(path, mode, split, skip_option)

    def run(rows: Iterator[RowBatch]) -> None:
        for batch in _prefetch(rows):
            ids = (np.int64(index) << SOURCE_SHIFT) | batch.lines
            buckets = row_buckets(path, batch.lines)
            records = encode_examples({**batch.columns, "id": ids, "bucket": buckets})
            writer.write(records, buckets)

    try:
        try:
            run(fast_rows(path, fmt, spec, log_))
        except Fallback as why:
            log.debug("data: %s: read row by row (%s)", path, why)
            writer.abandon()
            log_ = SourceLog(path, mode, split, skip_option)
            run(python_rows(path, fmt, spec, log_))
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
            "bad_rows": log_.report.to_dict()}


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
            skip_option: str | None = SKIP_OPTION,
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
    report = BadRowReport()
    labels: dict[str, int] = {}
    first_seen: dict[str, str] = {}
    for part in parts:
        report.merge(part["bad_rows"], split)
        for name, count in part["labels"].items():
            labels[name] = labels.get(name, 0) + count
            first_seen.setdefault(name, part["first_seen"][name])
    first_bad = str(report.examples[0]) if report.examples else None
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


def prepared(files: list[str], spec: RowSpec, *, cache: str, mode: str, split: str,
             skip_option: str | None = SKIP_OPTION) -> Prepared:
    """The manifest of ``files`` prepared into ``cache`` (one folder per ``cache_key``):
    reused when complete, else prepared now (under a lock: one process prepares, others
    wait). Bad rows recorded by a run with ``skip`` fail a run with ``fail``."""
    out = f"{cache.rstrip('/')}/{cache_key(files, spec)}"
    path = f"{out}/{MANIFEST}"
    started = time.time()
    # A complete cache is checked (shards just written are whole).
    damage = damaged_shard(read_manifest(path)) if tf.io.gfile.exists(path) else None
    if damage:
        log.warning("data: the prepared cache %s is damaged (%s); preparing it again", out,
                    damage)
    now = False
    if damage or not tf.io.gfile.exists(path):
        with _locked(out):
            if damage:
                for part in range(len(files)):
                    with contextlib.suppress(tf.errors.NotFoundError):
                        tf.io.gfile.remove(_part_path(out, part))
                tf.io.gfile.remove(path)
            if not tf.io.gfile.exists(path):
                now = True
                prepare(files, out, spec, mode=mode, split=split, skip_option=skip_option)
    manifest = read_manifest(path)
    if mode == "fail" and manifest.bad_rows.get("count"):
        first = manifest.bad_rows.get("first") or manifest.bad_rows["examples"][0]
        raise BadRowPolicy(mode, BadRowReport(), split, skip_option).error(first)
    return Prepared(manifest, now, time.time() - started)


@contextlib.contextmanager
def _locked(out: str) -> Iterator[None]:
    """An exclusive lock on preparing ``out`` (local caches; others need none: a folder
    prepared twice ends the same)."""
    if "://" in out:
        yield
        return
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out + ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
