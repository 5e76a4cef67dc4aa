"""The streams every task's input goes through: passes, sharding by file, exact resume,
stores written as the run reads, and the tf.data service's shape of them."""

from __future__ import annotations

import dataclasses
import os
import shutil

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import ClassifierDataConfig, DataServiceConfig
from tfapp.data.input import stream
from tfapp.data.input.pipeline import serialized_graph_bytes
from tfapp.data.input.plan import Source, Start, partition, plan_steps
from tfapp.data.input.store import Store

import numpy as np
import pytest
import tensorflow as tf
from conftest import classification_batches

COUNTS = (7, 0, 13, 5, 9)  # file j holds examples OFFSETS[j] .. OFFSETS[j + 1] - 1
OFFSETS = np.concatenate([[0], np.cumsum(COUNTS)])
SOURCE = Source("train", tuple(f"file{j}" for j in range(len(COUNTS))), COUNTS)


def examples(file, index):
    """File ``index``'s examples in chunks of 3 (streams pass chunks, not examples)."""
    del file
    return tf.data.Dataset.range(tf.gather(tf.constant(OFFSETS[:-1]), index),
                                 tf.gather(tf.constant(OFFSETS[1:]), index)).batch(3)


def take(dataset, n: int) -> list[int]:
    return [int(x) for x in dataset.unbatch().take(n).as_numpy_iterator()]


@pytest.mark.parametrize("pipelines", [1, 2, 7])
@pytest.mark.parametrize("block", [0, 4, 768])
def test_a_stream_resumed_anywhere_continues_exactly_where_it_stopped(pipelines, block):
    # 7 pipelines over 5 files: every pipeline reads every file and keeps its elements.
    # Block 768 merges the files in runs of 3 (stream.merge_unit), with shorter last runs.
    assert stream.merge_unit(768) == 3
    per_pass = min(partition(SOURCE, i, pipelines, 3).size for i in range(pipelines))
    for index in range(pipelines):
        part = partition(SOURCE, index, pipelines, 3)
        full = take(stream.training_stream(SOURCE, part, examples, seed=5, block=block,
                                           examples_per_pass=per_pass), 3 * per_pass)
        for epoch in range(2):
            pass_ = full[epoch * per_pass:(epoch + 1) * per_pass]
            assert len(set(pass_)) == per_pass  # no example twice in a pass
        # Every third position of a pass (inside chunks, between chunks and files), in
        # epochs 0 and 1 by turns: the epoch only moves the seed and the offset.
        for k, at in enumerate(range(0, per_pass, 3)):
            for epoch in ((0, 1) if k == 0 else (k % 2,)):
                start = Start(epoch, at)
                resumed = take(stream.training_stream(SOURCE, part, examples, seed=5,
                                                      block=block,
                                                      examples_per_pass=per_pass,
                                                      start=start), per_pass)
                first = epoch * per_pass + at
                assert resumed == full[first:first + per_pass], (index, block, epoch, at)


def test_pipelines_read_disjoint_files_covering_the_split():
    parts = [partition(SOURCE, i, 2, 11) for i in range(2)]
    assert parts[0].element_shard is None
    assert sorted(parts[0].files + parts[1].files) == list(range(len(COUNTS)))
    seen = [set(take(stream.eval_stream(SOURCE, p, examples), 100)) for p in parts]
    assert not seen[0] & seen[1] and seen[0] | seen[1] == set(range(sum(COUNTS)))
    # Fewer files than pipelines: elements i::N of every file, still disjoint and whole.
    few = [partition(SOURCE, i, 7, 11) for i in range(7)]
    seen = [set(take(stream.eval_stream(SOURCE, p, examples), 100)) for p in few]
    assert sum(map(len, seen)) == sum(COUNTS) and set.union(*seen) == set(range(sum(COUNTS)))


def test_passes_shuffle_with_the_seed_and_differ_from_each_other():
    part = partition(SOURCE, 0, 1, 0)
    make = lambda seed: take(stream.training_stream(  # noqa: E731
        SOURCE, part, examples, seed=seed, block=8, examples_per_pass=34), 68)
    a, b = make(1), make(1)
    assert a == b and a[:34] != a[34:] and sorted(a[:34]) == sorted(a[34:])
    assert make(2) != a
    assert a[:34] != list(range(34))


