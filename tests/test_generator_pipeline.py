"""The generator's tf.data pipeline through the shared stages: snapshot, cache, input
shards, tf.data service, and a whole generator run that writes then replays its snapshot.

Example i of ``examples(n)`` carries its index in every array (ids above 255, so the
snapshot stores them as uint16), so each batch row says which example it is and whether
its values survived storage.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from collections import Counter

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import DataConfig, DataServiceConfig, load_config
from tfapp.data import pipeline as stages
from tfapp.data.errors import DataError
from tfapp.data.text_lines import Examples, make_generator_dataset
from tfapp.data_service import LocalDataService

import numpy as np
import pytest
import tensorflow as tf

BASE = 300  # example i: encoder ids BASE + i + [0, 1, 2], labels BASE + i + [0, 1]
N, K = 3, 2
BLOCK = 32


def examples(n: int, name: str = "train") -> Examples:
    i = np.arange(n, dtype=np.int32)[:, None]
    labels = BASE + i + np.arange(K, dtype=np.int32)
    decoder = np.concatenate([np.full((n, 1), 2, np.int32), labels[:, :-1]], axis=1)
    return Examples(BASE + i + np.arange(N, dtype=np.int32), decoder, labels, name)


def hollow(ex: Examples) -> Examples:
    """Zeros in place of ``ex``'s arrays, claiming its content fingerprint: a pipeline that
    gives ``ex``'s values from these read them from storage, never from the arrays."""
    return Examples(np.zeros_like(ex.encoder_ids), np.zeros_like(ex.decoder_ids),
                    np.zeros_like(ex.labels), ex.name, _fingerprint=ex.fingerprint())


def data_cfg(**kw) -> DataConfig:
    kw.setdefault("shuffle_buffer", BLOCK)  # a pool of one block: block order is visible
    return dataclasses.replace(DataConfig(), **kw)


@pytest.fixture
def small_blocks(monkeypatch):
    # Blocks of 32 examples instead of 1024, so a tiny split spans several block files.
    monkeypatch.setattr(stages, "STORE_BLOCK", BLOCK)


def ids(dataset) -> list[int]:
    """The example index of every row of one pass, in order; checks each row is intact."""
    out = []
    for x, y in dataset.as_numpy_iterator():
        assert x["encoder_ids"].dtype == x["decoder_ids"].dtype == y.dtype == np.int32
        for enc, dec, lab in zip(x["encoder_ids"], x["decoder_ids"], y, strict=True):
            i = int(enc[0]) - BASE
            np.testing.assert_array_equal(enc, BASE + i + np.arange(N))
            np.testing.assert_array_equal(lab, BASE + i + np.arange(K))
            np.testing.assert_array_equal(dec, [2, BASE + i])
            out.append(i)
    return out


def snapshot_dirs(root) -> list[str]:
    return sorted(d for d in os.listdir(root) if not d.startswith("."))


