"""The generator's examples: a cleaned text corpus -> fixed-shape integer windows
(``tfapp.data.text.words``: continuation windows of every line, or source -> target pairs).

The files are prepared once (``tfapp.data.input.splits``: local, ``gs://``, ``.gz``,
``data.on_bad_rows``) and streamed: each shard's lines are cleaned, looked up in the
vocabulary and cut into windows in tf.data (``generator_examples``), so no line is held in
memory and a resumed run continues at its next unseen batch. Everything that touches
strings runs on the host: the device only ever sees int32 tensors, of fixed shape or,
with ``data.length_buckets``, of a few: training and validation batches are grouped by
target length and their decoder side cut to the bucket's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp.config import GeneratorDataConfig
from tfapp.data.input import reader, stream
from tfapp.data.input.lengths import Lengths
from tfapp.data.input.parse import cached_counts, split_rows
from tfapp.data.input.splits import (
    PreparedSplits,
    SplitCounts,
    SplitData,
    prepared_splits,
    resolve_demo,
)
from tfapp.data.rows.spec import RowSpec
from tfapp.data.text.words import (
    DECODER_KEYS,
    UNK_ID,
    build_vocabulary,
    continuation_windows,
    drop_matcher,
    label_lengths,
    load_vocabulary,
    pair_windows,
    standardize,
    vocabulary_table,
    word_ids,
)
from tfapp.errors import DataError

import numpy as np
import tensorflow as tf

__all__ = ["GeneratorData", "build_generator_data", "demo_files", "generator_examples",
           "generator_rows", "iter_split_texts"]

log = logging.getLogger("tfapp")


def generator_rows(cfg: GeneratorDataConfig) -> RowSpec:
    """What a row of the generator's files is: a text (continuation) or a pair."""
    return RowSpec.from_config("pairs" if cfg.example_shape == "pairs" else "texts", cfg)


def demo_files(cfg: GeneratorDataConfig) -> tuple[str, str, str]:
    """(train, validation, test) file specs, ``demo`` mapped to the shipped corpus or
    pairs."""
    return resolve_demo(cfg, "generator_pairs.tsv" if cfg.example_shape == "pairs"
                        else "generator_corpus.txt", fill=False)


def _cleaned_lines(split: SplitData, cfg: GeneratorDataConfig, chunk: int
                   ) -> stream.ExamplesFn:
    """``lines(file, index)``: batches of the file's rows of ``split`` (``chunk`` rows
    read per batch), cleaned: ``{"text", "id"}`` (continuation; lines ``drop_regex``
    drops and lines empty after cleaning left out) or ``{"source", "target", "id"}``
    (pairs; pairs whose target is empty left out)."""
    pairs = cfg.example_shape == "pairs"
    names = ("source", "target") if pairs else ("text",)
    drop, strip = drop_matcher(cfg.drop_regex), cfg.strip_punctuation

    def clean(rows: dict[str, tf.Tensor]) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        keep = tf.ones_like(rows["id"], tf.bool)
        if drop is not None:  # on the raw text, as the filter's docs say
            raw = (tf.strings.join([rows["source"], rows["target"]], "\t") if pairs
                   else rows["text"])
            keep &= ~drop(raw)
        out = {n: standardize(rows[n], strip) for n in names}
        keep &= tf.strings.length(out["target" if pairs else "text"]) > 0
        return {**out, "id": rows["id"]}, keep

    return split_rows(split, {n: tf.io.FixedLenFeature([], tf.string) for n in names},
                      chunk, clean)


def _windows(table, cfg: GeneratorDataConfig) -> Callable[[dict], dict]:
    """A batch of cleaned lines -> its examples (``continuation_windows`` or
    ``pair_windows``), each with the id of its line times 2**16 plus its position."""
    pairs = cfg.example_shape == "pairs"

    def windows(batch):
        if pairs:
            out = pair_windows(word_ids(table, batch["source"]),
                               word_ids(table, batch["target"]), cfg.context_words,
                               cfg.target_words)
        else:
            out = continuation_windows(word_ids(table, batch["text"]), cfg.context_words,
                                       cfg.target_words)
        line = out.pop("line")
        first = tf.concat([[0], tf.cast(tf.math.cumsum(tf.math.bincount(
            tf.cast(line, tf.int32), minlength=tf.size(batch["id"]))), tf.int64)], 0)
        position = tf.range(tf.size(line, out_type=tf.int64)) - tf.gather(first, line)
        out["id"] = tf.gather(batch["id"], line) * (1 << 16) + position
        return out

    return windows


