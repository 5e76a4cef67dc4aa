"""Snapshot replay with token ids above 255: uint16 storage, exact int32 rows, block shuffle.

The snapshot stores integers in the narrowest dtype that holds them; a vocabulary of a
few hundred words needs uint16 ids. What users rely on: replayed batches are the int32
rows a cold pass makes, and a training replay still shows every example once per epoch,
in a new seeded order each epoch (its block files are read in a shuffled order).
"""

from __future__ import annotations

import json
import os

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.data import pipeline as stages
from tfapp.data.bert_preprocess import make_bert_preprocess_fn
from tfapp.data.classification import make_classification_dataset
from tfapp.data.sources import ExampleSet
from tfapp.data.vocab import write_vocab

import numpy as np
import pytest
import tensorflow as tf
from test_data_pipeline import SEQ, SPECIAL, CountingPreprocess, data_cfg

WORDS = 700  # 705 entries: ids need uint16 (> 255), far below 65536
BASE = 300  # example i starts with word w{BASE + i}, id 5 + BASE + i > 255
FEATURES = ("input_word_ids", "input_mask", "input_type_ids")


@pytest.fixture(scope="module")
def wide_pre(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    return make_bert_preprocess_fn(vocab_file=str(write_vocab(
        SPECIAL + [f"w{i}" for i in range(WORDS)], path)), seq_length=SEQ)


@pytest.fixture
def small_blocks(monkeypatch):
    # Blocks of ~32 examples instead of 1024, so a tiny split spans several block files.
    monkeypatch.setattr(stages, "STORE_BLOCK", 32)


def wide_examples(n: int, pairs: bool = False) -> ExampleSet:
    return ExampleSet([f"w{BASE + i} w{i}" for i in range(n)],
                      [f"w{WORDS - 1 - i} w{i}" for i in range(n)] if pairs else None,
                      (np.arange(n) % 3).astype(np.int32), "train")


def example_id(word_ids: np.ndarray) -> int:
    return int(word_ids[1]) - 5 - BASE


def rows(dataset) -> dict[str, np.ndarray]:
    """All batches of one epoch concatenated: features and "labels", as numpy arrays."""
    batches = list(dataset.as_numpy_iterator())
    out = {k: np.concatenate([x[k] for x, _ in batches]) for k in FEATURES}
    out["labels"] = np.concatenate([y for _, y in batches])
    return out


def snapshot_meta(root) -> dict:
    (name,) = os.listdir(root)
    return json.loads((root / name / "tfapp_snapshot.json").read_text())


@pytest.mark.parametrize("pairs", [False, True])
def test_eval_replay_of_uint16_ids_matches_the_cold_pass(wide_pre, tmp_path, small_blocks,
                                                         pairs):
    n = 75  # 3 blocks of 30 (batch 10): the last block is partial, the last batch too
    cold = make_classification_dataset(wide_examples(n, pairs), wide_pre, data_cfg(),
                                       batch_size=10, training=False, seed=0)
    cfg = data_cfg(snapshot=str(tmp_path / "snap"))
    first = make_classification_dataset(wide_examples(n, pairs), wide_pre, cfg, batch_size=10,
                                        training=False, seed=0)
    counting = CountingPreprocess(wide_pre)
    replay = make_classification_dataset(wide_examples(n, pairs), counting, cfg,
                                          batch_size=10, training=False, seed=0)
    assert counting.calls == 0  # the second pipeline only reads the snapshot

    meta = snapshot_meta(tmp_path / "snap")
    assert meta["blocks"] == 3
    stored, label_dtype = tf.nest.pack_sequence_as(replay.element_spec, meta["dtypes"])
    assert stored == {"input_word_ids": "uint16", "input_mask": "uint8",
                      "input_type_ids": "uint8"}
    assert label_dtype == "uint8"

    want = rows(cold)
    assert want["input_word_ids"].max() > 255  # the uint16 range is really exercised
    assert [example_id(r) for r in want["input_word_ids"]] == list(range(n))
    for ds in (first, replay):
        for key in FEATURES:
            assert ds.element_spec[0][key] == tf.TensorSpec([None, SEQ], tf.int32)
        assert ds.element_spec[1] == tf.TensorSpec([None], tf.int32)
        assert [len(y) for _, y in ds.as_numpy_iterator()] == [10] * 7 + [5]
        got = rows(ds)
        for key, value in want.items():
            assert got[key].dtype == np.int32
            np.testing.assert_array_equal(got[key], value, err_msg=key)

    # The row of example i, spelled out: [CLS] w{BASE+i} wi [SEP] (w{WORDS-1-i} wi [SEP]).
    i = 70
    first_ids = [2, 5 + BASE + i, 5 + i, 3]
    if pairs:
        assert list(got["input_word_ids"][i]) == first_ids + [5 + WORDS - 1 - i, 5 + i, 3, 0]
        assert list(got["input_type_ids"][i]) == [0, 0, 0, 0, 1, 1, 1, 0]
        assert list(got["input_mask"][i]) == [1] * 7 + [0]
    else:
        assert list(got["input_word_ids"][i]) == first_ids + [0] * 4
        assert list(got["input_type_ids"][i]) == [0] * SEQ
        assert list(got["input_mask"][i]) == [1] * 4 + [0] * 4
    assert got["labels"][i] == i % 3


def test_training_replay_reads_shuffled_blocks_each_example_once(wide_pre, tmp_path,
                                                                 small_blocks):
    n, batch = 320, 8  # 10 block files of 32 examples, 4 batches each
    cold = rows(make_classification_dataset(wide_examples(n, pairs=True), wide_pre,
                                            data_cfg(), batch_size=n, training=False,
                                            seed=0))
    # A pool of one block: batches come block by block, so the block order is visible.
    # data.deterministic: training maps may otherwise hand out pools in completion order
    # (throughput over order), and the same-seed check below needs the seeded order.
    cfg = data_cfg(snapshot=str(tmp_path / "snap"), shuffle_buffer=32, deterministic=True)
    make = lambda pre: make_classification_dataset(  # noqa: E731
        wide_examples(n, pairs=True), pre, cfg, batch_size=batch, training=True, seed=7)
    ds = make(wide_pre)
    meta = snapshot_meta(tmp_path / "snap")
    assert meta["blocks"] == 10 and meta["dtypes"][2] == "uint16"  # input_word_ids
    for key in FEATURES:
        assert ds.element_spec[0][key] == tf.TensorSpec([batch, SEQ], tf.int32)
    assert ds.element_spec[1] == tf.TensorSpec([batch], tf.int32)

    def epoch(dataset) -> list[int]:
        order = []
        for x, y in dataset.as_numpy_iterator():
            assert all(x[k].dtype == np.int32 and x[k].shape == (batch, SEQ) for k in FEATURES)
            assert y.dtype == np.int32 and y.shape == (batch,)
            for r in range(batch):
                i = example_id(x["input_word_ids"][r])
                for key in FEATURES:  # each replayed row is the cold row of its example
                    np.testing.assert_array_equal(x[key][r], cold[key][i], err_msg=key)
                assert y[r] == cold["labels"][i]
                order.append(i)
        assert sorted(order) == list(range(n))  # every example exactly once
        return order

    def blocks(order: list[int]) -> list[frozenset]:
        return [frozenset(order[b:b + 32]) for b in range(0, n, 32)]

    one, two = epoch(ds), epoch(ds)
    assert one != two
    # The same 10 blocks each epoch, read in a new order (not just rows permuted inside).
    assert set(blocks(one)) == set(blocks(two)) and len(set(blocks(one))) == 10
    assert blocks(one) != blocks(two)

    # A fresh pipeline (as in a new run) with the same seed and data.deterministic replays
    # the same two epochs.
    counting = CountingPreprocess(wide_pre)
    fresh = make(counting)
    assert epoch(fresh) == one and epoch(fresh) == two
    assert counting.calls == 0