def test_snapshot_is_written_once_then_replayed_not_rebuilt(tmp_path, small_blocks):
    n, batch = 100, 8  # blocks of 32: 3 full blocks and one of 4 (its 4 rows are dropped)
    ex = examples(n)
    cfg = data_cfg(snapshot=str(tmp_path / "snap"), deterministic=True)
    first = make_generator_dataset(ex, cfg, batch_size=batch, training=True, seed=3)
    (name,) = snapshot_dirs(tmp_path / "snap")  # written while the pipeline was built
    assert name.startswith("train-")
    meta = json.loads((tmp_path / "snap" / name / "tfapp_snapshot.json").read_text())
    assert meta["blocks"] == 4 and meta["examples"] == n and meta["block"] == BLOCK
    assert (meta["context_words"], meta["target_words"]) == (N, K)
    assert sorted(os.listdir(tmp_path / "snap" / name)) == [
        "000000.raw", "000001.raw", "000002.raw", "000003.raw", "tfapp_snapshot.json"]
    # Ids above 255 are stored as uint16: (encoder_ids, decoder_ids) then labels.
    assert meta["dtypes"] == ["uint16", "uint16", "uint16"]
    assert first.element_spec[0]["encoder_ids"] == tf.TensorSpec([batch, N], tf.int32)
    assert first.element_spec[1] == tf.TensorSpec([batch, K], tf.int32)

    # The stored blocks are a fixed (seed 0) permutation of the examples; training drops
    # the last, partial block's rows, the same ones every epoch.
    perm = np.random.default_rng(0).permutation(n)
    one, two = ids(first), ids(first)
    assert sorted(one) == sorted(two) == sorted(perm[:96].tolist())
    assert one != two  # reshuffled every epoch

    # A pipeline built afresh (a new run) over examples whose arrays are all zeros but
    # whose fingerprint is the same reads the snapshot: the real values, the same order.
    again = make_generator_dataset(hollow(ex), cfg, batch_size=batch, training=True, seed=3)
    assert ids(again) == one and ids(again) == two
    assert snapshot_dirs(tmp_path / "snap") == [name]
    without = make_generator_dataset(hollow(ex), data_cfg(), batch_size=batch, training=True,
                                     seed=3)
    assert not any(y.any() for _, y in without.as_numpy_iterator())  # what ignoring it gives

    # Evaluation has its own (unpermuted) snapshot: every row, in order, last batch partial.
    cold = make_generator_dataset(ex, data_cfg(), batch_size=batch, training=False, seed=0)
    make_generator_dataset(ex, cfg, batch_size=batch, training=False, seed=0)
    replay = make_generator_dataset(hollow(ex), cfg, batch_size=batch, training=False, seed=0)
    assert ids(replay) == ids(cold) == list(range(n))
    assert [len(y) for _, y in replay.as_numpy_iterator()] == [batch] * 12 + [4]
    assert len(snapshot_dirs(tmp_path / "snap")) == 2

    # Changed examples (one fewer) are a new key: a new snapshot, never the stale one.
    fewer = make_generator_dataset(examples(n - 1), cfg, batch_size=batch, training=False,
                                   seed=0)
    assert ids(fewer) == list(range(n - 1))
    assert len(snapshot_dirs(tmp_path / "snap")) == 3


@pytest.mark.parametrize("cache", ["memory", "file"])
def test_memory_and_file_cache_store_fixed_blocks(tmp_path, small_blocks, cache):
    n, batch = 96, 8  # 3 blocks of 32, 4 batches each
    prefix = str(tmp_path / "cache" / "c")
    # The memory cache holds what the snapshot replay read (the cache comes after it).
    cfg = (data_cfg(cache="memory", snapshot=str(tmp_path / "snap"), deterministic=True)
           if cache == "memory" else data_cfg(cache=prefix, deterministic=True))
    ds = make_generator_dataset(examples(n), cfg, batch_size=batch, training=True, seed=1)
    one = ids(ds)
    if cache == "memory":
        shutil.rmtree(tmp_path / "snap")  # epoch 2 can only come from memory now
    two = ids(ds)
    assert sorted(one) == sorted(two) == list(range(n)) and one != two
    # Batches are cut from the stored blocks of the fixed permutation: every 4 batches are
    # one block, the same 3 blocks each epoch (a plain shuffle would mix across them).
    perm = np.random.default_rng(0).permutation(n)
    blocks = {frozenset(perm[b:b + BLOCK].tolist()) for b in range(0, n, BLOCK)}
    for epoch in (one, two):
        assert {frozenset(epoch[b:b + BLOCK]) for b in range(0, n, BLOCK)} == blocks
    if cache == "file":
        assert any(f.startswith("c-train-") for f in os.listdir(tmp_path / "cache"))
        # A new pipeline over the same key reads the complete cache files, not the arrays.
        again = make_generator_dataset(hollow(examples(n)), cfg, batch_size=batch,
                                       training=True, seed=1)
        assert ids(again) == one


