"""A split's prepared rows as tf.data reads them, once for every task: parsed from its
shard files a chunk at a time, only the rows of the split (the held-out filter:
``SplitSelector``'s buckets), and what a task works out from them once and caches: the
per-file counts (one pass) and a sample of example lengths (length buckets).

A prepared record holds the row's features (``RowSpec.features``), its ``id`` and its
``bucket``; a task names the features it reads and, with ``select``, makes its chunk of
them and says which rows it keeps (known labels, lines left after cleaning...).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfapp.atomic import read_state, write_text
from tfapp.cachedir import usable_cache_dir
from tfapp.data.input.splits import SplitData
from tfapp.data.input.stream import ExamplesFn
from tfapp.data.prepare.manifest import BUCKETS

import numpy as np
import tensorflow as tf

__all__ = ["cached_counts", "cached_lengths", "split_rows"]

Chunk = dict[str, tf.Tensor]


def split_rows(split: SplitData, features: dict[str, Any], chunk: int,
               select: Callable[[Chunk], tuple[Chunk, tf.Tensor | None]] | None = None
               ) -> ExamplesFn:
    """``rows(file, index)``: the rows of one shard file that belong to ``split``, in
    chunks (the rows of each parsed batch of ``chunk`` records): ``features`` (name ->
    ``tf.io`` feature) and ``id``, or what ``select(parsed rows) -> (chunk, keep)`` makes
    of them, ``keep`` the rows it keeps (None: all)."""
    spec = {**features, "id": tf.io.FixedLenFeature([], tf.int64),
            "bucket": tf.io.FixedLenFeature([], tf.int64)}
    selector = split.selector

    def parse(records: tf.Tensor) -> Chunk:
        rows = tf.io.parse_example(records, spec)
        if select is None:
            out, keep = {k: rows[k] for k in (*features, "id")}, None
        else:
            out, keep = select(rows)
        if not selector.everything:
            rotated = (rows["bucket"] + selector.rotation) % BUCKETS
            mine = (rotated >= selector.low) & (rotated < selector.high)
            keep = mine if keep is None else keep & mine
        if keep is None:
            return out
        return {k: tf.ragged.boolean_mask(v, keep) for k, v in out.items()}

    def examples(file: tf.Tensor, index: tf.Tensor) -> tf.data.Dataset:
        del index
        return tf.data.TFRecordDataset(file).batch(chunk).map(
            parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    return examples


def cached_counts(name: str, split: SplitData, key: Any, examples: ExamplesFn,
                  measure: Callable[[Chunk], tf.Tensor]) -> np.ndarray:
    """``measure`` (a chunk -> int64 counts ``[k]``) summed over each file of ``split``
    (``[files, k]``, ``examples`` reading the files): one pass, cached in tfapp's cache
    folder by what decides it (the prepared data, the split's rows, and ``key``: the
    tokeniser, the labels, the lengths ...) so a later run of the same data reads it."""
    def count() -> list:
        counts = []
        for j, file in enumerate(split.files()):
            chunks = examples(tf.constant(file), tf.constant(j, tf.int64)).map(
                measure, num_parallel_calls=tf.data.AUTOTUNE)
            counts.append(sum((np.asarray(c, np.int64) for c in chunks.as_numpy_iterator()),
                              np.int64(0)).tolist())
        return counts

    counts = _cached("counts", name, split, key, count)
    return np.asarray(counts, np.int64).reshape(len(split.files()), -1)


def cached_lengths(name: str, split: SplitData, key: Any, sample: Callable[[], np.ndarray]
                   ) -> np.ndarray:
    """``sample()`` (the lengths of some of ``split``'s examples, that length buckets are
    placed by), cached in tfapp's cache folder as ``cached_counts`` is, by what decides
    it: a later run (a tune trial, a run of the same data) reads it instead of tokenising
    the examples again. ``key`` must decide the sample as the Examples' key decides the
    encoded examples."""
    lengths = _cached("lengths", name, split, key,
                      lambda: np.asarray(sample(), np.int64).tolist())
    return np.asarray(lengths, np.int64)


def _cached(kind: str, name: str, split: SplitData, key: Any,
            compute: Callable[[], list]) -> list:
    """``compute()``, or what a run of the same data and ``key`` stored for ``kind``."""
    path = _path(kind, name, split, key)
    cached = read_state(path, f"{name} {kind}") if path.is_file() else None
    if cached is None:
        cached = {kind: compute()}
        write_text(path, json.dumps(cached) + "\n")
    return cached[kind]


def _path(folder: str, name: str, split: SplitData, key: Any) -> Path:
    digest = hashlib.sha256(repr((name, split.manifest.root, split.manifest.to_json(),
                                  split.selector, key)).encode()).hexdigest()[:16]
    return usable_cache_dir() / folder / f"{name}-{split.name}-{digest}.json"
