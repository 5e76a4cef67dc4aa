"""Text-classification examples: labelled rows streamed from prepared shards into BERT
batches.

The rows come from prepared shards (``tfapp.data.input.splits``); they are parsed,
selected (held-out splits), label-encoded and tokenised in tf.data, in chunks, by the one
input reader (``tfapp.data.input.reader``), and never held in memory or in the graph.
``load_classification_splits`` settles the label vocabulary; ``classification_examples``
says what an example of a split is. Elements are ``(features, labels)``: ``features`` a
dict of int32 ``[batch, seq_length]`` ``input_word_ids`` / ``input_mask`` /
``input_type_ids``; ``labels`` int32 ``[batch]`` or, for multi-label data, float32
multi-hot ``[batch, num_classes]``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tfapp.config import ClassifierDataConfig
from tfapp.data.input import reader, stream
from tfapp.data.input.lengths import Lengths, first_lengths, mask_lengths
from tfapp.data.input.parse import cached_counts, cached_lengths, split_rows
from tfapp.data.input.splits import (
    PreparedSplits,
    SplitCounts,
    SplitData,
    prepared_splits,
    resolve_demo,
)
from tfapp.data.rows.bad_rows import BadRowReport
from tfapp.data.rows.names import KnownNames, LabelVocab, read_label_vocab, write_label_vocab
from tfapp.data.rows.spec import RowSpec
from tfapp.data.text.bert_preprocess import FEATURE_KEYS
from tfapp.errors import DataError

import numpy as np
import tensorflow as tf

__all__ = ["ClassificationSplits", "classification_examples", "demo_files",
           "load_classification_splits", "raw_batches", "token_lengths"]

log = logging.getLogger("tfapp.data")


@dataclass
class ClassificationSplits(SplitCounts):
    """The splits of a classification dataset and facts about its labels.

    Attributes:
      prepared: the prepared data of each split (``tfapp.data.input.splits``).
      label_names: label names in id order (also in labels.json).
      multi_label: labels are multi-hot rows (sigmoid per class) instead of class ids.
      class_counts: rows carrying each label in the training files (class weights).
      counts: split -> examples of it in each shard file.
      report: rows dropped with on_bad_rows=skip (count and first few).
      label_vocab_path: where labels.json was written or read, if anywhere.
    """

    prepared: PreparedSplits
    label_names: list[str]
    multi_label: bool
    class_counts: np.ndarray
    counts: dict[str, list[int]] = field(default_factory=dict)
    report: BadRowReport = field(default_factory=BadRowReport)
    label_vocab_path: Path | None = None

    @property
    def num_classes(self) -> int:
        return len(self.label_names)


def demo_files(data_cfg: ClassifierDataConfig) -> tuple[str, str, str]:
    """(train, validation, test) file specs, ``demo`` mapped to the shipped CSVs."""
    return resolve_demo(data_cfg, "reviews_{split}.csv")


def _vocab(data_cfg: ClassifierDataConfig, train: SplitData, path: Path | None, keep: bool
           ) -> tuple[LabelVocab, str]:
    """The label vocabulary and where it comes from (for messages): ``data.labels``,
    a resumed run's labels.json, or the training files' labels."""
    if data_cfg.labels:
        names = [str(n) for n in data_cfg.labels]
        if len(set(names)) != len(names):
            raise DataError(f"data.labels: {names} names a label twice")
        if len(names) < 2 and not data_cfg.multi_label:
            raise DataError("data.labels: a classifier needs at least two labels")
        return LabelVocab(names, data_cfg.multi_label), "data.labels"
    if path is not None and keep and path.exists():
        vocab = read_label_vocab(path)
        if vocab.multi_label != data_cfg.multi_label:
            raise DataError(f"{path}: multi_label={vocab.multi_label} but data.multi_label="
                            f"{data_cfg.multi_label}; use a new run name or delete labels.json")
        return vocab, str(path)
    seen = set(train.manifest.labels)
    names = sorted(seen, key=int) if seen and all(re.fullmatch(r"-?\d+", s) for s in seen) \
        else sorted(seen)
    if not names:
        raise DataError("the training data has no labels at all; check data.label_column")
    if len(names) < 2 and not data_cfg.multi_label:
        raise DataError(f"the training data has only one label ('{names[0]}'); a "
                        "classifier needs at least two")
    return LabelVocab(names, data_cfg.multi_label), "the training data"


def load_classification_splits(data_cfg: ClassifierDataConfig, seed: int,
                               label_vocab_path: Path | str | None = None, *,
                               keep_vocab: bool = True) -> ClassificationSplits:
    """Prepare (or reuse) the splits and settle the label vocabulary.

    The vocabulary comes from ``data.labels``, else from ``label_vocab_path`` when that
    file exists and ``keep_vocab`` (a resumed run keeps its label ids), else from the
    training labels (written there). Rows whose label is not in it are bad rows: under
    ``fail`` one line names the first (file:line), under ``skip`` they are left out and
    counted. Without validation (test) files a seeded fraction of train is held out.
    """
    if data_cfg.format == "tfds" and data_cfg.train_files == "demo":
        raise DataError("data.format=tfds needs data.train_files=NAME[:SPLIT], not 'demo'")
    train_spec, val_spec, test_spec = demo_files(data_cfg)
    if data_cfg.format == "tfds":
        train_spec = train_spec if ":" in train_spec else f"{train_spec}:train"
        name = train_spec.split(":")[0]
        val_spec = val_spec if not val_spec or ":" in val_spec else f"{name}:{val_spec}"
        test_spec = test_spec if not test_spec or ":" in test_spec else f"{name}:{test_spec}"
    row = RowSpec.from_config("labelled", data_cfg)
    prepared = prepared_splits(train_spec, val_spec, test_spec, row, data_cfg, seed=seed)
    path = Path(label_vocab_path) if label_vocab_path else None
    vocab, known_from = _vocab(data_cfg, prepared.train, path, keep_vocab)
    if path is not None and known_from == "the training data":
        write_label_vocab(vocab, path)
    report = prepared.report
    out = ClassificationSplits(prepared, vocab.names, vocab.multi_label,
                               np.array([prepared.train.manifest.labels.get(n, 0)
                                         for n in vocab.names], np.int64),
                               report=report, label_vocab_path=path)
    prepared.check_held_out(data_cfg)
    known = KnownNames(tuple(vocab.names), known_from)
    for split in prepared.splits():
        out.counts[split.name] = _split_counts(out, split, data_cfg, known)
    if not out.size(out.train):
        raise DataError(f"data.train_files: no usable examples in '{out.train.spec}' "
                        f"({report.per_split.get('train', 0)} bad row(s) skipped: "
                        f"{report.summary()})")
    if report.count:
        log.warning("data: %s", report.summary())
    log.info("data: %d train / %d validation / %d test examples, %d labels%s",
             out.size(out.train), out.size(out.validation), out.size(out.test),
             len(vocab.names), " (multi-label)" if vocab.multi_label else "")
    return out


def _split_counts(splits: ClassificationSplits, split: SplitData, data_cfg: ClassifierDataConfig,
                  known: KnownNames) -> list[int]:
    """Examples of ``split`` per file: its rows, less those with labels outside the
    vocabulary (a DataError naming the first under on_bad_rows=fail; under skip they are
    counted by a pass over the split's labels)."""
    unknown, bad = split.unknown_names(known, data_cfg.on_bad_rows)
    if not unknown:
        return split.counts()
    counts = cached_counts("classifier", split, (splits.label_names, splits.multi_label),
                           _examples_fn(split, splits, with_text=False),
                           lambda chunk: tf.stack([stream.rows(chunk)]))[:, 0].tolist()
    splits.report.add(split.name, bad, split.rows - sum(counts))
    return counts


def _examples_fn(split: SplitData, splits: ClassificationSplits, *,
                 with_text: bool = True, chunk: int = reader.READ_CHUNK) -> stream.ExamplesFn:
    """``examples(file, index)``: the rows of one shard file that belong to ``split`` and
    whose labels are known, as ``{"text"[, "text_pair"], "label", "id"}``, in chunks (the
    rows of each parsed batch of ``chunk`` records)."""
    pair = bool(splits.train.manifest.settings.get("text_pair_column"))
    texts = (["text"] + (["text_pair"] if pair else [])) if with_text else []
    features = {"labels": tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64),
                **{name: tf.io.FixedLenFeature([], tf.string) for name in texts}}
    names = splits.label_names
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(names), tf.range(len(names))), -1)
    multi, classes = splits.multi_label, len(names)

    def select(rows: dict[str, tf.Tensor]) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        ids = tf.ragged.map_flat_values(table.lookup, rows["labels"])
        if multi:
            label = tf.reduce_sum(tf.one_hot(ids, classes, dtype=tf.float32), axis=1)
        else:
            label = tf.cast(ids[:, :1].to_tensor(default_value=0)[:, 0], tf.int32)
        return ({"label": label, "id": rows["id"], **{name: rows[name] for name in texts}},
                tf.reduce_all(ids >= 0, axis=1))

    return split_rows(split, features, chunk, select)


