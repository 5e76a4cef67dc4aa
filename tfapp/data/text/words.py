"""The generator's words: cleaning, the word vocabulary and the windows a model learns from.

The same functions run on the corpus in the input pipeline (``tfapp.data.examples.generator``)
and, traced into the export, on prompts at serving time, so both see identical words.

Two example shapes feed the same encoder-decoder:

* **continuation**: every position of every corpus line. With ``ext = [START] + line +
  [END]`` and the next word at line position ``i`` (``0 <= i <= len(line)``, ``i = len``
  meaning "the line ends here"), the encoder sees the last ``context_words`` tokens of
  ``ext[:i + 1]`` and the decoder learns the next ``target_words`` tokens ``ext[i + 1:]``.
  A prompt is handled the same way (``[START] + prompt``, last ``context_words`` tokens),
  so an empty prompt asks for a line opening, and ``[END]`` teaches the model to stop.
* **pairs**: a source text -> a target text; the encoder sees the first
  ``context_words`` tokens of ``[START] + source``.

Labels are right-padded with 0 (the loss and metrics ignore it); decoder inputs are the
labels shifted right behind ``[START]`` (teacher forcing).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp.atomic import write_text
from tfapp.errors import DataError

import tensorflow as tf

PAD, UNK, START, END = "", "[UNK]", "[START]", "[END]"
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
SPECIAL_TOKENS = (PAD, UNK, START, END)

# Keras' default punctuation set minus the apostrophe, so "man's" stays one word.
PUNCTUATION = r"[!\"#$%&()*+,\-./:;<=>?@\[\\\]^_`{|}~]"


# --------------------------------------------------------------------------- cleaning


def standardize(texts: tf.Tensor, strip_punctuation: bool = True) -> tf.Tensor:
    """Lowercase, optionally strip punctuation, collapse whitespace (TF ops; see the module
    docstring: the corpus and the export's prompts go through it alike)."""
    texts = tf.strings.lower(texts, encoding="utf-8")
    if strip_punctuation:
        texts = tf.strings.regex_replace(texts, PUNCTUATION, " ")
    texts = tf.strings.regex_replace(texts, r"\s+", " ")
    return tf.strings.strip(texts)


def drop_matcher(drop_regex: str) -> Callable[[tf.Tensor], tf.Tensor] | None:
    """``texts -> bool``: which texts ``data.drop_regex`` drops (a search anywhere in the
    raw text, as Python's ``re.search``), run by TensorFlow's RE2; None for no regex. One
    DataError line when the pattern is not valid, or uses what RE2 lacks (lookarounds,
    backreferences)."""
    if not drop_regex:
        return None
    try:
        re.compile(drop_regex)
    except re.error as err:
        raise DataError(f"data.drop_regex: '{drop_regex}' is not a valid regular "
                        f"expression ({err})") from None
    pattern = f"(?s).*(?:{drop_regex}).*"
    try:
        tf.strings.regex_full_match(tf.constant([""]), pattern)
    except tf.errors.InvalidArgumentError as err:
        raise DataError(f"data.drop_regex: '{drop_regex}' uses syntax TensorFlow's regular "
                        f"expressions (RE2) lack ({err.message.splitlines()[0]}); write it "
                        "without lookarounds or backreferences") from None
    return lambda texts: tf.strings.regex_full_match(texts, pattern)


# --------------------------------------------------------------------------- vocabulary


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


def vocabulary_table(vocabulary: list[str]) -> tf.lookup.StaticHashTable:
    """Word -> id of ``vocabulary`` (unknown words -> ``UNK_ID``), as a table the input
    pipeline and the export both use."""
    words = vocabulary[1:]  # the padding token "" never comes out of a split
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(words), tf.range(1, len(vocabulary), dtype=tf.int64)),
        default_value=UNK_ID)


def word_ids(table: tf.lookup.StaticHashTable, texts: tf.Tensor) -> tf.RaggedTensor:
    """Cleaned texts ``[n]`` -> word ids ``[n, (words)]`` (whitespace-split)."""
    return tf.ragged.map_flat_values(table.lookup, tf.strings.split(texts))


