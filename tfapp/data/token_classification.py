"""Token-classification inputs: tagged words -> word pieces, tags on first pieces, windows.

Each word is tokenised on its own by the BERT preprocessor's ``tokenize`` (WordPiece; a
word may give several pieces, or none). A word's tag goes to its *first* piece; the
other pieces, ``[CLS]``, ``[SEP]`` and padding get label ``IGNORE`` (-1), which the loss
and the metrics leave out (``tfapp.tasks.ner.model``).

A sentence whose pieces do not fit ``seq_length - 2`` is cut into windows of
``L = seq_length - 2`` consecutive pieces (piece ``j`` lies in window ``j // L`` at
position ``1 + j % L``, after ``[CLS]``). Windows do not overlap, so every word's first
piece is in exactly one window and the predictions re-join by reading each word at its
first piece (``first_pieces``, ``rejoin``); a word cut at a window's end has its tag in
the window where it starts. The serving export windows the same way, in TensorFlow.

The number of windows of each sentence is decided on the host, from the piece counts of
its words (``piece_counts``), so each window is one example of known count, and the
pipeline stages of ``tfapp.data.pipeline`` (sharding, snapshot, cache, service,
prefetch) apply exactly as for the classifier.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfapp.config import DataConfig
from tfapp.data import pipeline as stages
from tfapp.data.bert_preprocess import FEATURE_KEYS
from tfapp.data.tagged import TaggedSentence

import numpy as np
import tensorflow as tf

__all__ = ["IGNORE", "WindowedSentences", "window_sentences", "piece_counts", "first_pieces",
           "rejoin", "make_ner_dataset", "word_pieces", "window_features"]

IGNORE = -1
_BATCH = 4096  # distinct words tokenised per eager call


def word_pieces(tokenize: Callable, words: tf.Tensor) -> tf.RaggedTensor:
    """Piece ids ``[n, (pieces)]`` of each of ``words`` ``[n]`` (a Hub ``tokenize`` gives
    ``[n, (words), (pieces)]``: a word with punctuation inside may split; merged)."""
    pieces = tokenize(words)
    if pieces.shape.rank > 2:
        pieces = pieces.merge_dims(1, -1)
    return tf.cast(pieces, tf.int32)


def piece_counts(tokenize: Callable, words: list[str]) -> dict[str, int]:
    """How many pieces each distinct word of ``words`` gives."""
    distinct = sorted(set(words))
    counts: dict[str, int] = {}
    for start in range(0, len(distinct), _BATCH):
        chunk = distinct[start:start + _BATCH]
        lengths = word_pieces(tokenize, tf.constant(chunk)).row_lengths().numpy()
        counts.update(zip(chunk, map(int, lengths), strict=True))
    return counts


def first_pieces(counts: list[int], window: int) -> list[tuple[int, int] | None]:
    """(window, position) of each word's first piece (position 0 is ``[CLS]``), or None
    for a word without pieces."""
    out, j = [], 0
    for c in counts:
        out.append((j // window, 1 + j % window) if c else None)
        j += c
    return out


@dataclass
class WindowedSentences:
    """Sentences cut into windows: one example per window, sentence by sentence.

    Attributes:
      sentences: the tagged sentences (IOB2).
      counts: pieces per word of each sentence.
      windows: windows per sentence; ``offsets[i]`` is sentence i's first example.
      window: pieces per window (``seq_length - 2``).
      name: split name, for messages.
    """

    sentences: list[TaggedSentence]
    counts: list[list[int]]
    windows: list[int]
    window: int
    name: str = "train"
    _fingerprint: str | None = field(default=None, repr=False)

    def __len__(self) -> int:  # examples (windows)
        return sum(self.windows)

    @property
    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.windows)[:-1]]).astype(np.int64)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            h = hashlib.sha256()
            for s in self.sentences:
                h.update("\x1f".join(s.words).encode("utf-8", "surrogatepass") + b"\x00")
                h.update("\x1f".join(s.tags).encode() + b"\x01")
            h.update(str(self.window).encode())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint


def window_sentences(sentences: list[TaggedSentence], tokenize: Callable, seq_length: int,
                     name: str) -> WindowedSentences:
    """Count each sentence's pieces and the windows of ``seq_length - 2`` pieces it needs."""
    counts_of = piece_counts(tokenize, [w for s in sentences for w in s.words])
    counts = [[counts_of[w] for w in s.words] for s in sentences]
    window = seq_length - 2
    windows = [max(1, math.ceil(sum(c) / window)) for c in counts]
    return WindowedSentences(sentences, counts, windows, window, name)


def rejoin(data: WindowedSentences, window_ids: np.ndarray) -> list[list[int]]:
    """Each sentence's per-word label ids read from ``window_ids`` ``[examples, seq_length]``
    (the argmax of a prediction, or the labels) at each word's first piece; 0 (``O``) for
    a word without pieces."""
    out, offsets = [], data.offsets
    for i, counts in enumerate(data.counts):
        base = offsets[i]
        out.append([int(window_ids[base + wp[0], wp[1]]) if wp else 0
                    for wp in first_pieces(counts, data.window)])
    return out


