"""Classifier models: heads and activations, fine-tuning a Hub encoder (XLA on and off,
MirroredStrategy over 2 logical CPUs), CNN/RNN baselines, masked pooling."""

from __future__ import annotations

import tfapp  # noqa: F401
from tfapp.config import ClassifierModelConfig, ConfigError
from tfapp.hub.export import export_encoder, float32_policy
from tfapp.models.bert import BertConfig, BertEncoder
from tfapp.models.classifier import MaskedMeanMaxPooling, build_classifier, output_units

import numpy as np
import pytest
import tensorflow as tf
from conftest import two_replica_results

VOCAB, SEQ = 40, 12


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    return export_tiny_encoder(tmp_path_factory.mktemp("hub") / "encoder")


def export_tiny_encoder(path) -> str:
    """A 2-layer BERT encoder (hidden 32, dropout 0.1) exported as a Hub module at path."""
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=2,
                     intermediate_size=64, max_position_embeddings=SEQ, dropout=0.1,
                     attention_dropout=0.1)
    with float32_policy():
        encoder = BertEncoder(cfg, seed=3)
    return str(export_encoder(encoder, path))


@pytest.fixture(autouse=True)
def _reset_policy():
    yield
    tf.keras.mixed_precision.set_global_policy("float32")


def learnable_data(n: int = 64, seed: int = 0, num_classes: int = 2):
    """Label = which 'class token' (5, 6, 7...) follows [CLS]; the rest is noise + padding."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, n)
    lengths = rng.integers(4, SEQ + 1, n)
    mask = (np.arange(SEQ)[None] < lengths[:, None]).astype("int32")
    ids = rng.integers(10, VOCAB, (n, SEQ)).astype("int32")
    ids[:, 0] = 2
    ids[:, 1] = 5 + labels
    ids *= mask
    x = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}
    return x, labels


def _cfg(**kw) -> ClassifierModelConfig:
    base = dict(kind="bert", units=16, embedding_dim=16, dropout=0.1)
    return ClassifierModelConfig(**{**base, **kw})


@pytest.mark.parametrize("num_classes,multi_label,units,act", [
    (2, False, 1, "sigmoid"), (4, False, 4, "softmax"), (3, True, 3, "sigmoid")])
def test_output_units(num_classes, multi_label, units, act):
    assert output_units(num_classes, multi_label) == (units, act)


@pytest.mark.parametrize("kind,pooling", [("bert", "pooled"), ("bert", "mean_max"),
                                          ("cnn", "pooled"), ("rnn", "pooled")])
def test_probabilities_for_each_kind(encoder_dir, kind, pooling):
    x, _ = learnable_data(6)
    binary = build_classifier(_cfg(kind=kind, pooling=pooling), num_classes=2,
                              multi_label=False, seq_length=SEQ, vocab_size=VOCAB,
                              hub_handle=encoder_dir)
    p = binary.predict(x, verbose=0)
    assert p.shape == (6, 1) and ((p > 0) & (p < 1)).all()
    multi = build_classifier(_cfg(kind=kind, pooling=pooling, bidirectional=True),
                             num_classes=3, multi_label=False, seq_length=SEQ,
                             vocab_size=VOCAB, hub_handle=encoder_dir)
    p = multi.predict(x, verbose=0)
    assert p.shape == (6, 3)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-5)
    labels = build_classifier(_cfg(kind=kind, pooling=pooling), num_classes=3,
                              multi_label=True, seq_length=SEQ, vocab_size=VOCAB,
                              hub_handle=encoder_dir)
    p = labels.predict(x, verbose=0)
    assert p.shape == (6, 3) and not np.allclose(p.sum(axis=1), 1.0)
    assert binary.hub_handle == (encoder_dir if kind == "bert" else "")
    assert binary.classifier_kind == kind


def test_mixed_bfloat16_keeps_float32_probabilities(encoder_dir):
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    x, y = learnable_data(8)
    for kind in ("bert", "cnn"):
        model = build_classifier(_cfg(kind=kind, pooling="mean_max"), num_classes=2,
                                 multi_label=False, seq_length=SEQ, vocab_size=VOCAB,
                                 hub_handle=encoder_dir)
        assert model.output.dtype == tf.float32
        assert model.get_layer("logits").compute_dtype == "float32"
        model.compile(tf.keras.optimizers.Adam(1e-3), "binary_crossentropy")
        history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"]).all()


def _encoder_weights(model) -> list[np.ndarray]:
    return [w.numpy().copy() for w in model.get_layer("bert_encoder").weights]


def _fine_tune(encoder_dir, *, jit_compile: bool, epochs: int, batch_size: int):
    tf.keras.utils.set_random_seed(0)
    x, y = learnable_data(64)
    model = build_classifier(_cfg(), num_classes=2, multi_label=False, seq_length=SEQ,
                             hub_handle=encoder_dir)
    before = _encoder_weights(model)
    assert len(model.get_layer("bert_encoder").trainable_weights) == len(before) > 0
    model.compile(tf.keras.optimizers.Adam(3e-3), "binary_crossentropy", metrics=["accuracy"],
                  jit_compile=jit_compile)
    history = model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0)
    after = _encoder_weights(model)
    changed = sum(not np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert changed == len(before)  # every encoder variable was updated
    assert np.isfinite(history.history["loss"]).all()
    return history.history["loss"]


def test_fine_tuning_changes_encoder_weights(encoder_dir):
    losses = _fine_tune(encoder_dir, jit_compile=False, epochs=4, batch_size=16)
    assert losses[-1] < losses[0]


@pytest.mark.slow
@pytest.mark.xla_cpu
def test_fine_tuning_changes_encoder_weights_under_xla(encoder_dir):
    # Two steps only: XLA recompiles the train step on *every* step when it updates the
    # variables of a restored SavedModel (measured ~10 s/step here even for this tiny
    # encoder; a native encoder compiles once). See docs/hub.md "XLA".
    _fine_tune(encoder_dir, jit_compile=True, epochs=1, batch_size=32)


def test_frozen_encoder_trains_only_the_head(encoder_dir):
    x, y = learnable_data(16)
    model = build_classifier(_cfg(trainable=False), num_classes=2, multi_label=False,
                             seq_length=SEQ, hub_handle=encoder_dir)
    assert [w.name.split("/")[0] for w in model.trainable_weights] == ["logits", "logits"]
    before = _encoder_weights(model)
    model.compile(tf.keras.optimizers.Adam(1e-2), "binary_crossentropy")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    for a, b in zip(before, _encoder_weights(model), strict=True):
        np.testing.assert_array_equal(a, b)


def test_masked_pooling_ignores_padding():
    seq = tf.constant([[[1.0, -1.0], [3.0, 5.0], [100.0, 100.0]],
                       [[-2.0, -4.0], [9.0, 9.0], [9.0, 9.0]]])
    mask = tf.constant([[1, 1, 0], [1, 0, 0]])
    out = MaskedMeanMaxPooling("mean_max")(seq, mask).numpy()
    np.testing.assert_allclose(out, [[2.0, 2.0, 3.0, 5.0], [-2.0, -4.0, -2.0, -4.0]])
    empty = MaskedMeanMaxPooling("max")(seq, tf.zeros((2, 3), tf.int32)).numpy()
    np.testing.assert_array_equal(empty, np.zeros((2, 2)))


def test_user_errors_are_one_line(encoder_dir, tmp_path):
    with pytest.raises(ConfigError, match="needs the vocabulary size"):
        build_classifier(_cfg(kind="cnn"), num_classes=2, multi_label=False, seq_length=SEQ)
    with pytest.raises(ConfigError, match="model.kind=seq2seq is not a classifier"):
        build_classifier(_cfg(kind="seq2seq"), num_classes=2, multi_label=False,
                         seq_length=SEQ)
    with pytest.raises(ConfigError, match="at least 2 classes, found 1"):
        build_classifier(_cfg(), num_classes=1, multi_label=False, seq_length=SEQ,
                         hub_handle=encoder_dir)
    with pytest.raises(ConfigError, match="does not exist") as err:
        build_classifier(_cfg(), num_classes=2, multi_label=False, seq_length=SEQ,
                         hub_handle=str(tmp_path / "missing"))
    assert "\n" not in str(err.value)


def test_native_encoder_can_replace_the_hub_layer():
    # The path for mixed precision inside the encoder: a native BertEncoder as the layer.
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=1, num_heads=2,
                     intermediate_size=64, max_position_embeddings=SEQ)
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = build_classifier(_cfg(pooling="mean_max"), num_classes=3, multi_label=False,
                             seq_length=SEQ, encoder=BertEncoder(cfg, name="bert_encoder"))
    x, y = learnable_data(8, num_classes=3)
    model.compile(tf.keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy")
    assert np.isfinite(model.fit(x, y, batch_size=4, verbose=0).history["loss"]).all()
    assert model.output.dtype == tf.float32


@pytest.mark.slow
def test_fine_tunes_under_mirrored_strategy_with_steps_per_execution(tmp_path_factory):
    """Two replicas (logical CPUs) and steps_per_execution=4, in tests/workers/
    two_replicas.py: the logical devices must exist before TensorFlow initialises. No XLA:
    XLA's CPU backend binds to one device (DESIGN.md)."""
    result = two_replica_results(tmp_path_factory)["bert_fine_tuning"]
    assert result["replicas"] == 2
    assert result["mirrored"] == "MirroredVariable"
    assert len(result["devices"]) == 2
    assert result["changed"] == result["n"]
    assert np.isfinite(result["loss"]).all()
    assert result["loss"][-1] < result["loss"][0]
