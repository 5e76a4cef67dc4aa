"""data.class_weight and model.label_smoothing: the weighted, smoothed cross-entropy equals
Keras's own losses given the same weights, the balanced weights are sklearn's, and the
update is the same on two replicas as on one."""

from __future__ import annotations

from tfapp.config import ConfigError, load_config
from tfapp.training.metrics import (
    BINARY,
    MULTICLASS,
    MULTILABEL,
    WeightedCrossEntropy,
    build_loss,
    class_weights_for,
)

import numpy as np
import pytest
import tensorflow as tf
from conftest import REPO, two_replica_results

WEIGHTS = np.array([0.5, 2.0, 3.0], np.float32)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_multiclass_equals_keras_loss_with_per_example_weights(smoothing):
    rng = np.random.default_rng(0)
    y = np.array([0, 1, 2, 2, 1, 0])
    p = tf.nn.softmax(rng.normal(size=(6, 3))).numpy()
    ours = WeightedCrossEntropy(MULTICLASS, 3, label_smoothing=smoothing,
                                class_weights=WEIGHTS)(y, p)
    keras = tf.keras.losses.CategoricalCrossentropy(label_smoothing=smoothing)(
        tf.one_hot(y, 3), p, sample_weight=WEIGHTS[y])
    assert float(ours) == pytest.approx(float(keras), rel=1e-6)
    if smoothing == 0.0:  # what fit(class_weight=...) computes for sparse labels
        sparse = tf.keras.losses.SparseCategoricalCrossentropy()(y, p, sample_weight=WEIGHTS[y])
        assert float(ours) == pytest.approx(float(sparse), rel=1e-6)


def test_binary_equals_keras_loss_with_per_example_weights():
    y = np.array([0, 1, 1, 0, 1])
    p = np.array([[0.2], [0.7], [0.4], [0.9], [0.99]], np.float32)
    w = np.array([1.0, 4.0], np.float32)
    ours = WeightedCrossEntropy(BINARY, 2, label_smoothing=0.1, class_weights=w)(y, p)
    keras = tf.keras.losses.BinaryCrossentropy(label_smoothing=0.1)(
        y.reshape(-1, 1).astype("float32"), p, sample_weight=w[y])
    assert float(ours) == pytest.approx(float(keras), rel=1e-6)


def test_multilabel_weights_the_positive_terms_by_hand():
    y = np.array([[1, 0, 1], [0, 1, 0]], np.float32)
    p = np.array([[0.9, 0.2, 0.6], [0.3, 0.8, 0.1]], np.float32)
    ours = float(WeightedCrossEntropy(MULTILABEL, 3, class_weights=WEIGHTS)(y, p))
    terms = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    by_hand = (terms * np.where(y == 1, WEIGHTS, 1.0)).mean(axis=1).mean()
    assert ours == pytest.approx(by_hand, rel=1e-5)
    assert isinstance(build_loss(3, True), tf.keras.losses.BinaryCrossentropy)  # off: plain


def test_balanced_weights_and_mappings():
    labels = np.array([0, 0, 0, 1, 2, 2])
    counts = np.bincount(labels)  # what the manifest holds: rows per label
    balanced = class_weights_for("balanced", counts, 6, ["a", "b", "c"], False)
    np.testing.assert_allclose(balanced, [6 / 9, 6 / 3, 6 / 6])  # n / (classes x count)
    from sklearn.utils.class_weight import compute_class_weight

    np.testing.assert_allclose(balanced, compute_class_weight(  # scikit-learn's own rule
        "balanced", classes=np.arange(3), y=labels))
    multi = np.array([[1, 0], [1, 1], [1, 0], [0, 0]])
    np.testing.assert_allclose(class_weights_for("balanced", multi.sum(0), 4, ["x", "y"], True),
                               [1 / 3, 3 / 1])  # negatives / positives per label
    np.testing.assert_allclose(class_weights_for({"c": 5.0}, counts, 6, ["a", "b", "c"], False),
                               [1, 1, 5])
    assert class_weights_for("none", counts, 6, ["a", "b", "c"], False) is None
    with pytest.raises(ConfigError, match="label.s. d that the training data does not have"):
        class_weights_for({"d": 2.0}, counts, 6, ["a", "b", "c"], False)
    with pytest.raises(ConfigError, match="label.s. c have no training rows"):
        class_weights_for("balanced", np.array([3, 3, 0]), 6, ["a", "b", "c"], False)


def test_config_accepts_names_and_mappings_and_refuses_the_rest():
    base = REPO / "configs/classifier_local.yaml"
    assert load_config(base, ["data.class_weight=Balanced"]).data.class_weight == "balanced"
    assert load_config(base, ["data.class_weight={pos: 2}"]).data.class_weight == {"pos": 2.0}
    with pytest.raises(ConfigError, match="data.class_weight: 'heavy' is not allowed"):
        load_config(base, ["data.class_weight=heavy"])
    with pytest.raises(ConfigError, match="the weight of 'pos' must be a number > 0"):
        load_config(base, ["data.class_weight={pos: -1}"])
    with pytest.raises(ConfigError, match="model.label_smoothing: 0.7 is too large"):
        load_config(base, ["model.label_smoothing=0.7"])


@pytest.mark.slow
def test_two_replicas_make_the_same_update_as_one(tmp_path_factory):
    """One step of global batch 8 with the weighted, smoothed loss: the same weights after
    it on MirroredStrategy over 2 logical CPUs as on one device
    (tests/workers/two_replicas.py)."""
    (two, one) = two_replica_results(tmp_path_factory)["class_weight_update"]["after"]
    for a, b in zip(two, one, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_class_weight_mapping_is_one_hparams_string():
    from tfapp.training.tb_logging import hparams

    cfg = load_config(REPO / "configs/classifier_local.yaml",
                      ["data.class_weight={positive: 3, negative: 0.5}"])
    assert hparams(cfg)["data.class_weight"] == "positive:3,negative:0.5"
    assert hparams(load_config(REPO / "configs/classifier_local.yaml",
                               []))["data.class_weight"] == "none"
