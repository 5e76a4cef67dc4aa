"""Token-classification inputs: tagged words -> word pieces, tags on first pieces, windows.

Each word is tokenised on its own by the BERT preprocessor's ``tokenize`` (WordPiece; a
word may give several pieces, or none). A word's tag goes to its *first* piece; the
other pieces, ``[CLS]``, ``[SEP]`` and padding get label ``IGNORE`` (-1), which the loss
and the metrics leave out (``tfapp.tasks.ner.model``).

A sentence whose pieces do not fit ``seq_length - 2`` is cut into windows of
``L = seq_length - 2`` consecutive pieces (piece ``j`` lies in window ``j // L`` at
position ``1 + j % L``, after ``[CLS]``). Windows do not overlap, so every word's first
piece is in exactly one window and predictions re-join by reading each word at its
first piece (the windows carry each position's word index); a word cut at a window's
end has its tag in the window where it starts. The serving export windows the same way.

The sentences stream from prepared shards (``tfapp.data.splits``) and are cut into
windows in tf.data, batch by batch; a window is one example of the stream
(``tfapp.data.stream``), whose counts per file come from one pass that tokenises the
words, cached by what decides them.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfapp.atomic import read_state, write_text
from tfapp.cachedir import usable_cache_dir
from tfapp.config import NerDataConfig
from tfapp.data import lengths, reader, stream
from tfapp.data.manifest import BUCKETS
from tfapp.data.ner_splits import NerSplits
from tfapp.data.splits import SplitData
from tfapp.data.text.bert_preprocess import FEATURE_KEYS
from tfapp.data.text.windows import cut_windows, windows_per_sentence, word_pieces
from tfapp.errors import DataError

import numpy as np
import tensorflow as tf

__all__ = ["NerData", "build_ner_data", "make_ner_dataset", "eval_windows",
           "KeptWindows", "predict_tags", "gold_tags"]

#: the most bytes of an evaluation split's windows ``KeptWindows`` holds in memory
KEEP_WINDOWS_BYTES = 256 << 20


# ------------------------------------------------------------------------------ streams


def _sentences(split: SplitData, names: list[str], chunk: int
               ) -> Callable[[tf.Tensor, tf.Tensor], tf.data.Dataset]:
    """``sentences(file, index)``: batches of ``chunk`` rows of one shard file, the
    sentences of ``split`` among them whose tags are all in ``names``, as ``{"words",
    "tags"}`` (ragged; tag ids) and ``id``."""
    ragged = tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64)
    spec = {"words": ragged, "tags": ragged,
            "id": tf.io.FixedLenFeature([], tf.int64),
            "bucket": tf.io.FixedLenFeature([], tf.int64)}
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(names), tf.range(len(names))), -1)
    selector = split.selector

    def parse(records):
        rows = tf.io.parse_example(records, spec)
        tags = tf.ragged.map_flat_values(table.lookup, rows["tags"])
        keep = tf.reduce_all(tags >= 0, axis=1)
        if not selector.everything:
            rotated = (rows["bucket"] + selector.rotation) % BUCKETS
            keep &= (rotated >= selector.low) & (rotated < selector.high)
        return {"words": tf.ragged.boolean_mask(rows["words"], keep),
                "tags": tf.ragged.boolean_mask(tags, keep),
                "id": tf.boolean_mask(rows["id"], keep)}

    def sentences(file, index):
        del index
        return tf.data.TFRecordDataset(file).batch(chunk).map(
            parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    return sentences


@functools.lru_cache(maxsize=8)
def _cut(module: Any, seq_length: int, *, eval_fields: bool = False) -> Callable[[dict], dict]:
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


@dataclass
class NerData:
    """The tagger's splits and how many windows each shard file gives.

    Attributes:
      splits: the prepared splits and tag vocabulary (``tfapp.data.ner_splits``).
      counts: split -> windows of it in each shard file.
      sentences: split -> its sentences (whose tags are known).
    """

    splits: NerSplits
    counts: dict[str, list[int]] = field(default_factory=dict)
    sentences: dict[str, int] = field(default_factory=dict)

    @property
    def tag_names(self) -> list[str]:
        return self.splits.tag_names

    def split(self, name: str) -> SplitData | None:
        return getattr(self.splits.prepared, name)

    def size(self, split: SplitData | None) -> int:
        return sum(self.counts[split.name]) if split is not None else 0

    def source(self, split: SplitData) -> stream.Source:
        return split.source(self.counts[split.name])


def _counts_path(split: SplitData, names: list[str], fingerprint: str, seq_length: int
                 ) -> Path:
    key = hashlib.sha256(repr(("ner-counts", 1, split.manifest.root, split.manifest.to_json(),
                               split.selector, names, fingerprint, seq_length)).encode())
    return usable_cache_dir() / "counts" / f"ner-{split.name}-{key.hexdigest()[:16]}.json"


def build_ner_data(splits: NerSplits, preprocess_fn: Any, seq_length: int) -> NerData:
    """Count the windows of every shard file of every split (one pass that tokenises the
    words, cached by the prepared data, the tags, the preprocessing and ``seq_length``);
    sentences dropped for unknown tags are counted in the bad-row report."""
    data = NerData(splits)
    module = preprocess_fn.module
    for split in splits.prepared.splits():
        path = _counts_path(split, splits.tag_names, str(preprocess_fn.fingerprint), seq_length)
        cached = read_state(path, "NER counts") if path.is_file() else None
        if cached is None:
            sentences = _sentences(split, splits.tag_names, 1024)

            def windows(batch):
                words = batch["words"]
                pieces = word_pieces(module.tokenize, words.flat_values).row_lengths()
                totals = tf.math.unsorted_segment_sum(pieces, words.value_rowids(),
                                                      words.nrows())
                return tf.reduce_sum(windows_per_sentence(totals, seq_length))

            counts, total = [], 0
            for j, file in enumerate(split.files()):
                batches = sentences(tf.constant(file), tf.constant(j, tf.int64))
                n = np.zeros(2, np.int64)
                for w, rows in batches.map(lambda b: (windows(b), tf.size(b["id"]))) \
                        .as_numpy_iterator():
                    n += [w, rows]
                counts.append(int(n[0]))
                total += int(n[1])
            cached = {"counts": counts, "sentences": total}
            write_text(path, json.dumps(cached) + "\n")
        data.counts[split.name] = cached["counts"]
        data.sentences[split.name] = cached["sentences"]
        if split.name in splits.unknown:
            splits.report.add(split.name, None, split.rows - cached["sentences"])
    if not data.sentences.get("train"):
        raise DataError(f"data.train_files: no usable sentences ({splits.report.count} bad "
                        f"row(s) skipped: {splits.report.summary()})")
    return data


def _model_inputs(batch: dict[str, tf.Tensor]) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
    return {k: batch[k] for k in FEATURE_KEYS}, batch["labels"]


def ner_examples(data: NerData, split: SplitData, preprocess_fn: Any, seq_length: int
                 ) -> reader.Examples:
    """How ``split``'s sentences are read and cut into windows (``tfapp.data.reader``)."""
    spec = {k: tf.TensorSpec([None, seq_length], tf.int32) for k in (*FEATURE_KEYS, "labels")}
    spec["id"] = tf.TensorSpec([None], tf.int64)
    return reader.Examples(
        task="ner", split=split, source=data.source(split),
        read=lambda rows: _sentences(split, data.tag_names, rows),
        encode=_cut(preprocess_fn.module, seq_length), model_inputs=_model_inputs,
        spec=spec,
        storage={"input_word_ids": reader.token_storage(getattr(preprocess_fn, "vocab_size",
                                                                None)),
                 "input_mask": tf.uint8, "input_type_ids": tf.uint8, "labels": tf.int16,
                 "id": tf.int64},
        key=(data.tag_names, str(preprocess_fn.fingerprint), seq_length),
        describe={"seq_length": seq_length}, what="window")


