"""Length-aware batches (tfapp.data.input.lengths): bucket boundaries, the grouping of a window,
exact resume through ``stream.batches``, and XLA compiling once per bucket."""

from __future__ import annotations

import re

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import ClassifierDataConfig
from tfapp.data.input import lengths, stream
from tfapp.data.input.plan import Source, plan_steps

import numpy as np
import pytest
import tensorflow as tf
from conftest import XLA_DUMP_DIR, run_tfapp

SEQ = 32
COUNTS = (700, 500, 400)
OFFSETS = np.concatenate([[0], np.cumsum(COUNTS)])
SOURCE = Source("train", ("a", "b", "c"), COUNTS)


def length_of(ids: np.ndarray | tf.Tensor):
    """Example ``id``'s token length: 1..SEQ, spread unevenly (mostly short, as real text)."""
    return 1 + (ids * 7919 % 97) ** 2 % SEQ


def features(ids: tf.Tensor) -> dict[str, tf.Tensor]:
    n = tf.cast(length_of(ids), tf.int32)
    mask = tf.cast(tf.range(SEQ)[None, :] < n[:, None], tf.int32)
    return {"input_word_ids": mask * (tf.cast(ids, tf.int32)[:, None] % 1000 + 1),
            "input_mask": mask, "input_type_ids": tf.zeros_like(mask),
            "label": tf.cast(ids % 2, tf.int32), "id": ids}


def examples(file, index):
    del file
    return tf.data.Dataset.range(tf.gather(tf.constant(OFFSETS[:-1]), index),
                                 tf.gather(tf.constant(OFFSETS[1:]), index)).batch(64).map(features)


def batches_of(dataset, n):
    return [{k: v.numpy() for k, v in b.items()} for b in dataset.take(n)]


def test_boundaries_are_quantiles_rounded_to_the_device_multiple():
    sample = np.array([5] * 30 + [12] * 30 + [40] * 30 + [120] * 10)
    # quartiles 5, 12, 40 -> 8, 16, 40; the last is always seq_length
    assert lengths.boundaries(sample, 4, 128, 8) == (8, 16, 40, 128)
    # On TPU (multiples of 128) a seq_length of 128 leaves one bucket.
    assert lengths.boundaries(sample, 4, 128, 128) == (128,)
    assert lengths.boundaries(sample, 4, 512, 128) == (128, 512)
    assert lengths.boundaries(sample, 1, 128, 8) == (128,)
    assert lengths.multiple_for("TPU") == 128 and lengths.multiple_for("GPU") == 8


def test_a_training_window_is_sorted_into_buckets_and_its_units_shuffled():
    plan = lengths.LengthPlan((8, 16, SEQ), batch=8, unit=2, seq_length=SEQ)
    assert plan.window_batches == 50 and plan.window_examples == 400
    ids = tf.data.Dataset.range(1200).batch(400).map(features)
    grouping = lengths.Grouping(plan.boundaries, SEQ, seed=3)
    out = batches_of(grouping(ids, plan, training=True), 150)
    assert len(out) == 150
    seen = np.concatenate([b["id"] for b in out])
    assert sorted(seen.tolist()) == list(range(1200))  # every example once
    for k, b in enumerate(out):
        n = b["input_mask"].shape[1]
        assert b["id"].shape == (8,) and n in plan.boundaries
        assert (length_of(b["id"]) <= n).all()
        # a unit is padded to the smallest bucket that holds its longest example
        unit_ids = np.concatenate([out[k - k % 2]["id"], out[k - k % 2 + 1]["id"]])
        assert plan.boundaries.index(n) == 0 or \
            length_of(unit_ids).max() > plan.boundaries[plan.boundaries.index(n) - 1]
        assert (b["input_mask"].sum(1) == length_of(b["id"])).all()
        if k % 2:  # the two batches of a unit (one step's replicas) share a length
            assert n == out[k - 1]["input_mask"].shape[1]
        window = k // 50
        assert all(window * 400 <= i < (window + 1) * 400 for i in b["id"])
    shapes = [b["input_mask"].shape[1] for b in out[:50]]
    assert shapes != sorted(shapes) and shapes != sorted(shapes, reverse=True)
    # another seed, another unit order; the same seed, the same batches
    again = batches_of(grouping(ids, plan, training=True), 50)
    other = batches_of(lengths.Grouping(plan.boundaries, SEQ, seed=4)(ids, plan, training=True),
                       50)
    assert all((a["id"] == b["id"]).all() for a, b in zip(again, out[:50], strict=True))
    assert any((a["id"] != b["id"]).any() for a, b in zip(other, out[:50], strict=True))


