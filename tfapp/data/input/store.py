"""Preprocessed examples kept per shard file and replayed: ``data.snapshot`` and
``data.cache``.

A store is a folder (local, ``gs://``, or ``ram://`` for ``data.cache=memory``) holding,
for each shard file of a split, the task's preprocessed examples of that file (token
ids, windows...) in chunks, in file order. A training or evaluation stream reads a file's
chunks when they are complete and the shard itself otherwise; the first pass over a
file writes its chunks *as the run reads it* (a ``tf.io.write_file`` in the pipeline, so
it works the same in every worker and under the tf.data service) and marks the file done
when its last chunk is written. A file whose pass is cut short (the end of a pass, a kill)
stays unmarked and is written again the next time it is read whole. So a store never
holds the data in memory, a replay opens no source file, and an interrupted run loses
only the file it was in.

Each chunk is one file: ``serialize_tensor`` of each component, after a header of their
byte lengths. Integer components are stored in the narrowest type that holds them (the
task says which: token ids under 65536 as uint16, masks as uint8), halving what a replay
reads, and widened back when read.

Files are keyed by the caller (``key``: the prepared data's identity, the split, the
preprocessing), so a changed vocabulary or sequence length never replays stale ids.
Writers name their chunk folder with a token of their own and the ``.done`` marker names
the folder that is complete, so two runs writing one store at once never mix chunks.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import tensorflow as tf

__all__ = ["Store", "CHUNK", "store_root"]

log = logging.getLogger("tfapp.data")

#: source rows per stored chunk (replay reads whole chunks: 1024 read ~2x faster than 256)
CHUNK = 1024


def store_root(data_cfg: Any) -> str:
    """Where ``data.snapshot`` / ``data.cache`` keep preprocessed examples ("": nowhere):
    the snapshot folder, TensorFlow's in-memory file system for ``cache=memory``, or the
    cache's path prefix."""
    if data_cfg.snapshot:
        return data_cfg.snapshot
    if data_cfg.cache == "memory":
        return "ram://tfapp-cache"
    return data_cfg.cache


class Store:
    """The stored chunks of one split's preprocessed examples (module docstring).

    Args:
      root: the store's folder.
      spec: element spec of a chunk (a nest of ``tf.TensorSpec`` ``[None, ...]``).
      storage: the dtype each component is stored as (same nest; None: as it is).
      chunks: chunks of each shard file (``ceil(rows / CHUNK)``), in manifest order.
      write: whether this pipeline writes missing files (False: it reads them cold).
      describe: what the store holds, written to ``store.json`` for people.
    """

    def __init__(self, root: str, spec: Any, chunks: list[int], *, storage: Any = None,
                 write: bool = True, describe: dict | None = None):
        self.root = root.rstrip("/")
        self.spec = spec
        flat = tf.nest.flatten(spec)
        self.storage = [s.dtype if d is None else tf.as_dtype(d) for s, d in zip(
            flat, tf.nest.flatten(storage) if storage is not None else [None] * len(flat),
            strict=True)]
        self.chunks = chunks
        self.write = write
        self.token = uuid.uuid4().hex[:8]
        tf.io.gfile.makedirs(self.root)
        header = tf.io.serialize_tensor(tf.zeros([len(flat)], tf.int64))
        self._header = int(tf.strings.length(header))
        done = self.done()
        log.info("data: %s: %d of %d file(s) stored%s", self.root, done, len(chunks),
                 "" if done == len(chunks) else "; the rest is stored as this run reads it")
        if describe is not None:
            info = f"{self.root}/store.json"
            if not tf.io.gfile.exists(info):
                with tf.io.gfile.GFile(info, "w") as fh:
                    fh.write(json.dumps(describe, indent=1, default=str) + "\n")

    def done(self) -> int:
        """How many files are stored complete."""
        return len(tf.io.gfile.glob(f"{self.root}/*.done"))

    # -- encoding ------------------------------------------------------------------
    def _encode(self, chunk: Any) -> tf.Tensor:
        parts = [tf.io.serialize_tensor(tf.cast(t, d))
                 for t, d in zip(tf.nest.flatten(chunk), self.storage, strict=True)]
        lengths = tf.cast(tf.stack([tf.strings.length(p) for p in parts]), tf.int64)
        return tf.strings.join([tf.io.serialize_tensor(lengths), *parts])

    def _decode(self, data: tf.Tensor) -> Any:
        flat = tf.nest.flatten(self.spec)
        lengths = tf.io.parse_tensor(tf.strings.substr(data, 0, self._header), tf.int64)
        lengths.set_shape([len(flat)])
        offsets = self._header + tf.concat([[0], tf.cumsum(lengths)], 0)
        out = []
        for k, (spec, dtype) in enumerate(zip(flat, self.storage, strict=True)):
            value = tf.io.parse_tensor(tf.strings.substr(data, offsets[k], lengths[k]), dtype)
            value = tf.cast(value, spec.dtype)
            value.set_shape(spec.shape)
            out.append(value)
        return tf.nest.pack_sequence_as(self.spec, out)

    # -- the examples of one file ------------------------------------------------------
    def examples(self, cold: Callable[[tf.Tensor, tf.Tensor], tf.data.Dataset]
                 ) -> Callable[[tf.Tensor, tf.Tensor], tf.data.Dataset]:
        """``examples(file, index)`` for ``stream``: the file's stored chunks when complete,
        else ``cold(file, index)`` (its chunks, computed), written as they pass when this
        store writes; in chunks either way."""
        chunks = tf.constant(self.chunks or [0], tf.int64)
        root, token = self.root, self.token

        def marker(index):
            return root + "/" + tf.strings.as_string(index, width=5, fill="0") + ".done"

        def replay(index):
            folder = root + "/" + tf.io.read_file(marker(index))
            names = folder + "/chunk-" + tf.strings.as_string(
                tf.range(tf.gather(chunks, index)), width=6, fill="0")
            return tf.data.Dataset.from_tensor_slices(names).map(
                lambda name: self._decode(tf.io.read_file(name)),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

        def computed(file, index):
            data = cold(file, index)
            if not self.write:
                return data
            folder_name = tf.strings.as_string(index, width=5, fill="0") + "-" + token
            folder = root + "/" + folder_name
            last = tf.gather(chunks, index) - 1

            def save(k, chunk):
                name = folder + "/chunk-" + tf.strings.as_string(k, width=6, fill="0")
                written = tf.io.write_file(name, self._encode(chunk))
                def mark():
                    # The marker goes in after the last chunk: a file is done or not at all.
                    with tf.control_dependencies([written,
                                                  tf.io.write_file(marker(index), folder_name)]):
                        return tf.constant(True)

                done = tf.cond(tf.equal(k, last), mark, lambda: tf.constant(False))
                with tf.control_dependencies([written, done]):
                    return tf.nest.map_structure(tf.identity, chunk)

            return data.enumerate().map(save)

        def examples(file, index):
            stored = tf.cast(tf.size(tf.io.matching_files(marker(index))) > 0, tf.int64)
            return (tf.data.Dataset.range(stored).flat_map(lambda _: replay(index))
                    .concatenate(tf.data.Dataset.range(1 - stored).flat_map(
                        lambda _: computed(file, index))))

        return examples
