"""Classification metrics: streaming Keras metrics for training, and the end-of-run report.

Label layouts (what the classifier's data pipeline yields and its head outputs):
  binary      y_true int [batch]      y_pred sigmoid [batch, 1]
  multiclass  y_true int [batch]      y_pred softmax [batch, C]
  multilabel  y_true 0/1 [batch, C]   y_pred sigmoid [batch, C]
"""

from __future__ import annotations

from tfapp.errors import ConfigError

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
class MacroF1(tf.keras.metrics.F1Score):
    """tf-keras's ``F1Score(average="macro")`` fed one-hot truth and 0/1 predictions: it takes
    no integer labels and, on one sigmoid column, would score the positive class alone
    (binary here is the mean over both classes, like sklearn's macro)."""

    def __init__(self, num_classes: int, mode: str, name: str = "macro_f1", **kwargs):
        for key in ("average", "beta", "threshold"):  # fixed here; present in get_config
            kwargs.pop(key, None)
        # The predictions arrive as 0/1 (the report's >= 0.5 and argmax), so any threshold
        # in (0, 1) keeps them as they are. float32 whatever the global policy: under a
        # mixed policy F1Score's counts would be autocast variables, and its result() adds
        # them inside the replicas' sync-on-read context, which refuses autocast reads
        # (MirroredStrategy + mixed_bfloat16 failed at the first epoch's end).
        kwargs.setdefault("dtype", "float32")
        super().__init__(average="macro", threshold=0.5, name=name, **kwargs)
        self.num_classes, self.mode = int(num_classes), mode
        # Create the variables now, where the metric is made (the strategy's scope), not
        # lazily in the first update: there, under multi-worker, they are made with a
        # collective broadcast inside the train step (and a lost worker surfaces as a
        # traceback from that broadcast, tests/test_resilience.py).
        shape = tf.TensorShape([None, self.num_classes])
        self.build(shape, shape)

    def update_state(self, y_true, y_pred, sample_weight=None):
        truth, pred = _one_hot_truth_and_prediction(y_true, y_pred, self.mode, self.num_classes)
        return super().update_state(truth, pred, sample_weight)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "mode": self.mode}


@tf.keras.utils.register_keras_serializable(package="tfapp")
class OneVsRestAUC(tf.keras.metrics.AUC):
    """ROC AUC for softmax outputs with integer labels (one-vs-rest, micro-averaged): kept as
    a subclass because ``tf.keras.metrics.AUC`` takes one-hot labels only."""

    def __init__(self, num_classes: int, name: str = "auc", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes = int(num_classes)

    def update_state(self, y_true, y_pred, sample_weight=None):
        truth = tf.one_hot(tf.cast(tf.reshape(y_true, [-1]), tf.int32), self.num_classes)
        return super().update_state(truth, y_pred, sample_weight)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


@tf.keras.utils.register_keras_serializable(package="tfapp")
class ConfusionMatrix(tf.keras.metrics.Metric):
    """Streaming single-label confusion matrix: ``num_classes x num_classes`` counts (rows:
    true label, columns: predicted), decided as the report decides (argmax; binary: the
    sigmoid above 0.5, ``predicted_labels``).

    Updated in fit's own steps, so the counts of the last evaluation are there at
    ``on_epoch_end`` without predicting the split again; under a strategy its variable is
    one per replica, summed when read (the usual metric aggregation). ``result()`` is an
    empty dict: a matrix has no place among the scalar logs (progress bar, history.csv),
    and no step reads it; ``counts()`` reads it, once per epoch (``ConfusionMatrixImage``).
    Float32 counts are exact up to 2**24 per cell.
    """

    def __init__(self, num_classes: int, mode: str, name: str = "confusion_matrix", **kwargs):
        super().__init__(name=name, **kwargs)
        if mode == MULTILABEL:
            raise ValueError("a confusion matrix is for single-label classification")
        self.num_classes, self.mode = int(num_classes), mode
        # float32, not int: an int32 variable lives in host memory on a GPU (a copy a step)
        self.matrix = self.add_weight(name="matrix", shape=(self.num_classes, self.num_classes),
                                      initializer="zeros", dtype=tf.float32)

    def update_state(self, y_true, y_pred, sample_weight=None):
        n = self.num_classes
        truth = tf.cast(tf.reshape(y_true, [-1]), tf.int32)
        if self.mode == BINARY:  # class_probabilities' [1 - p, p] argmax: a tie is class 0
            predicted = tf.cast(tf.reshape(y_pred, [-1]) > 0.5, tf.int32)
        else:
            predicted = tf.argmax(y_pred, axis=-1, output_type=tf.int32)
        weights = (tf.ones_like(truth, tf.float32) if sample_weight is None
                   else tf.cast(tf.reshape(sample_weight, [-1]), tf.float32))
        # A segment sum, not tf.math.confusion_matrix: no assert ops in the (XLA) step.
        counts = tf.math.unsorted_segment_sum(weights, truth * n + predicted, n * n)
        return self.matrix.assign_add(tf.reshape(counts, [n, n]))

    def result(self):
        return {}

    def reset_state(self):
        # Keras's default assigns a scalar 0, which a non-scalar variable refuses.
        for v in self.variables:
            v.assign(tf.zeros_like(v))

    def counts(self) -> np.ndarray:
        """The counts so far, summed over replicas, as ints (call outside a step)."""
        return np.rint(self.matrix.numpy()).astype(np.int64)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "mode": self.mode}


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