def test_evaluation_batches_are_sorted_and_keep_every_example():
    plan = lengths.LengthPlan((8, 16, SEQ), batch=8, unit=1, seq_length=SEQ)
    ids = tf.data.Dataset.range(437).batch(400).map(features)
    out = batches_of(lengths.Grouping(plan.boundaries, SEQ, seed=0)(ids, plan, training=False),
                     1000)
    assert sorted(np.concatenate([b["id"] for b in out]).tolist()) == list(range(437))
    assert [len(b["id"]) for b in out] == [8] * 50 + [8, 8, 8, 8, 5]
    first = [b["input_mask"].shape[1] for b in out[:50]]
    assert first == sorted(first, reverse=True)


def test_padding_efficiency_counts_real_over_computed_tokens():
    plan = lengths.LengthPlan((8, 32), batch=2, unit=1, seq_length=32)
    # fixed: (4 + 4 + 30 + 8) / (4 x 32); bucketed: batches {30, 8} at 32 and {4, 4} at 8
    assert lengths.padding_efficiency(np.array([4, 30, 4, 8]), None, 32) == 46 / 128
    assert lengths.padding_efficiency(np.array([4, 30, 4, 8]), plan, 32) == 46 / 80


@pytest.mark.parametrize("device, pipelines, spe, grouped", [
    ("CPU", 1, 1, True), ("CPU", 1, 8, True),  # Keras runs every step of an execution anyway
    ("CPU", 2, 1, False),  # several workers would pad one step to different lengths
    ("TPU", 1, 1, True), ("TPU", 1, 50, False), ("TPU", 1, None, False),  # None: auto, 50
])
def test_grouping_is_off_where_one_step_could_get_two_shapes(device, pipelines, spe, grouped):
    sample = np.array([20] * 50 + [300] * 50)
    grouping, why = lengths.grouping_for(4, lengths.Lengths(lambda: sample, 512), 0,
                                         device_kind=device, input_pipelines=pipelines,
                                         steps_per_execution=spe)
    assert (grouping is not None) == grouped, why
    if grouped:
        assert grouping.boundaries == ((24, 304, 512) if device == "CPU" else (128, 384, 512))
    else:
        assert why.startswith("every batch padded to seq_length 512")


def generator_examples(file, index):
    """The generator's shape of example: labels of ``length_of`` tokens (right-padded),
    decoder_ids as wide, and an encoder as wide that grouping must leave alone."""
    def windows(ids):
        n = tf.cast(length_of(ids), tf.int32)
        labels = tf.cast(tf.range(SEQ)[None, :] < n[:, None], tf.int32) * 5
        return {"encoder_ids": tf.ones_like(labels), "labels": labels,
                "decoder_ids": tf.pad(labels[:, :-1], [[0, 0], [1, 0]], constant_values=2),
                "id": ids}
    return examples(file, index).map(lambda f: windows(f["id"]))


