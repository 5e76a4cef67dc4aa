"""Validation runs once per epoch: the classifier's confusion matrix and NER's entity
scores come from fit's own validation pass (streaming metrics, per replica, summed), not
from a second prediction over the split; the counts equal those of ``model.predict``."""

from __future__ import annotations

from tfapp.data.text.tags import from_spans, spans, tag_names
from tfapp.tasks.ner.metrics import EntityCounts, micro_scores
from tfapp.tasks.ner.scores import entity_report
from tfapp.training.metrics import ConfusionMatrix

import numpy as np
import pytest
from conftest import two_replica_results


def test_confusion_matrix_counts_as_sklearn_and_stays_out_of_the_logs():
    from sklearn.metrics import confusion_matrix

    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 3, 40), rng.dirichlet(np.ones(3), 40).astype("float32")
    metric = ConfusionMatrix(3, "multiclass")
    metric.update_state(y[:25], p[:25])
    metric.update_state(y[25:], p[25:])
    assert metric.result() == {}
    np.testing.assert_array_equal(metric.counts(), confusion_matrix(y, p.argmax(1),
                                                                    labels=[0, 1, 2]))
    binary = ConfusionMatrix(2, "binary")  # one sigmoid column; 0.5 is class 0, as the report
    binary.update_state(np.array([0, 1, 1, 0]), np.array([[0.5], [0.9], [0.2], [0.7]]))
    np.testing.assert_array_equal(binary.counts(), [[1, 1], [1, 1]])


def _tagged_rows(rng, rows: int, length: int, names: list[str]):
    """Labels [rows, length] (tag ids at random word positions, -1 elsewhere), one-hot
    predictions, and the word tags of each row (gold IOB2; predicted, any tags)."""
    labels = np.full((rows, length), -1)
    probs = np.zeros((rows, length, len(names)), np.float32)
    probs[..., 0] = 1.0
    gold, pred = [], []
    for r in range(rows):
        n = int(rng.integers(0, length - 1))
        at = np.sort(rng.choice(np.arange(1, length), n, replace=False))
        g = [names[i] for i in rng.integers(0, len(names), n)]
        g = from_spans(spans(g, "iob2"), n)  # made valid IOB2
        p = [t if rng.random() < 0.8 else names[rng.integers(0, len(names))] for t in g]
        labels[r, at] = [names.index(t) for t in g]
        probs[r, at] = 0.0
        probs[r, at, [names.index(t) for t in p]] = 1.0
        gold.append(g)
        pred.append(p)
    return labels, probs, gold, pred


def test_entity_counts_equal_seqeval_strict_per_type():
    names = tag_names(["LOC", "PER", "ORG"])
    labels, probs, gold, pred = _tagged_rows(np.random.default_rng(1), 80, 12, names)
    metric = EntityCounts(names)
    metric.update_state(labels[:50], probs[:50])
    metric.update_state(labels[50:], probs[50:])
    assert metric.result() == {}
    counts, report = metric.counts(), entity_report(gold, pred)
    assert counts["true_positives"].sum() > 0 and counts["predicted"].sum() > 0
    for i, kind in enumerate(metric.types):
        assert counts["gold"][i] == report["per_type"][kind]["support"]
        found = counts["true_positives"][i]
        assert (found / counts["gold"][i] if counts["gold"][i] else 0.0) == pytest.approx(
            report["per_type"][kind]["recall"])
    scores = micro_scores(counts)
    assert scores == pytest.approx({k: report[k] for k in ("precision", "recall", "f1")})


@pytest.mark.slow
def test_validation_reads_its_data_once_per_epoch_on_two_replicas(tmp_path_factory):
    """fit with validation over MirroredStrategy on 2 logical CPUs (an uneven last batch),
    with the callbacks the tasks install: each epoch reads the validation batches once
    (a counter in the dataset), and the matrix / entity scores equal those of predict
    (tests/workers/two_replicas.py)."""
    out = two_replica_results(tmp_path_factory)["validation_pass"]

    c = out["classifier"]
    assert c["read"] == 2 * 45  # two epochs, each reads the 45 validation rows once
    expected = np.zeros((3, 3), int)
    np.add.at(expected, (c["y"], c["predicted"]), 1)
    assert c["matrix"] == expected.tolist()
    assert not any("confusion" in key for key in c["logs"])  # no matrix among the scalars

    n = out["ner"]
    assert n["read"] == 2 * 37
    names = n["names"]
    gold = [[names[t] for t in row if t >= 0] for row in n["labels"]]
    pred = [[names[p] for t, p in zip(row, prow, strict=True) if t >= 0]
            for row, prow in zip(n["labels"], n["predicted"], strict=True)]
    # the window as one sentence: its words, gold as it is (any tags, read strictly)
    report = entity_report(gold, pred)
    tp = sum(n["counts"]["true_positives"])
    assert sum(n["counts"]["predicted"]) == sum(
        t.startswith("B-") for row in pred for t in row)
    assert sum(n["counts"]["gold"]) == report["entities"]
    assert tp == round(report["recall"] * report["entities"])
    assert n["history"]["val_entity_f1"][-1] == pytest.approx(report["f1"])
    assert "entity_f1" not in n["history"] and "entity_counts" not in n["history"]
