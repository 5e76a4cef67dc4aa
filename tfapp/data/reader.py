"""The one input reader: a task's examples into the batches its model trains on.

Every task's pipeline is the same chain, built here once::

    a split's prepared files, this pipeline's own (stream.partition)
      -> raw chunks of rows, read and selected (the task's ``Examples.read``)
      -> encoded: tokenised and padded to fixed length, in parallel (``Examples.encode``),
         or replayed from the store the first pass wrote (data.snapshot / data.cache)
      -> the training stream or an evaluation pass, batched (stream.batches; grouped by
         length with a ``lengths.Grouping``)
      -> (features, labels) (``Examples.model_inputs``)
      -> finalize (options, tf.data service, prefetch)

A task describes its examples with an ``Examples``; the step arithmetic (global batch,
steps per pass, where a resumed run starts) is ``stream.plan_steps``'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfapp.data import pipeline as stages
from tfapp.data import stream
from tfapp.data.splits import SplitData
from tfapp.data.store import CHUNK, Store, store_root

import tensorflow as tf

__all__ = ["Examples", "READ_CHUNK", "read_batches", "token_storage"]

# Rows read per chunk when nothing is stored (a stored split is read in store.CHUNK rows,
# the store's unit).
READ_CHUNK = 256


@dataclass(frozen=True)
class Examples:
    """How a task reads and encodes one split's examples: all the reader needs of it.

    Attributes:
      task: the task's name (names its stores).
      split: the split read.
      source: the split as the stream counts it (examples per file).
      read: ``read(rows)`` -> ``examples(file, index)``: one file's raw examples of this
        split, in chunks of about ``rows`` rows.
      encode: a chunk of raw examples -> fixed-length features, labels and ``id``.
      model_inputs: a batch of encoded examples -> ``(features, labels)``.
      spec: the encoded chunk's ``tf.TensorSpec`` per key (``[None, ...]``); needed where
        the task's data config can store (data.snapshot / data.cache).
      storage: the dtype each key is stored as (narrower than the spec's where it fits).
      key: everything besides the prepared split that decides the encoded examples (the
        tokeniser's fingerprint, lengths, label names...): a store is reused only when
        it is the same.
      describe: what the store's description records besides task, split and data.
      what: the unit a message counts in ("example", "window").
    """

    task: str
    split: SplitData
    source: stream.Source
    read: Callable[[int], stream.ExamplesFn]
    encode: Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]]
    model_inputs: Callable[[dict[str, tf.Tensor]], Any]
    spec: dict[str, tf.TensorSpec] = field(default_factory=dict)
    storage: dict[str, tf.DType] = field(default_factory=dict)
    key: tuple = ()
    describe: dict[str, Any] = field(default_factory=dict)
    what: str = "example"


def token_storage(vocab_size: int | None) -> tf.DType:
    """The narrowest dtype that stores token ids of a vocabulary of ``vocab_size``."""
    return tf.uint16 if vocab_size and vocab_size <= 1 << 16 else tf.int32


def _store(examples: Examples, data_cfg: Any, *, write: bool) -> Store:
    split = examples.split
    manifest = split.manifest
    key = hashlib.sha256(repr((
        examples.task, 2, manifest.root, manifest.to_json(), split.selector, examples.key,
        CHUNK)).encode()).hexdigest()[:16]
    return Store(f"{store_root(data_cfg).rstrip('/')}/{split.name}-{key}", examples.spec,
                 split.chunks(CHUNK), storage=examples.storage, write=write,
                 describe={"task": examples.task, "split": split.name,
                           "prepared": manifest.root, **examples.describe})


def _encoded(read: stream.ExamplesFn, encode: Callable) -> stream.ExamplesFn:
    def examples(file: tf.Tensor, index: tf.Tensor) -> tf.data.Dataset:
        return read(file, index).map(encode, num_parallel_calls=tf.data.AUTOTUNE,
                                     deterministic=True)
    return examples


def read_batches(examples: Examples, data_cfg: Any, *, batch_size: int, training: bool,
                 seed: int, input_context: tf.distribute.InputContext | None = None,
                 start: stream.Start | None = None, grouping: Any = None) -> tf.data.Dataset:
    """The tf.data pipeline of one split: ``(features, labels)`` batches.

    ``batch_size`` is the *global* batch. With an ``input_context`` (from
    ``pipeline.distribute``) this pipeline reads its own files and batches
    ``get_per_replica_batch_size(batch_size)``. Training streams pass after pass from
    ``start`` (seeded, resumable) in whole batches (static shapes for XLA/TPU);
    evaluation keeps every example, in order. With ``data.snapshot``/``data.cache`` the
    encoded examples of each file are stored as the first pass makes them and replayed
    after. With a ``grouping`` (``tfapp.data.lengths``) batches are grouped by length and
    each is padded to its bucket's length, not the full length.
    """
    pipelines, index = 1, 0
    if input_context is not None:
        pipelines, index = input_context.num_input_pipelines, input_context.input_pipeline_id
    source = examples.source
    store = None
    if store_root(data_cfg):
        part = stream.partition(source, index, pipelines, seed)
        store = _store(examples, data_cfg, write=part.element_shard is None or index == 0)
        per_file = store.examples(_encoded(examples.read(CHUNK), examples.encode))
    else:
        per_file = _encoded(examples.read(READ_CHUNK), examples.encode)
    dataset = stream.batches(source, per_file, data_cfg, training=training, seed=seed,
                             batch_size=batch_size, input_context=input_context, start=start,
                             store=store, what=examples.what, grouping=grouping)
    dataset = dataset.map(examples.model_inputs)
    return stages.finalize(dataset, data_cfg, examples.split.name,
                           sharded_by_context=input_context is not None, deterministic=True,
                           training=training)
