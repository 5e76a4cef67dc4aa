"""Seq2Seq network, masked loss and metrics: shapes, padding ignored, training learns."""

import math

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.models import seq2seq

import numpy as np
import pytest
import tensorflow as tf


def batch(rng, b=4, n=5, k=6, vocab=20):
    enc = rng.integers(4, vocab, size=(b, n)).astype("int32")
    enc[:, 3:] = 0  # right padding in the context
    labels = rng.integers(4, vocab, size=(b, k)).astype("int32")
    labels[:, 4:] = 0
    dec = np.concatenate([np.full((b, 1), 2, "int32"), labels[:, :-1]], 1)
    return {"encoder_ids": tf.constant(enc), "decoder_ids": tf.constant(dec)}, tf.constant(labels)


@pytest.mark.parametrize("attention,bidirectional", [("bahdanau", False), ("luong", True)])
def test_shapes_and_decode_step_agree_with_call(attention, bidirectional):
    model = seq2seq.Seq2Seq(20, embedding_dim=8, units=16, bidirectional=bidirectional,
                            attention=attention).build_for(5, 6)
    x, _ = batch(np.random.default_rng(0))
    logits = model(x)
    assert logits.shape == (4, 6, 20) and logits.dtype == tf.float32
    # Stepping the decoder cell from the encoder state gives the teacher-forced logits.
    memory, keys, mask, state = model.encode(x["encoder_ids"])
    assert memory.shape == (4, 5, 32 if bidirectional else 16)
    assert mask.numpy()[:, 3:].sum() == 0
    for t in range(6):
        step, state = model.decode_step(x["decoder_ids"][:, t], state, memory, keys, mask)
        np.testing.assert_allclose(step.numpy(), logits[:, t].numpy(), atol=1e-5)
    assert seq2seq.Seq2Seq(**model.get_config()).get_config() == model.get_config()


def test_padding_in_the_context_is_ignored():
    model = seq2seq.Seq2Seq(20, embedding_dim=8, units=16, bidirectional=True).build_for(5, 6)
    x, _ = batch(np.random.default_rng(1))
    longer = {"encoder_ids": tf.pad(x["encoder_ids"], [[0, 0], [0, 3]]),
              "decoder_ids": x["decoder_ids"]}
    np.testing.assert_allclose(model(x).numpy(), model(longer).numpy(), atol=1e-5)


def test_loss_ignores_padding_and_metrics():
    rng = np.random.default_rng(2)
    labels = tf.constant([[5, 6, 3, 0, 0], [7, 3, 0, 0, 0]])
    logits = rng.normal(size=(2, 5, 10)).astype("float32")
    loss_fn = seq2seq.MaskedSequenceLoss()
    base = float(loss_fn(labels, tf.constant(logits)))
    changed = logits.copy()
    changed[labels.numpy() == 0] = rng.normal(size=(5, 10)) * 100.0  # padded positions only
    assert float(loss_fn(labels, tf.constant(changed))) == pytest.approx(base, abs=1e-6)
    # The value is the mean cross-entropy over the 5 real tokens.
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits).numpy()
    assert base == pytest.approx(ce[labels.numpy() != 0].mean(), rel=1e-5)

    acc, ppl = seq2seq.MaskedTokenAccuracy(), seq2seq.Perplexity()
    onehot = tf.one_hot(labels, 10) * 10.0  # right everywhere, padding included
    acc.update_state(labels, onehot)
    assert float(acc.result()) == 1.0 and float(acc.count) == 5.0
    ppl.update_state(labels, tf.constant(logits))
    assert float(ppl.result()) == pytest.approx(math.exp(base), rel=1e-5)


def test_token_metrics_weigh_tokens_not_batches():
    """Streaming over batches with 2 and 12 real tokens: accuracy and perplexity are the
    means over all real tokens (padding ignored), not the mean of batch means."""
    rng = np.random.default_rng(5)
    labels = rng.integers(1, 10, (4, 6)).astype("int32")
    labels[:, 4:] = 0
    labels[0, 2:] = 0
    logits = rng.normal(size=(4, 6, 10)).astype("float32")
    acc, ppl = seq2seq.MaskedTokenAccuracy(), seq2seq.Perplexity()
    for part in (slice(0, 1), slice(1, 4)):
        acc.update_state(tf.constant(labels[part]), tf.constant(logits[part]))
        ppl.update_state(tf.constant(labels[part]), tf.constant(logits[part]))
    real = labels != 0
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits).numpy()
    assert float(acc.result()) == pytest.approx((logits.argmax(-1) == labels)[real].mean())
    assert float(ppl.result()) == pytest.approx(math.exp(ce[real].mean()), rel=1e-5)


def test_a_few_training_steps_reduce_the_loss():
    tf.keras.utils.set_random_seed(0)
    x, y = batch(np.random.default_rng(3), b=16)
    model = seq2seq.Seq2Seq(20, embedding_dim=16, units=32).build_for(5, 6)
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-2), loss=seq2seq.MaskedSequenceLoss(),
                  metrics=[seq2seq.MaskedTokenAccuracy(), seq2seq.Perplexity()])
    hist = model.fit(x, y, batch_size=16, epochs=30, verbose=0).history
    assert hist["loss"][-1] < 0.5 * hist["loss"][0]
    assert hist["token_accuracy"][-1] > hist["token_accuracy"][0]
    assert hist["perplexity"][-1] < hist["perplexity"][0]


@pytest.mark.parametrize("bidirectional", [False, True])
def test_unfused_lstm_is_the_same_network(bidirectional):
    x, _ = batch(np.random.default_rng(5))
    fused = seq2seq.Seq2Seq(20, 8, 16, bidirectional=bidirectional).build_for(5, 6)
    plain = seq2seq.Seq2Seq(20, 8, 16, bidirectional=bidirectional,
                            fused_lstm=False).build_for(5, 6)
    plain.set_weights(fused.get_weights())
    np.testing.assert_allclose(plain(x).numpy(), fused(x).numpy(), atol=1e-5)


