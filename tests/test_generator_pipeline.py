"""The generator's tf.data pipeline over prepared shards: snapshot and cache written as the
first pass reads and replayed without the sources, input pipelines, tf.data service, and a
whole generator run that writes then replays its snapshot."""

from __future__ import annotations

import logging
import os
from collections import Counter

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import DataServiceConfig, load_config
from tfapp.data.examples import generator as tl
from tfapp.data.input.lengths import grouping_for
from tfapp.data.input.reader import read_batches
from tfapp.data_service import LocalDataService
from tfapp.errors import DataError
from tfapp.tasks import get_task

import numpy as np
import pytest
import tensorflow as tf


def cfg_for(corpus, *overrides):
    return load_config(None, ["task=generator", "model.kind=seq2seq",
                              f"data.train_files={corpus}", "data.context_words=3",
                              "data.target_words=2", "data.validation_split=0.2",
                              *overrides]).data


@pytest.fixture
def corpus(tmp_path):
    # 300 distinct words: ids above 255, so stores keep them as uint16.
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(f"w{i} w{i + 1} w{i + 2} w{(i * 7) % 300}" for i in range(300)))
    return path


def rows(dataset, batches: int | None = None) -> list[tuple]:
    """Every example of ``dataset`` (or its first ``batches``) as a hashable row."""
    out = []
    source = dataset.take(batches) if batches else dataset
    for x, y in source.as_numpy_iterator():
        for enc, dec, lab in zip(x["encoder_ids"], x["decoder_ids"], y, strict=True):
            out.append((tuple(enc), tuple(dec), tuple(lab)))
    return out


def make(data, cfg, split="train", **kw):
    kw.setdefault("batch_size", 8)
    kw.setdefault("training", split == "train")
    kw.setdefault("seed", 3)
    return read_batches(tl.generator_examples(data, getattr(data, split), cfg), cfg,
                        **kw)


def test_snapshot_is_stored_as_the_first_pass_reads_and_replayed_without_the_source(
        tmp_path, corpus):
    cfg = cfg_for(corpus, f"data.snapshot={tmp_path / 'snap'}")
    data = tl.build_generator_data(cfg, seed=0)
    assert len(data.vocabulary) > 256
    steps = data.size(data.train) // 8
    first = make(data, cfg)
    one = rows(first, steps + 1)  # a pass, and a batch of the next: the store completes
    cold = rows(make(data, cfg_for(corpus), training=False, split="train"))
    assert set(one[:steps * 8]) <= set(cold) and len(set(one[:steps * 8])) == steps * 8
    evaluation = rows(make(data, cfg, split="validation"))
    assert evaluation == rows(make(data, cfg_for(corpus), split="validation"))
    # The sources gone, a new pipeline over the same key replays: the same rows, in order.
    for path in data.train.manifest.files():
        os.remove(path)
    assert rows(make(data, cfg), steps + 1) == one
    assert rows(make(data, cfg, split="validation")) == evaluation
    assert sorted(d.split("-")[0] for d in os.listdir(tmp_path / "snap")) == [
        "train", "validation"]


@pytest.mark.parametrize("cache", ["memory", "file"])
def test_memory_and_file_cache_store_the_windows_once(tmp_path, corpus, cache):
    where = "memory" if cache == "memory" else str(tmp_path / "cache" / "c")
    cfg = cfg_for(corpus, f"data.cache={where}")
    data = tl.build_generator_data(cfg, seed=0)
    steps = data.size(data.train) // 8
    dataset = make(data, cfg)
    both = rows(dataset, 2 * steps)
    one, two = both[:steps * 8], both[steps * 8:]
    whole = set(rows(make(data, cfg_for(corpus), training=False)))
    assert len(set(one)) == len(one) and set(one) | set(two) <= whole
    assert len(set(one) & set(two)) > len(one) - 8  # each pass all but its remainder
    assert one != two  # in a new order
    if cache == "file":
        assert os.listdir(tmp_path / "cache" / "c")


def test_input_pipelines_read_disjoint_parts_covering_every_example(tmp_path, corpus):
    cfg = cfg_for(corpus)
    data = tl.build_generator_data(cfg, seed=0)
    evaluated = []
    for pipeline_id in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline_id,
                                         num_replicas_in_sync=4)
        ev = make(data, cfg, split="validation", batch_size=16, input_context=ctx)
        assert [len(y) for _, y in ev.as_numpy_iterator()][0] == 4  # 16 global / 4 replicas
        evaluated.append(Counter(rows(ev)))
        tr = make(data, cfg, batch_size=16, input_context=ctx)
        assert tr.element_spec[1] == tf.TensorSpec([4, 2], tf.int32)
    whole = Counter(rows(make(data, cfg, split="validation")))
    assert evaluated[0] + evaluated[1] == whole
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1,
                                     num_replicas_in_sync=2)
    with pytest.raises(DataError, match=r"in input pipeline 1 of 2\), fewer than one batch "
                                        r"of 4096; .*lower data.batch_size"):
        make(data, cfg, batch_size=8192, input_context=ctx)


@pytest.fixture(scope="module")
def service():
    svc = LocalDataService(workers=2, port=0, listen_all=True)
    yield svc
    svc.stop()


