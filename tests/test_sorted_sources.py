"""A sorted source trains as well as a shuffled one: the order of an epoch does not
depend on the order of the rows in the files (prepare permutes each shard, and every
pass merges all its shard files in a seeded order; tfapp.data.input.stream)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import REPO, run_tfapp

DEMO = REPO / "tfapp" / "demo"


def _reviews(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))[1:]


def _write(path: Path, rows: list[list[str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([["text", "label"], *rows])


def _val_accuracy(run: Path) -> list[float]:
    with open(run / "history.csv", newline="") as fh:
        return [round(float(r["val_accuracy"]), 3) for r in csv.DictReader(fh)]


@pytest.mark.slow
def test_label_sorted_sources_train_to_the_shuffled_sources_accuracy(tmp_path):
    rows = _reviews(DEMO / "reviews_train.csv")[:2000]  # 8 files of shuffle blocks per class
    layouts = {"shuffled": tmp_path / "shuffled"}
    _write(tmp_path / "shuffled.csv", rows)
    layouts["shuffled"] = tmp_path / "shuffled.csv"
    # One file sorted by label, and one file per class (IMDB's pos/ and neg/), each at
    # more than 10x the shuffle block of 128.
    by_label = sorted(rows, key=lambda r: r[1])
    _write(tmp_path / "sorted.csv", by_label)
    layouts["sorted"] = tmp_path / "sorted.csv"
    (tmp_path / "per_class").mkdir()
    for label in sorted({r[1] for r in rows}):
        _write(tmp_path / "per_class" / f"class_{label}.csv", [r for r in rows if r[1] == label])
    layouts["per_class"] = tmp_path / "per_class" / "class_*.csv"
    best = {}
    for name, data in layouts.items():
        result = run_tfapp("tfapp.train", [
            "--config", "configs/classifier_local.yaml", f"output_dir={tmp_path / 'runs'}",
            f"name={name}", f"data.train_files={data}",
            f"data.validation_files={DEMO / 'reviews_validation.csv'}",
            "data.shuffle_buffer=128", "model.kind=cnn", "model.units=32",
            "model.embedding_dim=32", "data.seq_length=24", "trainer.steps_per_epoch=0",
            "trainer.epochs=4", "trainer.export=false", "tracking.tensorboard=false",
            "runtime.seed=7"])
        assert result.returncode == 0, result.stderr[-3000:]
        best[name] = _val_accuracy(tmp_path / "runs" / name)
    print("validation accuracy by epoch:", best)
    best = {k: v[-1] for k, v in best.items()}
    # Last epoch's validation accuracy. Measured: the old stream (files one after another,
    # blocks permuted in place) gave shuffled 0.877, sorted 0.697, one file per class
    # 0.617 on the earlier templated demo; the merged stream 0.873, 0.873 and 0.857 there,
    # and 0.784, 0.792 and 0.798 on 2,000 of today's plain demo reviews (whole-word vocab).
    assert best["shuffled"] > 0.7, best
    for name in ("sorted", "per_class"):
        assert best[name] > 0.7 and abs(best[name] - best["shuffled"]) < 0.1, best