def make_ner_dataset(data: NerData, split: SplitData, preprocess_fn: Any, cfg: NerDataConfig, *,
                     batch_size: int, training: bool, seed: int,
                     input_context: tf.distribute.InputContext | None = None,
                     start: stream.Start | None = None,
                     grouping: lengths.Grouping | None = None) -> tf.data.Dataset:
    """``(features, labels)`` batches of one split's windows, labels int32 ``[batch,
    seq_length]`` with ``IGNORE`` off first pieces (``tfapp.data.reader.read_batches``,
    as for the classifier). With a ``grouping`` each batch is cut to its length bucket
    (features and labels alike)."""
    return reader.read_batches(
        ner_examples(data, split, preprocess_fn, cfg.seq_length), cfg, batch_size=batch_size,
        training=training, seed=seed, input_context=input_context, start=start,
        grouping=grouping)


def eval_windows(data: NerData, split: SplitData, preprocess_fn: Any, seq_length: int,
                 batch_size: int) -> tf.data.Dataset:
    """The windows of ``split`` in order, batched, with what re-joins predictions to words:
    each window's ``sentence`` (id) and ``words`` (the sentence's word count), each
    position's ``word_index``. Build it once and predict over it at every evaluation."""
    source = data.source(split)
    sentences = _sentences(split, data.tag_names, reader.READ_CHUNK)
    cut = _cut(preprocess_fn.module, seq_length, eval_fields=True)
    return stream.eval_stream(source, stream.partition(source, 0, 1, 0),
                              lambda f, j: sentences(f, j).map(cut)
                              ).rebatch(batch_size).prefetch(2)