def test_data_service_delivers_each_example_once_per_distributed_epoch(service, tmp_path,
                                                                       corpus):
    base = cfg_for(corpus)
    data = tl.build_generator_data(base, seed=0)
    whole = Counter(rows(make(data, base, split="validation")))
    for mode, times in (("distributed_epoch", 1), ("parallel_epochs", 2)):
        cfg = cfg_for(corpus, f"data.service.address={service.address}",
                      f"data.service.processing_mode={mode}")
        ds = make(data, cfg, split="validation")
        counts = Counter(rows(ds))
        # Exactly once across both workers; parallel_epochs (each worker a full epoch)
        # shows that both workers really served this pipeline.
        assert counts == Counter({k: v * times for k, v in whole.items()})
    # The default is the mode checked first above: each example once per epoch.
    assert DataServiceConfig().processing_mode == "distributed_epoch"


@pytest.mark.slow
def test_generator_run_writes_its_snapshot_and_the_next_run_replays_it(tmp_path, caplog):
    """Also ``runtime.deterministic=true``: the second run (the same windows, replayed)
    repeats the first one exactly, every training and validation figure of every epoch
    and the test scores of its final model (issue 46: run-to-run spread)."""
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
            f"data.test_files={corpus}", "model.dropout=0.3", "model.tie_embeddings=true",
            "model.lm_loss=true",
            "runtime.deterministic=true", "runtime.seed=11",
            "trainer.epochs=2", "trainer.export=false",
            "tracking.tensorboard=false", "generation.method=greedy",
            "generation.max_length=3", "generation.num_beams=2"])
        with caplog.at_level(logging.INFO, logger="tfapp.data"):
            caplog.clear()
            result = train(cfg, task=get_task(cfg.task))
        assert np.isfinite(result.history["loss"]).all() and "val_loss" in result.history
        outcomes.append((result.history, result.metrics))
        return caplog.text

    outcomes: list = []
    first = run("first")
    assert "0 of 1 file(s) stored" in first
    stamps = {p: p.stat().st_mtime_ns for p in snap.rglob("*") if p.is_file()}
    assert sorted(p.name for p in stamps if p.suffix == ".done") == ["00000.done"] * 2
    second = run("second")
    assert "1 of 1 file(s) stored" in second and "0 of 1" not in second
    # Nothing rewritten: the second run replayed the first run's chunks.
    assert {p: p.stat().st_mtime_ns for p in snap.rglob("*") if p.is_file()} == stamps
    (history, metrics), (history2, metrics2) = outcomes
    assert history["loss"][0] != history["loss"][1]  # it trained (dropout on, seeded)
    assert history2 == history  # exact floats: op determinism, the same seed and windows
    assert "test_lm_perplexity" in metrics and metrics2 == metrics


def test_length_buckets_cut_the_decoder_side_to_each_batch_s_target_length(tmp_path):
    # Lines of 1 to 23 distinct words: windows' targets of 1 to target_words 20 tokens,
    # each window's content its own.
    corpus = tmp_path / "lines.txt"
    corpus.write_text("\n".join(" ".join(f"w{i}x{j}" for j in range(1 + i % 23))
                                for i in range(200)))
    cfg = cfg_for(corpus, "data.target_words=20", "data.length_buckets=4")
    data = tl.build_generator_data(cfg, seed=0)
    hist = data.target_lengths["train"]
    assert len(hist) == 21 and sum(hist) == data.size(data.train) and hist[0] == 0
    by_target = tl.generator_examples(data, data.train, cfg).lengths
    grouping, why = grouping_for(cfg.length_buckets, by_target, 3, device_kind="CPU",
                                 input_pipelines=1)
    assert grouping is not None and grouping.boundaries == (8, 16, 20), why
    assert why.startswith("3 length buckets")
    assert grouping_for(0, by_target, 3, device_kind="CPU", input_pipelines=1)[0] is None

    def padded(dataset, batches=None):
        """Rows padded back to target_words, and the decoder widths of the batches."""
        out, widths = [], []
        source = dataset.take(batches) if batches else dataset
        for x, y in source.as_numpy_iterator():
            width = y.shape[1]
            assert x["decoder_ids"].shape[1] == width and x["encoder_ids"].shape[1] == 3
            assert width in grouping.boundaries
            # the smallest bucket that holds the batch's longest target
            longest = (y != 0).sum(1).max()
            assert longest <= width and (width == 8 or longest > grouping.boundaries[
                grouping.boundaries.index(width) - 1])
            widths.append(width)
            # the decoder still reads [START] and the gold words before each target slot
            assert (x["decoder_ids"] == np.pad(y, [[0, 0], [1, 0]], constant_values=2
                                               )[:, :width]).all()
            for e, lab in zip(x["encoder_ids"], np.pad(y, [[0, 0], [0, 20 - width]]),
                              strict=True):
                out.append((tuple(e), tuple(lab)))
        return out, widths

    def whole(split, training):
        return [(e, lab) for e, _, lab in rows(make(data, cfg, split=split, training=training))]

    # Evaluation: every example once (nothing of a target cut), sorted by length.
    fixed = whole("validation", False)
    grouped, widths = padded(make(data, cfg, split="validation", grouping=grouping))
    assert Counter(grouped) == Counter(fixed) and len(set(widths)) == 3
    assert widths[:50] == sorted(widths[:50], reverse=True)  # a window of 50 batches
    # Training: whole batches of every bucket, mixed (not sorted) within a window.
    train, widths = padded(make(data, cfg, grouping=grouping), 50)
    assert len(train) == 50 * 8 and len(set(train)) == len(train)
    assert set(train) <= set(whole("train", False))
    assert len(set(widths)) == 3 and widths != sorted(widths, reverse=True)
