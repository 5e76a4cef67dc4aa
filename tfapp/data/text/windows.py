"""Token classification's windows: tagged words -> word pieces, tags on first pieces.

Each word is tokenised on its own by the BERT preprocessor's ``tokenize`` (WordPiece; a
word may give several pieces, or none). A word's tag goes to its *first* piece; the
other pieces, ``[CLS]``, ``[SEP]`` and padding get label ``IGNORE`` (-1), which the loss
and the metrics leave out (``tfapp.tasks.ner.model``).

A sentence whose pieces do not fit ``seq_length - 2`` is cut into windows of
``L = seq_length - 2`` consecutive pieces (piece ``j`` lies in window ``j // L`` at
position ``1 + j % L``, after ``[CLS]``). Windows do not overlap, so every word's first
piece is in exactly one window and predictions re-join by reading each word at its
first piece (the windows carry each position's word index); a word cut at a window's
end has its tag in the window where it starts. The training input
(``tfapp.data.examples.ner``) and the serving export window alike, with these functions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfapp.data.text.bert_preprocess import FEATURE_KEYS

import tensorflow as tf

__all__ = ["IGNORE", "word_pieces", "windows_per_sentence", "cut_windows"]

IGNORE = -1


def word_pieces(tokenize: Callable, words: tf.Tensor) -> tf.RaggedTensor:
    """Piece ids ``[n, (pieces)]`` of each of ``words`` ``[n]`` (a Hub ``tokenize`` gives
    ``[n, (words), (pieces)]``: a word with punctuation inside may split; merged)."""
    pieces = tokenize(words)
    if pieces.shape.rank > 2:
        pieces = pieces.merge_dims(1, -1)
    return tf.cast(pieces, tf.int32)


def windows_per_sentence(pieces: tf.Tensor, seq_length: int) -> tf.Tensor:
    """How many windows of ``seq_length`` (with [CLS] and [SEP]) hold sentences of
    ``pieces`` word pieces (int64): at least one, also for a sentence with none."""
    return tf.maximum(tf.constant(1, tf.int64), -(-pieces // (seq_length - 2)))


def cut_windows(tokenize: Callable, pack: Callable, words: tf.RaggedTensor,
             window: tf.Tensor | None, seq_length: int, tags: tf.RaggedTensor | None = None
             ) -> dict[str, Any]:
    """BERT ``features`` of window ``window[b]`` of each sentence ``words[b]``, its
    ``labels`` (the tag id on first pieces, ``IGNORE`` elsewhere) when ``tags`` are given,
    and ``word_index`` ``[b, seq_length]``: the index (in its sentence) of the word whose
    first piece is at each position, ``IGNORE`` elsewhere.

    With ``window=None`` every window of every sentence is made (each sentence tokenised
    once, however many windows it has), and ``sentence`` ``[windows]`` says whose each is.
    """
    size = seq_length - 2
    pieces = word_pieces(tokenize, words.flat_values)  # [words, (pieces)]
    per_sentence = tf.RaggedTensor.from_row_lengths(pieces, words.row_lengths())
    tokens = per_sentence.merge_dims(1, 2)  # [b, (pieces of the sentence)]
    sentence = None
    if window is None:
        windows = windows_per_sentence(tokens.row_lengths(), seq_length)
        sentence = tf.repeat(tf.range(tokens.nrows(), dtype=tf.int64), windows)
        window = tf.ragged.range(windows).flat_values
    first = tf.equal(tf.ragged.range(tf.cast(pieces.row_lengths(), tf.int32)), 0)
    first = tf.RaggedTensor.from_row_lengths(first, words.row_lengths()).merge_dims(1, 2)

    def per_piece(per_word: tf.Tensor) -> tf.RaggedTensor:
        """A value per word (flat, int32) at its first piece, IGNORE at the others."""
        values = tf.RaggedTensor.from_row_lengths(
            tf.repeat(per_word, pieces.row_lengths()), tokens.row_lengths())
        return tf.ragged.map_flat_values(tf.where, first, values,
                                         tf.fill(tf.shape(values.flat_values), IGNORE))

    values = {"word_index": per_piece(
        tf.ragged.range(tf.cast(words.row_lengths(), tf.int32)).flat_values)}
    if tags is not None:
        values["labels"] = per_piece(tf.cast(tags.flat_values, tf.int32))
    if sentence is not None:
        tokens = tf.gather(tokens, sentence)
        values = {k: tf.gather(v, sentence) for k, v in values.items()}
    position = tf.ragged.range(tf.cast(tokens.row_lengths(), tf.int32))
    start = tf.cast(window, tf.int32)[:, tf.newaxis] * size
    keep = (position >= start) & (position < start + size)
    features = pack([tf.ragged.boolean_mask(tokens, keep)], seq_length=seq_length)
    out: dict[str, Any] = {"features": {
        k: tf.ensure_shape(tf.cast(features[k], tf.int32), [None, seq_length])
        for k in FEATURE_KEYS}, "sentence": sentence, "window": window}
    for name, value in values.items():
        value = tf.ragged.boolean_mask(value, keep)
        value = tf.concat([tf.fill([value.nrows(), 1], IGNORE), value], axis=1)
        out[name] = value.to_tensor(default_value=IGNORE, shape=[None, seq_length])
    return out
