"""Text-classification inputs: splits from files, and the tf.data pipeline that feeds BERT.

The classifier task calls, in order::

    splits = load_classification_splits(cfg.data, seed=cfg.runtime.seed,
                                        label_vocab_path=run_dir / "labels.json")
    preprocess = make_bert_preprocess_fn(hub_preprocessor=..., vocab_file=..., seq_length=...)
    train = distribute(strategy, lambda ctx: make_classification_dataset(
        splits.train, preprocess, cfg.data, batch_size=global_batch, training=True,
        seed=cfg.runtime.seed, input_context=ctx))

Elements are ``(features, labels)``: ``features`` a dict of int32 ``[batch, seq_length]``
``input_word_ids`` / ``input_mask`` / ``input_type_ids``; ``labels`` int32 ``[batch]`` or,
for multi-label data, float32 multi-hot ``[batch, num_classes]``. Strings never leave the
host: tokenisation runs in tf.data (no strings on TPU).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfapp.config import DataConfig
from tfapp.data import pipeline as stages
from tfapp.data.errors import DataError
from tfapp.data.sources import (
    BadRowReport,
    ExampleSet,
    LabelVocab,
    demo_file,
    encode_examples,
    held_out,
    read_examples,
    read_label_vocab,
    write_label_vocab,
)

import numpy as np
import tensorflow as tf

__all__ = ["ClassificationSplits", "load_classification_splits", "make_classification_dataset",
           "resolve_demo"]

log = logging.getLogger("tfapp.data")

# Examples tokenised per map call (rounded to whole batches): amortises per-call overhead.
PREPROCESS_CHUNK = 256


@dataclass
class ClassificationSplits:
    """The splits of a classification dataset and facts about its labels.

    Attributes:
      train: training examples.
      validation: validation examples (own files or a seeded split of train), or None.
      test: test examples, or None.
      label_names: label names in id order (also in labels.json).
      multi_label: labels are multi-hot rows (sigmoid per class) instead of class ids.
      report: rows dropped with on_bad_rows=skip (count and first few).
      label_vocab_path: where labels.json was written or read, if anywhere.
    """

    train: ExampleSet
    validation: ExampleSet | None
    test: ExampleSet | None
    label_names: list[str]
    multi_label: bool
    report: BadRowReport = field(default_factory=BadRowReport)
    label_vocab_path: Path | None = None

    @property
    def num_classes(self) -> int:
        return len(self.label_names)


def resolve_demo(data_cfg: DataConfig) -> tuple[str, str, str]:
    """(train, validation, test) file specs with ``demo`` mapped to the shipped CSVs.

    ``train_files: demo`` also fills empty validation/test specs with the demo's own
    validation and test files, so the default run evaluates on held-out data.
    """
    train, validation, test = data_cfg.train_files, data_cfg.validation_files, data_cfg.test_files
    if train.strip() == "demo":
        train = demo_file("train")
        validation = validation or demo_file("validation")
        test = test or demo_file("test")
    validation = demo_file("validation") if validation.strip() == "demo" else validation
    test = demo_file("test") if test.strip() == "demo" else test
    return train, validation, test


def load_classification_splits(data_cfg: DataConfig, seed: int,
                               label_vocab_path: Path | str | None = None, *,
                               keep_vocab: bool = True) -> ClassificationSplits:
    """Read, check and label-encode the train/validation/test splits.

    The label vocabulary comes from ``label_vocab_path`` when that file exists and
    ``keep_vocab`` (a resumed run keeps its label ids), else it is built from the training
    labels and written there (a run that starts over takes its data's labels, not those an
    earlier run left).
    Without validation files, a seeded ``validation_split`` fraction of train is held out.
    Bad rows fail or are skipped per ``data.on_bad_rows``; the skip report is logged here,
    at the end of the data pass, and returned in ``.report``.
    """
    if data_cfg.format == "tfds" and data_cfg.train_files == "demo":
        raise DataError("data.format=tfds needs data.train_files=NAME[:SPLIT], not 'demo'")
    train_spec, val_spec, test_spec = resolve_demo(data_cfg)
    if data_cfg.format == "tfds":
        train_spec = train_spec if ":" in train_spec else f"{train_spec}:train"
        name = train_spec.split(":")[0]
        val_spec = val_spec if not val_spec or ":" in val_spec else f"{name}:{val_spec}"
        test_spec = test_spec if not test_spec or ":" in test_spec else f"{name}:{test_spec}"
    mode, report = data_cfg.on_bad_rows, BadRowReport()

    raw_train = read_examples(train_spec, data_cfg, split="train", mode=mode, report=report)
    path = Path(label_vocab_path) if label_vocab_path else None
    if path is not None and keep_vocab and path.exists():
        vocab = read_label_vocab(path)
        if vocab.multi_label != data_cfg.multi_label:
            raise DataError(f"{path}: multi_label={vocab.multi_label} but data.multi_label="
                            f"{data_cfg.multi_label}; use a new run name or delete labels.json")
        known_from = f"{path}"
    else:
        vocab = LabelVocab.from_examples(raw_train, data_cfg.multi_label)
        if path is not None:
            write_label_vocab(vocab, path)
        known_from = "the training data"
    train = encode_examples(raw_train, vocab, split="train", mode=mode, report=report,
                            known_from=known_from)

    validation = test = None
    if not test_spec and data_cfg.test_split > 0:  # carved first: validation never sees it
        train, test = _split(train, data_cfg.test_split, seed + 1, "test")
    if val_spec:
        raw = read_examples(val_spec, data_cfg, split="validation", mode=mode, report=report)
        validation = encode_examples(raw, vocab, split="validation", mode=mode, report=report,
                                     known_from="the training data")
    elif data_cfg.validation_split > 0:
        train, validation = _split(train, data_cfg.validation_split, seed, "validation")
    if test_spec:
        raw = read_examples(test_spec, data_cfg, split="test", mode=mode, report=report)
        test = encode_examples(raw, vocab, split="test", mode=mode, report=report,
                               known_from="the training data")

    if report.count:
        log.warning("data: %s", report.summary())
    log.info("data: %d train / %d validation / %d test examples, %d labels%s",
             len(train), len(validation) if validation else 0, len(test) if test else 0,
             len(vocab.names), " (multi-label)" if vocab.multi_label else "")
    return ClassificationSplits(train, validation, test, vocab.names, vocab.multi_label,
                                report, path)


def _split(examples: ExampleSet, fraction: float, seed: int, split: str
           ) -> tuple[ExampleSet, ExampleSet]:
    """(rest of train, a seeded ``fraction`` of it as ``split``)."""
    kept, held = held_out(len(examples), fraction, seed, split)
    return examples.subset(kept, "train"), examples.subset(held, split)


def _preprocess_fingerprint(preprocess_fn: Callable) -> str:
    fp = getattr(preprocess_fn, "fingerprint", None)
    if fp:
        return str(fp)
    log.warning("data: the preprocess function has no .fingerprint; snapshots/caches are "
                "keyed by its name only and will not notice changes inside it")
    module = getattr(preprocess_fn, "__module__", "")
    return f"{module}.{getattr(preprocess_fn, '__qualname__', repr(preprocess_fn))}"


_NARROW_KEYS = ("input_mask", "input_type_ids")


def _narrow(features, labels):
    return {k: tf.cast(v, tf.uint8) if k in _NARROW_KEYS else v
            for k, v in features.items()}, labels


def make_classification_dataset(examples: ExampleSet, preprocess_fn: Callable[..., dict],
                                data_cfg: DataConfig, *, batch_size: int, training: bool,
                                seed: int,
                                input_context: tf.distribute.InputContext | None = None
                                ) -> tf.data.Dataset:
    """The tf.data pipeline of one split: ``(features, labels)`` batches.

    ``batch_size`` is the *global* batch. With an ``input_context`` (from
    ``distribute``), this pipeline reads only shard ``input_pipeline_id`` of
    ``num_input_pipelines`` and batches ``get_per_replica_batch_size(batch_size)``.
    Training batches drop the remainder (static shapes for XLA/TPU) and are shuffled with
    ``seed``; evaluation batches keep every example in order.
    """
    part = stages.local_shard(input_context, len(examples), batch_size, training=training,
                              what=f"the {examples.name} split")
    n_shards, shard, local_batch, n_local = part.count, part.index, part.batch, part.size

    # Tokenise several batches per call: per-call overhead amortised, then ``rebatch``
    # splits the chunk into batches without touching single examples.
    stored = bool(data_cfg.snapshot or data_cfg.cache)
    chunk = local_batch * max(1, (stages.STORE_BLOCK if stored else PREPROCESS_CHUNK)
                              // local_batch)
    shuffle = training and data_cfg.shuffle_buffer > 0
    # Evaluation keeps example order (predictions line up with the rows); training may
    # trade order for throughput unless data.deterministic asks for reproducibility.
    ordered = data_cfg.deterministic or not training
    deterministic = True if ordered else None

    order = np.arange(len(examples))
    if stored and training:
        # Stored blocks are fixed; a fixed permutation (seed 0, part of the key) makes each
        # block a random sample of the data even when the file is sorted by label.
        order = np.random.default_rng(0).permutation(len(examples))
    order = order[shard::n_shards]
    columns: dict[str, Any] = {"text": tf.constant([examples.texts[i] for i in order],
                                                   tf.string)}
    if examples.text_pairs is not None:
        columns["text_pair"] = tf.constant([examples.text_pairs[i] for i in order], tf.string)
    columns["label"] = tf.constant(examples.labels[order])
    dataset = tf.data.Dataset.from_tensor_slices(columns)

    def preprocess(batch: dict[str, tf.Tensor]) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        if "text_pair" in batch:
            features = preprocess_fn(batch["text"], batch["text_pair"])
        else:
            features = preprocess_fn(batch["text"])
        # Tokenisers lose the static batch size; restore it (and check seq_length).
        shape = [batch["label"].shape[0], data_cfg.seq_length]
        return {k: tf.ensure_shape(v, shape) for k, v in features.items()}, batch["label"]

    if stored:
        # Preprocess once into blocks of `chunk` examples and store those: replaying
        # whole blocks is what makes a snapshot/cache much faster than tokenising again.
        dataset = stages.host_map(dataset.batch(chunk), preprocess,
                                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        key = stages.pipeline_key(
            examples=examples.fingerprint(), preprocess=_preprocess_fingerprint(preprocess_fn),
            seq_length=data_cfg.seq_length, shard=[shard, n_shards], chunk=chunk,
            permuted=training, pair=examples.text_pairs is not None)
        # input_mask and input_type_ids are 0/1: stored as uint8 they shrink what a replay
        # reads by half; widened back to int32 when the batches are cut.
        dataset = stages.stored_batches(
            stages.host_map(dataset, _narrow), data_cfg, examples.name, key, block=chunk,
            batch=local_batch, examples=n_local, training=training, seed=seed,
            describe={"examples": len(examples), "shard": [shard, n_shards],
                      "seq_length": data_cfg.seq_length, "block": chunk})
    else:
        if shuffle:
            # Shuffle the (cheap) raw strings, then tokenise whole chunks at once.
            dataset = dataset.shuffle(min(data_cfg.shuffle_buffer, n_local), seed=seed,
                                      reshuffle_each_iteration=True)
        dataset = stages.host_map(dataset.batch(chunk), preprocess,
                                  num_parallel_calls=tf.data.AUTOTUNE,
                                  deterministic=deterministic)
        dataset = dataset.rebatch(local_batch, drop_remainder=training)
    return stages.finalize(dataset, data_cfg, examples.name,
                           sharded_by_context=input_context is not None, deterministic=ordered)
