"""A run stopped mid-epoch resumes at its next unseen batch: across the two runs, every
example of the interrupted epoch is trained on exactly once.

Each case is a real ``python -m tfapp.train`` process that gets SIGTERM in the middle of
epoch 1 (a kill point sends it, so the step is not left to a timer) and stops after writing
a backup; the same command then resumes: in this process for one replica (it reads only
what the stopped process left on disk), in a fresh one for two (logical CPU devices are
set once per process). ``TFAPP_INPUT_LOG`` makes every training pipeline log the ids of
the examples in each batch it delivers, numbered from the start of the run. The first
run's batches up to the backup's step (read from the backup, not from the runs' logs) and
the second run's batches after it must hold each example of the epoch once: the second
run starts on the batch after the backup's, and no example of the epoch is repeated or
skipped. Without exact resume the second run reads the epoch from its start again, and
the check fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_tfapp, subprocess_env

ROWS = 320  # training rows (generator: lines / 5); batches of 16 per replica


# Words of builtin:tiny's vocabulary, one token each.
WORDS = ["the", "battery", "screen", "sound", "room", "staff", "food", "plot", "great",
         "price", "delivery", "camera", "book", "film", "hotel", "phone", "fit", "service",
         "bad", "was"]


def _reviews(path: Path, ids: range) -> str:
    """A distinct text per id (two words by its digits in base 20), of 6 to 12 tokens:
    two length buckets, whose windows must not carry examples from one pass into the
    next."""
    path.write_text("text,label\n" + "".join(
        f"{WORDS[i % 20]} {WORDS[i // 20 % 20]}{' the film' * (i % 4)} was "
        f"{'good' if i % 2 else 'poor'},{'positive' if i % 2 else 'negative'}\n"
        for i in ids))
    return str(path)


def _corpus(path: Path, task: str) -> str:
    if task == "classifier":
        _reviews(path, range(ROWS))
    else:
        path.write_text("".join(f"line {i} of the corpus\n" for i in range(ROWS // 5)))
    return str(path)


def _command(task: str, data: str, out: Path, strategy: list[str]) -> list[str]:
    common = [f"output_dir={out}", f"data.train_files={data}", "data.validation_split=0",
              "trainer.steps_per_epoch=0", "trainer.epochs=2", "trainer.export=false",
              "tracking.tensorboard=false", "data.shuffle_buffer=32", *strategy]
    if task == "classifier":
        # The CNN baseline, not the tiny BERT: the input pipeline under test is the same
        # (ClassifierTask.build_inputs tokenizes with the BERT preprocessor whatever
        # model.kind is; the model only consumes the batches), at less cost per process.
        # 32 validation rows, not the demo's 300: validation is not what is checked.
        validation = _reviews(Path(data).with_name("validation.csv"), range(ROWS, ROWS + 32))
        return [sys.executable, "-m", "tfapp.train", "--config",
                "configs/classifier_local.yaml", f"data.validation_files={validation}",
                "model.kind=cnn", "model.units=32", "model.embedding_dim=32",
                "data.seq_length=16", *common]
    return [sys.executable, "-m", "tfapp.train", "--config", "configs/generator_local.yaml",
            "data.drop_regex=", "data.batch_size=16", *common]


def _batches(prefix: Path) -> dict[int, list[int]]:
    """The input log of one run: pipeline batch number -> the example ids in it."""
    out: dict[int, list[int]] = {}
    for log in prefix.parent.glob(prefix.name + ".*"):
        for line in log.read_text().splitlines():
            number, *ids = line.split()
            out[int(number)] = [int(i) for i in ids]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("task", ["classifier", "generator"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_run_stopped_mid_epoch_trains_each_example_of_it_once(tmp_path, task, replicas):
    from tfapp.compat import saved_backup_position

    data = _corpus(tmp_path / ("train.csv" if task == "classifier" else "corpus.txt"), task)
    strategy = (["runtime.strategy=mirrored", "runtime.cpu_devices=2"] if replicas == 2
                else ["runtime.strategy=cpu"])
    command = _command(task, data, tmp_path / "runs", strategy)
    name = "classifier_local" if task == "classifier" else "generator_local"
    run = tmp_path / "runs" / name
    logs = [tmp_path / "first" / "ids", tmp_path / "second" / "ids"]
    for log in logs:
        log.parent.mkdir()
    first = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=400,
                           env=subprocess_env(TFAPP_INPUT_LOG=str(logs[0]),
                                              TFAPP_KILL_AT="train-batch@3:TERM"))
    assert first.returncode == 143, first.stderr[-3000:]
    epoch, step = saved_backup_position(run / "backup")
    per_epoch = json.loads((run / "input_state.json").read_text())["fit_steps_per_epoch"]
    assert epoch == 0 and 2 <= step < per_epoch - 2  # stopped inside epoch 1
    if replicas == 1:
        second = run_tfapp("tfapp.train", command[3:], env={"TFAPP_INPUT_LOG": str(logs[1])})
    else:
        second = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                                timeout=400, env=subprocess_env(TFAPP_INPUT_LOG=str(logs[1])))
    assert second.returncode == 0, second.stderr[-3000:]
    before, after = _batches(logs[0]), _batches(logs[1])
    # Pipeline batches: one per replica per step (one input pipeline on this host).
    done = (step + 1) * replicas  # batches the backup's weights were trained on
    epoch_batches = per_epoch * replicas
    assert min(after) == done  # the second run's first batch is the next unseen one
    trained = [i for b in range(done) for i in before[b]]
    trained += [i for b in range(done, epoch_batches) for i in after[b]]
    batch = len(before[0])
    assert len(trained) == epoch_batches * batch
    assert len(set(trained)) == len(trained)  # no example twice in the epoch
    # ... and the epoch's examples are those of an uninterrupted pass: every row (its
    # last partial batch aside) of the training data.
    rows = ROWS if task == "classifier" else None
    if rows is not None:
        assert len(trained) == rows // (batch * replicas) * batch * replicas
    # The second epoch went on from there: another pass, each example once again.
    second_epoch = [i for b in range(epoch_batches, 2 * epoch_batches) for i in after[b]]
    assert len(set(second_epoch)) == len(second_epoch) == len(trained)
    assert set(second_epoch) | set(trained) == set(trained) | set(second_epoch)
