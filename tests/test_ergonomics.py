"""Training ergonomics: step-based training, the run header, the LR range finder and the
schedule plot, through the real driver on a tiny CNN classifier."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from tfapp.config import ConfigError, load_config
from tfapp.demo import DEMO_DIR
from tfapp.tasks import get_task
from tfapp.training.plan import plan_training

import numpy as np
import pytest
from conftest import run_python, run_tfapp

N_TRAIN, N_VAL, BATCH = 64, 16, 4


def _write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    with (DEMO_DIR / "reviews_train.csv").open() as fh:
        rows = list(csv.DictReader(fh))[:N_TRAIN + N_VAL]
    # Each review ends with words that give its label away, so the loss falls clearly
    # within the few steps of an LR range test (on the plain reviews it stays near chance).
    for row in rows:
        row["text"] += " great great" if row["label"] == "positive" else " awful awful"
    d = tmp_path_factory.mktemp("data")
    _write_csv(d / "train.csv", rows[:N_TRAIN])
    _write_csv(d / "val.csv", rows[N_TRAIN:])
    return d


def _overrides(data_dir: Path, out: Path, *extra: str) -> list[str]:
    return [f"output_dir={out}", f"data.train_files={data_dir / 'train.csv'}",
            f"data.validation_files={data_dir / 'val.csv'}", f"data.batch_size={BATCH}",
            "data.seq_length=16", "data.shuffle_buffer=64", "model.kind=cnn",
            "model.embedding_dim=16", "model.units=16", "trainer.export=false",
            "trainer.steps_per_epoch=0", *extra]


def _scalars(log_dir: Path, tag: str) -> dict[int, float]:
    import tensorflow as tf

    out = {}
    for events in sorted(log_dir.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                if value.tag == tag:
                    out[event.step] = float(tf.make_ndarray(value.tensor))
    return out


# --------------------------------------------------------------------------- plan (no TF)


def test_plan_epochs_and_steps():
    cfg = load_config(None, ["trainer.epochs=3", "trainer.gradient_accumulation_steps=2"])
    plan = plan_training(cfg, num_train_examples=100, global_batch=8)  # 12 batches/pass
    assert (plan.fit_epochs, plan.fit_steps_per_epoch, plan.total_steps) == (3, 12, 18)
    assert not plan.step_mode and plan.effective_batch == 16

    cfg = load_config(None, ["trainer.max_steps=12", "trainer.eval_every_steps=4",
                             "trainer.gradient_accumulation_steps=3"])
    plan = plan_training(cfg, num_train_examples=10, global_batch=8)  # data repeats
    assert (plan.fit_epochs, plan.fit_steps_per_epoch, plan.total_steps) == (3, 12, 12)

    # eval_every_steps without max_steps: the epochs' steps (2 x 12 = 24) in chunks of 8.
    cfg = load_config(None, ["trainer.epochs=2", "trainer.eval_every_steps=8"])
    plan = plan_training(cfg, num_train_examples=100, global_batch=8)
    assert (plan.fit_epochs, plan.fit_steps_per_epoch, plan.total_steps) == (3, 8, 24)
    cfg = load_config(None, ["trainer.epochs=2", "trainer.eval_every_steps=5"])
    with pytest.raises(ConfigError, match="not a multiple of it; set trainer.max_steps=25"):
        plan_training(cfg, num_train_examples=100, global_batch=8)


def test_steps_per_execution_auto_per_device_and_capped():
    """null (auto) takes the device kind's value, capped at log_every_steps (in batches)
    and at one fit epoch; an explicit value is kept but for the epoch cap; 0 is refused."""
    from tfapp.runtime import AUTO_STEPS_PER_EXECUTION, Runtime
    from tfapp.training.plan import resolve_steps_per_execution

    def resolved(device: str, *overrides: str, examples: int = 1000) -> tuple[int, str]:
        cfg = load_config(None, list(overrides))
        rt = Runtime(strategy=None, kind="cpu", reason="", num_replicas=1,
                     precision="float32", device_kind=device)
        return resolve_steps_per_execution(cfg, rt, plan_training(cfg, examples, 8))

    assert load_config(None, []).trainer.steps_per_execution is None  # auto by default
    assert resolved("TPU") == (50, "auto: TPU")  # 125 batches an epoch
    assert resolved("GPU") == (8, "auto: GPU")
    assert resolved("CPU") == (AUTO_STEPS_PER_EXECUTION["CPU"], "auto: CPU")
    assert resolved("TPU", "trainer.log_every_steps=5",
                    "trainer.gradient_accumulation_steps=2") == (
        10, "auto: TPU, capped at log_every_steps")
    assert resolved("TPU", examples=80) == (10, "auto: TPU, capped at one epoch")
    assert resolved("CPU", "trainer.steps_per_execution=7",
                    "trainer.log_every_steps=2") == (7, "config")  # the user's choice
    assert resolved("GPU", "trainer.steps_per_execution=64", examples=80) == (
        10, "config, capped at one epoch")
    with pytest.raises(ConfigError, match="trainer.steps_per_execution: 0 is too small"):
        load_config(None, ["trainer.steps_per_execution=0"])


@pytest.mark.parametrize("overrides, message", [
    (["trainer.max_steps=10", "trainer.eval_every_steps=4"],
     "trainer.max_steps=10 is not a multiple of trainer.eval_every_steps=4; set "
     "trainer.max_steps=12 or 8"),
    (["optimizer.learning_rate=fast"], "optimizer.learning_rate: 'fast' is not a number"),
    (["optimizer.learning_rate=-1"], "optimizer.learning_rate: -1.0 must be > 0"),
    (["optimizer.lr_find_min=1", "optimizer.lr_find_max=0.1"], "must be below"),
])
def test_bad_step_and_lr_settings(overrides, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_config(None, overrides)


def test_lr_find_suggests_the_users_own_command_with_the_new_rate():
    from tfapp.lr_find import suggested_command

    assert suggested_command("configs/my run.yaml", [
        "trainer.epochs=3", "optimizer.learning_rate=0.1", "name=x y"], 0.000312) == (
        "python -m tfapp.train --config 'configs/my run.yaml' trainer.epochs=3 'name=x y' "
        "optimizer.learning_rate=0.000312")
    assert suggested_command(["a.yaml", "b.yaml"], [], 2e-5) == (
        "python -m tfapp.train --config a.yaml --config b.yaml optimizer.learning_rate=2e-05")


def test_learning_rate_is_a_float_or_auto(tmp_path):
    # PyYAML reads 1e-3 (no dot) as a string; it must still become a float.
    (tmp_path / "c.yaml").write_text("optimizer:\n  learning_rate: 1e-3\n")
    assert load_config(tmp_path / "c.yaml").optimizer.learning_rate == 1e-3
    assert load_config(None, ["optimizer.learning_rate=2"]).optimizer.learning_rate == 2.0
    assert load_config(None, ["optimizer.learning_rate=AUTO"]).optimizer.learning_rate == "auto"


# --------------------------------------------------------------------------- real training


@pytest.fixture(scope="module")
def step_run(data_dir, tmp_path_factory):
    """max_steps=6, evaluation every 3 steps, accumulation 2, steps_per_execution 4, and
    optimizer.learning_rate=auto (a 32-step LR range test first: batches of 4 are noisy,
    and the sweep must see the loss fall beyond that noise)."""
    from tfapp.training.driver import train

    out = tmp_path_factory.mktemp("runs")
    cfg = load_config(None, _overrides(
        data_dir, out, "name=steps", "trainer.max_steps=6", "trainer.eval_every_steps=3",
        "trainer.log_every_steps=2", "trainer.gradient_accumulation_steps=2",
        "trainer.steps_per_execution=4", "optimizer.learning_rate=auto",
        "optimizer.lr_find_steps=32", "optimizer.lr_find_min=1e-3", "optimizer.lr_find_max=1",
        "optimizer.warmup_ratio=0.5"))
    return train(cfg, task=get_task(cfg.task))


def test_max_steps_is_exact_and_evaluations_happen_at_the_configured_steps(step_run):
    model = step_run.model
    # 12 batches, accumulated in pairs; the LR range test's steps do not count. The model
    # ends with the best evaluation's weights and optimizer state (val_accuracy, the first
    # of equals): 3 optimizer steps per evaluation.
    accuracy = step_run.history["val_accuracy"]
    assert int(model.optimizer.iterations) == 3 * (1 + accuracy.index(max(accuracy)))
    assert len(step_run.history["val_loss"]) == 2  # one evaluation per 3 steps
    logs = step_run.run_dir / "logs"
    # Keras logs each evaluation at the optimizer step it happened.
    assert sorted(_scalars(logs / "validation", "evaluation_loss_vs_iterations")) == [3, 6]
    with (step_run.run_dir / "history.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 2


def test_learning_rate_logged_per_optimizer_step_and_plotted(step_run):
    from tfapp.training.optimizers import WarmupSchedule

    peak = json.loads((step_run.run_dir / "lr_find.json").read_text())["suggestion"]
    lrs = _scalars(step_run.run_dir / "logs" / "train", "learning_rate")
    assert sorted(lrs) == list(range(6))  # every step, also between executions of 4 batches
    expected = WarmupSchedule(peak, total_steps=6, warmup_steps=3)
    for step, lr in lrs.items():
        assert lr == pytest.approx(float(expected(step)), rel=1e-5)
    assert max(lrs.values()) == pytest.approx(peak, rel=1e-5)
    png = step_run.run_dir / "lr_schedule.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_header_one_replica(step_run):
    header = json.loads((step_run.run_dir / "run_header.json").read_text())
    assert header["examples"] == {"train": N_TRAIN, "validation": N_VAL}
    assert (header["num_replicas"], header["global_batch"], header["batch_per_replica"]) == (
        1, BATCH, BATCH)
    assert header["gradient_accumulation_steps"] == 2 and header["effective_batch"] == 2 * BATCH
    assert (header["total_steps"], header["warmup_steps"], header["evaluations"]) == (6, 3, 2)
    # precision auto: mixed_bfloat16 on a CPU with native bfloat16, else float32.
    from tfapp.runtime import choose_precision

    assert header["precision"] == choose_precision("auto", "CPU", None)
    text = (step_run.run_dir / "run_header.txt").read_text()
    assert header["steps_per_execution_source"] == "config"
    assert "steps/execution:      4 (config)" in text
    assert header["steps_per_execution"] == 4
    assert "optimizer steps:      6" in text and "effective batch:      8" in text


@pytest.mark.parametrize("schedule", ["linear", "one_cycle", "constant"])
def test_schedule_values_cover_every_step(schedule):
    from tfapp.config import OptimizerConfig
    from tfapp.training.optimizers import build_schedule
    from tfapp.training.schedule_plot import schedule_values

    for warmup in (0.0, 0.2):
        cfg = OptimizerConfig(schedule=schedule, warmup_ratio=warmup)
        sched = build_schedule(cfg, peak=0.1, total_steps=10)
        values = schedule_values(sched, 10)
        assert values.shape == (10,)
        assert values == pytest.approx([float(sched(s)) for s in range(10)], rel=1e-6)


def test_lr_finder_suggests_inside_the_range_and_restores_weights(tmp_path):
    """A real sweep on a small regression problem whose SGD diverges above lr ~ 1."""
    from tfapp.config import ClassifierConfig, OptimizerConfig, RuntimeConfig
    from tfapp.training.context import RunContext
    from tfapp.training.lr_finder import find_lr

    import tensorflow as tf

    def context(optimizer: OptimizerConfig) -> RunContext:
        cfg = ClassifierConfig(optimizer=optimizer, runtime=RuntimeConfig(seed=0))
        return RunContext.create(cfg, task=get_task(cfg.task), run_dir=tmp_path)

    tf.keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1)) + 0.1 * rng.normal(size=(512, 1))).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
    inp = tf.keras.Input((8,))
    model = tf.keras.Model(inp, tf.keras.layers.Dense(1)(tf.keras.layers.Dense(16)(inp)))
    before = [w.copy() for w in model.get_weights()]
    cfg = OptimizerConfig(name="sgd", clipnorm=0.0, lr_find_steps=60, lr_find_min=1e-5,
                          lr_find_max=10.0)
    result = find_lr(context(cfg), model, data, loss="mse")
    for a, b in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert result.diverged and len(result.lrs) < 60  # stopped once the loss blew up
    # Measured (seed 0): 2.8e-3, 24 of 48 steps; the smoothed loss is lowest at 7.3e-2.
    _assert_sweep_and_suggestion(result.lrs, result.smoothed, result.suggestion,
                                 start=1e-5, end=10.0, steps=60)
    assert result.suggestion < result.lrs[-1] / 10  # well below where it diverged
    # The suggested rate trains: from the same start it lowers the loss far more than the
    # sweep's starting rate does.
    losses = {}
    for lr in (1e-5, result.suggestion):
        model.set_weights(before)
        model.compile(optimizer=tf.keras.optimizers.SGD(lr, momentum=0.9), loss="mse")
        losses[lr] = model.fit(data, steps_per_epoch=30, verbose=0).history["loss"][-1]
    assert losses[result.suggestion] < 0.5 * losses[1e-5]

    # Rates too small to move the loss: no suggestion to train with (auto stops there).
    model.set_weights(before)
    tiny = OptimizerConfig(name="sgd", clipnorm=0.0, lr_find_steps=10, lr_find_min=1e-9,
                           lr_find_max=1e-8)
    flat = find_lr(context(tiny), model, data, loss="mse")
    assert not flat.loss_fell and "unreliable" in flat.describe()
    with pytest.raises(ConfigError, match="the loss did not fall clearly over 10 steps"):
        flat.check_usable()


def _assert_sweep_and_suggestion(lrs: list[float], smoothed: list[float], suggestion: float,
                                 start: float, end: float, steps: int) -> None:
    """The sweep grew the rate geometrically from ``start`` to ``end`` over ``steps``
    steps, and the suggestion is a rate at which the smoothed loss was still falling:
    at or before its minimum, below its starting value."""
    np.testing.assert_allclose(lrs[0], start, rtol=1e-6)
    np.testing.assert_allclose(np.diff(np.log(lrs)), np.log(end / start) / (steps - 1),
                               rtol=1e-4)
    i, lowest = lrs.index(suggestion), int(np.argmin(smoothed))
    assert 0 < i <= lowest and smoothed[i] < smoothed[0], (i, lowest, smoothed)


def test_learning_rate_auto_runs_the_finder_first(step_run):
    run = step_run.run_dir
    found = json.loads((run / "lr_find.json").read_text())
    header = json.loads((run / "run_header.json").read_text())
    assert found["loss_fell"]
    _assert_sweep_and_suggestion(found["lrs"], found["smoothed"], found["suggestion"],
                                 start=1e-3, end=1.0, steps=32)
    assert header["peak_learning_rate"] == pytest.approx(found["suggestion"])
    assert "auto" in header["schedule"]
    assert (run / "lr_find.png").read_bytes()[:4] == b"\x89PNG"


# ------------------------------------------- the commands (two replicas: in a subprocess)


@pytest.mark.slow
def test_run_header_two_replicas(data_dir, tmp_path):
    args = ["-m", "tfapp.train", *_overrides(
        data_dir, tmp_path, "name=two", "runtime.strategy=mirrored", "runtime.cpu_devices=2",
        "trainer.epochs=2", "tracking.tensorboard=false")]
    proc = run_python(args, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    header = json.loads((tmp_path / "two" / "run_header.json").read_text())
    assert (header["num_replicas"], header["global_batch"]) == (2, 2 * BATCH)
    assert header["total_steps"] == 2 * (N_TRAIN // (2 * BATCH))  # 2 epochs x 8 batches
    assert "run header" in proc.stderr and "global batch:         8" in proc.stderr


@pytest.mark.slow
def test_lr_find_cli_leaves_the_run_directory_alone(data_dir, tmp_path):
    png = tmp_path / "sweep.png"
    args = [*_overrides(data_dir, tmp_path / "runs", "optimizer.lr_find_steps=10"),
            "--output", str(png)]
    proc = run_tfapp("tfapp.lr_find", args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "suggested learning rate:" in proc.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert json.loads(png.with_suffix(".json").read_text())["suggestion"] > 0
    assert not (tmp_path / "runs").exists()

    # Without --output: the plot goes into the run directory, the suggested command keeps
    # the user's overrides, and train still takes that directory as a new run.
    overrides = _overrides(data_dir, tmp_path / "runs", "name=sweep",
                           "optimizer.lr_find_steps=10", "optimizer.learning_rate=0.5",
                           "model.units=12")
    proc = run_tfapp("tfapp.lr_find", overrides, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "runs" / "sweep"
    assert (run / "lr_range_test.png").read_bytes()[:4] == b"\x89PNG"
    suggestion = json.loads((run / "lr_range_test.json").read_text())["suggestion"]
    assert sorted(p.name for p in run.iterdir()) == ["lr_range_test.json", "lr_range_test.png"]
    assert not list(tmp_path.glob("lr_*"))  # nothing in the current directory
    (used,) = [line for line in proc.stdout.splitlines() if line.startswith("use it: ")]
    from tfapp.lr_find import suggested_command

    kept = [o for o in overrides if not o.startswith("optimizer.learning_rate=")]
    assert used == "use it: " + suggested_command(None, kept, suggestion)
    assert "model.units=12" in used and "optimizer.learning_rate=0.5" not in used
    from tfapp.config import load_config
    from tfapp.tasks import get_task
    from tfapp.training.context import RunContext
    from tfapp.training.run_directory import RunDirectory

    # The training loop takes the folder as a new run (no "not a tfapp run directory").
    cfg = load_config(None, [f"output_dir={tmp_path / 'runs'}", "name=sweep"])
    RunDirectory.take(RunContext.create(cfg, task=get_task(cfg.task))).release()
    assert (run / "params.yaml").is_file()

    bad = run_tfapp("tfapp.lr_find", ["--output", str(tmp_path / "no" / "x.png")])
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"tfapp: error: --output {tmp_path / 'no' / 'x.png'}: folder {tmp_path / 'no'} does "
        "not exist"]


def test_tfapp_callbacks_trigger_no_keras_slow_callback_warning(data_dir, tmp_path):
    """Keras times the batch hooks of the first batches against the batch: tfapp's own
    (the per-step learning rate for TensorBoard among them) must not make it warn that
    ``on_train_batch_end`` is slow. A tiny CNN's batch takes milliseconds, so a summary
    write per batch shows up here."""
    import logging

    from tfapp.training.driver import train

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    keep = Keep()
    logging.getLogger("tensorflow").addHandler(keep)
    try:
        cfg = load_config(None, _overrides(data_dir, tmp_path, "name=quiet",
                                           "trainer.epochs=1", "tracking.tensorboard=true"))
        train(cfg, task=get_task(cfg.task))
    finally:
        logging.getLogger("tensorflow").removeHandler(keep)
    assert not [r for r in records if "slow compared to the batch time" in r]
    # ... and the learning rate of every optimizer step is still in TensorBoard.
    lrs = _scalars(tmp_path / "quiet" / "logs" / "train", "learning_rate")
    assert sorted(lrs) == list(range(N_TRAIN // BATCH))
