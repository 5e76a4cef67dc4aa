"""Token classification on a TF-Hub BERT encoder: ``sequence_output`` -> dropout -> dense.

Inputs are the BERT dict of int32 ``[batch, seq_length]``; the output is float32 tag
probabilities ``[batch, seq_length, tags]`` (the last Dense and softmax in float32 under
mixed precision, as for the classifier). Labels are int32 ``[batch, seq_length]`` with
``-1`` where no word starts (``tfapp.data.text.windows.IGNORE``):
``masked_token_loss`` and ``MaskedTokenAccuracy`` leave those positions out.
"""

from __future__ import annotations

from tfapp.config import NerModelConfig
from tfapp.models.classifier import bert_encoder_outputs
from tfapp.models.hub_encoder import BERT_INPUT_KEYS

import tensorflow as tf

__all__ = ["build_token_classifier", "masked_token_loss", "MaskedTokenAccuracy"]


def build_token_classifier(model_cfg: NerModelConfig, *, num_tags: int, seq_length: int,
                           hub_handle: str, encoder: tf.keras.layers.Layer | None = None
                           ) -> tf.keras.Model:
    """The uncompiled token classifier (build it in the strategy's scope)."""
    # Any length up to seq_length: batches come padded to their length bucket.
    inputs = {k: tf.keras.Input(shape=(None,), dtype=tf.int32, name=k)
              for k in BERT_INPUT_KEYS}
    outputs = bert_encoder_outputs(model_cfg, inputs, hub_handle, encoder)
    x = tf.keras.layers.Dropout(model_cfg.dropout, name="head_dropout")(
        outputs["sequence_output"])
    logits = tf.keras.layers.Dense(num_tags, dtype="float32", name="logits")(x)
    probs = tf.keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    model = tf.keras.Model(inputs=inputs, outputs=probs, name="bert_token_classifier")
    model.hub_handle = hub_handle
    return model


def masked_token_loss(labels: tf.Tensor, probs: tf.Tensor) -> tf.Tensor:
    """Cross-entropy per example, averaged over its labelled (first-piece) positions."""
    labels = tf.cast(labels, tf.int32)
    mask = tf.cast(labels >= 0, probs.dtype)
    ce = tf.keras.losses.sparse_categorical_crossentropy(tf.maximum(labels, 0), probs)
    return tf.reduce_sum(ce * mask, axis=-1) / tf.maximum(tf.reduce_sum(mask, axis=-1), 1.0)


class MaskedTokenAccuracy(tf.keras.metrics.Mean):
    """Share of labelled positions whose argmax is the label (``token_accuracy``)."""

    def __init__(self, name: str = "token_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tf.cast(y_true, tf.int32)
        right = tf.equal(tf.argmax(y_pred, axis=-1, output_type=tf.int32), y_true)
        return super().update_state(tf.cast(right, tf.float32),
                                    sample_weight=tf.cast(y_true >= 0, tf.float32))