@pytest.mark.parametrize("task", ["classifier", "generator"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_grouped_stream_resumed_mid_window_gives_the_same_batches(replicas, task, capfd):
    from tfapp.data.text import words

    cfg = ClassifierDataConfig(shuffle_buffer=256)
    grouping = lengths.Grouping((8, 16, SEQ), SEQ, seed=7)
    read, width = examples, "input_mask"
    if task == "generator":  # by target length, the decoder side cut
        grouping = lengths.Grouping((8, 16, SEQ), SEQ, seed=7,
                                    length_fn=words.label_lengths,
                                    keys=words.DECODER_KEYS)
        read, width = generator_examples, "labels"
    per_step = 8 * replicas
    steps = plan_steps(SOURCE, global_batch=per_step, pipelines=1, seed=7).steps
    context = tf.distribute.InputContext(1, 0, replicas)

    def run(at, n):
        plan = plan_steps(SOURCE, global_batch=per_step, pipelines=1, seed=7,
                          resumed_batches=at)
        return batches_of(stream.batches(SOURCE, read, cfg, plan=plan, training=True,
                                         input_context=context, grouping=grouping), n)

    full = run(0, 3 * steps * replicas)
    assert len({b[width].shape[1] for b in full}) == 3  # every bucket occurs
    if task == "generator":
        assert all(b["encoder_ids"].shape[1] == SEQ for b in full)
        assert all((b["labels"] != 0).sum(1).tolist() == length_of(b["id"]).tolist()
                   for b in full)
    for at in (1, 37, steps - 1, steps + 51):  # inside windows, across a pass's end
        resumed = run(at, 30)
        first = at * replicas
        for a, b in zip(resumed, full[first:first + 30], strict=True):
            assert (a["id"] == b["id"]).all() and a[width].shape == b[width].shape
    # Windows rebatched from chunks cut at a pass's end logged TensorFlow's "RefCount not
    # reliable if buf_ points to a SubBuffer" error line (36 lines in the demo run).
    assert "SubBuffer" not in capfd.readouterr().err


@pytest.mark.parametrize("replicas", [1, 2])
def test_each_pass_of_a_grouped_stream_trains_each_example_once(replicas):
    # 700 examples in batches of 8 per replica: 87 (or 2 x 43) steps a pass, not a whole
    # number of 50-batch windows, so a window that ran on into the next pass would train
    # some examples twice in one epoch and leave others to the next.
    source = Source("train", ("a",), COUNTS[:1])
    grouping = lengths.Grouping((8, 16, SEQ), SEQ, seed=7)
    per_step = 8 * replicas
    steps = plan_steps(source, global_batch=per_step, pipelines=1, seed=7).steps

    def run(at, n):
        plan = plan_steps(source, global_batch=per_step, pipelines=1, seed=7,
                          resumed_batches=at)
        return batches_of(stream.batches(
            source, examples, ClassifierDataConfig(shuffle_buffer=256), plan=plan,
            training=True, grouping=grouping,
            input_context=tf.distribute.InputContext(1, 0, replicas)), n)

    full = run(0, 3 * steps * replicas)
    assert len({b["input_mask"].shape[1] for b in full}) == 3
    for e in range(3):
        ids = np.concatenate([b["id"] for b in full[e * steps * replicas:
                                                    (e + 1) * steps * replicas]])
        assert len(set(ids.tolist())) == len(ids) == steps * per_step
    for at in (steps - 1, steps + 30):  # in a pass's short last window, then the next pass
        resumed = run(at, 10)
        first = at * replicas
        assert [b["id"].tolist() for b in resumed] == \
            [b["id"].tolist() for b in full[first:first + 10]]


@pytest.mark.slow
@pytest.mark.xla_cpu
def test_xla_compiles_the_train_step_at_most_once_per_bucket(tmp_path):
    # XLA's dump holds one module per compiled program. Texts of 1 to 40 words fall in
    # several buckets: the train step (the only compiled function: no validation, no
    # export) is compiled once per bucket that occurs, not once per batch.
    rng = np.random.default_rng(0)
    words = ["good", "bad", "film", "plot", "actor", "scene", "boring", "great"]
    csv = tmp_path / "train.csv"
    csv.write_text("text,label\n" + "".join(
        f"{' '.join(rng.choice(words, rng.integers(1, 41)))},{'ab'[i % 2]}\n"
        for i in range(640)))
    # In this process: conftest's XLA_DUMP_DIR holds what XLA compiled since this test's
    # setup began (XLA reads its flags once per process, and conftest set them).
    done = run_tfapp("tfapp.train", [
        f"output_dir={tmp_path}", "name=x", f"data.train_files={csv}",
        "data.validation_split=0", "data.seq_length=64", "model.kind=cnn", "model.units=8",
        "model.embedding_dim=8", "trainer.epochs=1", "trainer.jit_compile=true",
        "trainer.export=false", "data.length_buckets=4", "tracking.tensorboard=false"])
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.search(r"data: (\d+) length buckets", done.stderr + done.stdout)
    assert found, (done.stderr + done.stdout)[-2000:]
    buckets = int(found.group(1))
    modules = sorted(p.name for p in XLA_DUMP_DIR.glob("*.before_optimizations.txt"))
    assert {m.split(".")[1] for m in modules} == {modules[0].split(".")[1]}  # one function
    assert 2 <= len(modules) <= buckets <= 4, (buckets, modules)
