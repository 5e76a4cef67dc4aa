"""The token classifier's loss and accuracy skip unlabelled positions (hand-computed);
under mixed precision the encoder runs in bfloat16 and the output stays float32."""

from __future__ import annotations

import math

import numpy as np
import pytest


def test_masked_loss_and_accuracy_hand_computed():
    from tfapp.models.token_classifier import MaskedTokenAccuracy, masked_token_loss

    import tensorflow as tf

    labels = tf.constant([[-1, 1, -1, 0], [-1, -1, -1, -1]])
    probs = tf.constant([[[0.5, 0.5], [0.2, 0.8], [0.9, 0.1], [0.4, 0.6]],
                         [[0.5, 0.5]] * 4])
    # row 0: mean of -log 0.8 and -log 0.4 over its two labelled positions; row 1: none
    np.testing.assert_allclose(masked_token_loss(labels, probs).numpy(),
                               [(-math.log(0.8) - math.log(0.4)) / 2, 0.0], rtol=1e-6)
    acc = MaskedTokenAccuracy()
    acc.update_state(labels, probs)
    assert float(acc.result()) == pytest.approx(0.5)  # position 1 right, position 3 wrong


@pytest.mark.slow
def test_output_is_float32_under_mixed_precision():
    from tfapp.config import NerModelConfig
    from tfapp.hub.handles import resolve_hub_handle
    from tfapp.models.bert import BertEncoder
    from tfapp.models.token_classifier import build_token_classifier

    import tensorflow as tf

    encoder, _ = resolve_hub_handle("builtin:tiny")
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = build_token_classifier(NerModelConfig(), num_tags=5, seq_length=8,
                                       hub_handle=encoder)
        ones = tf.ones([2, 8], tf.int32)
        probs = model({"input_word_ids": ones, "input_mask": ones,
                       "input_type_ids": tf.zeros([2, 8], tf.int32)})
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    assert probs.dtype == tf.float32 and probs.shape == (2, 8, 5)
    np.testing.assert_allclose(tf.reduce_sum(probs, -1).numpy(), 1.0, rtol=1e-5)
    # the module's weights run in the native encoder, so bfloat16 reaches the encoder
    # (a restored Hub graph would stay float32 whatever the policy)
    (encoder_layer,) = [layer for layer in model.layers if isinstance(layer, BertEncoder)]
    assert encoder_layer.compute_dtype == "bfloat16"
