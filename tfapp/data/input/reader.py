"""The one input reader: a task's examples into the batches its model trains on.

Every task's pipeline is the same chain, built here once::

    a split's prepared files, this pipeline's own (plan.partition)
      -> raw chunks of rows, read and selected (the task's ``Examples.read``)
      -> encoded: tokenised and padded to fixed length, in parallel (``Examples.encode``),
         or replayed from the store the first pass wrote (data.snapshot / data.cache)
      -> the training stream or an evaluation pass, batched (stream.batches; grouped by
         length with a ``lengths.Grouping``)
      -> (features, labels) (``Examples.model_inputs``)
      -> finalize (options, tf.data service, prefetch)

A task describes its examples with an ``Examples`` and gets its datasets from one entry
point, ``training_inputs``: the step arithmetic (global batch, steps per pass, where a
resumed run starts) is worked out there once (``plan.plan_steps``), the length buckets
chosen, and one pipeline per input worker built.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfapp.data.input import pipeline as stages
from tfapp.data.input import stream
from tfapp.data.input.lengths import Lengths, grouping_for
from tfapp.data.input.plan import Source, StepPlan, partition, plan_steps
from tfapp.data.input.splits import SplitData
from tfapp.data.input.store import CHUNK, Store, store_root
from tfapp.data.text.bert_preprocess import FEATURE_KEYS

import tensorflow as tf

__all__ = ["Examples", "READ_CHUNK", "TrainingInputs", "read_batches", "token_storage",
           "training_inputs"]

log = logging.getLogger("tfapp.data")

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
      labels: the key of the labels the model trains on (None: it has none, the batch
        is its features).
      features: the keys of the model's inputs.
      spec: the encoded chunk's ``tf.TensorSpec`` per key besides ``id`` (``[None,
        ...]``); needed where the task's data config can store (data.snapshot /
        data.cache).
      storage: the dtype a key is stored as, where narrower than the spec's.
      key: everything besides the prepared split that decides the encoded examples (the
        tokeniser's fingerprint, lengths, label names...): a store is reused only when
        it is the same.
      describe: what the store's description records besides task, split and data.
      what: the unit a message counts in ("example", "window").
      lengths: what length buckets group the examples by (None: the task has none).
    """

    task: str
    split: SplitData
    source: Source
    read: Callable[[int], stream.ExamplesFn]
    encode: Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]]
    labels: str | None = None
    features: tuple[str, ...] = FEATURE_KEYS
    spec: dict[str, tf.TensorSpec] = field(default_factory=dict)
    storage: dict[str, tf.DType] = field(default_factory=dict)
    key: tuple = ()
    describe: dict[str, Any] = field(default_factory=dict)
    what: str = "example"
    lengths: Lengths | None = None

    def model_inputs(self, batch: dict[str, tf.Tensor]) -> Any:
        """A batch of encoded examples -> ``(features, labels)`` (or the features)."""
        features = {k: batch[k] for k in self.features}
        return (features, batch[self.labels]) if self.labels else features


def token_storage(vocab_size: int | None) -> tf.DType:
    """The narrowest dtype that stores token ids of a vocabulary of ``vocab_size``."""
    return tf.uint16 if vocab_size and vocab_size <= 1 << 16 else tf.int32


def _store(examples: Examples, data_cfg: Any, *, write: bool) -> Store:
    split = examples.split
    manifest = split.manifest
    key = hashlib.sha256(repr((
        examples.task, 2, manifest.root, manifest.to_json(), split.selector, examples.key,
        CHUNK)).encode()).hexdigest()[:16]
    spec = {**examples.spec, "id": tf.TensorSpec([None], tf.int64)}
    return Store(f"{store_root(data_cfg).rstrip('/')}/{split.name}-{key}", spec,
                 split.chunks(CHUNK), storage={k: examples.storage.get(k) for k in spec},
                 write=write, describe={"task": examples.task, "split": split.name,
                           "prepared": manifest.root, **examples.describe})


def _encoded(read: stream.ExamplesFn, encode: Callable) -> stream.ExamplesFn:
    def examples(file: tf.Tensor, index: tf.Tensor) -> tf.data.Dataset:
        return read(file, index).map(encode, num_parallel_calls=tf.data.AUTOTUNE,
                                     deterministic=True)
    return examples


