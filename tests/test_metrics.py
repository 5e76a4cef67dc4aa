"""Classification metrics: the streaming Keras metrics agree with the numpy report, and
the report matches hand-computed values."""

from __future__ import annotations

from tfapp.training.metrics import MacroF1, OneVsRestAUC, classification_report, label_mode

import numpy as np
import pytest


def test_report_matches_hand_computation_multiclass():
    y = np.array([0, 0, 1, 1, 2, 2])
    probs = np.array([[.8, .1, .1], [.2, .7, .1], [.1, .8, .1],
                      [.1, .6, .3], [.3, .3, .4], [.5, .2, .3]])
    r = classification_report(y, probs, ["a", "b", "c"], multi_label=False)
    # predictions: a, b, b, b, c, a
    assert r["accuracy"] == pytest.approx(4 / 6)
    assert r["per_class"]["a"]["precision"] == pytest.approx(0.5)
    assert r["per_class"]["b"]["recall"] == pytest.approx(1.0)
    assert r["per_class"]["b"]["f1"] == pytest.approx(2 * 2 / (2 * 2 + 1))
    assert r["per_class"]["c"]["f1"] == pytest.approx(2 / 3)
    assert r["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)


def test_binary_auc_and_macro_f1_over_both_classes():
    y = np.array([0, 0, 1, 1])
    p = np.array([[0.1], [0.6], [0.4], [0.9]])
    r = classification_report(y, p, ["neg", "pos"], multi_label=False)
    assert r["auc"] == pytest.approx(0.75)  # 3 of 4 positive/negative pairs ordered right
    assert r["accuracy"] == pytest.approx(0.5)
    assert r["macro_f1"] == pytest.approx(0.5)


@pytest.mark.parametrize("multi_label,classes", [(False, 2), (False, 3), (True, 3)])
def test_streaming_macro_f1_equals_report(multi_label, classes):
    rng = np.random.default_rng(0)
    n = 50
    if multi_label:
        y = (rng.random((n, classes)) > 0.5).astype("float32")
        p = rng.random((n, classes)).astype("float32")
    elif classes == 2:
        y = rng.integers(0, 2, n)
        p = rng.random((n, 1)).astype("float32")
    else:
        y = rng.integers(0, classes, n)
        p = rng.dirichlet(np.ones(classes), n).astype("float32")
    metric = MacroF1(classes, label_mode(classes, multi_label))
    metric.update_state(y[:20], p[:20])
    metric.update_state(y[20:], p[20:])  # streaming over two batches
    names = [str(i) for i in range(classes)]
    expected = classification_report(y, p, names, multi_label)["macro_f1"]
    assert float(metric.result()) == pytest.approx(expected, abs=1e-6)


def test_one_vs_rest_auc_is_perfect_for_perfect_scores():
    auc = OneVsRestAUC(3)
    auc.update_state(np.array([0, 1, 2]), np.eye(3, dtype="float32"))
    assert float(auc.result()) == pytest.approx(1.0)
