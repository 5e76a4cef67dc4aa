"""The checks that need MirroredStrategy over 2 logical CPUs, in one fresh process (the
logical devices must exist before TensorFlow initialises): ``python two_replicas.py OUT``
writes OUT (JSON), one entry per case; tests/conftest.py ``two_replica_results`` runs it
once per test session and the tests (test_class_weight, test_metrics,
test_one_validation_pass, test_training, test_data_pipeline,
test_models_classifier) assert on their entries."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

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


def accumulation() -> dict:
    """8 batches of global batch 8 (4 per replica) accumulated 4 at a time, against 2 steps
    of 32 on the two replicas and on one device, with Adam (whose moments would drift if a
    batch that does not apply touched them): the weights after each, their start, the
    optimizer steps, and whether the replicas synchronise through merge_call."""
    from tfapp import compat
    from tfapp.training.accumulation import AccumulatingModel

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")
    with rt.strategy.scope():
        merge_call = not compat.replica_context_can_synchronise()

    def trained(acc, batch, strategy):
        with strategy.scope():
            tf.keras.utils.set_random_seed(1)
            inp = tf.keras.Input((4,))
            out = tf.keras.layers.Dense(1)(tf.keras.layers.Dense(8, activation="tanh")(inp))
            model = tf.keras.Model(inp, out)
            start = [w.numpy() for w in model.trainable_weights]
            if acc > 1:
                model = AccumulatingModel.wrap(model, acc)
            model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="mse",
                          steps_per_execution=2)
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(batch), epochs=1, verbose=0)
        return model, start

    accumulated, start = trained(4, 8, rt.strategy)
    plain, _ = trained(1, 32, rt.strategy)
    one, _ = trained(1, 32, tf.distribute.get_strategy())
    models = (accumulated, plain, one)
    return {"merge_call": merge_call,
            "weights": [[w.numpy().tolist() for w in m.trainable_weights] for m in models],
            "start": np.concatenate([w.ravel() for w in start]).tolist(),
            "updates": [int(m.optimizer.iterations.numpy()) for m in models]}


def per_replica_batches(folder: Path) -> dict:
    """One pass of the classifier's input pipeline (40 rows "wI wI+1", global batch 8)
    shared out over the replicas: each step's parts' shapes and, per part, I of each
    example (its first word's id less the 5 special tokens)."""
    import dataclasses

    from tfapp.config import ClassifierDataConfig
    from tfapp.data.examples.classification import (
        classification_examples,
        load_classification_splits,
    )
    from tfapp.data.input.reader import read_batches
    from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn
    from tfapp.data.text.vocab import write_vocab

    folder.mkdir()
    vocab = write_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                         *(f"w{i}" for i in range(400))], folder / "vocab.txt")
    (folder / "train.csv").write_text(
        "text,label\n" + "".join(f"w{i} w{i + 1},{i % 3}\n" for i in range(40)))
    pre = make_bert_preprocess_fn(vocab_file=str(vocab), seq_length=8)
    cfg = dataclasses.replace(ClassifierDataConfig(), seq_length=8,
                              train_files=str(folder / "train.csv"), validation_split=0.0)
    splits = load_classification_splits(cfg, 0)
    dist = rt.strategy.distribute_datasets_from_function(lambda ctx: read_batches(
        classification_examples(splits, splits.train, pre, cfg.seq_length), cfg,
        batch_size=8, training=True, seed=0, input_context=ctx))
    steps = []
    for step, (x, _) in enumerate(dist):
        if step == 5:  # one pass: 40 examples, 8 per step
            break
        parts = rt.strategy.experimental_local_results(x["input_word_ids"])
        steps.append({"shapes": [part.shape.as_list() for part in parts],
                      "first_words": [[int(v) - 5 for v in part[:, 1]] for part in parts]})
    return {"steps": steps}


def bert_fine_tuning(folder: Path) -> dict:
    """The BERT classifier on a 2-layer Hub encoder, fine-tuned over the replicas with
    steps_per_execution=4 (no XLA: its CPU backend binds to one device), 4 epochs of 8
    steps on data it can learn: the losses, how many encoder weights changed, and where
    the encoder's first variable lives."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
    from tfapp.config import ClassifierModelConfig
    from tfapp.models.classifier import build_classifier

    from test_models_classifier import SEQ, export_tiny_encoder, learnable_data

    x, y = learnable_data(64)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(
        rt.global_batch_size(8), drop_remainder=True)
    with rt.strategy.scope():
        model = build_classifier(ClassifierModelConfig(kind="bert", dropout=0.1), num_classes=2,
                                 multi_label=False, seq_length=SEQ,
                                 hub_handle=export_tiny_encoder(folder / "encoder"))
        before = [w.numpy().copy() for w in model.get_layer("bert_encoder").weights]
        model.compile(tf.keras.optimizers.Adam(3e-3), "binary_crossentropy",
                      steps_per_execution=4, jit_compile=False)
    h = model.fit(ds, epochs=4, steps_per_epoch=8, verbose=0)
    after = [w.numpy() for w in model.get_layer("bert_encoder").weights]
    var = model.get_layer("bert_encoder").weights[0]
    return {"replicas": rt.num_replicas, "loss": h.history["loss"],
            "changed": sum(not np.array_equal(a, b) for a, b in zip(before, after, strict=True)),
            "n": len(before), "mirrored": type(var).__name__,
            "devices": sorted(v.device for v in var.values)}


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
                   "accumulation": accumulation(),
                   "per_replica_batches": per_replica_batches(Path(logs) / "data"),
                   "bert_fine_tuning": bert_fine_tuning(Path(logs)),
                   "streaming_metrics": {f"{multi}-{n}": streaming_metrics(multi, n)
                                         for multi, n in ((False, 3), (True, 3))},
                   "validation_pass": validation_pass(logs)}
    with open(sys.argv[1], "w") as fh:
        json.dump(results, fh)
