"""A run killed after its first backup, rerun under a changed config: nothing is lost.

The first run is a real ``python -m tfapp.train`` SIGKILLed right after epoch 1's backup
(``TFAPP_KILL_AT=backup-saved@1``). The reruns go through ``tfapp.train.main`` in this
process: a changed config is refused naming the keys; ``--resume-anyway`` with a changed
weight shape is one line naming the key, with the backup untouched; the unchanged rerun
resumes, and its result holds the whole run (both epochs, both processes' time), which is
what a tuning trial is scored on.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time

from tfapp import train as train_cmd
from tfapp.config import load_config
from tfapp.run_layout import RunLayout
from tfapp.tasks import get_task
from tfapp.training.callbacks import history_row
from tfapp.training.driver import train
from tfapp.tuning.tuner import best_epoch_metrics

import keras_tuner as kt
import pytest
from conftest import REPO, run_python, run_tfapp, subprocess_env

# 64 of the demo's validation and test reviews, not 300 of each, and no export: every
# process validates each epoch and scores both splits at its end, and nothing here reads
# the scores' values or the export.
BASE = ["--config", "configs/classifier_local.yaml", "model.kind=cnn",
        "tracking.tensorboard=false", "trainer.export=false",
        f"data.validation_files={REPO / 'tests/fixtures/reviews_validation_64.csv'}",
        f"data.test_files={REPO / 'tests/fixtures/reviews_test_64.csv'}"]


def _fingerprint(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_changed_config_never_loses_the_backup_and_a_resume_is_scored_whole(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # configs/ is relative
    out = [f"output_dir={tmp_path}"]
    killed = run_python(["-m", "tfapp.train", *BASE, *out],
                        env=subprocess_env(TFAPP_KILL_AT="backup-saved@1"))
    assert killed.returncode == -9, killed.stderr[-3000:]
    run = RunLayout(tmp_path / "classifier_local")
    assert run.has_backup()
    trained_before = json.loads(run.status.read_text())["train_seconds"]
    assert trained_before > 0  # epoch 1's time, on record before its backup
    backup = _fingerprint(run.backup)

    def rerun(*args: str) -> tuple[int, list[str]]:
        code = train_cmd.main([*BASE, *out, *args])
        return code, capsys.readouterr().err.strip().splitlines()

    # A changed weight shape: refused, naming the key and the three ways forward.
    code, err = rerun("model.units=32")
    assert code == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"tfapp: error: {run.root} holds a backup made under another "
                              "config (model.units: 64 -> 32); nothing was changed; to "
                              "resume it with these changes, pass --resume-anyway;")
    assert f"--config {run.backup_params}" in err[-1] and "--start-over" in err[-1]
    # Asked to resume anyway: the backup cannot fit; one line naming the key, no traceback.
    code, err = rerun("model.units=32", "--resume-anyway")
    assert code == 2 and "Traceback" not in "\n".join(err), err[-20:]
    assert err[-1].startswith(f"tfapp: error: the backup in {run.backup} does not fit the "
                              "model this config builds (")
    assert err[-1].endswith("; changed since the backup: model.units: 64 -> 32; resume it "
                            f"under the config it was made under (--config "
                            f"{run.backup_params}) or pass --start-over")
    assert _fingerprint(run.backup) == backup  # nothing of the backup was touched

    # The same command again resumes, and the result is the whole run's.
    cfg = load_config("configs/classifier_local.yaml", [*BASE[2:], *out])
    result = train(cfg, task=get_task(cfg.task))
    assert len(result.history["val_loss"]) == 2
    assert [history_row(run.history, e)["val_loss"] for e in (1, 2)] == \
        pytest.approx(result.history["val_loss"])
    assert result.seconds > trained_before
    # What a tuning trial reports to the oracle: its best epoch over the whole run, whichever
    # side of the interruption it fell on (epoch 1 trained in the killed process).
    for direction, pick in (("min", min), ("max", max)):
        scored = best_epoch_metrics(result.history, result.metrics,
                                    kt.Objective("val_loss", direction))
        assert scored["val_loss"] == pytest.approx(pick(result.history["val_loss"]))


@pytest.mark.slow
def test_ctrl_c_saves_a_backup_and_names_the_command_that_resumes(tmp_path):
    """The first Ctrl-C stops training at the end of its step with a backup (as SIGTERM
    does), and the last line says so and gives the command that resumes: the one typed,
    less --start-over (which would move the run aside again). That command resumes."""
    args = [*BASE, "trainer.steps_per_epoch=30", "trainer.epochs=3", f"output_dir={tmp_path}"]
    run = RunLayout(tmp_path / "classifier_local")
    first = subprocess.Popen([sys.executable, "-m", "tfapp.train", "--start-over", *args],
                             cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while not (run.backup / "chief" / "checkpoint").exists():  # epoch 1 is backed up
        assert first.poll() is None and time.time() < deadline, first.stdout.read()[-3000:]
        time.sleep(0.05)
    first.send_signal(signal.SIGINT)
    out = first.communicate(timeout=120)[0]
    assert first.returncode == 130, out[-3000:]
    assert "Traceback" not in out
    last = out.strip().splitlines()[-1]
    found = re.fullmatch(r"tfapp: interrupted: stopped by Ctrl-C at epoch (\d) step (\d+) and "
                         rf"saved a backup of that step in {run.backup}; resume with: (.*)", last)
    assert found, last
    epoch, step, command = found.group(1), found.group(2), shlex.split(found.group(3))
    assert command == ["python", "-m", "tfapp.train", *args]  # no --start-over
    assert json.loads(run.status.read_text())["state"] == "interrupted"

    # (in this process: the Ctrl-C was the other's; the resume reads what it left on disk)
    again = run_tfapp(command[2], command[3:])
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from the backup in {run.backup} at epoch {epoch} step {step}" in \
        again.stderr, again.stderr[-3000:]
    assert not list(tmp_path.glob("classifier_local.old-*"))  # resumed, not moved aside
