"""``python -m tfapp.beam_predict``: RunInference with tfapp's model handler, on Beam's
DirectRunner with two worker processes, writes every row once with ``tfapp predict``'s
values.

apache-beam cannot share the main venv (it needs protobuf<7 and pyarrow<26), so CI's
pytest does not collect this folder (tests/conftest.py); ``scripts/check_beam.sh``
builds the [beam] venv and runs it. apache_beam is imported at the top: in a venv
without it this file errors, it never skips.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from tfapp.demo import DEMO_DIR

import apache_beam  # noqa: F401  (the [beam] extra: an error here, never a skip)
import pytest
from conftest import run_tfapp, shared_run

# The run test_classifier's tests train their own of; here the config's own 2 x 8 steps.
RUN = ("configs/classifier_local.yaml",)
TWO_WORKERS = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return shared_run(tmp_path_factory, *RUN)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[str, list[int]]:
    """The 300 demo test reviews with ids, in two files (CSV, and JSONL with one bad row:
    a null text), and the ids of the good rows."""
    d = tmp_path_factory.mktemp("beam-inputs")
    with (DEMO_DIR / "reviews_test.csv").open() as fh:
        texts = [row["text"] for row in csv.DictReader(fh)]
    with (d / "a.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text"])
        writer.writerows((i, t) for i, t in enumerate(texts[:150]))
    with (d / "b.jsonl").open("w") as fh:
        for i, t in enumerate(texts[150:], start=150):
            fh.write(json.dumps({"id": i, "text": t}) + "\n")
        fh.write(json.dumps({"id": 999, "text": None}) + "\n")
    return f"{d / 'a.csv'},{d / 'b.jsonl'}", list(range(len(texts)))


def _rows(paths) -> list[dict]:
    return [json.loads(line) for p in paths for line in Path(p).read_text().splitlines()]


@pytest.mark.slow
def test_two_workers_write_every_row_once_with_predicts_values(run_dir, inputs, tmp_path):
    data, ids = inputs
    # As a URL (the way of gs://: each worker copies the export, tf.io.gfile reads it).
    proc = run_tfapp("tfapp.beam_predict", [
        "--model", f"file://{run_dir}", "--data", data, "--keep", "id", "--on-bad-rows", "skip",
        "--output", str(tmp_path / "beam" / "preds"), "--batch-size", "64", *TWO_WORKERS])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "beam_predict: 300 rows -> " in proc.stderr and "1 bad row(s) skipped" in proc.stderr
    shards = sorted((tmp_path / "beam").glob("preds-*-of-*.jsonl"))
    beam_rows = _rows(shards)
    # Each row once, the bad one left out. (The CSV's ids are strings, the JSONL's numbers,
    # in both commands' output.)
    assert sorted(int(r["id"]) for r in beam_rows) == ids

    proc = run_tfapp("tfapp.predict", ["--model", str(run_dir), "--data", data, "--keep", "id",
                                       "--on-bad-rows", "skip", "--output",
                                       str(tmp_path / "predict.jsonl"), "--quiet"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = {str(r["id"]): r for r in _rows([tmp_path / "predict.jsonl"])}
    assert len(expected) == len(ids)
    for row in beam_rows:
        want = expected[str(row["id"])]
        assert set(row) == {"id", "label", "probabilities"} and row["id"] == want["id"]
        assert row["label"] == want["label"], row["id"]
        # Beam's batches are cut elsewhere than predict's, so a call pads to another
        # length: the same values up to float32 rounding.
        assert row["probabilities"] == pytest.approx(want["probabilities"], abs=1e-5)
    # The config's 16 steps on the demo reviews learn no labels (every row says the same
    # one), but each row's probabilities are its own: equal values are a real comparison.
    assert len({round(r["probabilities"]["positive"], 5) for r in beam_rows}) > 100


def test_a_bad_row_stops_the_pipeline_in_one_line_and_outputs_are_never_overwritten(
        run_dir, inputs, tmp_path):
    data, _ = inputs
    out = str(tmp_path / "preds")
    # The DirectRunner in this process (no workers to start): the error crosses Beam's
    # wrapping all the same.
    proc = run_tfapp("tfapp.beam_predict", ["--model", str(run_dir), "--data", data,
                                            "--keep", "id", "--output", out])
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    # The command's own last line; Beam's worker prints the traceback before it (its log).
    assert line == (f"tfapp: error: {data.split(',')[1]}:151: column 'text' is null (fix "
                    "the data, or pass --on-bad-rows skip to drop such rows)"), line
    assert not list(tmp_path.glob("preds*"))  # no shards from a failed run

    mine = tmp_path / "preds-00000-of-00001.jsonl"
    mine.write_text("the user's\n")
    proc = run_tfapp("tfapp.beam_predict", ["--model", str(run_dir), "--data", data,
                                            "--output", out])
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"tfapp: error: --output {out}: {mine} is already there; "
                                   "give a new prefix (this command never overwrites files)")
    assert mine.read_text() == "the user's\n"
