"""Parquet wherever files are read: prepared, trained on and evaluated exactly as the same
rows in a CSV file, read a batch of rows at a time, bad rows named ``FILE:ROW``. (Bad
Parquet files, one line each: rows data-parquet-* of tests/test_bad_inputs.py.)"""

from __future__ import annotations

import csv
from pathlib import Path

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import load_config
from tfapp.data.formats import parquet
from tfapp.data.prepare import builder as P
from tfapp.data.rows.bad_rows import BadRowPolicy, BadRowReport, SourceLog
from tfapp.data.rows.columnar import fast_rows
from tfapp.data.rows.read import file_formats, iter_rows, python_rows, read_texts
from tfapp.data.rows.spec import RowSpec
from tfapp.errors import DataError
from tfapp.tasks import get_task
from tfapp.training.context import RunContext

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from test_prepare import read_rows, row_tuples

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
TEXTS = [f"{WORDS[i % 12]}, {WORDS[i // 12]} {'great' if i % 3 else 'awful'} \u00e9t\u00e9"
         for i in range(96)]  # 96 different texts (commas, accents)
LABELS = ["pos" if i % 3 else "neg" for i in range(96)]


def _write_both(tmp_path: Path, texts: list, labels: list, **parquet_kwargs) -> tuple[str, str]:
    """The same rows as CSV and as Parquet (several row groups)."""
    with open(tmp_path / "rows.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        writer.writerows(zip(texts, labels, strict=True))
    pq.write_table(pa.table({"text": texts, "label": labels}), tmp_path / "rows.parquet",
                   row_group_size=40, **parquet_kwargs)
    return str(tmp_path / "rows.csv"), str(tmp_path / "rows.parquet")


def test_parquet_prepares_the_rows_of_the_same_csv(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet, "READ_ROWS", 7)  # batches across row groups: 40 rows each
    texts, labels = list(TEXTS), list(LABELS)
    texts[50], labels[83] = "   ", None  # rows 51 and 84: bad (a null label in Parquet)
    as_csv, as_parquet = _write_both(tmp_path, texts, labels, compression="zstd")
    got = {}
    for name, path in (("csv", as_csv), ("parquet", as_parquet)):
        manifest = P.prepare([path], str(tmp_path / name), RowSpec(kind="labelled"),
                             mode="skip")
        got[name] = (manifest, sorted((r["text"], r["labels"]) for r in read_rows(manifest)))
    (m_csv, rows_csv), (m_pq, rows_pq) = got["csv"], got["parquet"]
    assert rows_pq == rows_csv and len(rows_pq) == 94
    assert m_pq.labels == m_csv.labels == {"neg": 32, "pos": 62}
    # FILE:ROW, rows counted from 1 (the CSV's lines count its header too)
    assert [(b["line"], b["problem"]) for b in m_pq.bad_rows["examples"]] == [
        (51, "empty text in column 'text'"), (84, "column 'label' (label) is null")]
    assert [b["line"] for b in m_csv.bad_rows["examples"]] == [52, 85]
    with pytest.raises(DataError, match=r"rows.parquet:51: empty text in column 'text'"):
        P.prepare([as_parquet], str(tmp_path / "fail"), RowSpec(kind="labelled"))


def test_parquet_is_read_a_batch_at_a_time_with_rows_numbered_across_batches(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setattr(parquet, "READ_ROWS", 5)
    _, path = _write_both(tmp_path, TEXTS, LABELS)
    batches = []
    real = pq.ParquetFile.iter_batches

    def counted(self, *args, **kwargs):  # the real reader, its batch sizes recorded
        for batch in real(self, *args, **kwargs):
            batches.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counted)
    texts = read_texts(path)
    assert texts == TEXTS
    assert max(batches) == 5 and sum(batches) == 96
    # numbers: bytes that are not UTF-8 in a binary column make their row bad, by its number
    raw = [t.encode() for t in TEXTS]
    raw[17] = b"\xff\xfe broken"
    pq.write_table(pa.table({"text": raw}), tmp_path / "raw.parquet", row_group_size=10)
    report = BadRowReport()
    assert len(read_texts(str(tmp_path / "raw.parquet"), mode="skip", report=report)) == 95
    assert [(b.line, b.problem) for b in report.examples] == [
        (18, "column 'text' is not valid UTF-8 (re-save the file as UTF-8)")]


@pytest.mark.parametrize("kind", ["labelled", "texts", "pairs"])
def test_the_columnar_path_gives_the_rows_and_messages_of_the_python_readers(tmp_path,
                                                                           monkeypatch, kind):
    """prepare reads string columns column-wise (``fast_rows``); rows with nulls, blank
    texts, blank rows and labels of every shape must come out as the readers give them."""
    monkeypatch.setattr(parquet, "READ_ROWS", 7)
    odd = [("", ""), ("  ", " "), ("", None), (None, "pos"), ("x", None), ("x", ""),
           ("", "pos"), ("x", "pos|neg"), ("\u00e9t\u00e9", "a\tb"), (None, None),
           (" x ", " pos | | neg ")]
    rows = [odd[i // 6 % len(odd)] if i % 6 == 5 else (f"text {i}", "pos" if i % 3 else "neg")
            for i in range(80)]  # an odd row in every 6, across batches of 7
    texts, labels = [t for t, _ in rows], [label for _, label in rows]
    pq.write_table(pa.table({"text": texts, "label": labels}), tmp_path / "odd.parquet",
                   row_group_size=11)
    path = str(tmp_path / "odd.parquet")
    spec = RowSpec(kind=kind, multi_label=True, source_column="text", target_column="label")
    logs = [SourceLog(path, "skip", "train", "data.on_bad_rows=skip") for _ in range(2)]
    fast = row_tuples(fast_rows(path, "parquet", spec, logs[0]))
    slow = row_tuples(python_rows(path, "parquet", spec, logs[1]))
    assert sorted(fast, key=lambda r: r[0]) == slow and len(slow) > 20
    assert [str(b) for b in logs[0].report.examples] == [str(b) for b in logs[1].report.examples]
    assert logs[0].report.count == logs[1].report.count > (0 if kind != "pairs" else -1)
    assert (logs[0].labels, logs[0].first_seen) == (logs[1].labels, logs[1].first_seen)


def test_evaluate_reads_parquet_as_the_same_csv(tmp_path):
    """evaluate's reader (``iter_rows``), integer labels and a dictionary-encoded text
    column included."""
    as_csv, as_parquet = _write_both(tmp_path, TEXTS, [i % 3 for i in range(96)],
                                     use_dictionary=True)
    data = load_config(None, []).data
    spec = RowSpec.from_config("labelled", data)
    read = {path: list(BadRowPolicy("fail", BadRowReport(), "test").good(
        iter_rows(file_formats(path, spec), spec))) for path in (as_csv, as_parquet)}
    assert [r.values for r in read[as_parquet]] == [r.values for r in read[as_csv]]
    assert (read[as_parquet][4].file, read[as_parquet][4].line) == (as_parquet, 5)
    assert read[as_parquet][4].values[-1] == ["1"]


def test_parquet_trains_on_the_examples_of_the_same_csv(tmp_path):
    """A pass of the training stream holds the same examples (its order depends on the
    rows' file and numbers, so the examples are compared sorted), and a model fits on it."""
    as_csv, as_parquet = _write_both(tmp_path, TEXTS, LABELS)
    passes, tasks = {}, {}
    for path in (as_csv, as_parquet):
        cfg = load_config("configs/classifier_local.yaml", [
            f"output_dir={tmp_path}", f"name={Path(path).suffix[1:]}", "model.kind=cnn",
            f"data.train_files={path}", f"data.validation_files={as_csv}",
            "data.batch_size=8", "data.length_buckets=0", "trainer.epochs=1"])
        task = get_task(cfg.task)(RunContext.create(cfg, task=get_task(cfg.task)))
        inputs = task.build_inputs()
        assert inputs.num_train_examples == 96 and inputs.batches_per_pass == 12
        rows = []
        for features, labels in inputs.train.take(12).as_numpy_iterator():
            flat = [np.asarray(f).reshape(8, -1) for f in tf.nest.flatten(features)]
            rows += [tuple(np.concatenate([*(f[i] for f in flat),
                                           np.asarray(labels).reshape(8, -1)[i]]).tolist())
                     for i in range(8)]
        passes[path] = sorted(rows)
        tasks[path] = (task, inputs)
    assert passes[as_parquet] == passes[as_csv] and len(set(passes[as_csv])) > 90
    task, inputs = tasks[as_parquet]
    model = task.build_model(inputs)
    model.compile(optimizer="adam", loss=task.build_losses(inputs))
    history = model.fit(inputs.train, steps_per_epoch=2, epochs=1, verbose=0).history
    assert np.isfinite(history["loss"][-1])
