"""Classification metrics: streaming Keras metrics for training, and the end-of-run report.

Label layouts (what the classifier's data pipeline yields and its head outputs):
  binary      y_true int [batch]      y_pred sigmoid [batch, 1]
  multiclass  y_true int [batch]      y_pred softmax [batch, C]
  multilabel  y_true 0/1 [batch, C]   y_pred sigmoid [batch, C]
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

BINARY, MULTICLASS, MULTILABEL = "binary", "multiclass", "multilabel"


def label_mode(num_classes: int, multi_label: bool) -> str:
    if multi_label:
        return MULTILABEL
    return BINARY if num_classes == 2 else MULTICLASS


def _one_hot_truth_and_prediction(y_true, y_pred, mode: str, num_classes: int):
    """(truth, prediction) as 0/1 float matrices [batch, classes]."""
    y_pred = tf.cast(y_pred, tf.float32)
    if mode == MULTILABEL:
        return tf.cast(y_true, tf.float32), tf.cast(y_pred >= 0.5, tf.float32)
    truth = tf.one_hot(tf.cast(tf.reshape(y_true, [-1]), tf.int32), num_classes)
    if mode == BINARY:
        predicted = tf.cast(tf.reshape(y_pred, [-1]) >= 0.5, tf.int32)
    else:
        predicted = tf.argmax(y_pred, axis=-1, output_type=tf.int32)
    return truth, tf.one_hot(predicted, num_classes)


@tf.keras.utils.register_keras_serializable(package="tfapp")
class MacroF1(tf.keras.metrics.Metric):
    """Unweighted mean of per-class F1 (binary: over both classes, like sklearn's macro)."""

    def __init__(self, num_classes: int, mode: str, name: str = "macro_f1", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes, self.mode = int(num_classes), mode
        shape = (self.num_classes,)
        self.tp = self.add_weight("tp", shape=shape, initializer="zeros")
        self.fp = self.add_weight("fp", shape=shape, initializer="zeros")
        self.fn = self.add_weight("fn", shape=shape, initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        truth, pred = _one_hot_truth_and_prediction(y_true, y_pred, self.mode, self.num_classes)
        self.tp.assign_add(tf.reduce_sum(truth * pred, axis=0))
        self.fp.assign_add(tf.reduce_sum((1.0 - truth) * pred, axis=0))
        self.fn.assign_add(tf.reduce_sum(truth * (1.0 - pred), axis=0))

    def result(self):
        return tf.reduce_mean(tf.math.divide_no_nan(2.0 * self.tp,
                                                    2.0 * self.tp + self.fp + self.fn))

    def reset_state(self):
        for v in (self.tp, self.fp, self.fn):
            v.assign(tf.zeros_like(v))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "mode": self.mode}


@tf.keras.utils.register_keras_serializable(package="tfapp")
class OneVsRestAUC(tf.keras.metrics.AUC):
    """ROC AUC for softmax outputs with integer labels (one-vs-rest, micro-averaged)."""

    def __init__(self, num_classes: int, name: str = "auc", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes = int(num_classes)

    def update_state(self, y_true, y_pred, sample_weight=None):
        truth = tf.one_hot(tf.cast(tf.reshape(y_true, [-1]), tf.int32), self.num_classes)
        return super().update_state(truth, y_pred, sample_weight)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


def build_metrics(num_classes: int, multi_label: bool) -> list:
    mode = label_mode(num_classes, multi_label)
    if mode == MULTILABEL:
        auc = tf.keras.metrics.AUC(name="auc", multi_label=True, num_labels=num_classes)
        accuracy = tf.keras.metrics.BinaryAccuracy(name="accuracy")
    elif mode == BINARY:
        auc = tf.keras.metrics.AUC(name="auc")
        accuracy = tf.keras.metrics.BinaryAccuracy(name="accuracy")
    else:
        auc = OneVsRestAUC(num_classes)
        accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    return [accuracy, auc, MacroF1(num_classes, mode)]


def build_loss(num_classes: int, multi_label: bool) -> tf.keras.losses.Loss:
    if label_mode(num_classes, multi_label) == MULTICLASS:
        return tf.keras.losses.SparseCategoricalCrossentropy()
    return tf.keras.losses.BinaryCrossentropy()


def class_probabilities(y_pred: np.ndarray, mode: str) -> np.ndarray:
    """[batch, classes] probabilities for every mode (binary's one sigmoid -> two columns)."""
    y_pred = np.asarray(y_pred, dtype=np.float64)
    if mode == BINARY:
        p = y_pred.reshape(-1)
        return np.stack([1.0 - p, p], axis=1)
    return y_pred


def _roc_auc(truth: np.ndarray, score: np.ndarray) -> float:
    """Rank-based ROC AUC (ties averaged); nan when only one class is present."""
    pos, neg = truth.sum(), len(truth) - truth.sum()
    if pos == 0 or neg == 0:
        return float("nan")
    order = score.argsort(kind="mergesort")
    ranks = np.empty(len(score))
    sorted_scores = score[order]
    i = 0
    while i < len(score):  # average ranks over ties
        j = i
        while j + 1 < len(score) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[truth == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def classification_report(y_true: np.ndarray, y_pred: np.ndarray, label_names: list[str],
                          multi_label: bool) -> dict:
    """Accuracy, macro F1, ROC AUC and per-class precision/recall/F1/support, in numpy."""
    mode = label_mode(len(label_names), multi_label)
    probs = class_probabilities(y_pred, mode)
    if mode == MULTILABEL:
        truth = np.asarray(y_true, dtype=np.float64)
        pred = (probs >= 0.5).astype(np.float64)
        accuracy = float((truth == pred).mean())
    else:
        labels = np.asarray(y_true).reshape(-1).astype(int)
        truth = np.eye(len(label_names))[labels]
        pred = np.eye(len(label_names))[probs.argmax(axis=1)]
        accuracy = float((labels == probs.argmax(axis=1)).mean())
    per_class = {}
    for i, name in enumerate(label_names):
        tp = float((truth[:, i] * pred[:, i]).sum())
        fp = float(((1 - truth[:, i]) * pred[:, i]).sum())
        fn = float((truth[:, i] * (1 - pred[:, i])).sum())
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
        per_class[name] = {"precision": precision, "recall": recall, "f1": f1,
                           "support": int(truth[:, i].sum()),
                           "auc": _roc_auc(truth[:, i], probs[:, i])}
    aucs = [c["auc"] for c in per_class.values() if not np.isnan(c["auc"])]
    return {"accuracy": accuracy,
            "macro_f1": float(np.mean([c["f1"] for c in per_class.values()])),
            "auc": per_class[label_names[1]]["auc"] if mode == BINARY
            else (float(np.mean(aucs)) if aucs else float("nan")),
            "examples": int(len(truth)), "per_class": per_class}


def format_report(report: dict) -> str:
    width = max(10, *(len(n) for n in report["per_class"]))
    lines = [f"{'class':<{width}}  precision  recall     f1  support"]
    for name, c in report["per_class"].items():
        lines.append(f"{name:<{width}}  {c['precision']:9.3f}  {c['recall']:6.3f}  "
                     f"{c['f1']:5.3f}  {c['support']:7d}")
    lines.append(f"accuracy {report['accuracy']:.4f}  macro F1 {report['macro_f1']:.4f}  "
                 f"ROC AUC {report['auc']:.4f}  ({report['examples']} examples)")
    return "\n".join(lines)