@pytest.mark.xla_cpu
def test_xla_training_step_and_mixed_precision_logits():
    x, y = batch(np.random.default_rng(4), b=8)
    model = seq2seq.Seq2Seq(20, embedding_dim=8, units=16, fused_lstm=False).build_for(5, 6)
    model.compile(optimizer="adam", loss=seq2seq.MaskedSequenceLoss(), jit_compile=True)
    loss = model.fit(x, y, batch_size=8, epochs=3, verbose=0).history["loss"]
    assert all(np.isfinite(loss)) and loss[-1] < loss[0]
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        mp = seq2seq.Seq2Seq(20, embedding_dim=8, units=16).build_for(5, 6)
        assert mp(x).dtype == tf.float32
        assert mp.decoder.compute_dtype == "bfloat16"
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


def test_lm_loss_counts_each_token_of_a_line_once():
    # Line "a b c" -> [START] a b c [END]; context_words 4, target_words 3: the windows at
    # positions 0..3 hold a (once), b (twice), c, [END] (three times each). (Exact while
    # the encoder is not full; past context_words words a token weighs at most too much.)
    from tfapp.data.text.words import continuation_windows

    windows = continuation_windows(tf.ragged.constant([[4, 5, 6]]), 4, 3)
    weights = seq2seq.lm_token_weights(windows["encoder_ids"], 3).numpy()
    per_token: dict[int, float] = {}
    for label_row, weight_row in zip(windows["labels"].numpy(), weights, strict=True):
        for label, weight in zip(label_row, weight_row, strict=True):
            if label:
                per_token[label] = per_token.get(label, 0.0) + weight
    assert per_token == pytest.approx({4: 1.0, 5: 1.0, 6: 1.0, 3: 1.0})
    # The compiled loss under lm_loss: sum(weight * cross-entropy) / sum(weight).
    model = seq2seq.Seq2Seq(8, embedding_dim=4, units=4, lm_loss=True).build_for(4, 3)
    model.compile(loss=seq2seq.MaskedSequenceLoss())
    x = {k: windows[k] for k in ("encoder_ids", "decoder_ids")}
    losses, mask, _ = seq2seq.token_scores(windows["labels"], model(x))
    expected = float(tf.reduce_sum(losses * weights) / tf.reduce_sum(mask * weights))
    assert expected != pytest.approx(float(tf.reduce_sum(losses) / tf.reduce_sum(mask)))
    assert model.evaluate(x, windows["labels"], verbose=0) == pytest.approx(expected, rel=1e-5)


def test_tied_embeddings_score_with_the_embedding_matrix():
    model = seq2seq.Seq2Seq(20, embedding_dim=8, units=16, tie_embeddings=True).build_for(5, 6)
    x, _ = batch(np.random.default_rng(0))
    assert not any("logits/kernel" in w.name for w in model.weights)
    before = model(x).numpy()
    # Only the output side of the embedding is involved in this change: the logits of
    # word 7 move when its row does, as an untied output layer's would not.
    matrix = model.embedding.embeddings
    matrix.assign(tf.tensor_scatter_nd_add(matrix, [[7]], [tf.ones([8])]))
    after = model(x).numpy()
    assert not np.allclose(after[..., 7], before[..., 7])
    assert seq2seq.Seq2Seq(**model.get_config()).get_config()["tie_embeddings"] is True


def test_a_window_padded_to_a_shorter_bucket_has_the_same_loss_and_metrics():
    """Length buckets cut a batch's decoder_ids and labels to 8 of target_words 12: the
    loss (lm_loss's weights included: they depend on target_words, not on the width a
    batch arrives with) and the metrics are those of the full width."""
    from tfapp.data.text.words import continuation_windows

    windows = continuation_windows(tf.ragged.constant([list(range(4, 18))]), 8, 12)
    short = (windows["labels"].numpy() != 0).sum(1) <= 8  # the line's last 8 windows
    x = {k: tf.boolean_mask(windows[k], short) for k in ("encoder_ids", "decoder_ids")}
    y = tf.boolean_mask(windows["labels"], short)
    assert y.shape == (8, 12) and not y.numpy()[:, 8:].any()
    cut = {"encoder_ids": x["encoder_ids"], "decoder_ids": x["decoder_ids"][:, :8]}
    model = seq2seq.Seq2Seq(20, embedding_dim=8, units=16, lm_loss=True).build_for(8, 12)
    # Larger weights than the initial ones: cross-entropies that differ between tokens,
    # so that how the tokens are weighted shows in the loss.
    model.set_weights([w * 4 for w in model.get_weights()])
    model.compile(loss=seq2seq.MaskedSequenceLoss(),
                  metrics=[seq2seq.MaskedTokenAccuracy(), seq2seq.Perplexity()])
    full = model.evaluate(x, y, verbose=0)
    assert model.evaluate(cut, y[:, :8], verbose=0) == pytest.approx(full, rel=1e-6)
    # The weights matter here: the mean is not the unweighted one, and weights capped at
    # the cut width (8, what the labels' width would give) are others.
    losses, mask, _ = seq2seq.token_scores(y, model(x))
    assert full[0] != pytest.approx(float(tf.reduce_sum(losses) / tf.reduce_sum(mask)),
                                    rel=1e-3)
    real = y.numpy()[:, :8] != 0
    at_width = seq2seq.lm_token_weights(x["encoder_ids"], 8).numpy()[real]
    assert not np.allclose(at_width, seq2seq.lm_token_weights(
        x["encoder_ids"], 12, 8).numpy()[real])
