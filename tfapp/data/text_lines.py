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

The files are read by ``tfapp.data.sources`` (``read_texts``/``read_pairs``), the reader
every task and command shares: local, ``gs://``, ``.gz``, ``data.on_bad_rows``.

Labels are right-padded with 0 (the loss and metrics ignore it); decoder inputs are the
labels shifted right behind ``[START]`` (teacher forcing). Everything that touches
strings runs on the host: the device only ever sees int32 tensors of fixed shape.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp.atomic import write_text
from tfapp.config import DataConfig
from tfapp.data import pipeline as stages
from tfapp.data import sources
from tfapp.data.errors import DataError
from tfapp.demo import DEMO_DIR

import numpy as np
import tensorflow as tf

log = logging.getLogger("tfapp")

PAD, UNK, START, END = "", "[UNK]", "[START]", "[END]"
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
SPECIAL_TOKENS = (PAD, UNK, START, END)

DEMO_CORPUS = DEMO_DIR / "generator_corpus.txt"
DEMO_PAIRS = DEMO_DIR / "generator_pairs.tsv"

# Keras' default punctuation set minus the apostrophe, so "man's" stays one word.
PUNCTUATION = r"[!\"#$%&()*+,\-./:;<=>?@\[\\\]^_`{|}~]"


# --------------------------------------------------------------------------- cleaning


def standardize(texts: tf.Tensor, strip_punctuation: bool = True) -> tf.Tensor:
    """Lowercase, optionally strip punctuation, collapse whitespace (TF ops).

    The same function runs on the corpus at training time and, traced into the export,
    on prompts at serving time, so both see identical words.
    """
    texts = tf.strings.lower(texts, encoding="utf-8")
    if strip_punctuation:
        texts = tf.strings.regex_replace(texts, PUNCTUATION, " ")
    texts = tf.strings.regex_replace(texts, r"\s+", " ")
    return tf.strings.strip(texts)


def clean_lines(lines: list[str], drop_regex: str = "",
                strip_punctuation: bool = True) -> list[str]:
    """Drop lines matching ``drop_regex`` (on the raw text), standardize, drop empties."""
    if drop_regex:
        try:
            pattern = re.compile(drop_regex)
        except re.error as err:
            raise DataError(f"data.drop_regex: '{drop_regex}' is not a valid regular "
                            f"expression ({err})") from None
        lines = [line for line in lines if not pattern.search(line)]
    if not lines:
        return []
    cleaned = standardize(tf.constant(lines), strip_punctuation).numpy()
    return [c.decode("utf-8") for c in cleaned if c]


# --------------------------------------------------------------------------- reading
# The files are read by tfapp.data.sources (formats, gs://, .gz, bad rows); here only which
# files ('demo') and which settings.


def read_corpus(pattern: str, cfg: DataConfig, split: str = "train") -> list[str]:
    """The corpus texts of ``pattern`` ('demo' = the shipped corpus): the lines of text
    files, or ``data.text_column`` of csv/tsv/jsonl/tfrecord rows."""
    if pattern == "demo":
        pattern = str(DEMO_CORPUS)
    return sources.read_texts(pattern, text_column=cfg.text_column, fmt=cfg.format,
                              mode=cfg.on_bad_rows, split=split, what=f"data.{split}_files")


def read_pairs(pattern: str, cfg: DataConfig, split: str = "train") -> list[tuple[str, str]]:
    """(source, target) rows of csv/tsv/jsonl/tfrecord files ('demo' = the shipped pairs):
    ``data.source_column`` -> ``data.target_column``."""
    if pattern == "demo":
        pattern = str(DEMO_PAIRS)
    return sources.read_pairs(pattern, source_column=cfg.source_column,
                              target_column=cfg.target_column, fmt=cfg.format,
                              mode=cfg.on_bad_rows, split=split, what=f"data.{split}_files")


# --------------------------------------------------------------------------- vocabulary


def build_vocabulary(lines: list[str], vocab_size: int) -> list[str]:
    """``TextVectorization.adapt`` on cleaned lines -> the vocabulary with specials first.

    Ids: 0 padding, 1 [UNK], 2 [START], 3 [END], then words by falling frequency.
    """
    counter = tf.keras.layers.TextVectorization(
        max_tokens=vocab_size, standardize=None, split="whitespace")
    counter.adapt(tf.data.Dataset.from_tensor_slices(lines).batch(1024))
    words = [str(w) for w in counter.get_vocabulary()[2:] if w not in SPECIAL_TOKENS]
    return list(SPECIAL_TOKENS) + words[: max(0, vocab_size - len(SPECIAL_TOKENS))]


