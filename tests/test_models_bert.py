"""The native tf.keras BERT encoder: interface, masking, weights layout, mixed precision."""

from __future__ import annotations

import tfapp  # noqa: F401
from tfapp.models.bert import (
    BertConfig,
    BertEncoder,
    FeedForwardDense,
    dummy_inputs,
    gelu_exact,
    hf_weight_name,
)

import numpy as np
import pytest
import tensorflow as tf

CFG = BertConfig(vocab_size=60, hidden_size=32, num_layers=2, num_heads=2,
                 intermediate_size=64, max_position_embeddings=32)


def _batch(seed: int = 0, batch: int = 3, seq: int = 10) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, seq + 1, batch)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype("int32")
    ids = rng.integers(5, CFG.vocab_size, (batch, seq)).astype("int32") * mask
    types = ((np.arange(seq)[None] >= lengths[:, None] // 2) * mask).astype("int32")
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


@pytest.fixture(autouse=True)
def _float32_policy():
    yield
    tf.keras.mixed_precision.set_global_policy("float32")


def test_outputs_follow_the_hub_bert_interface():
    enc = BertEncoder(CFG, seed=1)
    out = enc(_batch(), training=False)
    assert out["pooled_output"].shape == (3, 32)
    assert out["sequence_output"].shape == (3, 10, 32)
    assert len(out["encoder_outputs"]) == 2
    assert all(o.shape == (3, 10, 32) for o in out["encoder_outputs"])
    np.testing.assert_array_equal(out["encoder_outputs"][-1], out["sequence_output"])
    # pooled_output is tanh(dense(first token)).
    assert np.all(np.abs(out["pooled_output"].numpy()) <= 1.0)


def test_padding_does_not_change_real_positions():
    enc = BertEncoder(CFG, seed=1)
    x = _batch(batch=1, seq=6)
    x["input_mask"][:] = [[1, 1, 1, 1, 0, 0]]
    x["input_word_ids"][:, 4:] = 0
    a = enc(x, training=False)
    y = {k: v.copy() for k, v in x.items()}
    y["input_word_ids"][:, 4:] = [[17, 23]]  # change only what the mask hides
    b = enc(y, training=False)
    np.testing.assert_allclose(a["sequence_output"][:, :4], b["sequence_output"][:, :4],
                               atol=1e-5)
    np.testing.assert_allclose(a["pooled_output"], b["pooled_output"], atol=1e-5)


def test_dropout_only_in_training():
    enc = BertEncoder(CFG, seed=1)
    x = _batch()
    a = enc(x, training=False)["sequence_output"]
    np.testing.assert_array_equal(a, enc(x, training=False)["sequence_output"])
    assert np.abs(a - enc(x, training=True)["sequence_output"]).max() > 1e-3


def test_seed_makes_weights_reproducible_and_distinct():
    a = BertEncoder(CFG, seed=7).named_weights()
    b = BertEncoder(CFG, seed=7).named_weights()
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(a[name].numpy(), b[name].numpy())
    # One initializer instance per weight: query, key and value must differ.
    q, k = a["layer_0/attention/query/kernel"], a["layer_0/attention/key/kernel"]
    assert not np.allclose(q.numpy(), k.numpy())


def test_stable_names_map_onto_hugging_face_bert():
    names = BertEncoder(CFG, seed=0).named_weights()
    assert len(names) == 5 + CFG.num_layers * 16 + 2
    assert sum(int(np.prod(v.shape)) for v in names.values()) == CFG.num_parameters()
    hf = {n: hf_weight_name(n) for n in names}
    assert hf["embeddings/word_embeddings"] == ("embeddings.word_embeddings.weight", False)
    assert hf["embeddings/layer_norm/gamma"] == ("embeddings.LayerNorm.weight", False)
    assert hf["layer_1/attention/query/kernel"] == (
        "encoder.layer.1.attention.self.query.weight", True)
    assert hf["layer_0/attention_output/bias"] == ("encoder.layer.0.attention.output.dense.bias",
                                                   False)
    assert hf["layer_0/output_layer_norm/beta"] == ("encoder.layer.0.output.LayerNorm.bias",
                                                    False)
    assert hf["pooler/kernel"] == ("pooler.dense.weight", True)
    assert len({v[0] for v in hf.values()}) == len(hf)  # one-to-one


def test_assign_named_weights_copies_a_model_and_rejects_mismatches():
    src, dst = BertEncoder(CFG, seed=1), BertEncoder(CFG, seed=2)
    x = _batch()
    dst.assign_named_weights({k: v.numpy() for k, v in src.named_weights().items()})
    np.testing.assert_allclose(src(x)["sequence_output"], dst(x)["sequence_output"], atol=1e-6)
    weights = {k: v.numpy() for k, v in src.named_weights().items()}
    weights.pop("pooler/bias")
    with pytest.raises(ValueError, match="missing.*pooler/bias"):
        dst.assign_named_weights(weights)
    weights["pooler/bias"] = np.zeros(7, "float32")
    with pytest.raises(ValueError, match="pooler/bias: shape"):
        dst.assign_named_weights(weights)


def test_mixed_bfloat16_runs_in_bf16_and_stays_close_to_float32():
    ref = BertEncoder(CFG, seed=3)
    x = _batch()
    expected = ref(x, training=False)["sequence_output"].numpy()
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    enc = BertEncoder(CFG, seed=3).build_weights()
    assert all(v.dtype == tf.float32 for v in enc.weights)  # float32 master weights
    enc.assign_named_weights({k: v.numpy() for k, v in ref.named_weights().items()})
    out = enc(x, training=False)
    assert out["sequence_output"].dtype == tf.bfloat16
    got = tf.cast(out["sequence_output"], tf.float32).numpy()
    assert np.abs(got - expected).max() < 0.1  # bf16 keeps ~3 significant digits


def test_config_validation_and_round_trip():
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        BertConfig(vocab_size=10, hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="activation"):
        BertConfig(vocab_size=10, activation="swish")
    assert BertConfig.from_dict({**CFG.to_dict(), "unknown_future_key": 1}) == CFG
    enc = BertEncoder.from_config(BertEncoder(CFG).get_config())
    assert enc.cfg == CFG
    assert enc(dummy_inputs(2, 4))["pooled_output"].shape == (2, 32)


@pytest.mark.xla_cpu
def test_trains_under_xla():
    enc = BertEncoder(CFG, seed=4)
    x = _batch()
    before = enc.named_weights()["layer_0/attention/query/kernel"].numpy().copy()
    opt = tf.keras.optimizers.Adam(1e-2)

    @tf.function(jit_compile=True)
    def step(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(enc(batch, training=True)["pooled_output"] - 0.5))
        opt.apply_gradients(zip(tape.gradient(loss, enc.trainable_variables),
                                enc.trainable_variables, strict=True))
        return loss

    losses = [float(step(x)) for _ in range(5)]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    after = enc.named_weights()["layer_0/attention/query/kernel"].numpy()
    assert np.abs(after - before).max() > 0


def test_gelu_exact_matches_tensorflow_values_and_gradient():
    x = tf.constant(np.linspace(-8, 8, 801, dtype=np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours, reference = gelu_exact(x), tf.nn.gelu(x, approximate=False)
    np.testing.assert_allclose(ours.numpy(), reference.numpy(), atol=2e-6)
    np.testing.assert_allclose(tape.gradient(ours, x).numpy(),
                               tape.gradient(reference, x).numpy(), atol=2e-6)


@pytest.mark.parametrize("units", [64, 16])  # wider and narrower than the input
def test_feed_forward_dense_equals_dense_in_values_and_gradients(units):
    """FeedForwardDense only reorders the weight-gradient matmul for oneDNN (tfapp turns
    oneDNN on for x86, so this runs its custom path here); values, input gradient and
    weight gradients must be Dense's."""
    x = tf.random.stateless_normal([3, 10, 32], seed=[1, 2])
    ours, ref = (FeedForwardDense(units, activation=gelu_exact),
                 tf.keras.layers.Dense(units, activation=gelu_exact))
    ours.build(x.shape)
    ref.build(x.shape)
    ref.set_weights(ours.get_weights())
    results = []
    for layer in (ours, ref):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(y * tf.sin(y))
        results.append((y, tape.gradient(loss, [x, *layer.trainable_variables])))
    (y1, g1), (y2, g2) = results
    assert y1.shape == (3, 10, units)
    np.testing.assert_allclose(y1.numpy(), y2.numpy(), atol=1e-6)
    for a, b in zip(g1, g2, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)
    traced = tf.function(ours).get_concrete_function(tf.TensorSpec([None, 10, 32]))
    assert traced.structured_outputs.shape.as_list() == [None, 10, units]