def test_the_start_after_a_number_of_batches():
    def start(batches):  # 10 steps of 32 a pass
        return plan_steps(Source("train", ("a",), (335,)), global_batch=32, pipelines=1,
                          seed=0, resumed_batches=batches).start

    assert start(0) == Start(0, 0)
    assert start(25) == Start(2, 5 * 32)


def chunks(counts):
    offsets = np.concatenate([[0], np.cumsum(counts)])

    def cold(file, index):
        del file
        rows = tf.data.Dataset.range(tf.gather(tf.constant(offsets[:-1]), index),
                                     tf.gather(tf.constant(offsets[1:]), index))
        return rows.batch(1024).map(lambda ids: {"id": ids, "x": tf.cast(
            tf.stack([ids % 300, ids % 7], 1), tf.int32)})
    return cold


def test_a_store_is_written_in_the_first_pass_then_replayed_without_the_cold_path(tmp_path):
    counts = (2500, 1000, 30)
    source = Source("train", ("a", "b", "c"), counts)
    spec = {"id": tf.TensorSpec([None], tf.int64), "x": tf.TensorSpec([None, 2], tf.int32)}

    def make(cold):
        store = Store(str(tmp_path / "store"), spec, [-(-c // 1024) for c in counts],
                      storage={"id": None, "x": tf.uint16})
        part = partition(source, 0, 1, 0)
        return store, stream.training_stream(
            source, part, store.examples(cold), seed=1, block=100, examples_per_pass=3500,
            read_to_end=store.done() < 3)

    store, first = make(chunks(counts))
    # The pass's unused tail (the cut file's rest) is read once the stream moves on.
    a = [(int(e["id"]), e["x"].tolist())
         for e in first.unbatch().take(3501).as_numpy_iterator()][:3500]
    assert store.done() == 3  # a file is stored as the pass reads it, the cut one too
    assert all(x == [i % 300, i % 7] for i, x in a)

    def refuse(file, index):  # what a replay that read its sources would fail on
        return chunks(counts)(file, index).concatenate(
            tf.data.TFRecordDataset(str(tmp_path / "no-such-file")).map(
                lambda r: {"id": tf.zeros([0], tf.int64), "x": tf.zeros([0, 2], tf.int32)}))

    _, replay = make(refuse)
    assert [(int(e["id"]), e["x"].tolist())
            for e in replay.unbatch().take(3500).as_numpy_iterator()] == a
    # uint16 storage: a value above 255 survived narrowing.
    assert max(x[0] for _, x in a) == 299


def test_a_file_whose_pass_was_cut_short_is_not_marked_and_is_written_again(tmp_path):
    counts = (20_000,)  # 20 chunks: more than the pipeline reads ahead
    source = Source("train", ("a",), counts)
    spec = {"id": tf.TensorSpec([None], tf.int64), "x": tf.TensorSpec([None, 2], tf.int32)}
    store = Store(str(tmp_path / "s"), spec, [20], write=True)
    stream_ = stream.training_stream(source, partition(source, 0, 1, 0),
                                     store.examples(chunks(counts)), seed=0, block=0,
                                     examples_per_pass=20_000)
    take(stream_.map(lambda e: e["id"]), 500)  # a kill in the first chunks
    assert store.done() == 0
    take(stream_.map(lambda e: e["id"]), 20_000)
    assert store.done() == 1


def service_cfg(mode: str) -> ClassifierDataConfig:
    return dataclasses.replace(ClassifierDataConfig(), service=dataclasses.replace(
        ClassifierDataConfig().service, address="grpc://localhost:1", processing_mode=mode))


def test_the_graph_sent_to_the_service_holds_file_names_not_rows(tmp_path):
    # What a dispatcher receives for the classifier's real pipeline: a few KB whether the
    # data has a thousand or 100 thousand rows (the texts never go into the graph).
    from tfapp.config import load_config
    from tfapp.data.examples.classification import load_classification_splits
    from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn
    from tfapp.hub.handles import resolve_hub_handle

    _, pre = resolve_hub_handle("builtin:tiny")
    preprocess = make_bert_preprocess_fn(hub_preprocessor=pre, seq_length=32)
    sizes = []
    for rows in (1_000, 100_000):
        path = tmp_path / f"rows{rows}.csv"
        path.write_text("text,label\n" + "".join(f"review {i} was fine,{'ab'[i % 2]}\n"
                                                 for i in range(rows)))
        cfg = load_config(None, [f"data.train_files={path}", "data.seq_length=32",
                                 "data.service.address=grpc://localhost:1"])
        splits = load_classification_splits(cfg.data, 0)
        dataset = classification_batches(splits, splits.train, preprocess,
                                              dataclasses.replace(
                                                  cfg.data, service=DataServiceConfig()),
                                              batch_size=32, training=True, seed=0)
        sizes.append(serialized_graph_bytes(dataset))
    assert abs(sizes[1] - sizes[0]) < 0.01 * sizes[0] and sizes[1] < 1 << 20, sizes


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    files = []
    for j in range(4):
        path = str(root / f"s{j}.tfrecord")
        with tf.io.TFRecordWriter(path) as w:
            for i in range(25 * j, 25 * j + 25):
                w.write(str(i).encode())
        files.append(path)
    return Source("train", tuple(files), (25,) * 4)


@pytest.mark.parametrize("mode,copies", [("dynamic", 1), ("file", 1), ("off", 2)])
def test_service_workers_share_the_files_as_the_mode_says(shards, mode, copies):
    from tfapp.data.input.pipeline import apply_service
    from tfapp.data_service import LocalDataService

    def examples(file, index):
        return tf.data.TFRecordDataset(file).map(
            lambda r: (tf.strings.to_number(r, tf.int64), index)).batch(10)

    # Every worker runs its own copy of the pipeline: one batch larger than the data holds
    # all that its worker read, so each batch the client gets is one worker's share.
    dataset = stream.service_stream(shards, examples, seed=0, block=0, training=False)
    dataset = dataset.unbatch()
    service = LocalDataService(2, listen_all=True)
    try:
        cfg = dataclasses.replace(service_cfg(mode).service, address=service.address)
        shares = list(apply_service(dataset.batch(1000), cfg, f"t-{mode}")
                      .as_numpy_iterator())
    finally:
        service.stop()
    assert sorted(int(v) for values, _ in shares for v in values) == sorted(
        list(range(100)) * copies)
    files_of = [set(files.tolist()) for _, files in shares]
    if mode == "off":  # both workers read every file
        assert files_of == [set(range(4))] * 2
    else:  # disjoint files between the workers
        assert set.union(*files_of) == set(range(4)) and sum(map(len, files_of)) == 4
    if mode == "file":  # a static share: both workers, two files each
        assert sorted(map(len, files_of)) == [2, 2], files_of


def test_store_narrow_dtypes_must_hold_the_values(tmp_path):
    # int16 keeps -1 (NER's IGNORE); a cast would wrap a value the dtype cannot hold.
    spec = {"labels": tf.TensorSpec([None], tf.int32)}

    def read(labels):
        """One file of one chunk through a store: written by the first read, replayed
        (``labels`` unread) after."""
        store = Store(str(tmp_path / "n"), spec, [1], storage={"labels": tf.int16})
        examples = store.examples(lambda file, index: tf.data.Dataset.from_tensors(
            {"labels": tf.constant(labels, tf.int32)}))
        chunks = examples(tf.constant("f"), tf.constant(0, tf.int64))
        return store, [c["labels"].tolist() for c in chunks.as_numpy_iterator()]

    store, written = read([-1, 5, 300])
    assert store.done() == 1 and written == [[-1, 5, 300]]
    assert read([7])[1] == [[-1, 5, 300]]  # the stored int16 chunk, widened back
    shutil.rmtree(tmp_path / "n")
    assert not os.path.exists(tmp_path / "n")


def test_a_merged_pass_logs_no_tensorflow_errors(capfd):
    # Runs that alias their chunk made every shuffle block log TensorFlow's "Tensor
    # RefCount not reliable if buf_ points to a SubBuffer" error line, once per run (1,800
    # lines in a 30-step run), straight to the process's stderr.
    source = Source("train", ("a", "b"), (3000, 2000))
    ds = stream.training_stream(source, partition(source, 0, 1, 0), chunks(
        source.counts), seed=1, block=256, examples_per_pass=5000)
    assert len(take(ds.map(lambda e: e["id"]), 5000)) == 5000
    assert "SubBuffer" not in capfd.readouterr().err