@pytest.mark.parametrize("stored", [False, True])
def test_input_contexts_read_disjoint_shards_covering_every_example(tmp_path, small_blocks,
                                                                    stored):
    n = 100
    cfg = data_cfg(snapshot=str(tmp_path / "snap") if stored else "")
    evaluated, trained = [], []
    for pipeline_id in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline_id,
                                         num_replicas_in_sync=4)
        ev = make_generator_dataset(examples(n), cfg, batch_size=16, training=False, seed=0,
                                    input_context=ctx)
        assert [len(y) for _, y in ev.as_numpy_iterator()][0] == 4  # 16 global / 4 replicas
        evaluated.append(ids(ev))
        tr = make_generator_dataset(examples(n), cfg, batch_size=16, training=True, seed=0,
                                    input_context=ctx)
        assert tr.element_spec[1] == tf.TensorSpec([4, K], tf.int32)
        trained.append(set(ids(tr)))
    assert evaluated[0] == list(range(0, n, 2)) and evaluated[1] == list(range(1, n, 2))
    assert not trained[0] & trained[1] and trained[0] | trained[1] <= set(range(n))
    assert len(trained[0]) >= 50 - 4 and len(trained[1]) >= 50 - 4  # drops under a batch
    if stored:  # one snapshot per shard and split
        assert len(snapshot_dirs(tmp_path / "snap")) == 4
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1,
                                     num_replicas_in_sync=2)
    with pytest.raises(DataError, match=r"\(49 in input shard 1 of 2\), fewer than one batch "
                                        r"of 64; .*lower data.batch_size"):
        make_generator_dataset(examples(99), cfg, batch_size=128, training=True, seed=0,
                               input_context=ctx)


@pytest.fixture(scope="module")
def service():
    svc = LocalDataService(workers=2, port=0, listen_all=True)
    yield svc
    svc.stop()


@pytest.mark.parametrize("stored", [False, True])
def test_data_service_delivers_each_example_once_per_distributed_epoch(service, tmp_path,
                                                                       stored):
    n = 97  # not a multiple of the batch: evaluation keeps the remainder
    snapshot = str(tmp_path / "snap") if stored else ""
    for mode, times in (("distributed_epoch", 1), ("parallel_epochs", 2)):
        cfg = data_cfg(snapshot=snapshot, service=DataServiceConfig(
            address=service.address, processing_mode=mode))
        ds = make_generator_dataset(examples(n), cfg, batch_size=4, training=False, seed=0)
        for _epoch in range(2 if times == 1 else 1):
            counts = Counter(ids(ds))
            assert sorted(counts) == list(range(n))
            # Exactly once across both workers; parallel_epochs (each worker a full
            # epoch) shows that both workers really served this pipeline.
            assert set(counts.values()) == {times}


@pytest.mark.slow
def test_generator_run_writes_its_snapshot_and_the_next_run_replays_it(tmp_path, caplog):
    from tfapp.training.driver import train

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"the baker {w} bread at dawn number {i}"
                                for i, w in enumerate(["bakes", "sells", "eats"] * 10)))
    snap = tmp_path / "snap"

    def run(name: str):
        cfg = load_config(None, [
            "task=generator", "model.kind=seq2seq", f"name={name}",
            f"output_dir={tmp_path / 'runs'}", f"data.train_files={corpus}",
            f"data.snapshot={snap}", "data.context_words=4", "data.target_words=3",
            "data.batch_size=8", "model.embedding_dim=8", "model.units=8",
            "trainer.epochs=1", "trainer.steps_per_epoch=2", "trainer.export=false",
            "tracking.tensorboard=false", "generation.method=greedy",
            "generation.max_length=3", "generation.num_beams=2"])
        with caplog.at_level(logging.INFO, logger="tfapp.data"):
            caplog.clear()
            result = train(cfg)
        assert np.isfinite(result.history["loss"]).all() and "val_loss" in result.history
        return caplog.text

    first = run("first")
    dirs = snapshot_dirs(snap)
    assert [d.split("-")[0] for d in dirs] == ["train", "validation"]
    assert "writing train snapshot" in first and "writing validation snapshot" in first
    stamps = {p: p.stat().st_mtime_ns for p in snap.rglob("*")}
    assert len(stamps) >= 6 and (snap / dirs[0] / "tfapp_snapshot.json").is_file()

    second = run("second")
    assert "reading train snapshot" in second and "reading validation snapshot" in second
    assert "writing train snapshot" not in second and "writing validation" not in second
    # Same key, nothing rewritten: the second run replayed the first run's blocks.
    assert snapshot_dirs(snap) == dirs
    assert {p: p.stat().st_mtime_ns for p in snap.rglob("*")} == stamps