def build_loss(num_classes: int, multi_label: bool, *, label_smoothing: float = 0.0,
               class_weights: np.ndarray | None = None) -> tf.keras.losses.Loss:
    """Cross-entropy for the label layout; ``label_smoothing`` and per-label
    ``class_weights`` [num_classes] (see ``WeightedCrossEntropy``) when asked for."""
    mode = label_mode(num_classes, multi_label)
    if label_smoothing or class_weights is not None:
        return WeightedCrossEntropy(mode, num_classes, label_smoothing=label_smoothing,
                                    class_weights=class_weights)
    if mode == MULTICLASS:
        return tf.keras.losses.SparseCategoricalCrossentropy()
    return tf.keras.losses.BinaryCrossentropy()


@tf.keras.utils.register_keras_serializable(package="tfapp")
class WeightedCrossEntropy(tf.keras.losses.Loss):
    """Cross-entropy with label smoothing and per-label weights, per example.

    Single-label (binary or multiclass): each example's loss is scaled by the weight of its
    label -- what ``fit(class_weight=...)`` does, which tf-keras cannot apply to the
    distributed datasets tfapp feeds (it maps the dataset). Multi-label: each label's
    positive term is scaled by its weight (``pos_weight``), negatives weigh 1. Keras divides
    the sum by the global batch size under every strategy, as for the plain losses.
    ``SparseCategoricalCrossentropy`` has no ``label_smoothing``, hence the one-hot here.
    """

    def __init__(self, mode: str, num_classes: int, label_smoothing: float = 0.0,
                 class_weights=None, name: str = "weighted_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.mode, self.num_classes, self.label_smoothing = mode, num_classes, label_smoothing
        self.class_weights = (None if class_weights is None
                              else [float(w) for w in np.asarray(class_weights).reshape(-1)])

    def call(self, y_true, y_pred):
        y_pred = tf.cast(y_pred, tf.float32)
        weights = (None if self.class_weights is None
                   else tf.constant(self.class_weights, tf.float32))
        if self.mode == MULTILABEL:
            truth = tf.cast(y_true, tf.float32)
            smoothed = truth * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
            terms = tf.keras.backend.binary_crossentropy(smoothed, y_pred)
            if weights is not None:
                terms *= 1.0 + (weights - 1.0) * truth
            return tf.reduce_mean(terms, axis=-1)
        labels = tf.cast(tf.reshape(y_true, [-1]), tf.int32)
        if self.mode == BINARY:
            loss = tf.keras.losses.binary_crossentropy(
                tf.cast(tf.reshape(labels, [-1, 1]), tf.float32), y_pred,
                label_smoothing=self.label_smoothing)
        else:
            loss = tf.keras.losses.categorical_crossentropy(
                tf.one_hot(labels, self.num_classes), y_pred,
                label_smoothing=self.label_smoothing)
        return loss if weights is None else loss * tf.gather(weights, labels)

    def get_config(self) -> dict:
        return {**super().get_config(), "mode": self.mode, "num_classes": self.num_classes,
                "label_smoothing": self.label_smoothing, "class_weights": self.class_weights}


def class_weights_for(setting, counts: np.ndarray, rows: int, label_names: list[str],
                      multi_label: bool) -> np.ndarray | None:
    """``data.class_weight`` as one weight per label: None for "none"; "balanced" from the
    training label ``counts`` (rows carrying each label, of ``rows``): scikit-learn's
    "balanced" rule ``rows / (labels x count)`` for single-label (its
    ``compute_class_weight``, without a row array), negatives / positives per label for
    multi-label; a {label: weight} mapping (others weigh 1)."""
    if setting == "none":
        return None
    if isinstance(setting, dict):
        unknown = sorted(set(setting) - set(label_names))
        if unknown:
            raise ConfigError(f"data.class_weight names label(s) {', '.join(unknown)} that the "
                              f"training data does not have (labels: {', '.join(label_names)})")
        return np.array([setting.get(name, 1.0) for name in label_names], np.float64)
    counts = np.asarray(counts, np.float64)
    if multi_label:
        return (rows - counts) / np.maximum(counts, 1.0)
    if (counts == 0).any():
        missing = [n for n, c in zip(label_names, counts, strict=True) if not c]
        raise ConfigError(f"data.class_weight=balanced: label(s) {', '.join(missing)} have no "
                          "training rows; give the weights as a mapping")
    return counts.sum() / (len(label_names) * counts)


def class_probabilities(y_pred: np.ndarray, mode: str) -> np.ndarray:
    """[batch, classes] probabilities for every mode (binary's one sigmoid -> two columns)."""
    y_pred = np.asarray(y_pred, dtype=np.float64)
    if mode == BINARY:
        p = y_pred.reshape(-1)
        return np.stack([1.0 - p, p], axis=1)
    return y_pred


#: What a report's ``auc`` is (written beside it): scikit-learn's exact ROC AUC over the
#: predicted probabilities. Training's ``auc``/``val_auc`` is Keras's AUC metric instead,
#: a Riemann sum over 200 fixed thresholds, macro over labels for multi-label and
#: micro (one-vs-rest pooled) for multiclass, so the two differ for the same weights.
AUC_METHOD = {
    BINARY: "exact ROC AUC of the positive class (scikit-learn)",
    MULTICLASS: "exact ROC AUC one-vs-rest, mean over classes (scikit-learn)",
    MULTILABEL: "exact ROC AUC per label, mean over labels (scikit-learn)",
}


#: Printed under the final metrics when both kinds of AUC are among them.
AUC_NOTE = ("auc, val_auc: Keras's AUC during training (200 fixed thresholds: predictions "
            "between two thresholds tie); val_report_auc, test_auc: the exact ROC AUC of "
            "the exported model, as in the reports")


def _roc_auc(truth: np.ndarray, score: np.ndarray) -> float:
    """sklearn's ROC AUC, nan (not a warning) when only one class is present."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(truth, score)) if 0 < truth.sum() < len(truth) else float("nan")


def predicted_labels(probs: np.ndarray, mode: str) -> np.ndarray:
    """The decision on [batch, classes] probabilities: 0/1 per label at >= 0.5 (multi-label),
    else the argmax class index."""
    return (probs >= 0.5).astype(int) if mode == MULTILABEL else probs.argmax(axis=1)


def classification_report(y_true: np.ndarray, y_pred: np.ndarray, label_names: list[str],
                          multi_label: bool) -> dict:
    """Accuracy, macro F1, ROC AUC and per-class precision/recall/F1/support (scikit-learn)."""
    from sklearn.metrics import accuracy_score, hamming_loss, precision_recall_fscore_support

    mode = label_mode(len(label_names), multi_label)
    probs = class_probabilities(y_pred, mode)
    pred = predicted_labels(probs, mode)
    classes = np.arange(len(label_names))
    if mode == MULTILABEL:
        truth = np.asarray(y_true).astype(int)
        indicator = truth
        # Per label, as BinaryAccuracy in training (sklearn's accuracy_score is exact-set).
        accuracy = 1.0 - float(hamming_loss(truth, pred))
    else:
        truth = np.asarray(y_true).reshape(-1).astype(int)
        indicator = (truth[:, None] == classes).astype(int)
        accuracy = float(accuracy_score(truth, pred))
    precision, recall, f1, support = precision_recall_fscore_support(
        truth, pred, labels=classes, average=None, zero_division=0)
    per_class = {name: {"precision": float(precision[i]), "recall": float(recall[i]),
                        "f1": float(f1[i]), "support": int(support[i]),
                        "auc": _roc_auc(indicator[:, i], probs[:, i])}
                 for i, name in enumerate(label_names)}
    aucs = [c["auc"] for c in per_class.values() if not np.isnan(c["auc"])]
    report = {"accuracy": accuracy,
              "macro_f1": float(np.mean(f1)),
              "auc": per_class[label_names[1]]["auc"] if mode == BINARY
              else (float(np.mean(aucs)) if aucs else float("nan")),
              "auc_method": AUC_METHOD[mode],
              "examples": int(len(truth)), "per_class": per_class}
    if mode != MULTILABEL:
        from sklearn.metrics import confusion_matrix

        # rows: true label, columns: predicted, in label_names' order
        report["confusion_matrix"] = confusion_matrix(truth, pred, labels=classes).tolist()
    return report


def format_report(report: dict) -> str:
    width = max(10, *(len(n) for n in report["per_class"]))
    lines = [f"{'class':<{width}}  precision  recall     f1  support"]
    for name, c in report["per_class"].items():
        lines.append(f"{name:<{width}}  {c['precision']:9.3f}  {c['recall']:6.3f}  "
                     f"{c['f1']:5.3f}  {c['support']:7d}")
    lines.append(f"accuracy {report['accuracy']:.4f}  macro F1 {report['macro_f1']:.4f}  "
                 f"ROC AUC {report['auc']:.4f}  ({report['examples']} examples)")
    return "\n".join(lines)
