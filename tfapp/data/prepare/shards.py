"""Prepared records into TFRecord shards: each shard's rows gathered in memory, permuted,
written under a temporary name and renamed when complete, with its size, checksum and
bucket counts for the manifest (``tfapp.data.prepare.manifest``); the rows of held-out splits in
shards of their own when a spec says so.
"""

from __future__ import annotations

import contextlib

from tfapp.data.prepare.manifest import BUCKETS, ShardInfo, file_checksum, held_out_selectors

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import tensorflow as tf

__all__ = ["SHARD_BYTES", "SPLITS", "ShardWriter", "SplitWriters"]

#: what a shard holds: every split's rows (""), or one split's
SPLITS = ("", "train", "validation", "test")
#: shards are cut near this size, so files (the unit workers shard by) stay many
SHARD_BYTES = 64 << 20


class ShardWriter:
    """Records of one source into shards of about ``SHARD_BYTES``: each shard's rows are
    gathered in memory (one shard at a time), permuted, written under a temporary name
    and renamed when complete, with its size and checksum for the manifest."""

    def __init__(self, out: str, source: int, token: str, shard_bytes: int = SHARD_BYTES,
                 split: str = ""):
        self.out, self.source, self.token = out, source, token
        self.shard_bytes = shard_bytes
        self.split = split  # "": the rows of every split
        self.shards: list[ShardInfo] = []
        self._pending: list[bytes] = []  # the rows of the shard being filled
        self._tmp = ""
        self._bytes = 0
        self._buckets = np.zeros(BUCKETS, np.int64)

    def _name(self) -> str:
        split = f"{self.split}-" if self.split else ""
        return f"{self.source:05d}-{split}{len(self.shards):04d}.tfrecord"

    def write(self, records: pa.Array, buckets: np.ndarray) -> None:
        sizes = pc.binary_length(records).to_numpy(zero_copy_only=False)
        data = records.to_pylist()
        start = 0
        while start < len(data):
            room = self.shard_bytes - self._bytes
            end = start + max(1, int(np.searchsorted(np.cumsum(sizes[start:]), room)))
            end = min(end, len(data))
            self._pending.extend(data[start:end])
            self._bytes += int(sizes[start:end].sum())
            self._buckets += np.bincount(buckets[start:end], minlength=BUCKETS)
            start = end
            if self._bytes >= self.shard_bytes:
                self._close()

    def _close(self) -> None:
        """Write the pending rows as one shard, in an order drawn from the shard's name:
        a source sorted by label, date or length never reaches a shard sorted."""
        if not self._pending:
            return
        name = self._name()
        tmp = f"{self.out}/.{name}.tmp-{self.token}"
        self._tmp = tmp
        order = np.random.default_rng(
            [self.source, len(self.shards), SPLITS.index(self.split)]).permutation(
            len(self._pending))
        with tf.io.TFRecordWriter(tmp) as writer:
            for i in order:
                writer.write(self._pending[i])
        size, crc = file_checksum(tmp)
        tf.io.gfile.rename(tmp, f"{self.out}/{name}", overwrite=True)
        self.shards.append(ShardInfo(name, self.source, len(self._pending),
                                     self._buckets.tolist(), size, crc, self.split))
        self._pending, self._bytes = [], 0
        self._buckets = np.zeros(BUCKETS, np.int64)

    def finish(self) -> list[ShardInfo]:
        self._close()
        return self.shards

    def abandon(self) -> None:
        if self._tmp:
            with contextlib.suppress(tf.errors.OpError):
                tf.io.gfile.remove(self._tmp)
        for shard in self.shards:
            with contextlib.suppress(tf.errors.OpError):
                tf.io.gfile.remove(f"{self.out}/{shard.file}")
        self.__init__(self.out, self.source, self.token, self.shard_bytes, self.split)


class SplitWriters:
    """One ``ShardWriter`` per split when the rows of held-out splits go to shards of
    their own (``RowSpec.held_out``), else one for all rows; the same interface."""

    def __init__(self, out: str, source: int, token: str, shard_bytes: int,
                 held_out: tuple):
        self.selectors = held_out_selectors(*held_out) if held_out else {}
        self.writers = {name: ShardWriter(out, source, token, shard_bytes, name)
                        for name in (self.selectors or [""])}

    def write(self, records: pa.Array, buckets: np.ndarray) -> None:
        if not self.selectors:
            self.writers[""].write(records, buckets)
            return
        for name, selector in self.selectors.items():
            mine = selector.mask()[buckets]
            if mine.any():
                self.writers[name].write(records.filter(pa.array(mine)), buckets[mine])

    def finish(self) -> list[ShardInfo]:
        return [s for w in self.writers.values() for s in w.finish()]

    def abandon(self) -> None:
        for w in self.writers.values():
            w.abandon()
