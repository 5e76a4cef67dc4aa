"""The classification tf.data pipeline over prepared shards: exact shapes, passes,
snapshot and cache written as the first pass reads, sharding by file or element."""

from __future__ import annotations

import dataclasses
import os

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import ClassifierDataConfig
from tfapp.data.examples.classification import load_classification_splits
from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn
from tfapp.data.text.vocab import write_vocab
from tfapp.errors import DataError

import numpy as np
import pytest
import tensorflow as tf
from conftest import classification_batches, two_replica_results

N = 50
SEQ = 8
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    # Word wI has id 5 + I, so every example's identity can be read off its ids.
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    return str(write_vocab(SPECIAL + [f"w{i}" for i in range(400)], path))


@pytest.fixture(scope="module")
def pre(vocab_file):
    return make_bert_preprocess_fn(vocab_file=vocab_file, seq_length=SEQ)


def data_cfg(**kw) -> ClassifierDataConfig:
    kw.setdefault("seq_length", SEQ)
    kw.setdefault("shuffle_buffer", 100)
    kw.setdefault("validation_split", 0.0)
    return dataclasses.replace(ClassifierDataConfig(), **kw)


def write_examples(folder, n: int = N, pairs: bool = False, multi: bool = False,
                   files: int = 1) -> str:
    """n rows "wI wI+1" (label I % 3) in ``files`` CSV files; returns the glob."""
    os.makedirs(folder, exist_ok=True)
    for f in range(files):
        rows = ["text,pair,label"]
        for i in range(f, n, files):
            label = "|".join(sorted({str(i % 3), "9"})) if multi and i % 2 else str(i % 3)
            rows.append(f"w{i} w{i + 1},w{i + 2},{label}")
        (folder / f"part{f}.csv").write_text("\n".join(rows) + "\n")
    return str(folder / "part*.csv")


def splits_of(folder, **kw):
    cfg = data_cfg(train_files=write_examples(folder, **{k: kw.pop(k) for k in
                                                          ("n", "pairs", "multi", "files")
                                                          if k in kw}), **kw)
    return load_classification_splits(cfg, 0), cfg


class CountingPreprocess:
    """The BERT preprocess fn plus a py_function that counts how many texts it saw."""

    def __init__(self, inner):
        self.inner = inner
        self.fingerprint = self.inner.fingerprint
        self.vocab_size = inner.vocab_size
        self.calls = 0

    def _count(self, texts):
        self.calls += int(texts.shape[0])
        return texts

    def __call__(self, text, text_pair=None):
        text = tf.py_function(self._count, [text], tf.string)
        text.set_shape([None])
        return self.inner(text, text_pair)


def ids_of(batches) -> list[int]:
    """Example index of every row (first word id - 5), in order."""
    return [int(r) - 5 for x, _ in batches for r in x["input_word_ids"][:, 1]]


def take(dataset, n: int) -> list:
    return list(dataset.take(n).as_numpy_iterator())