def make_vectorizer(vocabulary: list[str]) -> tf.keras.layers.TextVectorization:
    """Whitespace-split words -> ragged int ids (unknown words -> 1)."""
    return tf.keras.layers.TextVectorization(
        standardize=None, split="whitespace", vocabulary=list(vocabulary), ragged=True)


def save_vocabulary(vocabulary: list[str], path: str | Path) -> Path:
    """One token per line; line 1 is the (empty) padding token."""
    return write_text(path, "\n".join(vocabulary) + "\n")


def load_vocabulary(path: str | Path) -> list[str]:
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    vocab = lines[:-1] if lines and lines[-1] == "" else lines
    if tuple(vocab[:4]) != SPECIAL_TOKENS:
        raise DataError(f"{path}: not a tfapp generator vocabulary (expected the padding, "
                        "[UNK], [START], [END] tokens first)")
    return vocab


# --------------------------------------------------------------------------- examples


@dataclass
class Examples:
    """Fixed-shape int32 arrays: encoder_ids [M, N], decoder_ids [M, K], labels [M, K].

    ``name`` is the split (train/validation): it names the split's snapshot and cache.
    """

    encoder_ids: np.ndarray
    decoder_ids: np.ndarray
    labels: np.ndarray
    name: str = "train"
    _fingerprint: str | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.labels)

    def fingerprint(self) -> str:
        """Content hash of the three arrays (values, shapes, dtypes): keys snapshots and
        caches to the exact examples, so changed data never replays a stale snapshot."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            for array in (self.encoder_ids, self.decoder_ids, self.labels):
                h.update(f"{array.dtype.str}{array.shape};".encode())
                h.update(np.ascontiguousarray(array).tobytes())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint


def _targets(labels_rows: list[list[int]], target_words: int) -> tuple[np.ndarray, np.ndarray]:
    labels = np.zeros((len(labels_rows), target_words), np.int32)
    for r, row in enumerate(labels_rows):
        labels[r, : len(row)] = row
    # Teacher forcing: the decoder reads the gold previous word, [START] first.
    decoder = np.concatenate(
        [np.full((len(labels_rows), 1), START_ID, np.int32), labels[:, :-1]], axis=1)
    return decoder, labels


def continuation_windows(token_lines: list[list[int]], context_words: int,
                         target_words: int) -> Examples:
    """Every (context -> next words) window of every line; see the module docstring."""
    enc_rows, label_rows = [], []
    for tokens in token_lines:
        ext = [START_ID, *tokens, END_ID]
        for i in range(len(tokens) + 1):
            enc_rows.append(ext[max(0, i + 1 - context_words): i + 1])
            label_rows.append(ext[i + 1: i + 1 + target_words])
    encoder = np.zeros((len(enc_rows), context_words), np.int32)
    for r, row in enumerate(enc_rows):
        encoder[r, : len(row)] = row
    decoder, labels = _targets(label_rows, target_words)
    return Examples(encoder, decoder, labels)


def pair_examples(pairs: list[tuple[list[int], list[int]]], context_words: int,
                  target_words: int) -> Examples:
    """Source -> target examples; both are truncated at the end to fit."""
    encoder = np.zeros((len(pairs), context_words), np.int32)
    label_rows = []
    for r, (src, tgt) in enumerate(pairs):
        row = [START_ID, *src][:context_words]
        encoder[r, : len(row)] = row
        label_rows.append([*tgt, END_ID][:target_words])
    decoder, labels = _targets(label_rows, target_words)
    return Examples(encoder, decoder, labels)


def prompt_encoder_ids(ids: tf.RaggedTensor, context_words: int,
                       keep: str = "last") -> tf.Tensor:
    """Ragged prompt word ids [B, (n)] -> encoder ids [B, context_words] (TF ops).

    Mirrors the training windows: ``[START] + prompt``, then the last (continuation) or
    first (pairs) ``context_words`` tokens, right-padded with 0.
    """
    ids = tf.cast(ids, tf.int32)
    start = tf.fill([ids.nrows(), 1], tf.constant(START_ID, tf.int32))
    ext = tf.concat([tf.RaggedTensor.from_tensor(start), ids], axis=1)
    ext = ext[:, -context_words:] if keep == "last" else ext[:, :context_words]
    return ext.to_tensor(default_value=PAD_ID, shape=[None, context_words])


def make_generator_dataset(examples: Examples, data_cfg: DataConfig, *, batch_size: int,
                           training: bool, seed: int,
                           input_context: tf.distribute.InputContext | None = None
                           ) -> tf.data.Dataset:
    """One pass of ``({"encoder_ids", "decoder_ids"}, labels)`` int32 batches.

    The same stages as the classifier's pipeline (``tfapp.data.pipeline``): shard by
    ``input_context`` (shard ``input_pipeline_id`` of ``num_input_pipelines``, batches of
    ``get_per_replica_batch_size(batch_size)``; ``batch_size`` is the *global* batch), then
    with ``data.snapshot``/``data.cache`` store the examples once in blocks and replay them
    (``stored_batches``), else shuffle the examples; then ``data.service``,
    ``data.prefetch`` and the options (``finalize``). Training batches drop the remainder
    (one static shape: XLA compiles once) and are shuffled with ``seed``; evaluation keeps
    every example, in order. The caller repeats the training stream.
    """
    part = stages.local_shard(input_context, len(examples), batch_size, training=training,
                              what=f"the generator's {examples.name} split")
    n_shards, shard, local_batch, n_local = part.count, part.index, part.batch, part.size
    stored = bool(data_cfg.snapshot or data_cfg.cache)
    order = np.arange(len(examples))
    if stored and training:
        # Stored blocks are fixed and the windows of one line sit side by side; a fixed
        # permutation (seed 0, part of the key) makes each block a random sample instead.
        order = np.random.default_rng(0).permutation(len(examples))
    order = order[shard::n_shards]
    dataset = tf.data.Dataset.from_tensor_slices(
        ({"encoder_ids": examples.encoder_ids[order], "decoder_ids": examples.decoder_ids[order]},
         examples.labels[order]))
    if stored:
        block = local_batch * max(1, stages.STORE_BLOCK // local_batch)
        key = stages.pipeline_key(
            examples=examples.fingerprint(), context_words=examples.encoder_ids.shape[1],
            target_words=examples.labels.shape[1], shard=[shard, n_shards], block=block,
            permuted=training)
        dataset = stages.stored_batches(
            dataset.batch(block), data_cfg, examples.name, key, block=block,
            batch=local_batch, examples=n_local, training=training, seed=seed,
            describe={"examples": len(examples), "shard": [shard, n_shards], "block": block,
                      "context_words": examples.encoder_ids.shape[1],
                      "target_words": examples.labels.shape[1]})
    else:
        if training and data_cfg.shuffle_buffer > 0:
            dataset = dataset.shuffle(min(data_cfg.shuffle_buffer, n_local), seed=seed,
                                      reshuffle_each_iteration=True)
        dataset = dataset.batch(local_batch, drop_remainder=training)
    # Evaluation order is fixed; training trades order for throughput unless
    # data.deterministic asks for reproducibility.
    return stages.finalize(dataset, data_cfg, examples.name,
                           sharded_by_context=input_context is not None,
                           deterministic=data_cfg.deterministic or not training)


# --------------------------------------------------------------------------- assembly


DatasetFn = Callable[[tf.distribute.InputContext | None], tf.data.Dataset]


@dataclass
class GeneratorData:
    """What ``build_generator_data`` made: the examples, their pipelines, the vocabulary.

    ``train`` and ``validation`` are dataset functions for ``pipeline.distribute``:
    ``fn(input_context)`` (or ``fn(None)``: one pipeline over every example) builds one
    pass of that split's pipeline (``make_generator_dataset``) at the global batch.
    """

    train: DatasetFn
    validation: DatasetFn | None
    vocabulary: list[str]
    num_train_examples: int
    num_validation_examples: int
    sample_prompts: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)


def _tokenize(vectorizer, texts: list[str]) -> list[list[int]]:
    if not texts:
        return []
    return [list(row) for row in vectorizer(tf.constant(texts)).to_list()]


def _split(items: list, fraction: float, seed: int) -> tuple[list, list]:
    """Seeded split of whole lines/pairs, so no window of a validation line is trained on."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    n_val = int(round(len(items) * fraction))
    val = sorted(order[:n_val])
    train = sorted(order[n_val:])
    return [items[i] for i in train], [items[i] for i in val]


