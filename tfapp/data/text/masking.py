"""Masked-LM inputs: BERT's dynamic masking as a tf.data stage on packed BERT features.

``MlmMasker(vocab, ...)`` is mapped over *enumerated* batches of packed features
(``input_word_ids``/``input_mask``/``input_type_ids`` [batch, seq]) and returns
``(features + masked_lm_positions, masked_lm_ids, masked_lm_weights)`` for ``fit``:

* about ``mask_rate`` (15%) of the real tokens are chosen -- never ``[CLS]``, ``[SEP]``,
  ``[PAD]`` or ``[UNK]``; with ``whole_word`` a word is chosen with all its ``##`` pieces
  (whole-word masking), otherwise each WordPiece on its own;
* of the chosen tokens 80% become ``[MASK]``, 10% a random token, 10% stay (the 80/10/10
  rule of the BERT paper), and the model predicts the original token at each;
* at most ``max_predictions`` per sequence are kept (fixed shapes for XLA/TPU: the
  positions/ids/weights are [batch, max_predictions], padded with weight 0).

Choices are drawn per example with a Bernoulli(``mask_rate``) (as Hugging Face's
``DataCollatorForLanguageModeling`` does), and anew at every step: the random draws are
stateless functions of ``(seed, step)``, so masks differ from epoch to epoch (dynamic
masking, as RoBERTa) yet a run is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tensorflow as tf

__all__ = ["MlmMasker", "default_max_predictions"]

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def default_max_predictions(seq_length: int, mask_rate: float) -> int:
    """Room for the chosen tokens of nearly every sequence: the expected count plus
    three standard deviations (Bernoulli choices over at most seq_length - 2 tokens)."""
    n = max(seq_length - 2, 1)
    mean = n * mask_rate
    return max(1, min(n, math.ceil(mean + 3 * math.sqrt(n * mask_rate * (1 - mask_rate)))))


# Kept, not tensorflow_text.mask_language_model (same 80/10/10 rule): its selector and
# value chooser draw with unseeded stateful ops, so the same seed gives other masks on a
# second pass (tests/test_mlm.py::test_tensorflow_text_masks_are_not_reproducible).
class MlmMasker:
    """``masker(step, features) -> (inputs, masked_lm_ids, masked_lm_weights)``; see the
    module docstring. ``vocab`` is the model's WordPiece vocabulary (it must hold [MASK]);
    ``max_predictions`` must not exceed the sequence length."""

    def __init__(self, vocab: Sequence[str], *, max_predictions: int, mask_rate: float = 0.15,
                 whole_word: bool = False, seed: int = 0):
        if "[MASK]" not in vocab:
            raise ValueError("the vocabulary has no [MASK] token, which masked-LM training "
                             "needs; use a BERT vocab (build-bert and HF BERT vocabs have it)")
        if not 0.0 < mask_rate < 1.0:
            raise ValueError(f"mask_rate must be in (0, 1), got {mask_rate}")
        if max_predictions < 1:
            raise ValueError(f"max_predictions must be >= 1, got {max_predictions}")
        index = {t: i for i, t in enumerate(vocab)}
        self.mask_id = index["[MASK]"]
        self.vocab_size = len(vocab)
        self.max_predictions = int(max_predictions)
        self.mask_rate = float(mask_rate)
        self.whole_word = bool(whole_word)
        self.seed = int(seed)
        self._special = tf.constant([index[t] for t in SPECIAL_TOKENS if t in index], tf.int32)
        # id -> "is a ##continuation piece", for whole-word masking.
        self._continuation = tf.constant([t.startswith("##") for t in vocab], tf.bool)

    def _uniform(self, stream: int, step: tf.Tensor, shape) -> tf.Tensor:
        seed = tf.stack([tf.constant(self.seed * 8 + stream, tf.int64), tf.cast(step, tf.int64)])
        return tf.random.stateless_uniform(shape, seed=seed)

    def __call__(self, step: tf.Tensor, features: dict[str, tf.Tensor]):
        ids = tf.cast(features["input_word_ids"], tf.int32)
        shape = tf.shape(ids)
        batch, seq = shape[0], shape[1]
        special = tf.reduce_any(ids[..., tf.newaxis] == self._special, axis=-1)
        candidates = tf.logical_and(tf.cast(features["input_mask"], tf.bool),
                                    tf.logical_not(special))

        if self.whole_word:
            # Word k of a row = the k-th non-## candidate and the ## pieces after it; one draw
            # per word, read back at each of its pieces.
            starts = tf.logical_and(candidates,
                                    tf.logical_not(tf.gather(self._continuation, ids)))
            word_id = tf.cumsum(tf.cast(starts, tf.int32), axis=1)
            draw = tf.gather(self._uniform(0, step, [batch, seq + 1]), word_id, batch_dims=1)
        else:
            draw = self._uniform(0, step, shape)
        chosen = tf.logical_and(candidates, draw < self.mask_rate)

        # Keep at most max_predictions per row, chosen at random among the chosen ones.
        score = tf.where(chosen, self._uniform(1, step, shape), -1.0)
        top, positions = tf.math.top_k(score, k=self.max_predictions)
        weights = tf.cast(top >= 0.0, tf.float32)
        positions = tf.where(top >= 0.0, positions, 0)
        labels = tf.gather(ids, positions, batch_dims=1)

        # The positions actually predicted, as a [batch, seq] mask (only these change).
        predicted = tf.reduce_any(tf.logical_and(
            tf.one_hot(positions, seq, on_value=True, off_value=False, dtype=tf.bool),
            tf.cast(weights, tf.bool)[..., tf.newaxis]), axis=1)
        roll = self._uniform(2, step, shape)
        random_ids = tf.cast(tf.floor(self._uniform(3, step, shape) * self.vocab_size), tf.int32)
        masked = tf.where(tf.logical_and(predicted, roll < 0.8), self.mask_id, ids)
        masked = tf.where(tf.logical_and(predicted, (roll >= 0.8) & (roll < 0.9)), random_ids,
                          masked)

        inputs = {"input_word_ids": masked,
                  "input_mask": tf.cast(features["input_mask"], tf.int32),
                  "input_type_ids": tf.cast(features["input_type_ids"], tf.int32),
                  "masked_lm_positions": positions}
        return inputs, labels, weights
