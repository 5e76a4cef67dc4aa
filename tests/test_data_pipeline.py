"""The classification tf.data pipeline: exact shapes, snapshot reuse, cache, sharding."""

from __future__ import annotations

import dataclasses
import json
import os
import textwrap

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import DataConfig
from tfapp.data import pipeline as stages
from tfapp.data.bert_preprocess import make_bert_preprocess_fn
from tfapp.data.classification import load_classification_splits, make_classification_dataset
from tfapp.data.errors import DataError
from tfapp.data.pipeline import distribute
from tfapp.data.sources import ExampleSet
from tfapp.data.vocab import write_vocab

import numpy as np
import pytest
import tensorflow as tf
from conftest import run_python

N = 50
SEQ = 8
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    # Word wI has id 5 + I, so every example's identity can be read off its ids.
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    return str(write_vocab(SPECIAL + [f"w{i}" for i in range(200)], path))


@pytest.fixture(scope="module")
def pre(vocab_file):
    return make_bert_preprocess_fn(vocab_file=vocab_file, seq_length=SEQ)


def examples(n: int = N, pairs: bool = False, multi: bool = False) -> ExampleSet:
    labels = (np.eye(3, dtype=np.float32)[np.arange(n) % 3] if multi
              else (np.arange(n) % 3).astype(np.int32))
    return ExampleSet([f"w{i} w{i + 1}" for i in range(n)],
                      [f"w{i + 2}" for i in range(n)] if pairs else None, labels, "train")


def data_cfg(**kw) -> DataConfig:
    kw.setdefault("seq_length", SEQ)
    kw.setdefault("shuffle_buffer", 100)
    return dataclasses.replace(DataConfig(), **kw)


class CountingPreprocess:
    """The BERT preprocess fn plus a py_function that counts how many texts it saw."""

    def __init__(self, inner):
        self.inner = inner
        self.fingerprint = self.inner.fingerprint
        self.calls = 0

    def _count(self, texts):
        self.calls += int(texts.shape[0])
        return texts

    def __call__(self, text, text_pair=None):
        text = tf.py_function(self._count, [text], tf.string)
        text.set_shape([None])
        return self.inner(text, text_pair)


def ids_of(dataset) -> list[int]:
    """Example index of every row (first word id - 5), in order."""
    return [int(r) - 5 for x, _ in dataset.as_numpy_iterator() for r in x["input_word_ids"][:, 1]]