def _columns(data: WindowedSentences, order: np.ndarray, tag_index: dict[str, int]
             ) -> dict[str, Any]:
    """The examples ``order`` (indices of windows) as tensors for ``from_tensor_slices``."""
    sentence = np.repeat(np.arange(len(data.sentences)), data.windows)
    within = np.arange(len(data)) - data.offsets[sentence]
    picked = [data.sentences[i] for i in sentence[order]]
    return {"words": tf.ragged.constant([s.words for s in picked], tf.string, ragged_rank=1),
            "tags": tf.ragged.constant([[tag_index[t] for t in s.tags] for s in picked],
                                       tf.int32, ragged_rank=1),
            "window": tf.constant(within[order], tf.int32)}


def window_features(tokenize: Callable, pack: Callable, words: tf.RaggedTensor,
                    window: tf.Tensor, seq_length: int, tags: tf.RaggedTensor | None = None
                    ) -> tuple[dict[str, tf.Tensor], tf.Tensor | None]:
    """BERT features of window ``window[b]`` of each sentence ``words[b]``, and its labels
    (the tag id on first pieces, ``IGNORE`` elsewhere) when ``tags`` are given."""
    size = seq_length - 2
    pieces = word_pieces(tokenize, words.flat_values)  # [words, (pieces)]
    per_sentence = tf.RaggedTensor.from_row_lengths(pieces, words.row_lengths())
    tokens = per_sentence.merge_dims(1, 2)  # [b, (pieces of the sentence)]
    position = tf.ragged.range(tf.cast(tokens.row_lengths(), tf.int32))
    start = tf.cast(window, tf.int32)[:, tf.newaxis] * size
    keep = (position >= start) & (position < start + size)
    features = pack([tf.ragged.boolean_mask(tokens, keep)], seq_length=seq_length)
    features = {k: tf.ensure_shape(tf.cast(features[k], tf.int32), [None, seq_length])
                for k in FEATURE_KEYS}
    if tags is None:
        return features, None
    first = tf.equal(tf.ragged.range(tf.cast(pieces.row_lengths(), tf.int32)), 0)
    first = tf.RaggedTensor.from_row_lengths(first, words.row_lengths()).merge_dims(1, 2)
    piece_tags = tf.RaggedTensor.from_row_lengths(
        tf.repeat(tags.flat_values, pieces.row_lengths()), tokens.row_lengths())
    labels = tf.ragged.map_flat_values(tf.where, first, piece_tags,
                                       tf.fill(tf.shape(piece_tags.flat_values), IGNORE))
    labels = tf.ragged.boolean_mask(labels, keep)
    labels = tf.concat([tf.fill([labels.nrows(), 1], IGNORE), labels], axis=1)
    labels = labels.to_tensor(default_value=IGNORE, shape=[None, seq_length])
    return features, labels


def _narrow(features, labels):
    return {k: tf.cast(v, tf.uint8) if k in ("input_mask", "input_type_ids") else v
            for k, v in features.items()}, labels


def make_ner_dataset(data: WindowedSentences, preprocess_fn: Callable, tag_names: list[str],
                     data_cfg: DataConfig, *, batch_size: int, training: bool, seed: int,
                     input_context: tf.distribute.InputContext | None = None
                     ) -> tf.data.Dataset:
    """The pipeline of one split: ``(features, labels)`` batches, labels int32
    ``[batch, seq_length]`` with ``IGNORE`` off first pieces. Sharding, batching,
    shuffling and the stored (snapshot/cache) path follow ``make_classification_dataset``.
    """
    part = stages.local_shard(input_context, len(data), batch_size, training=training,
                              what=f"the {data.name} split")
    stored = bool(data_cfg.snapshot or data_cfg.cache)
    chunk = part.batch * max(1, (stages.STORE_BLOCK if stored else 256) // part.batch)
    ordered = data_cfg.deterministic or not training
    order = np.arange(len(data))
    if stored and training:
        order = np.random.default_rng(0).permutation(len(data))
    order = order[part.index::part.count]
    dataset = tf.data.Dataset.from_tensor_slices(
        _columns(data, order, {t: i for i, t in enumerate(tag_names)}))
    module = preprocess_fn.module
    seq_length = data_cfg.seq_length

    def preprocess(batch):
        return window_features(module.tokenize, module.bert_pack_inputs, batch["words"],
                               batch["window"], seq_length, batch["tags"])

    if stored:
        dataset = stages.host_map(dataset.batch(chunk), preprocess,
                                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        key = stages.pipeline_key(
            examples=data.fingerprint(), preprocess=str(preprocess_fn.fingerprint),
            seq_length=seq_length, shard=[part.index, part.count], chunk=chunk,
            permuted=training, tags=tag_names, task="ner")
        dataset = stages.stored_batches(
            stages.host_map(dataset, _narrow), data_cfg, data.name, key, block=chunk,
            batch=part.batch, examples=part.size, training=training, seed=seed,
            describe={"windows": len(data), "shard": [part.index, part.count],
                      "seq_length": seq_length, "block": chunk})
    else:
        if training and data_cfg.shuffle_buffer > 0:
            dataset = dataset.shuffle(min(data_cfg.shuffle_buffer, part.size), seed=seed,
                                      reshuffle_each_iteration=True)
        dataset = stages.host_map(dataset.batch(chunk), preprocess,
                                  num_parallel_calls=tf.data.AUTOTUNE,
                                  deterministic=True if ordered else None)
        dataset = dataset.rebatch(part.batch, drop_remainder=training)
    return stages.finalize(dataset, data_cfg, data.name,
                           sharded_by_context=input_context is not None, deterministic=ordered)
