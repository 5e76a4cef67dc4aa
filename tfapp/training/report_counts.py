"""The classifier's report (``tfapp.training.metrics.classification_report``) from counts
kept batch by batch, so an evaluation holds no list of rows, whatever the data's size.

Accuracy, precision, recall, F1, support and the confusion matrix come from the counts
exactly. ROC AUC comes from two histograms per class (scores of the rows that are of the
class, and of those that are not) over bins of the score's float32 bits: scores in one
bin count as ties (half a pair), as scikit-learn counts equal scores. With the default
budget a binary model's bins are 2^-13 of a score wide relative to it, so the AUC differs
from scikit-learn's only where scores of both kinds fall that close together.
"""

from __future__ import annotations

import math

from tfapp.training.metrics import (
    BINARY,
    MULTILABEL,
    class_probabilities,
    label_mode,
    predicted_labels,
)

import numpy as np

__all__ = ["ClassificationCounts"]

#: float32 bits of 1.0: scores in [0, 1] have bit patterns in [0, this], in order
_ONE_BITS = 0x3F800000
#: histogram bins for all classes together, of each kind (bounds the memory: 8 B a bin)
BIN_BUDGET = 1 << 21


class ClassificationCounts:
    """``update(truth, y_pred)`` per batch (the arguments of ``classification_report``:
    class ids ``[n]`` or multi-hot ``[n, classes]``; probabilities as the model gives
    them), ``report()`` at the end."""

    def __init__(self, label_names: list[str], multi_label: bool, *,
                 bin_budget: int = BIN_BUDGET):
        self.names = list(label_names)
        classes = len(self.names)
        self.mode = label_mode(classes, multi_label)
        self.examples = 0
        self.confusion = np.zeros((classes, classes), np.int64)  # true x predicted
        self.tp, self.fp, self.fn = (np.zeros(classes, np.int64) for _ in range(3))
        self.wrong = 0  # multi-label: label decisions that differ from the truth
        per_class = max(1, bin_budget // classes)
        self.shift = max(0, math.ceil(math.log2((_ONE_BITS + 1) / per_class)))
        bins = (_ONE_BITS >> self.shift) + 1
        self.positive = np.zeros((classes, bins), np.int64)
        self.negative = np.zeros((classes, bins), np.int64)

    def update(self, truth: np.ndarray, y_pred: np.ndarray) -> None:
        probs = class_probabilities(y_pred, self.mode)
        pred = predicted_labels(probs, self.mode)
        classes = np.arange(len(self.names))
        if self.mode == MULTILABEL:
            indicator = np.asarray(truth).astype(int)
            self.tp += ((pred == 1) & (indicator == 1)).sum(axis=0)
            self.fp += ((pred == 1) & (indicator == 0)).sum(axis=0)
            self.fn += ((pred == 0) & (indicator == 1)).sum(axis=0)
            self.wrong += int((pred != indicator).sum())
        else:
            ids = np.asarray(truth).reshape(-1).astype(int)
            np.add.at(self.confusion, (ids, pred), 1)
            indicator = (ids[:, None] == classes).astype(int)
        self.examples += len(indicator)
        bins = np.clip(probs, 0.0, 1.0).astype(np.float32).view(np.int32) >> self.shift
        column = np.broadcast_to(classes, bins.shape)
        hit = indicator == 1
        np.add.at(self.positive, (column[hit], bins[hit]), 1)
        np.add.at(self.negative, (column[~hit], bins[~hit]), 1)

    def _auc(self, i: int) -> float:
        pos, neg = self.positive[i], self.negative[i]
        p, n = int(pos.sum()), int(neg.sum())
        if not p or not n:
            return float("nan")
        below = np.cumsum(neg) - neg  # negatives in lower bins
        return float((pos * (below + 0.5 * neg)).sum() / (p * n))

    def report(self) -> dict:
        """The dict ``classification_report`` returns, from the counts (``auc_method``
        says the AUC is binned)."""
        if self.mode == MULTILABEL:
            tp, fp, fn = self.tp, self.fp, self.fn
            accuracy = 1.0 - self.wrong / max(1, self.examples * len(self.names))
        else:
            tp = np.diag(self.confusion)
            fp = self.confusion.sum(axis=0) - tp
            fn = self.confusion.sum(axis=1) - tp
            accuracy = float(tp.sum() / max(1, self.examples))
        support = tp + fn
        precision = np.divide(tp, tp + fp, out=np.zeros(len(tp)), where=tp + fp > 0)
        recall = np.divide(tp, support, out=np.zeros(len(tp)), where=support > 0)
        denominator = 2 * tp + fp + fn
        f1 = np.divide(2 * tp, denominator, out=np.zeros(len(tp)), where=denominator > 0)
        per_class = {name: {"precision": float(precision[i]), "recall": float(recall[i]),
                            "f1": float(f1[i]), "support": int(support[i]),
                            "auc": self._auc(i)} for i, name in enumerate(self.names)}
        aucs = [c["auc"] for c in per_class.values() if not np.isnan(c["auc"])]
        resolution = 2.0 ** (self.shift - 23)
        what = {BINARY: "of the positive class", MULTILABEL: "per label, mean over labels"
                }.get(self.mode, "one-vs-rest, mean over classes")
        report = {"accuracy": float(accuracy), "macro_f1": float(np.mean(f1)),
                  "auc": per_class[self.names[1]]["auc"] if self.mode == BINARY
                  else (float(np.mean(aucs)) if aucs else float("nan")),
                  "auc_method": f"ROC AUC {what}, streamed: scores binned to {resolution:.1e} "
                                "of their value (equal within a bin count as ties)",
                  "examples": int(self.examples), "per_class": per_class}
        if self.mode != MULTILABEL:
            report["confusion_matrix"] = self.confusion.tolist()
        return report