@pytest.mark.parametrize("stored", [False, True])
def test_training_batches_have_exact_static_shapes(pre, tmp_path, stored):
    # Stored (snapshot) training batches are cut from shuffled blocks by a reshape: the
    # same shapes, the same dropped remainder, every kept example once.
    cfg = data_cfg(snapshot=str(tmp_path / "snap") if stored else "")
    ds = make_classification_dataset(examples(pairs=True), pre, cfg, batch_size=16,
                                     training=True, seed=0)
    spec = ds.element_spec
    for key in ("input_word_ids", "input_mask", "input_type_ids"):
        assert spec[0][key] == tf.TensorSpec([16, SEQ], tf.int32)
    assert spec[1] == tf.TensorSpec([16], tf.int32)
    batches = list(ds.as_numpy_iterator())
    assert len(batches) == 3  # 50 // 16, remainder dropped
    seen = [int(r) - 5 for x, _ in batches for r in x["input_word_ids"][:, 1]]
    assert len(set(seen)) == 48 and set(seen) <= set(range(50))
    x, y = batches[0]
    i = int(x["input_word_ids"][0, 1]) - 5
    np.testing.assert_array_equal(x["input_word_ids"][0], [2, 5 + i, 6 + i, 3, 7 + i, 3, 0, 0])
    np.testing.assert_array_equal(x["input_type_ids"][0], [0, 0, 0, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(x["input_mask"][0], [1, 1, 1, 1, 1, 1, 0, 0])
    assert y[0] == i % 3


def test_eval_keeps_order_and_remainder_and_multi_label(pre):
    ds = make_classification_dataset(examples(multi=True), pre, data_cfg(), batch_size=16,
                                     training=False, seed=0)
    assert ds.element_spec[1].shape.as_list() == [None, 3]
    assert ds.element_spec[1].dtype == tf.float32
    sizes = [len(y) for _, y in ds.as_numpy_iterator()]
    assert sizes == [16, 16, 16, 2]
    assert ids_of(ds) == list(range(N))


def test_shuffle_is_seeded_and_reshuffles_each_epoch(pre):
    make = lambda seed: make_classification_dataset(  # noqa: E731
        examples(), pre, data_cfg(), batch_size=10, training=True, seed=seed)
    a, b = make(1), make(1)
    first, second = ids_of(a), ids_of(a)
    assert first == ids_of(b)  # same seed, same order
    assert first != second  # a new order each epoch
    assert sorted(first) == list(range(N)) and ids_of(make(2)) != first


def test_split_smaller_than_a_batch_is_a_clear_error(pre):
    with pytest.raises(DataError, match="fewer than one batch of 64; .*lower data.batch_size"):
        make_classification_dataset(examples(), pre, data_cfg(), batch_size=64, training=True,
                                    seed=0)
    # Evaluation keeps partial batches, so the same size is fine there.
    make_classification_dataset(examples(), pre, data_cfg(), batch_size=64, training=False,
                                seed=0)


def test_snapshot_is_written_once_then_read_not_recomputed(pre, vocab_file, tmp_path):
    cfg = data_cfg(snapshot=str(tmp_path / "snap"))
    pre1 = CountingPreprocess(pre)
    ds1 = make_classification_dataset(examples(), pre1, cfg, batch_size=10, training=True,
                                      seed=0)
    assert pre1.calls == N  # the first pass wrote the snapshot
    (snap,) = os.listdir(tmp_path / "snap")
    assert snap.startswith("train-")
    meta = json.loads((tmp_path / "snap" / snap / "tfapp_snapshot.json").read_text())
    assert meta["examples"] == N and meta["seq_length"] == SEQ
    epoch = ids_of(ds1)
    assert sorted(epoch) == list(range(N)) and pre1.calls == N  # training reads the snapshot
    assert [len(y) for _, y in ds1.as_numpy_iterator()] == [10] * 5

    # A new pipeline (as in a new run) over the same data reuses it: zero preprocessing.
    pre2 = CountingPreprocess(pre)
    ds2 = make_classification_dataset(examples(), pre2, cfg, batch_size=10, training=True,
                                      seed=0)
    again = ids_of(ds2)
    assert sorted(again) == list(range(N)) and pre2.calls == 0
    assert again == epoch  # same seed: the same shuffled order as the first run
    assert ids_of(ds2) != epoch  # and a new order next epoch

    # Evaluation snapshots keep the rows in order and hold exactly the cold values.
    ev = make_classification_dataset(examples(), CountingPreprocess(pre), cfg, batch_size=10,
                                     training=False, seed=0)
    plain = make_classification_dataset(examples(), pre, data_cfg(), batch_size=10,
                                        training=False, seed=0)
    for (xa, ya), (xb, yb) in zip(ev.as_numpy_iterator(), plain.as_numpy_iterator(),
                                  strict=True):
        for key in xa:
            np.testing.assert_array_equal(xa[key], xb[key])
        np.testing.assert_array_equal(ya, yb)

    # A change in the pipeline (seq_length, or the data) builds a new snapshot.
    pre3 = CountingPreprocess(make_bert_preprocess_fn(vocab_file=vocab_file,
                                                      seq_length=SEQ + 4))
    make_classification_dataset(examples(), pre3, dataclasses.replace(cfg, seq_length=SEQ + 4),
                                batch_size=10, training=True, seed=0)
    pre4 = CountingPreprocess(pre)
    make_classification_dataset(examples(N - 1), pre4, cfg, batch_size=10, training=True,
                                seed=0)
    assert (pre3.calls, pre4.calls) == (N, N - 1)
    assert len(os.listdir(tmp_path / "snap")) == 4  # train, eval, seq_length+4, N-1


def test_memory_and_file_cache_preprocess_once(pre, tmp_path):
    for cache in ("memory", str(tmp_path / "cache" / "c")):
        counting = CountingPreprocess(pre)
        ds = make_classification_dataset(examples(), counting, data_cfg(cache=cache),
                                         batch_size=10, training=True, seed=0)
        one, two = ids_of(ds), ids_of(ds)
        assert counting.calls == N and sorted(one) == sorted(two) == list(range(N))
    assert any(f.startswith("c-train-") for f in os.listdir(tmp_path / "cache"))


@pytest.mark.parametrize("stored", [False, True])
def test_input_context_shards_are_disjoint_and_cover_the_data(pre, tmp_path, stored):
    cfg = data_cfg(snapshot=str(tmp_path / "s") if stored else "")
    shards = []
    for pipeline_id in range(3):
        ctx = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=pipeline_id,
                                         num_replicas_in_sync=6)
        ds = make_classification_dataset(examples(), pre, cfg, batch_size=12, training=False,
                                         seed=0, input_context=ctx)
        assert [len(y) for _, y in ds.as_numpy_iterator()][0] == 2  # 12 global / 6 replicas
        shards.append(set(ids_of(ds)))
    assert not shards[0] & shards[1] and not shards[1] & shards[2] and not shards[0] & shards[2]
    assert set().union(*shards) == set(range(N))
    ctx = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=2,
                                     num_replicas_in_sync=3)
    with pytest.raises(DataError, match=r"16 in input shard 2 of 3\), fewer than one batch of 20"):
        make_classification_dataset(examples(), pre, cfg, batch_size=60, training=True, seed=0,
                                    input_context=ctx)


