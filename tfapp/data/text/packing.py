"""Texts packed into full BERT sequences, for masked-LM pretraining.

BERT and RoBERTa pretrain on sequences filled with consecutive text up to the maximum
length (RoBERTa's FULL-SENTENCES: texts follow each other, a document boundary marked by
a separator token, a text longer than the rest of a sequence continued in the next one),
not on one short text padded to the full length. Each chunk of ``PACK_TEXTS`` texts of a
file is packed on its own: its word pieces, a ``[SEP]`` after each text, are cut into
rows of ``seq_length - 2`` pieces, each row framed as ``[CLS] ... [SEP]``; only a chunk's
last row is padded.

Because chunks are packed independently, the number of sequences of a file is fixed by
its texts, the tokeniser and ``seq_length``; the masked-LM examples
(``tfapp.data.examples.mlm``) count them once (cached), so the stream knows each file's
size, and steps per pass and exact resume work as for examples read one per row.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

__all__ = ["PACK_TEXTS", "pack_texts"]

# Texts packed together: a chunk's last row is padded, so larger chunks pad less (at 512
# short texts, well under 1% of the pieces).
PACK_TEXTS = 512


def pack_texts(tokenize: Callable[[tf.Tensor], tf.RaggedTensor], texts: tf.Tensor,
               seq_length: int, cls_id: int, sep_id: int) -> dict[str, tf.Tensor]:
    """A batch of texts -> BERT features ``[rows, seq_length]`` (int32) of the texts
    packed one after another (see the module docstring). ``tokenize`` is the BERT
    preprocessor's: strings -> word-piece ids ``[texts, words, pieces]``."""
    body = seq_length - 2
    pieces = tokenize(texts)
    if pieces.shape.rank == 3:  # [texts, words, pieces] -> [texts, pieces]
        pieces = pieces.merge_dims(1, 2)
    pieces = tf.cast(pieces, tf.int32)
    sep = tf.fill([pieces.nrows(), 1], sep_id)
    flat = tf.concat([pieces, tf.RaggedTensor.from_tensor(sep)], axis=1).flat_values
    total = tf.size(flat)
    rows = (total + body - 1) // body
    padded = tf.concat([flat, tf.zeros([rows * body - total], tf.int32)], axis=0)
    mask = tf.reshape(tf.sequence_mask(total, rows * body, tf.int32), [rows, body])
    ids = tf.reshape(padded, [rows, body])
    real = tf.reduce_sum(mask, axis=1)
    # [CLS] first; [SEP] right after each row's last real piece.
    ids = tf.concat([tf.fill([rows, 1], cls_id), ids, tf.zeros([rows, 1], tf.int32)], axis=1)
    ends = tf.stack([tf.range(rows), real + 1], axis=1)
    ids = tf.tensor_scatter_nd_update(ids, ends, tf.fill([rows], sep_id))
    mask = tf.sequence_mask(real + 2, seq_length, tf.int32)
    return {"input_word_ids": tf.ensure_shape(ids, [None, seq_length]),
            "input_mask": tf.ensure_shape(mask, [None, seq_length]),
            "input_type_ids": tf.zeros_like(ids)}