@pytest.mark.parametrize("stored", [False, True])
def test_training_batches_have_exact_static_shapes(pre, tmp_path, stored):
    splits, cfg = splits_of(tmp_path / "d", pairs=True, text_pair_column="pair",
                            snapshot=str(tmp_path / "snap") if stored else "")
    ds = classification_batches(splits, splits.train, pre, cfg, batch_size=16,
                                     training=True, seed=0)
    spec = ds.element_spec
    for key in ("input_word_ids", "input_mask", "input_type_ids"):
        assert spec[0][key] == tf.TensorSpec([16, SEQ], tf.int32)
    assert spec[1] == tf.TensorSpec([16], tf.int32)
    first_pass = take(ds, 3)  # 50 // 16 batches a pass, the remainder dropped
    seen = ids_of(first_pass)
    assert len(set(seen)) == 48 and set(seen) <= set(range(N))
    x, y = first_pass[0]
    i = int(x["input_word_ids"][0, 1]) - 5
    np.testing.assert_array_equal(x["input_word_ids"][0], [2, 5 + i, 6 + i, 3, 7 + i, 3, 0, 0])
    np.testing.assert_array_equal(x["input_type_ids"][0], [0, 0, 0, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(x["input_mask"][0], [1, 1, 1, 1, 1, 1, 0, 0])
    assert y[0] == splits.label_names.index(str(i % 3))


def test_eval_keeps_the_prepared_order_and_remainder_and_multi_label(pre, tmp_path):
    splits, cfg = splits_of(tmp_path / "d", multi=True, multi_label=True)
    ds = classification_batches(splits, splits.train, pre, cfg, batch_size=16,
                                     training=False, seed=0)
    assert ds.element_spec[1].shape.as_list() == [None, 4]
    assert ds.element_spec[1].dtype == tf.float32
    batches = list(ds.as_numpy_iterator())
    assert [len(y) for _, y in batches] == [16, 16, 16, 2]
    # Every example once, in the prepared shards' order (prepare permutes each shard's
    # rows), the same on every pass.
    order = ids_of(batches)
    assert sorted(order) == list(range(N)) and order != list(range(N))
    assert ids_of(list(ds.as_numpy_iterator())) == order
    labels = np.concatenate([y for _, y in batches])
    assert labels[order.index(1)].tolist() == [0, 1, 0, 1]  # row 1: labels "1" and "9"


def test_passes_are_seeded_and_reshuffled(pre, tmp_path):
    splits, cfg = splits_of(tmp_path / "d", shuffle_buffer=20)
    make = lambda seed: classification_batches(  # noqa: E731
        splits, splits.train, pre, cfg, batch_size=10, training=True, seed=seed)
    a, b = ids_of(take(make(1), 10)), ids_of(take(make(1), 10))
    assert a == b  # same seed, same order
    assert a[:50] != a[50:] and sorted(a[:50]) == sorted(a[50:]) == list(range(N))
    assert ids_of(take(make(2), 5)) != a[:50]


def test_split_smaller_than_a_batch_is_a_clear_error(pre, tmp_path):
    splits, cfg = splits_of(tmp_path / "d")
    with pytest.raises(DataError, match="fewer than one batch of 64; .*lower data.batch_size"):
        classification_batches(splits, splits.train, pre, cfg, batch_size=64,
                                    training=True, seed=0)
    # Evaluation keeps partial batches, so the same size is fine there.
    classification_batches(splits, splits.train, pre, cfg, batch_size=64, training=False,
                                seed=0)


def test_snapshot_is_written_as_the_first_pass_reads_then_replayed(pre, vocab_file, tmp_path):
    splits, cfg = splits_of(tmp_path / "d", snapshot=str(tmp_path / "snap"))
    counting = CountingPreprocess(pre)
    ds = classification_batches(splits, splits.train, counting, cfg, batch_size=10,
                                     training=True, seed=0)
    first = ids_of(take(ds, 6))  # a pass and a batch of the next
    assert counting.calls == N  # tokenised once, as the first pass read the file
    (store,) = os.listdir(tmp_path / "snap")
    assert store.startswith("train-") and (tmp_path / "snap" / store / "00000.done").exists()
    # A new pipeline (as in a new run) over the same data replays it: no tokenising.
    again = CountingPreprocess(pre)
    ds2 = classification_batches(splits, splits.train, again, cfg, batch_size=10,
                                      training=True, seed=0)
    assert ids_of(take(ds2, 6)) == first and again.calls == 0
    # An evaluation store holds exactly the cold values, rows in order.
    stored = classification_batches(splits, splits.train, CountingPreprocess(pre), cfg,
                                         batch_size=10, training=False, seed=0)
    list(stored.as_numpy_iterator())
    plain = classification_batches(splits, splits.train, pre, data_cfg(), batch_size=10,
                                        training=False, seed=0)
    for (xa, ya), (xb, yb) in zip(stored.as_numpy_iterator(), plain.as_numpy_iterator(),
                                  strict=True):
        for key in xa:
            np.testing.assert_array_equal(xa[key], xb[key])
        np.testing.assert_array_equal(ya, yb)
    # Another seq_length is another store.
    longer = CountingPreprocess(make_bert_preprocess_fn(vocab_file=vocab_file,
                                                        seq_length=SEQ + 4))
    take(classification_batches(splits, splits.train, longer,
                                     dataclasses.replace(cfg, seq_length=SEQ + 4),
                                     batch_size=10, training=True, seed=0), 1)
    assert longer.calls == N
    assert len(os.listdir(tmp_path / "snap")) == 2


@pytest.mark.parametrize("cache", ["memory", "file"])
def test_memory_and_file_cache_tokenise_once(pre, tmp_path, cache):
    where = "memory" if cache == "memory" else str(tmp_path / "cache" / "c")
    splits, cfg = splits_of(tmp_path / "d", cache=where)
    counting = CountingPreprocess(pre)
    ds = classification_batches(splits, splits.train, counting, cfg, batch_size=10,
                                     training=True, seed=0)
    seen = ids_of(take(ds, 15))
    assert counting.calls == N and sorted(seen[:50]) == sorted(seen[50:100]) == list(range(N))
    if cache == "file":
        assert any(f.startswith("c-train-") or f.startswith("train-")
                   for f in os.listdir(tmp_path / "cache" / "c"))


@pytest.mark.parametrize("files", [1, 4])
def test_input_pipelines_read_disjoint_parts_covering_the_data(pre, tmp_path, files):
    # One file: element sharding; four files: each pipeline reads its own files.
    splits, cfg = splits_of(tmp_path / "d", files=files)
    parts = []
    for pipeline_id in range(3):
        ctx = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=pipeline_id,
                                         num_replicas_in_sync=6)
        ds = classification_batches(splits, splits.train, pre, cfg, batch_size=12,
                                         training=False, seed=0, input_context=ctx)
        batches = list(ds.as_numpy_iterator())
        assert len(batches[0][1]) == 2  # 12 global / 6 replicas
        parts.append(set(ids_of(batches)))
    assert sum(map(len, parts)) == N and set().union(*parts) == set(range(N))
    ctx = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=2,
                                     num_replicas_in_sync=3)
    with pytest.raises(DataError, match=r"in input pipeline \d of 3\), fewer than one batch "
                                        r"of 20"):
        classification_batches(splits, splits.train, pre, cfg, batch_size=60,
                                    training=True, seed=0, input_context=ctx)


