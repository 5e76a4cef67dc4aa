"""Token-classification (NER) examples: tagged sentences streamed from prepared shards,
cut into windows of word pieces (``tfapp.data.text.windows``), tags on first pieces.

``load_ner_splits`` prepares (or reuses) the train / validation / test sentences, settles
the tag vocabulary and leaves out (or refuses) the sentences holding a tag outside it.
The sentences are cut into windows in tf.data, batch by batch; a window is one example of
the stream, whose counts per file come from one pass that tokenises the words, cached by
what decides them (``count_windows``). ``eval_windows`` and ``gold_tags`` give a split's
windows and tags in order, with what re-joins a tagger's predictions to the words of each
sentence.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfapp.config import NerDataConfig
from tfapp.data.input import reader, stream
from tfapp.data.input.lengths import Lengths, first_lengths
from tfapp.data.input.parse import cached_counts, cached_lengths, split_rows
from tfapp.data.input.splits import (
    PreparedSplits,
    SplitCounts,
    SplitData,
    prepared_splits,
    resolve_demo,
)
from tfapp.data.rows.bad_rows import BadRow, BadRowReport
from tfapp.data.rows.names import KnownNames, read_tag_vocab, write_tag_vocab
from tfapp.data.rows.read import log_entity_counts
from tfapp.data.rows.spec import RowSpec
from tfapp.data.text.bert_preprocess import FEATURE_KEYS
from tfapp.data.text.tags import OUTSIDE, split_tag, tag_names
from tfapp.data.text.windows import cut_windows, windows_per_sentence, word_pieces
from tfapp.errors import DataError

import numpy as np
import tensorflow as tf

__all__ = ["NerData", "count_windows", "cut_sentences", "demo_files",
           "eval_windows", "gold_tags", "load_ner_splits", "ner_examples"]


@dataclass
class NerData(SplitCounts):
    """A tagged dataset's prepared splits, its tag vocabulary (IOB2, from the training
    data) and how many windows each shard file gives.

    Attributes:
      prepared: the prepared train / validation / test splits (``tfapp.data.input.splits``).
      tag_names: the model's labels in id order: O, then B-/I- of each entity type.
      report: sentences dropped with on_bad_rows=skip.
      unknown: split -> tags of its data that are not in ``tag_names`` (its sentences
        with one are left out); ``first_unknown``: split -> the first such sentence.
      counts: split -> windows of it in each shard file (``count_windows``).
      sentences: split -> its sentences whose tags are known (``count_windows``).
    """

    prepared: PreparedSplits
    tag_names: list[str]
    report: BadRowReport = field(default_factory=BadRowReport)
    unknown: dict[str, list[str]] = field(default_factory=dict)
    first_unknown: dict[str, BadRow] = field(default_factory=dict)
    counts: dict[str, list[int]] = field(default_factory=dict)
    sentences: dict[str, int] = field(default_factory=dict)

    @property
    def entity_types(self) -> list[str]:
        return sorted({split_tag(t)[1] for t in self.tag_names if t != OUTSIDE})


def demo_files(data_cfg: NerDataConfig) -> tuple[str, str, str]:
    """(train, validation, test) file specs, ``demo`` mapped to the shipped CoNLL files."""
    return resolve_demo(data_cfg, "ner_{split}.conll")


def load_ner_splits(data_cfg: NerDataConfig, seed: int, tag_vocab_path: Path | str | None = None,
                    *, keep_vocab: bool = True) -> NerData:
    """Prepare (or reuse) the train/validation/test sentences and settle the tags.

    ``train_files: demo`` reads the shipped demo (and its validation and test files when
    none are given). The tag vocabulary is read from ``tag_vocab_path`` when it exists and
    ``keep_vocab`` (a resumed run), else built from the training tags and written there.
    A sentence holding a tag outside it is a bad row (under fail: one line naming its
    file and line; under skip: left out). Without validation (test) files a seeded
    fraction of train is held out, as for the classifier. The windows are counted by
    ``count_windows``.
    """
    train_spec, val_spec, test_spec = demo_files(data_cfg)
    prepared = prepared_splits(train_spec, val_spec, test_spec,
                               RowSpec.from_config("tagged", data_cfg), data_cfg, seed=seed)
    path = Path(tag_vocab_path) if tag_vocab_path else None
    if path is not None and keep_vocab and path.exists():
        names, known_from = read_tag_vocab(path), str(path)
    else:
        types = [split_tag(t)[1] for t in prepared.train.manifest.labels if t != OUTSIDE]
        if not types:
            raise DataError(f"data.train_files: '{train_spec}' tags no entity at all (every "
                            f"tag is O); check data.tag_column and data.tag_scheme")
        names, known_from = tag_names(types), "the training data"
        if path is not None:
            write_tag_vocab(names, path)
    # every run, prepared now or read from the cache: what the data it trains on holds
    for manifest in {id(s.manifest): s.manifest for s in prepared.splits()}.values():
        for source in manifest.sources:
            if source.entities:
                log_entity_counts(source.path, source.entities, data_cfg.tag_scheme)
    prepared.check_held_out(data_cfg, "sentences")
    out = NerData(prepared, names, prepared.report)
    known = KnownNames(tuple(names), known_from, tags=True)
    for split in prepared.splits():
        unknown, bad = split.unknown_names(known, data_cfg.on_bad_rows)
        if unknown:  # its sentences are counted with the windows (count_windows)
            out.unknown[split.name], out.first_unknown[split.name] = unknown, bad
    return out


def _sentences(split: SplitData, names: list[str], chunk: int) -> stream.ExamplesFn:
    """``sentences(file, index)``: batches of ``chunk`` rows of one shard file, the
    sentences of ``split`` among them whose tags are all in ``names``, as ``{"words",
    "tags"}`` (ragged; tag ids) and ``id``."""
    ragged = tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64)
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(names), tf.range(len(names))), -1)

    def select(rows: dict[str, tf.Tensor]) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        tags = tf.ragged.map_flat_values(table.lookup, rows["tags"])
        return ({"words": rows["words"], "tags": tags, "id": rows["id"]},
                tf.reduce_all(tags >= 0, axis=1))

    return split_rows(split, {"words": ragged, "tags": ragged}, chunk, select)


@functools.lru_cache(maxsize=8)
def cut_sentences(module: Any, seq_length: int, *, eval_fields: bool = False
                  ) -> Callable[[dict], dict]:
    """A batch of sentences -> the batch of its windows: features, labels, the id of the
    window (sentence id x 2**16 + window) and, for evaluation, each position's word
    index and the sentence's word count.

    One tf.function per preprocessor, length and kind, so the datasets that cut alike
    (training and validation; the validation and test reports) share one trace: the
    tokenizer and windowing graph takes seconds to trace, and a dataset's own map
    function is traced anew for every dataset."""
    def cut(batch):
        words, tags = batch["words"], batch["tags"]
        out = cut_windows(module.tokenize, module.bert_pack_inputs, words, None, seq_length,
                          tags)
        sentence, window = out["sentence"], out["window"]
        example = {**out["features"], "labels": out["labels"],
                   "id": tf.gather(batch["id"], sentence) * (1 << 16) + tf.cast(window,
                                                                                tf.int64)}
        if eval_fields:
            example["word_index"] = out["word_index"]
            example["words"] = tf.cast(tf.gather(words.row_lengths(), sentence), tf.int32)
            example["sentence"] = tf.gather(batch["id"], sentence)
        return example

    return tf.function(cut)


def count_windows(data: NerData, preprocess_fn: Any, seq_length: int) -> NerData:
    """Count the windows of every shard file of every split (one pass that tokenises the
    words, cached by the prepared data, the tags, the preprocessing and ``seq_length``);
    sentences dropped for unknown tags are counted in the bad-row report."""
    tokenize = preprocess_fn.module.tokenize

    def measure(batch: dict[str, tf.Tensor]) -> tf.Tensor:
        """[windows, sentences] of a batch of sentences."""
        words = batch["words"]
        pieces = word_pieces(tokenize, words.flat_values).row_lengths()
        totals = tf.math.unsorted_segment_sum(pieces, words.value_rowids(), words.nrows())
        return tf.stack([tf.reduce_sum(windows_per_sentence(totals, seq_length)),
                         tf.size(batch["id"], out_type=tf.int64)])

    for split in data.prepared.splits():
        counts = cached_counts("ner", split, (data.tag_names, str(preprocess_fn.fingerprint),
                                              seq_length),
                               _sentences(split, data.tag_names, 1024), measure)
        data.counts[split.name] = counts[:, 0].tolist()
        data.sentences[split.name] = int(counts[:, 1].sum())
        if split.name in data.unknown:
            data.report.add(split.name, data.first_unknown[split.name],
                            split.rows - data.sentences[split.name])
    if not data.sentences.get("train"):
        raise DataError(f"data.train_files: no usable sentences ({data.report.count} bad "
                        f"row(s) skipped: {data.report.summary()})")
    return data


def ner_examples(data: NerData, split: SplitData, preprocess_fn: Any, seq_length: int
                 ) -> reader.Examples:
    """How ``split``'s sentences are read and cut into windows (``tfapp.data.input.reader``):
    labels int32 ``[batch, seq_length]`` with ``IGNORE`` off first pieces; length buckets
    place their boundaries by the training windows' lengths, and cut features and labels
    alike."""
    spec = {k: tf.TensorSpec([None, seq_length], tf.int32) for k in (*FEATURE_KEYS, "labels")}
    key = (data.tag_names, str(preprocess_fn.fingerprint), seq_length)
    return reader.Examples(
        task="ner", split=split, source=data.source(split),
        read=lambda rows: _sentences(split, data.tag_names, rows),
        encode=cut_sentences(preprocess_fn.module, seq_length), labels="labels", spec=spec,
        storage={"input_word_ids": reader.token_storage(preprocess_fn.vocab_size),
                 "input_mask": tf.uint8, "input_type_ids": tf.uint8, "labels": tf.int16},
        key=key, describe={"seq_length": seq_length}, what="window",
        lengths=Lengths(lambda: cached_lengths("ner", data.train, key, lambda:
                                               window_lengths(data, preprocess_fn, seq_length)),
                        seq_length))


def eval_windows(data: NerData, split: SplitData, preprocess_fn: Any, seq_length: int,
                 batch_size: int) -> tf.data.Dataset:
    """The windows of ``split`` in order, batched, with what re-joins predictions to words:
    each window's ``sentence`` (id) and ``words`` (the sentence's word count), each
    position's ``word_index``. Build it once and predict over it at every evaluation."""
    sentences = _sentences(split, data.tag_names, reader.READ_CHUNK)
    cut = cut_sentences(preprocess_fn.module, seq_length, eval_fields=True)
    return stream.in_order(data.source(split), lambda f, j: sentences(f, j).map(cut)
                           ).rebatch(batch_size).prefetch(2)


def window_lengths(data: NerData, preprocess_fn: Any, seq_length: int, rows: int = 4096
                   ) -> np.ndarray:
    """Token lengths of the first ``rows`` training windows (``first_lengths``)."""
    return first_lengths(eval_windows(data, data.train, preprocess_fn, seq_length, 512),
                         lambda batch: batch["input_mask"].numpy().sum(axis=1), rows)


def gold_tags(data: NerData, split: SplitData) -> list[list[str]]:
    """The tags of every sentence of ``split``, in order (what a tagger's predictions of
    its ``eval_windows`` are scored against)."""
    sentences = _sentences(split, data.tag_names, reader.READ_CHUNK)
    names = data.tag_names
    out: list[list[str]] = []
    for batch in stream.in_order(split.source(), sentences).as_numpy_iterator():
        out += [[names[int(i)] for i in row] for row in batch["tags"]]
    return out
