"""The checks that need MirroredStrategy over 2 logical CPUs, in one fresh process (the
logical devices must exist before TensorFlow initialises): ``python two_replicas.py OUT``
writes OUT (JSON), one entry per case; tests/conftest.py ``two_replica_results`` runs it
once per test session and the tests (test_class_weight, test_metrics,
test_one_validation_pass) assert on their entries."""

from __future__ import annotations

import json
import sys
import tempfile

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import RuntimeConfig
from tfapp.runtime import setup

rt = setup(RuntimeConfig(strategy="mirrored", cpu_devices=2, seed=1))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def class_weight_update() -> dict:
    """One step of global batch 8 with the weighted, smoothed loss, on the two replicas and
    on one device: the weights after it."""
    from tfapp.training.metrics import MULTICLASS, WeightedCrossEntropy

    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4)).astype("float32")
    y = np.array([0, 1, 2, 2, 1, 0, 0, 0])
    after = []
    for strategy in (rt.strategy, tf.distribute.OneDeviceStrategy("/cpu:0")):
        with strategy.scope():
            tf.keras.utils.set_random_seed(3)
            model = tf.keras.Sequential([tf.keras.layers.Dense(
                3, activation="softmax", input_shape=(4,))])
            model.compile(tf.keras.optimizers.SGD(0.5), WeightedCrossEntropy(
                MULTICLASS, 3, label_smoothing=0.1, class_weights=[0.5, 2.0, 3.0]))
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), epochs=1, verbose=0)
        after.append([w.tolist() for w in model.get_weights()])
    return {"after": after}


def streaming_metrics(multi_label: bool, classes: int) -> dict:
    """evaluate() over the replicas (an uneven last batch): its scores, the labels and the
    model's own predictions."""
    from tfapp.training.metrics import build_loss, build_metrics

    rng = np.random.default_rng(0)
    x = rng.normal(size=(45, 4)).astype("float32")
    y = ((rng.random((45, classes)) > 0.5).astype("float32") if multi_label
         else rng.integers(0, classes, 45))
    with rt.strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(
            classes, activation="sigmoid" if multi_label else "softmax", input_shape=(4,))])
        model.compile("sgd", build_loss(classes, multi_label),
                      metrics=build_metrics(classes, multi_label))
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    scores = model.evaluate(ds, return_dict=True, verbose=0)
    return {"scores": scores, "y": y.tolist(), "p": model.predict(x, verbose=0).tolist()}


def validation_pass(logs: str) -> dict:
    """fit with validation and the callbacks the tasks install: how many validation rows
    each run read (a counter in the dataset), the confusion matrix and entity counts."""
    from tfapp.data.text.tags import tag_names
    from tfapp.models.token_classifier import masked_token_loss
    from tfapp.tasks.ner.metrics import EntityCounts
    from tfapp.tasks.ner.task import EntityF1
    from tfapp.training.metrics import ConfusionMatrix, build_loss
    from tfapp.training.tb_logging import ConfusionMatrixImage

    rng = np.random.default_rng(0)
    out = {}
    read = tf.Variable(0, dtype=tf.int64)  # validation rows read: one pass per epoch

    def counted(x, y):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
        return ds.map(lambda a, b: (a, b) if read.assign_add(
            tf.cast(tf.shape(a)[0], tf.int64)) is None else (a, b))

    # classifier: 3 classes, 45 validation rows
    x = rng.normal(size=(45, 4)).astype("float32")
    y = rng.integers(0, 3, 45)
    with rt.strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="softmax",
                                                           input_shape=(4,))])
        matrix = ConfusionMatrix(3, "multiclass")
        model.compile("sgd", build_loss(3, False), metrics=["accuracy", matrix])
    image = ConfusionMatrixImage(matrix, ["a", "b", "c"], logs)
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0,
                        validation_data=counted(x, y), callbacks=[image])
    out["classifier"] = {"read": int(read.numpy()), "matrix": image.matrix.tolist(),
                         "logs": sorted(history.history),
                         "predicted": model.predict(x, verbose=0).argmax(1).tolist(),
                         "y": y.tolist()}

    # NER: windows of 6 positions, 3 entity types, 37 validation windows
    names = tag_names(["LOC", "ORG", "PER"])
    ids = rng.integers(1, 50, (37, 6)).astype("int32")
    labels = np.where(rng.random((37, 6)) < 0.7, rng.integers(0, len(names), (37, 6)), -1)
    read.assign(0)
    with rt.strategy.scope():
        tagger = tf.keras.Sequential([tf.keras.layers.Embedding(50, 8, input_length=6),
                                      tf.keras.layers.Dense(len(names), activation="softmax")])
        entities = EntityCounts(names)
        tagger.compile("sgd", masked_token_loss, metrics=[entities])
    f1 = EntityF1(entities)
    history = tagger.fit(ids, labels, batch_size=8, epochs=2, verbose=0,
                         validation_data=counted(ids, labels), callbacks=[f1])
    out["ner"] = {"read": int(read.numpy()),
                  "counts": {k: v.tolist() for k, v in entities.counts().items()},
                  "history": history.history, "names": names, "labels": labels.tolist(),
                  "predicted": tagger.predict(ids, verbose=0).argmax(-1).tolist()}
    return out


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as logs:
        results = {"replicas": rt.num_replicas,
                   "class_weight_update": class_weight_update(),
                   "streaming_metrics": {f"{multi}-{n}": streaming_metrics(multi, n)
                                         for multi, n in ((False, 3), (True, 3))},
                   "validation_pass": validation_pass(logs)}
    with open(sys.argv[1], "w") as fh:
        json.dump(results, fh)