def read_batches(examples: Examples, data_cfg: Any, *, training: bool,
                 plan: StepPlan | None = None, batch_size: int = 0, seed: int = 0,
                 input_context: tf.distribute.InputContext | None = None,
                 grouping: Any = None) -> tf.data.Dataset:
    """The tf.data pipeline of one split: ``(features, labels)`` batches.

    ``plan`` (``training_inputs``'s) gives the *global* batch, the steps of a pass and
    where a resumed run starts; without one, it is planned here for a global batch of
    ``batch_size`` and ``seed``. With an ``input_context`` (one per input worker) this
    pipeline reads its own files and batches ``get_per_replica_batch_size(global batch)``;
    with a ``grouping`` (``tfapp.data.input.lengths``) batches are grouped by length.
    """
    pipelines, index = 1, 0
    if input_context is not None:
        pipelines, index = input_context.num_input_pipelines, input_context.input_pipeline_id
    source = examples.source
    if plan is None:
        plan = plan_steps(source, global_batch=batch_size, pipelines=pipelines, seed=seed)
    store = None
    if store_root(data_cfg):
        part = partition(source, index, pipelines, plan.seed)
        store = _store(examples, data_cfg, write=part.element_shard is None or index == 0)
        per_file = store.examples(_encoded(examples.read(CHUNK), examples.encode))
    else:
        per_file = _encoded(examples.read(READ_CHUNK), examples.encode)
    dataset = stream.batches(source, per_file, data_cfg, plan=plan, training=training,
                             input_context=input_context, store=store, what=examples.what,
                             grouping=grouping)
    dataset = dataset.map(examples.model_inputs)
    return stages.finalize(dataset, data_cfg, examples.split.name,
                           sharded_by_context=input_context is not None, training=training)


@dataclass
class TrainingInputs:
    """A task's datasets (one pipeline per input worker), the step plan they were cut by,
    and what the training loop needs to know of them: the fields of
    ``tfapp.training.task.Inputs`` (``fields()``).
    """

    plan: StepPlan
    train: Any
    validation: Any = None
    num_train_examples: int = 0
    num_validation_examples: int = 0

    def fields(self) -> dict[str, Any]:
        """train, validation, the examples of each, the steps of a pass and of a
        validation pass. Replicas past the end of their part get empty batches
        (get_next_as_optional), so every replica runs the same number of validation steps;
        the count is always given: a distributed dataset has no known size, and fit needs
        one for validation with steps_per_execution > 1 even on one replica."""
        return {"train": self.train, "validation": self.validation,
                "num_train_examples": self.num_train_examples,
                "batches_per_pass": self.plan.steps,
                "num_validation_examples": self.num_validation_examples,
                "validation_steps": self.plan.eval_steps(self.num_validation_examples)}


def training_inputs(examples: Callable[[SplitData], Examples], train: SplitData,
                    validation: SplitData | None, data_cfg: Any, *, runtime: Any, seed: int,
                    resumed_batches: int = 0, steps_per_execution: int | None = 1,
                    after: Callable[[tf.data.Dataset, Any, StepPlan], tf.data.Dataset]
                    | None = None) -> TrainingInputs:
    """The one entry point of a task's input: its training (and validation) datasets.

    ``examples(split)`` says what the task's examples of a split are; ``runtime`` (a
    ``tfapp.runtime.Runtime``) gives the strategy, the global batch and the input
    pipelines. The step plan is worked out once, here, resumed after ``resumed_batches``
    global batches; the training examples' ``lengths`` decide the length buckets
    (``data.length_buckets``), said in the log. ``after(dataset, input_context, plan)``
    adds a task's last stage to each training pipeline (masked LM: the masks). A
    validation split without examples is left out (None).
    """
    train_examples = examples(train)
    plan = plan_steps(train_examples.source, global_batch=runtime.global_batch_size(
        data_cfg.batch_size), pipelines=runtime.input_pipelines, seed=seed,
        resumed_batches=resumed_batches)
    grouping = None
    if train_examples.lengths is not None:
        grouping, why = grouping_for(data_cfg.length_buckets, train_examples.lengths, seed,
                                     device_kind=runtime.device_kind,
                                     input_pipelines=plan.pipelines,
                                     steps_per_execution=steps_per_execution)
        log.info("data: %s", why)

    def distributed(ex: Examples, training: bool) -> Any:
        def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
            dataset = read_batches(ex, data_cfg, training=training, plan=plan,
                                   input_context=input_context, grouping=grouping)
            return after(dataset, input_context, plan) if after and training else dataset
        # One pipeline per input worker, sharded by its InputContext; each step gets one
        # per-replica batch per replica, one global batch in all.
        return runtime.strategy.distribute_datasets_from_function(dataset_fn)

    out = TrainingInputs(plan, distributed(train_examples, True),
                         num_train_examples=train_examples.source.size)
    val = examples(validation) if validation is not None else None
    if val is not None and val.source.size:
        out.validation = distributed(val, False)
        out.num_validation_examples = val.source.size
    return out
