"""The generator's input pipeline: a cleaned text corpus -> fixed-shape integer examples.

Two example shapes feed the same encoder-decoder:

* **continuation**: every position of every corpus line. With ``ext = [START] + line +
  [END]`` and the next word at line position ``i`` (``0 <= i <= len(line)``, ``i = len``
  meaning "the line ends here"), the encoder sees the last ``context_words`` tokens of
  ``ext[:i + 1]`` and the decoder learns the next ``target_words`` tokens ``ext[i + 1:]``.
  A prompt is handled the same way (``[START] + prompt``, last ``context_words`` tokens),
  so an empty prompt asks for a line opening, and ``[END]`` teaches the model to stop.
* **pairs**: a source text -> a target text (CSV/TSV with a header row, JSONL or
  TFRecord rows); the encoder sees the first ``context_words`` tokens of
  ``[START] + source``.

The files are prepared once (``tfapp.data.splits``: local, ``gs://``, ``.gz``,
``data.on_bad_rows``) and streamed: each shard's lines are cleaned, looked up in the
vocabulary and cut into windows in tf.data (``make_generator_dataset``), so no line is
held in memory and a resumed run continues at its next unseen batch.

Labels are right-padded with 0 (the loss and metrics ignore it); decoder inputs are the
labels shifted right behind ``[START]`` (teacher forcing). Everything that touches
strings runs on the host: the device only ever sees int32 tensors, of fixed shape or,
with ``data.length_buckets``, of a few: training and validation batches are grouped by
target length and their decoder side cut to the bucket's (``generator_grouping``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp.atomic import read_state, write_text
from tfapp.cachedir import usable_cache_dir
from tfapp.config import GeneratorDataConfig
from tfapp.data import lengths, reader, stream
from tfapp.data.manifest import BUCKETS
from tfapp.data.prepare import RowSpec
from tfapp.data.splits import PreparedSplits, SplitData, prepared_splits
from tfapp.data.text.words import (
    DECODER_KEYS,
    PAD_ID,
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
from tfapp.demo import DEMO_DIR
from tfapp.errors import DataError

import numpy as np
import tensorflow as tf

log = logging.getLogger("tfapp")

DEMO_CORPUS = DEMO_DIR / "generator_corpus.txt"
DEMO_PAIRS = DEMO_DIR / "generator_pairs.tsv"


# --------------------------------------------------------------------------- the splits

#: parsed rows per call when turning lines into windows


def generator_rows(cfg: GeneratorDataConfig) -> RowSpec:
    """What a row of the generator's files is: a text (continuation) or a pair."""
    return RowSpec.from_config("pairs" if cfg.example_shape == "pairs" else "texts", cfg)