@pytest.mark.parametrize("parallel", [False, True])
def test_host_map_gives_what_map_gives_and_marks_its_function(parallel):
    # Several int32 outputs: the case TF's inject_prefetch rewrite cannot read on the
    # single-device path; host_map must still iterate with autotune on (the default).
    def fn(x):
        return {"ids": tf.cast(x, tf.int32), "twice": tf.cast(2 * x, tf.int32)}, x % 3

    kwargs = {"num_parallel_calls": tf.data.AUTOTUNE, "deterministic": True} if parallel else {}
    source = tf.data.Dataset.range(23).batch(4)
    fast = stages.host_map(source, fn, **kwargs).prefetch(tf.data.AUTOTUNE)
    plain = source.map(fn, **kwargs)
    assert fast.element_spec == plain.element_spec
    for _ in range(2):  # a new iterator each epoch, as fit reads a finite dataset
        got, want = list(fast.as_numpy_iterator()), list(plain.as_numpy_iterator())
        assert len(got) == len(want) == 6
        for (gx, gy), (wx, wy) in zip(got, want, strict=True):
            assert gx.keys() == wx.keys()
            assert all(np.array_equal(gx[k], wx[k]) for k in gx) and np.array_equal(gy, wy)

    # The fast path was taken: the map's function carries the single-device attribute
    # (so a TensorFlow upgrade that breaks it fails here instead of silently slowing down).
    graph = tf.compat.v1.GraphDef.FromString(fast._as_serialized_graph().numpy())
    marked = [f.signature.name for f in graph.library.function
              if f.attr["experimental_ints_on_device"].b]
    assert marked, "host_map fell back to Dataset.map"


def test_distribute_with_the_default_strategy(pre):
    strategy = tf.distribute.get_strategy()
    dist = distribute(strategy, lambda ctx: make_classification_dataset(
        examples(), pre, data_cfg(), batch_size=10, training=True, seed=0, input_context=ctx))
    shapes = [x["input_word_ids"].shape.as_list() for x, _ in dist]
    assert shapes == [[10, SEQ]] * 5


def test_load_and_feed_the_demo_end_to_end(vocab_file, tmp_path):
    splits = load_classification_splits(DataConfig(), seed=42,
                                         label_vocab_path=tmp_path / "labels.json")
    pre = make_bert_preprocess_fn(vocab_file=vocab_file, seq_length=16)
    ds = make_classification_dataset(splits.validation, pre, data_cfg(seq_length=16),
                                     batch_size=32, training=False, seed=0)
    assert sum(len(y) for _, y in ds.as_numpy_iterator()) == 300
    assert splits.label_names == ["negative", "positive"]


@pytest.mark.slow
def test_mirrored_replicas_each_get_a_per_replica_batch(vocab_file, tmp_path):
    """Two logical CPUs under MirroredStrategy (a subprocess: devices are fixed at start)."""
    script = tmp_path / "mirrored.py"
    script.write_text(textwrap.dedent(f"""
        import dataclasses
        import tfapp
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from tfapp.config import DataConfig
        from tfapp.data.bert_preprocess import make_bert_preprocess_fn
        from tfapp.data.classification import make_classification_dataset
        from tfapp.data.pipeline import distribute
        from tfapp.data.sources import ExampleSet
        import numpy as np
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        pre = make_bert_preprocess_fn(vocab_file={vocab_file!r}, seq_length=8)
        ex = ExampleSet([f"w{{i}}" for i in range(40)], None, np.zeros(40, np.int32))
        cfg = dataclasses.replace(DataConfig(), seq_length=8)
        dist = distribute(strategy, lambda ctx: make_classification_dataset(
            ex, pre, cfg, batch_size=8, training=True, seed=0, input_context=ctx))
        seen = []
        for x, y in dist:
            for part in strategy.experimental_local_results(x["input_word_ids"]):
                assert part.shape == (4, 8), part.shape
                seen += [int(v) - 5 for v in part[:, 1]]
        assert sorted(seen) == list(range(40)), seen
        print("OK", len(seen))
    """))
    result = run_python([str(script)], timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "OK 40" in result.stdout


def test_a_snapshot_left_unmarked_by_a_kill_is_replaced_then_reused(tmp_path, caplog):
    """A writer killed after its blocks were in place but before they were marked complete
    left a directory that every later run rewrote and discarded; now the marker goes in
    before the directory appears, and an unmarked one is replaced once."""
    from tfapp.data.pipeline import snapshot_dir, write_snapshot

    blocks = tf.data.Dataset.from_tensor_slices(np.arange(12, dtype=np.int32).reshape(3, 4))
    path = snapshot_dir(str(tmp_path), "train", "k1")
    os.makedirs(path)
    (tmp_path / os.path.basename(path) / "000000.raw").write_bytes(b"half")  # the old kill
    with caplog.at_level("INFO", logger="tfapp.data"):
        written = write_snapshot(blocks, str(tmp_path), "train", "k1")
        again = write_snapshot(blocks, str(tmp_path), "train", "k1")
    said = [r.getMessage().split(" snapshot")[0] for r in caplog.records]
    assert said == ["data: writing train", "data: reading train"]
    assert written.blocks == again.blocks == 3
    got = np.concatenate([np.ravel(b.numpy()) for b in again.dataset()])
    np.testing.assert_array_equal(got, np.arange(12))  # the blocks, not the kill's bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == [os.path.basename(path)]  # no tmp