def test_distribute_with_the_default_strategy(pre, tmp_path):
    splits, cfg = splits_of(tmp_path / "d")
    strategy = tf.distribute.get_strategy()
    dist = strategy.distribute_datasets_from_function(lambda ctx: classification_batches(
        splits, splits.train, pre, cfg, batch_size=10, training=False, seed=0,
        input_context=ctx))
    shapes = [x["input_word_ids"].shape.as_list() for x, _ in dist]
    assert shapes == [[10, SEQ]] * 5


def test_load_and_feed_the_demo_end_to_end(vocab_file, tmp_path):
    splits = load_classification_splits(ClassifierDataConfig(), seed=42,
                                         label_vocab_path=tmp_path / "labels.json")
    pre = make_bert_preprocess_fn(vocab_file=vocab_file, seq_length=16)
    ds = classification_batches(splits, splits.validation, pre, data_cfg(seq_length=16),
                                     batch_size=32, training=False, seed=0)
    assert sum(len(y) for _, y in ds.as_numpy_iterator()) == 500
    assert splits.label_names == ["negative", "positive"]


@pytest.mark.slow
def test_mirrored_replicas_each_get_a_per_replica_batch(tmp_path_factory):
    """Two logical CPUs under MirroredStrategy (tests/workers/two_replicas.py: devices are
    fixed at start): every step gives each replica its 4 of the global batch of 8, and one
    pass holds each of the 40 examples once."""
    steps = two_replica_results(tmp_path_factory)["per_replica_batches"]["steps"]
    assert [step["shapes"] for step in steps] == [[[4, SEQ], [4, SEQ]]] * 5
    seen = [i for step in steps for part in step["first_words"] for i in part]
    assert sorted(seen) == list(range(40)), seen


def write_sorted(folder, n: int, per_class_files: bool) -> str:
    """n rows sorted by label (label 0 for the first 60%, then 1), as one file or one file
    per class; returns the glob."""
    os.makedirs(folder, exist_ok=True)
    rows = [(f"w{i % 300} w{(i + 1) % 300}", int(i >= 0.6 * n)) for i in range(n)]
    groups = ([[r for r in rows if r[1] == c] for c in (0, 1)] if per_class_files
              else [rows])
    for g, group in enumerate(groups):
        (folder / f"class_{g}.csv").write_text(
            "text,label\n" + "".join(f"{t},{y}\n" for t, y in group))
    return str(folder / "class_*.csv")