def build_generator_data(cfg: DataConfig, *, global_batch_size: int, seed: int
                         ) -> GeneratorData:
    """Read, clean, split, adapt the vocabulary on the training part, window, batch."""
    strip = cfg.strip_punctuation
    if cfg.example_shape == "pairs":
        raw = read_pairs(cfg.train_files, cfg)
        val_raw = (read_pairs(cfg.validation_files, cfg, "validation")
                   if cfg.validation_files else None)
        if val_raw is None:
            raw, val_raw = _split(raw, cfg.validation_split, seed)

        def clean(rows):
            kept = [r for r in rows
                    if not (cfg.drop_regex and re.search(cfg.drop_regex, r[0] + "\t" + r[1]))]
            if not kept:
                return [], []
            src = standardize(tf.constant([s for s, _ in kept]), strip).numpy()
            tgt = standardize(tf.constant([t for _, t in kept]), strip).numpy()
            both = [(s.decode(), t.decode()) for s, t in zip(src, tgt, strict=True) if t]
            return [s for s, _ in both], [t for _, t in both]

        clean_lines([], cfg.drop_regex)  # validates the regex with a clear message
        src, tgt = clean(raw)
        val_src, val_tgt = clean(val_raw)
        if not src:
            raise DataError(f"data.train_files: no usable pairs in '{cfg.train_files}' after "
                            "filtering (check data.drop_regex and the columns)")
        vocabulary = build_vocabulary(src + tgt, cfg.vocab_size)
        vec = make_vectorizer(vocabulary)
        train_ex = pair_examples(list(zip(_tokenize(vec, src), _tokenize(vec, tgt),
                                          strict=True)), cfg.context_words, cfg.target_words)
        val_ex = pair_examples(list(zip(_tokenize(vec, val_src), _tokenize(vec, val_tgt),
                                        strict=True)), cfg.context_words, cfg.target_words)
        prompts = (val_src or src)[:3]
        n_texts, n_val_texts = len(src), len(val_src)
    else:
        lines = clean_lines(read_corpus(cfg.train_files, cfg), cfg.drop_regex, strip)
        if cfg.validation_files:
            val_lines = clean_lines(
                read_corpus(cfg.validation_files, cfg, "validation"),
                cfg.drop_regex, strip)
        else:
            lines, val_lines = _split(lines, cfg.validation_split, seed)
        if not lines:
            raise DataError(f"data.train_files: no text lines left in '{cfg.train_files}' "
                            "after cleaning (check data.drop_regex)")
        vocabulary = build_vocabulary(lines, cfg.vocab_size)
        vec = make_vectorizer(vocabulary)
        train_ex = continuation_windows(_tokenize(vec, lines), cfg.context_words,
                                        cfg.target_words)
        val_ex = continuation_windows(_tokenize(vec, val_lines), cfg.context_words,
                                      cfg.target_words)
        # Sample prompts for the per-epoch TensorBoard text: the opening words of a few
        # held-out lines, and the empty prompt (a line opening).
        prompts = ["", *(" ".join(line.split()[:2]) for line in (val_lines or lines)[:3])]
        n_texts, n_val_texts = len(lines), len(val_lines)

    val_ex.name = "validation"

    def pipeline(examples: Examples, training: bool) -> DatasetFn:
        def dataset_fn(input_context: tf.distribute.InputContext | None = None
                       ) -> tf.data.Dataset:
            return make_generator_dataset(examples, cfg, batch_size=global_batch_size,
                                          training=training, seed=seed,
                                          input_context=input_context)
        return dataset_fn

    info = {"vocab_size": len(vocabulary), "example_shape": cfg.example_shape,
            "context_words": cfg.context_words, "target_words": cfg.target_words,
            "texts": n_texts, "validation_texts": n_val_texts,
            "unk_rate": float(np.mean(train_ex.labels == UNK_ID))}
    log.info("generator data: %d %s -> %d examples (validation %d -> %d), vocabulary %d",
             n_texts, "pairs" if cfg.example_shape == "pairs" else "lines", len(train_ex),
             n_val_texts, len(val_ex), len(vocabulary))
    return GeneratorData(train=pipeline(train_ex, True),
                         validation=pipeline(val_ex, False) if len(val_ex) else None,
                         vocabulary=vocabulary,
                         num_train_examples=len(train_ex), num_validation_examples=len(val_ex),
                         sample_prompts=prompts, info=info)