def _tokenize(preprocess_fn: Callable, seq_length: int) -> Callable:
    def tokenize(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        if "text_pair" in batch:
            features = preprocess_fn(batch["text"], batch["text_pair"])
        else:
            features = preprocess_fn(batch["text"])
        # Tokenisers lose the static batch size; restore it (and check seq_length).
        shape = [tf.shape(batch["label"])[0], seq_length]
        out = {k: tf.ensure_shape(tf.reshape(v, shape), [None, seq_length])
               for k, v in features.items()}
        return {**out, "label": batch["label"], "id": batch["id"]}
    return tokenize


def classification_examples(splits: ClassificationSplits, split: SplitData,
                            preprocess_fn: Callable, seq_length: int) -> reader.Examples:
    """How ``split``'s rows are read and tokenised (``tfapp.data.input.reader``); length
    buckets place their boundaries by the training texts' token lengths."""
    spec = {k: tf.TensorSpec([None, seq_length], tf.int32) for k in FEATURE_KEYS}
    spec["label"] = (tf.TensorSpec([None, splits.num_classes], tf.float32)
                     if splits.multi_label else tf.TensorSpec([None], tf.int32))
    label = tf.uint8 if splits.multi_label or splits.num_classes <= 256 else tf.int32
    key = (splits.label_names, splits.multi_label, str(preprocess_fn.fingerprint), seq_length)
    return reader.Examples(
        task="classifier", split=split, source=splits.source(split),
        read=lambda rows: _examples_fn(split, splits, chunk=rows),
        encode=_tokenize(preprocess_fn, seq_length), labels="label", spec=spec,
        storage={"input_word_ids": reader.token_storage(preprocess_fn.vocab_size),
                 "input_mask": tf.uint8, "input_type_ids": tf.uint8, "label": label},
        key=key, describe={"seq_length": seq_length, "labels": splits.label_names},
        lengths=Lengths(lambda: cached_lengths("classifier", splits.train, key, lambda:
                                               token_lengths(splits, preprocess_fn)),
                        seq_length))


def token_lengths(splits: ClassificationSplits, preprocess_fn: Callable[..., dict],
                  rows: int = 4096) -> np.ndarray:
    """Token lengths of the first ``rows`` training examples (``first_lengths``)."""
    def lengths(batch: dict[str, np.ndarray]) -> np.ndarray:
        texts = [tf.constant(batch[k]) for k in ("text", "text_pair") if k in batch]
        return mask_lengths(preprocess_fn(*texts)).numpy()

    return first_lengths(raw_batches(splits, splits.train, batch=512), lengths, rows)


def raw_batches(splits: ClassificationSplits, split: SplitData, batch: int = 256
                ) -> Iterator[dict[str, np.ndarray]]:
    """The examples of ``split`` in order, as NumPy batches of text(s), label and id (for
    reports: no tokenising, one pipeline)."""
    dataset = stream.in_order(splits.source(split), _examples_fn(split, splits))
    yield from dataset.rebatch(batch).prefetch(2).as_numpy_iterator()