def build_vocabulary(texts: list[str] | tf.data.Dataset, vocab_size: int) -> list[str]:
    """``TextVectorization.adapt`` on cleaned texts (a list, or a dataset of text
    batches: streamed) -> the vocabulary with specials first.

    Ids: 0 padding, 1 [UNK], 2 [START], 3 [END], then words by falling frequency.
    """
    counter = tf.keras.layers.TextVectorization(
        max_tokens=vocab_size, standardize=None, split="whitespace")
    if isinstance(texts, list):
        texts = tf.data.Dataset.from_tensor_slices(tf.constant(texts, tf.string)).batch(1024)
    counter.adapt(texts)
    words = [str(w) for w in counter.get_vocabulary()[2:] if w not in SPECIAL_TOKENS]
    return list(SPECIAL_TOKENS) + words[: max(0, vocab_size - len(SPECIAL_TOKENS))]


# --------------------------------------------------------------------------- examples


def continuation_windows(ids: tf.RaggedTensor, context_words: int, target_words: int
                         ) -> dict[str, tf.Tensor]:
    """Every (context -> next words) window of every line (see the module docstring).

    ``ids``: word ids ``[lines, (words)]``. Returns int32 ``encoder_ids`` ``[W,
    context_words]``, ``decoder_ids`` / ``labels`` ``[W, target_words]`` and ``line``
    ``[W]`` (the line each window is of), windows in line order.
    """
    ids = tf.cast(ids, tf.int32)
    lines = ids.nrows()
    edge = lambda token: tf.RaggedTensor.from_tensor(  # noqa: E731
        tf.fill([lines, 1], tf.constant(token, tf.int32)))
    ext = tf.concat([edge(START_ID), ids, edge(END_ID)], axis=1)  # [lines, (words + 2)]
    counts = ids.row_lengths() + 1  # positions i = 0 .. words
    line = tf.repeat(tf.range(lines, dtype=tf.int64), counts)
    pos = tf.ragged.range(counts).flat_values
    starts = tf.gather(ext.row_starts(), line)
    size = tf.gather(ext.row_lengths(), line)
    flat = ext.flat_values

    def take(first: tf.Tensor, width: int, length: tf.Tensor) -> tf.Tensor:
        """ext[line][first : first + length], right-padded to width with 0."""
        k = tf.range(width, dtype=tf.int64)[tf.newaxis]
        valid = k < length[:, tf.newaxis]
        index = tf.where(valid, starts[:, tf.newaxis] + first[:, tf.newaxis] + k, 0)
        return tf.where(valid, tf.gather(flat, index), 0)

    first = tf.maximum(pos + 1 - context_words, 0)
    encoder = take(first, context_words, pos + 1 - first)
    label_len = tf.minimum(size - (pos + 1), target_words)
    labels = take(pos + 1, target_words, label_len)
    return {"encoder_ids": encoder, "decoder_ids": _teacher_forcing(labels),
            "labels": labels, "line": line}


def pair_windows(source: tf.RaggedTensor, target: tf.RaggedTensor, context_words: int,
                 target_words: int) -> dict[str, tf.Tensor]:
    """Source -> target examples, one per pair; both are truncated at the end to fit."""
    source, target = tf.cast(source, tf.int32), tf.cast(target, tf.int32)
    n = source.nrows()
    start = tf.RaggedTensor.from_tensor(tf.fill([n, 1], START_ID))
    end = tf.RaggedTensor.from_tensor(tf.fill([n, 1], END_ID))
    encoder = tf.concat([start, source], 1)[:, :context_words].to_tensor(
        0, shape=[None, context_words])
    labels = tf.concat([target, end], 1)[:, :target_words].to_tensor(
        0, shape=[None, target_words])
    return {"encoder_ids": encoder, "decoder_ids": _teacher_forcing(labels),
            "labels": labels, "line": tf.range(n, dtype=tf.int64)}


def _teacher_forcing(labels: tf.Tensor) -> tf.Tensor:
    """The decoder reads the gold previous word, [START] first."""
    start = tf.fill([tf.shape(labels)[0], 1], tf.constant(START_ID, tf.int32))
    return tf.concat([start, labels[:, :-1]], axis=1)


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


#: what a length bucket cuts: the decoder's side, where a window's length varies (its
#: context is full past a line's first words) and most of a step's work is (the [tokens,
#: vocabulary] logits). The padding past a window's last target token only reaches the
#: positions after it (the decoder reads left to right), whose labels the loss ignores.
DECODER_KEYS = ("decoder_ids", "labels")


def label_lengths(batch: dict[str, tf.Tensor]) -> tf.Tensor:
    """Real target tokens per example (labels are right-padded with ``PAD_ID``)."""
    return tf.reduce_sum(tf.cast(tf.not_equal(batch["labels"], PAD_ID), tf.int32), axis=1)
