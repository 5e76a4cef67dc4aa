"""The streamed classification report (``tfapp.training.report_counts``) against the
in-memory one (``classification_report``, scikit-learn) on the same rows: the counted
scores equal, the binned AUC within its bins."""

from __future__ import annotations

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.training.metrics import classification_report
from tfapp.training.report_counts import ClassificationCounts

import numpy as np
import pytest


def _streamed(truth, probs, names, multi_label, batch=7):
    counts = ClassificationCounts(names, multi_label)
    for start in range(0, len(truth), batch):
        counts.update(truth[start:start + batch], probs[start:start + batch])
    return counts.report()


def _compare(got, want):
    for key in ("accuracy", "macro_f1"):
        assert got[key] == pytest.approx(want[key], abs=1e-12), key
    assert got["examples"] == want["examples"]
    assert got.get("confusion_matrix") == want.get("confusion_matrix")
    assert got["auc"] == pytest.approx(want["auc"], abs=2e-4)
    for name, row in want["per_class"].items():
        for key in ("precision", "recall", "f1"):
            assert got["per_class"][name][key] == pytest.approx(row[key], abs=1e-12)
        assert got["per_class"][name]["support"] == row["support"]
        assert got["per_class"][name]["auc"] == pytest.approx(row["auc"], abs=2e-4)


def test_binary_multiclass_and_multilabel_reports_match_the_in_memory_one():
    rng = np.random.default_rng(0)
    n = 403
    # Binary: P(positive), with ties (rounded scores) and a truth the scores half follow.
    truth = rng.integers(0, 2, n)
    score = np.round(np.clip(0.5 + 0.2 * (truth - 0.5) + rng.normal(0, 0.2, n), 0, 1), 3)
    _compare(_streamed(truth, score[:, None], ["neg", "pos"], False),
             classification_report(truth, score[:, None], ["neg", "pos"], False))
    # Three classes, softmax rows.
    truth = rng.integers(0, 3, n)
    logits = rng.normal(0, 1, (n, 3)) + np.eye(3)[truth]
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    want = classification_report(truth, probs, ["a", "b", "c"], False)
    _compare(_streamed(truth, probs, ["a", "b", "c"], False), want)
    assert sum(map(sum, want["confusion_matrix"])) == n
    # Multi-label: sigmoid per label, a label never present (its AUC is nan, left out).
    truth = (rng.random((n, 3)) < [0.3, 0.6, 0.0]).astype(np.float32)
    probs = np.clip(0.3 * truth + rng.random((n, 3)) * 0.7, 0, 1)
    got = _streamed(truth, probs, ["x", "y", "z"], True)
    want = classification_report(truth, probs, ["x", "y", "z"], True)
    assert np.isnan(got["per_class"]["z"]["auc"]) and np.isnan(want["per_class"]["z"]["auc"])
    got["per_class"]["z"]["auc"] = want["per_class"]["z"]["auc"] = 0.0
    _compare(got, want)


def test_memory_of_the_counts_does_not_grow_with_the_rows():
    counts = ClassificationCounts(["neg", "pos"], False)
    size = counts.positive.nbytes + counts.negative.nbytes
    rng = np.random.default_rng(1)
    for _ in range(20):
        counts.update(rng.integers(0, 2, 1000), rng.random((1000, 1)))
    assert counts.examples == 20000
    assert counts.positive.nbytes + counts.negative.nbytes == size <= 64 << 20


def test_entity_tally_equals_seqeval_on_all_sentences_at_once():
    """NER's streamed report: batches of sentences counted and summed give seqeval's
    scores (strict and default mode, per type) on all of them, float for float."""
    import random

    from tfapp.tasks.ner.scores import EntityTally, entity_report

    rng = random.Random(0)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG", "B-ORG", "B-DATE"]
    gold = [[rng.choice(tags) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    pred = [[t if rng.random() < 0.6 else rng.choice(tags) for t in g] for g in gold]
    pred[0] = ["B-MISC"] * len(pred[0])  # a type only predicted: in per_type, support 0
    tally = EntityTally()
    for start in range(0, len(gold), 7):
        tally.update(gold[start:start + 7], pred[start:start + 7])
    got, want = tally.report(), entity_report(gold, pred)
    assert got == want
    assert want["per_type"]["MISC"]["support"] == 0 and want["default_mode"]["f1"] > 0