@pytest.mark.parametrize("per_class_files", [False, True])
def test_batches_from_a_label_sorted_source_carry_the_global_label_mix(pre, tmp_path,
                                                                       per_class_files):
    from scipy.stats import chi2_contingency

    # 10x the shuffle block, sorted: every batch of the old stream held one label.
    n, block, batch = 2560, 256, 32
    cfg = data_cfg(train_files=write_sorted(tmp_path / "d", n, per_class_files),
                   shuffle_buffer=block)
    splits = load_classification_splits(cfg, 0)
    ds = classification_batches(splits, splits.train, pre, cfg, batch_size=batch,
                                     training=True, seed=3)
    counts = np.array([np.bincount(y, minlength=2) for _, y in take(ds, 2 * n // batch)])
    # Two passes: each pass holds every example once.
    assert counts.sum(0).tolist() == [2 * int(0.6 * n), 2 * (n - int(0.6 * n))]
    # Batches x labels: one mix for all of them (a test of homogeneity against the global
    # mix), which a sorted stream fails with p ~ 0.
    p = chi2_contingency(counts).pvalue
    assert p > 0.01, (p, counts[:8].tolist())
    # Every batch holds both labels (a sorted stream's hold one).
    assert (counts.min(1) > 0).mean() > 0.95


def test_held_out_splits_are_prepared_into_shards_of_their_own(pre, tmp_path):
    from tfapp.data.examples.classification import raw_batches

    def ids(splits, split):
        return sorted(int(i) for b in raw_batches(splits, split) for i in b["id"])

    path = write_examples(tmp_path / "d", n=400, files=2)
    cfg = data_cfg(train_files=path, validation_split=0.2, test_split=0.1)
    splits = load_classification_splits(cfg, 0)
    by_split = {}
    for shard in splits.train.manifest.shards:
        by_split.setdefault(shard.split, []).append(shard.count)
    # Each source's rows went to a train, a validation and a test shard.
    assert sorted(by_split) == ["test", "train", "validation"]
    assert [len(v) for v in by_split.values()] == [2, 2, 2]
    # Each split reads only its own shards, and they hold exactly its rows.
    for split in (splits.train, splits.validation, splits.test):
        assert {s.split for j, s in enumerate(split.manifest.shards)
                if j in split.shards()} == {split.name}
        assert sum(split.counts()) == split.rows == sum(by_split[split.name])
    seen = {s.name: ids(splits, s) for s in (splits.train, splits.validation, splits.test)}
    assert sorted(sum(seen.values(), [])) == sorted(set(sum(seen.values(), [])))
    assert len(sum(seen.values(), [])) == 400
    # The same rows as the bucket filter picks from shards of every split (a folder
    # prepared for another seed or fraction still reads right, filtering each shard).
    other = load_classification_splits(dataclasses.replace(cfg, validation_split=0.3), 0)
    assert other.train.manifest.root != splits.train.manifest.root  # prepared again
    mixed = load_classification_splits(dataclasses.replace(
        cfg, validation_files=path, test_split=0.0, validation_split=0.0), 0)
    assert all(s.split == "" for s in mixed.train.manifest.shards)
    from tfapp.data.input.parse import split_rows
    from tfapp.data.input.splits import SplitData
    from tfapp.data.prepare.manifest import held_out_selectors

    selector = held_out_selectors(0, 0.2, 0.1)["validation"]
    filtered = SplitData("validation", mixed.train.manifest, selector)
    assert sum(filtered.counts()) == splits.validation.rows
    # ... and the shard parse keeps exactly those rows of each shard (the bucket filter).
    rows = split_rows(filtered, {}, 64)
    assert sorted(int(i) for j, file in enumerate(filtered.files())
                  for chunk in rows(tf.constant(file), tf.constant(j, tf.int64))
                  .as_numpy_iterator() for i in chunk["id"]) == seen["validation"]


def test_length_samples_are_tokenised_once_per_split_and_tokeniser(pre, vocab_file, tmp_path):
    """The lengths the buckets are placed by are worked out once for the same prepared
    split, labels, tokeniser and seq_length (cached: a tune trial or a rerun reads them),
    and again when one of them changes."""
    from tfapp.data.examples.classification import classification_examples, token_lengths

    splits, cfg = splits_of(tmp_path / "d", n=40)
    want = token_lengths(splits, pre)
    # "wI wI+1" is [CLS] wI wI+1 [SEP]: 4 tokens, every row of the split.
    assert want.tolist() == [4] * 40
    first = CountingPreprocess(pre)
    sample = classification_examples(splits, splits.train, first, SEQ).lengths.sample
    np.testing.assert_array_equal(sample(), want)
    assert first.calls == 40
    again = CountingPreprocess(pre)
    np.testing.assert_array_equal(
        classification_examples(splits, splits.train, again, SEQ).lengths.sample(), want)
    assert again.calls == 0
    # seq_length 3 leaves room for one word piece: other lengths, counted again.
    short = CountingPreprocess(make_bert_preprocess_fn(vocab_file=vocab_file, seq_length=3))
    got = classification_examples(splits, splits.train, short, 3).lengths.sample()
    assert got.tolist() == [3] * 40 and short.calls == 40
