"""The kill-point test: SIGKILL a default-shaped classifier run at ten points, rerun the same
command, and check that every rerun finishes with an export that loads and serves, and that
nothing half-written was taken for good in between.

The points are named in the code (``tfapp.killpoints``; ``TFAPP_KILL_AT=NAME[@N]`` kills the
N-th time a run reaches NAME): during an epoch, during validation, and just before each of
the run's state files and directories is renamed into place -- the moment a kill would
leave the most half-done. Each row is a real ``python -m tfapp.train`` killed by the kernel,
then the same command again.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from tfapp.run_layout import RunLayout
from tfapp.tasks.classifier.serving import LoadedClassifier

import pytest
from conftest import REPO, run_tfapp, subprocess_env

# The builtin tiny BERT classifier of configs/classifier_local.yaml (2 epochs of 8 steps)
# with 64 of the demo's validation and test reviews, not 300 of each (4 validation
# batches: validation-batch@3 still falls inside one); TensorBoard extras cost seconds a
# run and hold no state.
HELD_OUT = 64
COMMAND = [sys.executable, "-m", "tfapp.train", "--config", "configs/classifier_local.yaml",
           f"data.validation_files={REPO / f'tests/fixtures/reviews_validation_{HELD_OUT}.csv'}",
           f"data.test_files={REPO / f'tests/fixtures/reviews_test_{HELD_OUT}.csv'}",
           "tracking.tensorboard=false"]
STEPS = 8  # trainer.steps_per_epoch in that config

# (kill point, what the killed run must have left). "resumes": the rerun continues from
# the backup instead of starting over.
POINTS = [
    ("rename:params.yaml", "before the run wrote its config", False),
    ("train-batch@5", "mid epoch 1, before any backup", False),
    ("validation-batch@3", "during epoch 1's validation", False),
    ("backup-saved@1", "epoch 1 backed up, nothing else of its end", True),
    ("rename:best.json@1", "epoch 1's best checkpoint written, not yet recorded", True),
    (f"train-batch@{STEPS + 4}", "mid epoch 2, after epoch 1's backup", True),
    ("rename:export", "the export written, not yet in place", True),
    ("rename:validation_report.json", "the export not yet written, the report not", True),
    ("rename:status.json@2", "everything written but status 'finished'", True),
    ("drop-backup", "finished, the backup not yet dropped", True),
]


def _run(out: Path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = subprocess_env(**({"TFAPP_KILL_AT": kill_at} if kill_at else {}))
    return subprocess.run([*COMMAND, f"output_dir={out}"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _check_nothing_half_written_is_good(run: Path) -> None:
    """What a killed run leaves must never pass for finished work."""
    status = run / "status.json"
    state = json.loads(status.read_text())["state"] if status.exists() else None
    export = run / "export"
    if export.exists():  # only ever renamed into place complete
        assert (export / "saved_model.pb").is_file()
        assert (export / "tfapp_export.json").is_file()
    report = run / "validation_report.json"
    if report.exists():
        json.loads(report.read_text())  # whole, never truncated
    best = run / "checkpoints" / "best.json"
    if best.exists():
        name = json.loads(best.read_text())["checkpoint"]
        assert (run / "checkpoints" / f"{name}.index").is_file()
    if state == "finished":  # said only after the export and report exist
        assert export.exists() and report.exists()


def _check_finished(run: Path) -> None:
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    assert not (run / "backup").exists()  # dropped only after a good finish
    leftovers = [p.name for p in run.iterdir() if p.name.startswith(".")
                 and p.name not in (".lock",)]
    assert leftovers == []
    with (run / "history.csv").open() as fh:
        assert [int(r["epoch"]) for r in csv.DictReader(fh)] == [0, 1]
    record = json.loads((run / "checkpoints" / "best.json").read_text())
    assert (run / "checkpoints" / f"{record['checkpoint']}.index").is_file()
    assert sorted(p.name.split(".")[0] for p in (run / "checkpoints").glob("best-*")) == \
        [record["checkpoint"]] * 2  # .index + .data: the best one, no other
    assert json.loads((run / "validation_report.json").read_text())["examples"] == HELD_OUT
    probs, labels = LoadedClassifier(run).predict(["a wonderful, moving film",
                                                   "dull and far too long"])
    assert probs.shape == (2, 2) and abs(float(probs.sum()) - 2.0) < 1e-4
    assert set(labels) <= {"negative", "positive"}


def _check_killed(killed: subprocess.CompletedProcess, point: str, where: str, run: Path,
                  resumes: bool) -> None:
    assert killed.returncode == -9, (where, killed.stderr[-3000:])
    assert f"kill point {point}" in killed.stderr
    if run.exists():
        _check_nothing_half_written_is_good(run)
    assert RunLayout(run).has_backup() == resumes, where


def _check_rerun(rerun: subprocess.CompletedProcess, where: str, resumes: bool,
                 fresh_process: bool = True) -> None:
    """A rerun after a kill resumes from the backup exactly when the kill left one (and a
    fresh process starts on the quiet first screen)."""
    assert ("resuming from the backup" in rerun.stderr) == resumes, (where, rerun.stderr[-3000:])
    if fresh_process:
        assert "oneDNN custom operations" not in rerun.stderr


# CI kills at the four points where the run's state changes kind (no backup yet, the
# first backup, the export in flight, finished), as one chain: each rerun is killed at the
# next point, and the last rerun finishes (4 processes and one run's training instead of
# 8 processes and four). That last rerun runs in this process: nothing kills it, and it
# reads only what the killed processes left on disk. Every point, each from a fresh run
# and each rerun to its end, runs with `pytest -m long`.
CHAIN = ["train-batch@5", "backup-saved@1", "rename:export", "drop-backup"]


@pytest.mark.slow
@pytest.mark.timeout(1500)  # four processes of up to 300 s each, and a rerun
def test_a_run_killed_at_each_kind_of_point_in_turn_finishes_when_rerun(tmp_path):
    run = tmp_path / "classifier_local"
    table = {p[0]: p[1:] for p in POINTS}
    left_backup = False  # what the previous kill left: the next run resumes from it
    for point in CHAIN:
        where, resumes = table[point]
        killed = _run(tmp_path, kill_at=point)  # also the rerun after the previous kill
        _check_rerun(killed, f"the rerun killed {where}", left_backup)
        _check_killed(killed, point, where, run, resumes)
        left_backup = resumes
    rerun = run_tfapp("tfapp.train", [*COMMAND[3:], f"output_dir={tmp_path}"])
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    _check_rerun(rerun, "the last rerun", left_backup, fresh_process=False)
    _check_finished(run)


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("point,where,resumes", [pytest.param(*p, id=p[0]) for p in POINTS])
def test_a_run_killed_at_any_point_finishes_when_rerun(point, where, resumes, tmp_path):
    run = tmp_path / "classifier_local"
    _check_killed(_run(tmp_path, kill_at=point), point, where, run, resumes)
    rerun = _run(tmp_path)
    assert rerun.returncode == 0, (where, rerun.stderr[-3000:])
    _check_rerun(rerun, where, resumes)
    _check_finished(run)
