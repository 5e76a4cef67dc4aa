"""tf.data service for real: a dispatcher and two workers (listening on every interface,
advertised as 127.0.0.1), and the acknowledgement that listening demands."""

from __future__ import annotations

import dataclasses
import gc
import signal
import subprocess
import sys
import time
from collections import Counter

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import ClassifierDataConfig, ConfigError, DataServiceConfig
from tfapp.data.examples.classification import load_classification_splits
from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn
from tfapp.data.text.vocab import write_vocab
from tfapp.data_service import LocalDataService

import pytest
from conftest import REPO, classification_batches, subprocess_env

N = 97  # not a multiple of the batch: the eval pipeline keeps the remainder


@pytest.fixture(scope="module")
def service():
    svc = LocalDataService(workers=2, port=0, listen_all=True)
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def preprocess(tmp_path_factory):
    # Word i of the vocab is "wI", so example i ("wI") encodes to [CLS] 5+i [SEP].
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(N)]
    path = write_vocab(vocab, tmp_path_factory.mktemp("svc") / "vocab.txt")
    return make_bert_preprocess_fn(vocab_file=str(path), seq_length=8)


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    """N rows "wI" (label I % 2) in four CSV files, prepared."""
    folder = tmp_path_factory.mktemp("svc-data")
    for f in range(4):
        (folder / f"part{f}.csv").write_text("text,label\n" + "".join(
            f"w{i},{i % 2}\n" for i in range(f, N, 4)))
    cfg = dataclasses.replace(ClassifierDataConfig(), train_files=str(folder / "part*.csv"),
                              validation_split=0.0)
    return load_classification_splits(cfg, 0)


def _dataset(splits, preprocess, address: str, mode: str, **kw):
    data_cfg = dataclasses.replace(ClassifierDataConfig(), seq_length=8, service=DataServiceConfig(
        address=address, processing_mode=mode))
    kw.setdefault("training", False)
    kw.setdefault("batch_size", 4)
    return classification_batches(splits, splits.train, preprocess, data_cfg, seed=0, **kw)


def _ids(dataset) -> list[int]:
    return [int(row[1]) - 5 for features, _ in dataset.as_numpy_iterator()
            for row in features["input_word_ids"]]


@pytest.mark.parametrize("mode", ["distributed_epoch", "file"])
def test_distributed_epoch_delivers_every_example_exactly_once(service, preprocess, splits,
                                                               mode):
    dataset = _dataset(splits, preprocess, service.address, mode)
    for _epoch in range(2):
        counts = Counter(_ids(dataset))
        assert sorted(counts) == list(range(N))
        assert set(counts.values()) == {1}


def _per_worker_counts(address: str, n: int) -> list[int]:
    """Elements each worker produced in one distributed epoch of range(n), most first.

    Every worker runs its own copy of the pipeline, so a ``scan`` counter numbers each
    worker's elements 0, 1, ... separately: worker w made k_w elements exactly when the
    indices 0..k_w-1 came from it, i.e. the index i occurs once per worker with k_w > i."""
    import tensorflow as tf

    ds = tf.data.Dataset.range(n).scan(tf.constant(0, tf.int64), lambda i, _x: (i + 1, i))
    ds = ds.apply(tf.data.experimental.service.distribute("distributed_epoch", address))
    times = Counter(int(i) for i in ds.as_numpy_iterator())
    return [sum(1 for c in times.values() if c >= w) for w in range(1, max(times.values()) + 1)]


def test_both_workers_serve_a_distributed_epoch(service):
    counts = _per_worker_counts(service.address, N)
    # Measured over 5 epochs: 49/48, 60/37, 55/42, 62/35, 55/42.
    assert len(counts) == 2 and min(counts) > 0 and sum(counts) == N, counts


def test_parallel_epochs_gives_each_worker_a_full_epoch(service, preprocess, splits):
    dataset = _dataset(splits, preprocess, service.address, "parallel_epochs")
    counts = Counter(_ids(dataset))
    assert sorted(counts) == list(range(N)) and set(counts.values()) == {2}


def test_no_server_starts_without_the_listen_all_acknowledgement(preprocess):
    """TensorFlow's servers bind 0.0.0.0/[::] whatever --host says: starting them needs
    --listen-all (listen_all=True in code), else one line and exit 2, nothing started."""
    with pytest.raises(ConfigError, match=r"listen on every network interface with no "
                                          r"authentication.*pass listen_all=True"):
        LocalDataService(workers=1, port=0)
    proc = subprocess.run(
        [sys.executable, "-m", "tfapp.data_service", "--workers", "1", "--port", "0",
         "--host", "127.0.0.1"],
        capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("tfapp: error: TensorFlow's tf.data servers listen on every "
                           "network interface with no authentication")
    assert "--host only sets the address advertised" in line and "pass --listen-all" in line
    assert "firewall" in line
    # The local multi-worker launcher starts the service for --data-service: same rule.
    proc = subprocess.run([sys.executable, "scripts/launch_local_multi_worker.py",
                           "--data-service", "2", "--", "--config", "/never/read.yaml"],
                          capture_output=True, text=True, env=subprocess_env(), cwd=REPO,
                          timeout=60)
    assert proc.returncode == 2 and "[data service]" not in proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("tfapp: error: --data-service starts TensorFlow's tf.data servers")
    assert "add --listen-all" in line


def test_data_service_command_serves_until_sigterm(preprocess, splits):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfapp.data_service", "--workers", "2", "--port", "0",
         "--listen-all"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=subprocess_env(),
        cwd=REPO)
    try:
        line = proc.stdout.readline()
        deadline = time.time() + 60
        while "dispatcher grpc://" not in line and time.time() < deadline:
            line = proc.stdout.readline()
        assert "2 worker(s)" in line
        address = line.split("dispatcher ")[1].split(",")[0]
        assert address.startswith("grpc://127.0.0.1:")
        port = address.rsplit(":", 1)[1]
        assert proc.stdout.readline().startswith(
            f"listening on all interfaces, unauthenticated: dispatcher port {port}, workers "
            "on ports ")
        dataset = _dataset(splits, preprocess, address, "distributed_epoch", batch_size=8,
                           training=True)
        got = _ids(dataset.take(N // 8))  # a training stream repeats: one epoch's worth
        # Training drops incomplete batches; with two workers each may drop its own tail.
        assert len(got) == len(set(got)) and len(got) >= N - 2 * 8 - 8 and len(got) % 8 == 0
        del dataset  # release the job while the dispatcher is alive (else the client retries)
        gc.collect()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