def window_lengths(data: NerData, preprocess_fn: Any, seq_length: int, rows: int = 4096
                   ) -> np.ndarray:
    """Token lengths of the first ``rows`` training windows (in file order, the same on
    every worker): what ``lengths.boundaries`` places the buckets by."""
    out: list[np.ndarray] = []
    for batch in eval_windows(data, data.split("train"), preprocess_fn, seq_length, 512):
        out.append(batch["input_mask"].numpy().sum(axis=1))
        if sum(len(o) for o in out) >= rows:
            break
    return np.concatenate(out)[:rows] if out else np.zeros([0], np.int64)


class KeptWindows:
    """The numpy batches of an ``eval_windows`` dataset, read from it once and then kept
    (up to ``limit`` bytes; a larger split is read again each time): a run scores its
    validation windows at every epoch and at the end, and each new iterator of the
    dataset costs seconds (its functions, the tokenizer's among them, are instantiated
    and optimized anew) besides tokenising and windowing every sentence again."""

    def __init__(self, dataset: tf.data.Dataset, limit: int = KEEP_WINDOWS_BYTES):
        self.dataset, self.limit = dataset, limit
        self.batches: list[dict[str, np.ndarray]] | None = None

    def __iter__(self):
        return iter(self.batches) if self.batches is not None else self._first_pass()

    def _first_pass(self):
        kept: list[dict[str, np.ndarray]] | None = []
        size = 0
        for batch in self.dataset.as_numpy_iterator():
            if kept is not None:
                size += sum(v.nbytes for v in batch.values())
                if size <= self.limit:
                    kept.append(batch)
                else:
                    kept = None
            yield batch
        self.batches = kept


def predict_tags(call: Callable, windows: tf.data.Dataset | KeptWindows, tag_names: list[str]
                 ) -> list[list[str]]:
    """The predicted IOB2 tags of every sentence of an ``eval_windows`` dataset (or its
    ``KeptWindows``), in order: ``call`` (a tagger: features -> tag ids) on its windows,
    each word read at its first piece (O for a word without pieces)."""
    window_sentences, window_words, positions, seen = [], [], [], 0
    batches = windows.as_numpy_iterator() if isinstance(windows, tf.data.Dataset) else windows
    for batch in batches:
        predicted = np.asarray(call({k: batch[k] for k in FEATURE_KEYS}))
        rows, cols = np.nonzero(batch["word_index"] >= 0)
        # (window, word in its sentence, predicted tag) of every word's first piece
        positions.append(np.stack([seen + rows, batch["word_index"][rows, cols],
                                   predicted[rows, cols]], 1))
        window_sentences.append(batch["sentence"])
        window_words.append(batch["words"])
        seen += len(batch["sentence"])
    if not window_sentences:
        return []
    sentence_of_window = np.concatenate(window_sentences)
    # Windows of a sentence are consecutive: a new sentence wherever the id changes.
    new = np.r_[True, sentence_of_window[1:] != sentence_of_window[:-1]]
    starts, index_of_window = np.flatnonzero(new), np.cumsum(new) - 1
    words = np.concatenate(window_words)[starts].astype(np.int64)
    offsets = np.r_[0, np.cumsum(words)]
    tags = np.zeros(offsets[-1], np.int64)  # O for words without pieces
    found = np.concatenate(positions)
    tags[offsets[index_of_window[found[:, 0]]] + found[:, 1]] = found[:, 2]
    names = np.array(tag_names)
    return [names[tags[offsets[i]:offsets[i + 1]]].tolist() for i in range(len(words))]


def gold_tags(data: NerData, split: SplitData) -> list[list[str]]:
    """The tags of every sentence of ``split``, in order (what ``predict_tags`` is scored
    against)."""
    source = split.source()
    sentences = _sentences(split, data.tag_names, reader.READ_CHUNK)
    names = data.tag_names
    out: list[list[str]] = []
    for batch in stream.eval_stream(source, stream.partition(source, 0, 1, 0),
                                    sentences).as_numpy_iterator():
        out += [[names[int(i)] for i in row] for row in batch["tags"]]
    return out