@dataclass
class GeneratorData(SplitCounts):
    """The generator's prepared splits, vocabulary and example counts.

    Attributes:
      prepared: the prepared train / validation / test splits
        (``tfapp.data.input.splits``).
      vocabulary: the word vocabulary (specials first).
      counts: split -> examples (windows or pairs) in each shard file.
      target_lengths: split -> its examples per target length (index: real target
        tokens, [END] included), what the length buckets are placed by.
      sample_prompts: prompts decoded after each epoch.
      info: facts for the run header and model card.
    """

    prepared: PreparedSplits
    vocabulary: list[str]
    counts: dict[str, list[int]]
    target_lengths: dict[str, list[int]] = field(default_factory=dict)
    sample_prompts: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)


def _split_lines(split: SplitData, cfg: GeneratorDataConfig) -> tf.data.Dataset:
    """Batches of the cleaned lines of ``split``, its files in order."""
    return stream.in_order(split.source(), _cleaned_lines(split, cfg, 1024))


def iter_split_texts(split: SplitData, cfg: GeneratorDataConfig
                     ) -> Iterator[tuple[list[str], list[str] | None]]:
    """The cleaned texts of ``split`` as its examples are made of them, in file order, a
    batch at a time (about 1024 rows): (lines, None) for continuation, (sources, targets)
    for pairs. What a streaming evaluation reads: it holds one batch."""
    pairs = cfg.example_shape == "pairs"
    for batch in _split_lines(split, cfg).as_numpy_iterator():
        if pairs:
            yield ([t.decode("utf-8") for t in batch["source"]],
                   [t.decode("utf-8") for t in batch["target"]])
        else:
            yield [t.decode("utf-8") for t in batch["text"]], None


def _count(split: SplitData, cfg: GeneratorDataConfig, vocabulary: list[str]) -> dict:
    """Examples per file of ``split``, its cleaned lines, the [UNK] share of its labels
    and its examples per target length: one pass, cached by what decides them."""
    windows, t = _windows(vocabulary_table(vocabulary), cfg), cfg.target_words

    def measure(lines: dict[str, tf.Tensor]) -> tf.Tensor:
        """[windows, lines, [UNK] labels, labels, examples per target length...]."""
        labels = windows(lines)["labels"]
        return tf.concat([tf.cast(tf.stack([
            tf.shape(labels)[0], tf.size(lines["id"]),
            tf.reduce_sum(tf.cast(labels == UNK_ID, tf.int32)), tf.size(labels)]), tf.int64),
            tf.math.bincount(label_lengths({"labels": labels}), minlength=t + 1,
                             maxlength=t + 1, dtype=tf.int64)], 0)

    counts = cached_counts("generator", split, (
        cfg.example_shape, cfg.drop_regex, cfg.strip_punctuation, cfg.context_words, t,
        vocabulary), _cleaned_lines(split, cfg, 1024), measure)
    total = counts.sum(axis=0)
    return {"counts": counts[:, 0].tolist(), "texts": int(total[1]),
            "unk_rate": float(total[2] / total[3]) if total[3] else 0.0,
            "target_lengths": total[4:].tolist()}