def _cleaned_lines(split: SplitData, cfg: GeneratorDataConfig, chunk: int
                   ) -> Callable[[tf.Tensor, tf.Tensor], tf.data.Dataset]:
    """``lines(file, index)``: batches of the file's rows of ``split`` (``chunk`` rows
    read per batch), cleaned: ``{"text", "id"}`` (continuation; lines ``drop_regex``
    drops and lines empty after cleaning left out) or ``{"source", "target", "id"}``
    (pairs; pairs whose target is empty left out)."""
    pairs = cfg.example_shape == "pairs"
    names = ("source", "target") if pairs else ("text",)
    spec = {n: tf.io.FixedLenFeature([], tf.string) for n in names}
    spec.update(id=tf.io.FixedLenFeature([], tf.int64), bucket=tf.io.FixedLenFeature([], tf.int64))
    selector, drop = split.selector, drop_matcher(cfg.drop_regex)
    strip = cfg.strip_punctuation

    def clean(records):
        rows = tf.io.parse_example(records, spec)
        keep = tf.ones_like(rows["id"], tf.bool)
        if not selector.everything:
            rotated = (rows["bucket"] + selector.rotation) % BUCKETS
            keep &= (rotated >= selector.low) & (rotated < selector.high)
        if drop is not None:  # on the raw text, as the filter's docs say
            raw = (tf.strings.join([rows["source"], rows["target"]], "\t") if pairs
                   else rows["text"])
            keep &= ~drop(raw)
        out = {n: standardize(rows[n], strip) for n in names}
        keep &= tf.strings.length(out["target" if pairs else "text"]) > 0
        out["id"] = rows["id"]
        return {k: tf.boolean_mask(v, keep) for k, v in out.items()}

    def lines(file, index):
        del index
        return tf.data.TFRecordDataset(file).batch(chunk).map(
            clean, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    return lines


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
class GeneratorData:
    """The generator's prepared splits, vocabulary and example counts.

    Attributes:
      splits: the prepared train / validation split (``tfapp.data.splits``).
      vocabulary: the word vocabulary (specials first).
      counts: split -> examples (windows or pairs) in each shard file.
      target_lengths: split -> its examples per target length (index: real target
        tokens, [END] included), what the length buckets are placed by.
      sample_prompts: prompts decoded after each epoch.
      info: facts for the run header and model card.
    """

    splits: PreparedSplits
    vocabulary: list[str]
    counts: dict[str, list[int]]
    target_lengths: dict[str, list[int]] = field(default_factory=dict)
    sample_prompts: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    def size(self, split: SplitData | None) -> int:
        return sum(self.counts[split.name]) if split is not None else 0

    def source(self, split: SplitData) -> stream.Source:
        return split.source(self.counts[split.name])


def resolve_demo(cfg: GeneratorDataConfig) -> tuple[str, str, str]:
    """(train, validation, test) file specs, ``demo`` mapped to the shipped corpus or
    pairs."""
    demo = str(DEMO_PAIRS if cfg.example_shape == "pairs" else DEMO_CORPUS)
    train, validation, test = (demo if spec.strip() == "demo" else spec for spec in (
        cfg.train_files, cfg.validation_files, cfg.test_files))
    return train, validation, test




def _split_lines(split: SplitData, cfg: GeneratorDataConfig) -> tf.data.Dataset:
    """Batches of the cleaned lines of ``split``, its files in order."""
    source = split.source()
    lines = _cleaned_lines(split, cfg, 1024)
    return stream.eval_stream(source, stream.partition(source, 0, 1, 0), lines)


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


def split_texts(split: SplitData, cfg: GeneratorDataConfig) -> tuple[list[str], list[str] | None]:
    """All of ``iter_split_texts`` in two lists (a benchmark's corpus)."""
    texts: list[str] = []
    targets: list[str] | None = [] if cfg.example_shape == "pairs" else None
    for more, more_targets in iter_split_texts(split, cfg):
        texts += more
        if targets is not None:
            targets += more_targets
    return texts, targets


def _count(split: SplitData, cfg: GeneratorDataConfig, table) -> dict[str, Any]:
    """Examples per file of ``split``, its cleaned lines, and the [UNK] share of its
    labels: one pass, cached by what decides them (see ``_counts_path``)."""
    path = _counts_path(split, cfg, table.vocabulary)
    cached = read_state(path, "generator counts") if path.is_file() else None
    if cached is not None:
        return cached
    lines, windows = _cleaned_lines(split, cfg, 1024), _windows(table.table, cfg)
    counts, texts, unk, labels = [], 0, 0, 0
    histogram = np.zeros(cfg.target_words + 1, np.int64)
    for j, file in enumerate(split.files()):
        n = np.zeros(4, np.int64)
        for batch in lines(tf.constant(file), tf.constant(j, tf.int64)).map(
                lambda b: (b, windows(b))).prefetch(2).as_numpy_iterator():
            rows, examples = batch
            n += [len(examples["labels"]), len(rows["id"]),
                  int((examples["labels"] == UNK_ID).sum()), examples["labels"].size]
            histogram += np.bincount((examples["labels"] != PAD_ID).sum(axis=1),
                                     minlength=cfg.target_words + 1)
        counts.append(int(n[0]))
        texts, unk, labels = texts + int(n[1]), unk + int(n[2]), labels + int(n[3])
    out = {"counts": counts, "texts": texts, "unk_rate": unk / labels if labels else 0.0,
           "target_lengths": histogram.tolist()}
    write_text(path, json.dumps(out) + "\n")
    return out


class _Table:
    """A vocabulary and its lookup table (what the counts are keyed by)."""

    def __init__(self, vocabulary: list[str]):
        self.vocabulary = vocabulary
        self.table = vocabulary_table(vocabulary)


def _counts_path(split: SplitData, cfg: GeneratorDataConfig, vocabulary: list[str]) -> Path:
    key = hashlib.sha256(repr((
        "generator-counts", 2, split.manifest.root, split.manifest.to_json(), split.selector,
        cfg.example_shape, cfg.drop_regex, cfg.strip_punctuation, cfg.context_words,
        cfg.target_words, vocabulary)).encode()).hexdigest()[:16]
    return usable_cache_dir() / "counts" / f"generator-{split.name}-{key}.json"


def build_generator_data(cfg: GeneratorDataConfig, *, seed: int, vocab_path: Path | None = None,
                         keep_vocab: bool = False) -> GeneratorData:
    """Prepare (or reuse) the splits, adapt the vocabulary on the training lines (or read
    a resumed run's ``vocab_path``), and count the examples of each file."""
    drop_matcher(cfg.drop_regex)  # a bad pattern is one line before any data is read
    train_spec, val_spec, test_spec = resolve_demo(cfg)
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
    table = _Table(vocabulary)
    counted = {s.name: _count(s, cfg, table) for s in prepared.splits()}
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


def _model_inputs(batch: dict[str, tf.Tensor]) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
    return {"encoder_ids": batch["encoder_ids"], "decoder_ids": batch["decoder_ids"]}, \
        batch["labels"]


def generator_examples(data: GeneratorData, split: SplitData, cfg: GeneratorDataConfig
                       ) -> reader.Examples:
    """How ``split``'s lines are read, cleaned and cut into windows (``tfapp.data.reader``)."""
    c, t = cfg.context_words, cfg.target_words
    spec = {"encoder_ids": tf.TensorSpec([None, c], tf.int32),
            "decoder_ids": tf.TensorSpec([None, t], tf.int32),
            "labels": tf.TensorSpec([None, t], tf.int32), "id": tf.TensorSpec([None], tf.int64)}
    ids = reader.token_storage(len(data.vocabulary))
    return reader.Examples(
        task="generator", split=split, source=data.source(split),
        read=lambda rows: _cleaned_lines(split, cfg, rows),
        encode=_windows(vocabulary_table(data.vocabulary), cfg), model_inputs=_model_inputs,
        spec=spec, storage={"encoder_ids": ids, "decoder_ids": ids, "labels": ids,
                            "id": tf.int64},
        key=(cfg.example_shape, cfg.drop_regex, cfg.strip_punctuation, c, t, data.vocabulary),
        describe={"context_words": c, "target_words": t})


def make_generator_dataset(data: GeneratorData, split: SplitData, cfg: GeneratorDataConfig, *,
                           batch_size: int, training: bool, seed: int,
                           input_context: tf.distribute.InputContext | None = None,
                           start: stream.Start | None = None,
                           grouping: lengths.Grouping | None = None) -> tf.data.Dataset:
    """``({"encoder_ids", "decoder_ids"}, labels)`` int32 batches of one split
    (``tfapp.data.reader.read_batches``: ``batch_size`` is the global batch). With a
    ``grouping`` (``generator_grouping``) each batch's ``decoder_ids`` and labels are cut
    to its target-length bucket."""
    return reader.read_batches(generator_examples(data, split, cfg), cfg,
                               batch_size=batch_size, training=training, seed=seed,
                               input_context=input_context, start=start, grouping=grouping)


def generator_grouping(data: GeneratorData, cfg: GeneratorDataConfig, seed: int, *,
                       device_kind: str, input_pipelines: int,
                       steps_per_execution: int | None = 1
                       ) -> tuple[lengths.Grouping | None, str]:
    """``lengths.grouping_for`` the generator: buckets of target length (``label_lengths``,
    placed by the training split's histogram), each cutting ``DECODER_KEYS`` to at most
    ``target_words``; and the line saying what was chosen."""
    buckets = cfg.length_buckets
    sample = target_length_sample(data, data.splits.train) if buckets > 1 else np.zeros([0])
    return lengths.grouping_for(
        buckets, cfg.target_words, seed, sample, device_kind=device_kind,
        input_pipelines=input_pipelines, steps_per_execution=steps_per_execution,
        length_fn=label_lengths, keys=DECODER_KEYS, length_name="target_words")