def build_generator_data(cfg: GeneratorDataConfig, *, seed: int, vocab_path: Path | None = None,
                         keep_vocab: bool = False) -> GeneratorData:
    """Prepare (or reuse) the splits, adapt the vocabulary on the training lines (or read
    a resumed run's ``vocab_path``), and count the examples of each file."""
    drop_matcher(cfg.drop_regex)  # a bad pattern is one line before any data is read
    train_spec, val_spec, test_spec = demo_files(cfg)
    prepared = prepared_splits(train_spec, val_spec, test_spec, generator_rows(cfg), cfg,
                               seed=seed)
    prepared.check_held_out(cfg, "pairs" if cfg.example_shape == "pairs" else "lines")
    if vocab_path is not None and keep_vocab and Path(vocab_path).is_file():
        vocabulary = load_vocabulary(vocab_path)
    else:
        lines = _split_lines(prepared.train, cfg)
        texts = (lines.map(lambda b: tf.concat([b["source"], b["target"]], 0))
                 if cfg.example_shape == "pairs" else lines.map(lambda b: b["text"]))
        vocabulary = build_vocabulary(texts, cfg.vocab_size)
    counted = {s.name: _count(s, cfg, vocabulary) for s in prepared.splits()}
    if not counted["train"]["texts"]:
        raise DataError(f"data.train_files: no text lines left in '{cfg.train_files}' after "
                        "cleaning (check data.drop_regex and the columns)")
    data = GeneratorData(prepared, vocabulary, {k: v["counts"] for k, v in counted.items()},
                         {k: v["target_lengths"] for k, v in counted.items()})
    sample = prepared.validation if counted.get("validation", {}).get("texts") else \
        prepared.train
    first = [b for b in _split_lines(sample, cfg).unbatch().take(3).as_numpy_iterator()]
    if cfg.example_shape == "pairs":
        data.sample_prompts = [b["source"].decode("utf-8") for b in first]
    else:
        # The opening words of a few held-out lines, and the empty prompt (a line opening).
        data.sample_prompts = ["", *(" ".join(b["text"].decode("utf-8").split()[:2])
                                     for b in first)]
    val, test = counted.get("validation", {}), counted.get("test", {})
    data.info = {"vocab_size": len(vocabulary), "example_shape": cfg.example_shape,
                 "context_words": cfg.context_words, "target_words": cfg.target_words,
                 "texts": counted["train"]["texts"], "validation_texts": val.get("texts", 0),
                 "test_texts": test.get("texts", 0),
                 "unk_rate": counted["train"]["unk_rate"]}
    log.info("generator data: %d %s -> %d examples (validation %d -> %d, test %d -> %d), "
             "vocabulary %d", data.info["texts"],
             "pairs" if cfg.example_shape == "pairs" else "lines", data.size(prepared.train),
             val.get("texts", 0), data.size(prepared.validation), test.get("texts", 0),
             data.size(prepared.test), len(vocabulary))
    return data


def target_length_sample(data: GeneratorData, split: SplitData, rows: int = 1 << 16
                         ) -> np.ndarray:
    """Up to ``rows`` target lengths drawn (seeded) from ``split``'s histogram, in a
    random order as the shuffled stream has them: what ``lengths.grouping_for`` places
    the buckets by and estimates padding with."""
    histogram = np.asarray(data.target_lengths.get(split.name, []), np.int64)
    every = np.repeat(np.arange(len(histogram)), histogram)
    return np.random.default_rng(0).permutation(every)[:rows]


def generator_examples(data: GeneratorData, split: SplitData, cfg: GeneratorDataConfig
                       ) -> reader.Examples:
    """How ``split``'s lines are read, cleaned and cut into windows
    (``tfapp.data.input.reader``). Length buckets group by target length
    (``label_lengths``, placed by the training split's histogram) and cut the decoder's
    side (``DECODER_KEYS``) to at most ``target_words``."""
    c, t = cfg.context_words, cfg.target_words
    spec = {"encoder_ids": tf.TensorSpec([None, c], tf.int32),
            "decoder_ids": tf.TensorSpec([None, t], tf.int32),
            "labels": tf.TensorSpec([None, t], tf.int32)}
    ids = reader.token_storage(len(data.vocabulary))
    return reader.Examples(
        task="generator", split=split, source=data.source(split),
        read=lambda rows: _cleaned_lines(split, cfg, rows),
        encode=_windows(vocabulary_table(data.vocabulary), cfg), labels="labels",
        features=("encoder_ids", "decoder_ids"), spec=spec,
        storage={"encoder_ids": ids, "decoder_ids": ids, "labels": ids},
        key=(cfg.example_shape, cfg.drop_regex, cfg.strip_punctuation, c, t, data.vocabulary),
        describe={"context_words": c, "target_words": t},
        lengths=Lengths(lambda: target_length_sample(data, data.train), t,
                        label_lengths, DECODER_KEYS, "target_words"))
