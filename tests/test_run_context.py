"""The run context (built once per entry point), the run directory a run takes (its lock,
status and time trained) and the run directory's layout."""

from __future__ import annotations

import dataclasses
import json

from tfapp.config import ConfigError, load_config
from tfapp.run_layout import RunLayout, is_worker_scratch
from tfapp.runtime import Runtime
from tfapp.tasks import get_task
from tfapp.training.context import RunContext
from tfapp.training.resume_rules import differences
from tfapp.training.run_directory import RunDirectory

import pytest


def _cfg(tmp_path, *overrides: str):
    return load_config(None, [f"output_dir={tmp_path}", "name=run", *overrides])


def _create(cfg, **kwargs) -> RunContext:
    """The context a command builds: it looks the task up and hands it in."""
    return RunContext.create(cfg, task=get_task(cfg.task), **kwargs)


def _take(ctx: RunContext, **kwargs) -> RunDirectory:
    """What the loop does first: take the run directory for this process."""
    return RunDirectory.take(ctx, **kwargs)


def test_the_context_is_frozen_and_the_built_model_settles_xla_in_a_new_one(tmp_path):
    """A task whose answer depends on the model built (a restored Hub encoder recompiles
    every step under XLA): the context of the built model has XLA settled for it; the
    one the task was built with keeps the first answer."""
    class HubLike(get_task("classifier")):
        @classmethod
        def recompiles_under_xla(cls, cfg, model=None) -> bool:
            return model == "restored hub encoder"

    gpu = Runtime(strategy=None, kind="one_device", reason="test", num_replicas=1,
                  precision="float32", device_kind="GPU")
    cfg = _cfg(tmp_path, "model.kind=cnn")
    ctx = RunContext.create(cfg, task=HubLike, runtime=gpu)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.jit_compile = False  # type: ignore[misc]
    settled = ctx.for_model("restored hub encoder")
    assert (ctx.jit_compile, settled.jit_compile) == (True, False)
    assert settled.jit_reason != ctx.jit_reason and settled.layout == ctx.layout
    assert ctx.for_model("native encoder").jit_compile is True


def test_a_runtime_is_reused_and_cannot_change_under_a_run(tmp_path):
    first = _create(_cfg(tmp_path))
    again = _create(_cfg(tmp_path, "runtime.seed=7", "name=other"),
                              runtime=first.runtime)
    assert again.runtime is first.runtime  # no second strategy (or TPU initialisation)
    assert again.run.root == tmp_path / "other"
    with pytest.raises(ConfigError, match="runtime.precision: this process set its runtime "
                                          "up with 'auto'; it cannot change"):
        _create(_cfg(tmp_path, "runtime.precision=mixed_bfloat16"),
                          runtime=first.runtime)


def test_xla_is_decided_once_from_the_task_trait(tmp_path):
    """On a GPU, auto turns XLA on except for models that recompile every step under it:
    the classifier's Hub BERT and LSTM baselines; the generator's unfused cells are fine."""
    gpu = Runtime(strategy=None, kind="one_device", reason="test", num_replicas=1,
                  precision="float32", device_kind="GPU")
    cases = {("task=classifier",): False, ("model.kind=rnn",): False,
             ("model.kind=cnn",): True, ("task=generator", "model.kind=seq2seq"): True,
             ("model.kind=cnn", "trainer.jit_compile=false"): False}
    for overrides, expected in cases.items():
        ctx = _create(_cfg(tmp_path, *overrides), runtime=gpu)
        assert ctx.jit_compile is expected, overrides
        assert ("xla=on" if expected else "xla=off") in ctx.describe()


def test_begin_writes_params_and_status_and_a_worker_writes_to_scratch(tmp_path):
    ctx = _create(_cfg(tmp_path))
    assert ctx.layout == ctx.run == RunLayout(tmp_path / "run")
    ctx_dir = _take(ctx)
    params = ctx_dir.params
    assert params == tmp_path / "run" / "params.yaml" and "name: run" in params.read_text()
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "running"

    worker = dataclasses.replace(ctx.runtime, is_chief=False, task_type="worker", task_id=1)
    wctx = _create(_cfg(tmp_path), runtime=worker)
    assert wctx.run.root == tmp_path / "run"  # backups: the chief's
    assert wctx.layout.root == tmp_path / ".workers" / "worker_1" / "run"
    assert is_worker_scratch(wctx.layout.params) and not is_worker_scratch(ctx.layout.params)
    wctx_dir = _take(wctx)
    wctx_dir.end()  # a finished non-chief leaves nothing behind
    assert not (tmp_path / ".workers").exists()
    assert (tmp_path / "run" / "params.yaml").is_file()
    with pytest.raises(ValueError, match="not a worker scratch directory"):
        ctx.layout.remove_worker_scratch()


def test_an_unwritable_output_directory_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    ctx = _create(_cfg(tmp_path, f"output_dir={tmp_path / 'file'}"))
    with pytest.raises(ConfigError, match="is not writable .*set output_dir= to a writable"):
        _take(ctx)


def test_one_process_at_a_time_trains_into_a_run_directory(tmp_path):
    first, second = _create(_cfg(tmp_path)), _create(_cfg(tmp_path))
    first_dir = _take(first)
    with pytest.raises(ConfigError, match=rf"{tmp_path / 'run'} is in use by pid \d+ on "):
        _take(second)
    first_dir.release()  # (a killed process lets go the same way: the lock is the kernel's)
    second_dir = _take(second)
    second_dir.release()


def _interrupted(tmp_path, *overrides: str) -> RunLayout:
    """A run that began and left a backup (as a killed run does)."""
    ctx = _create(_cfg(tmp_path, *overrides))
    ctx_dir = _take(ctx)
    (tmp_path / "run" / "backup" / "chief").mkdir(parents=True)
    (tmp_path / "run" / "backup" / "chief" / "checkpoint").write_text("x")
    ctx_dir.keep_config_with_backup()  # as the loop does after the first backup
    ctx_dir.release()
    return ctx.run


def test_a_backup_resumes_only_under_its_own_config(tmp_path):
    run = _interrupted(tmp_path, "trainer.epochs=2")
    assert "epochs: 2" in run.backup_params.read_text()  # kept with the backup
    longer = _create(_cfg(tmp_path, "trainer.epochs=5"))  # train longer: fine
    longer_dir = _take(longer)
    longer_dir.release()
    assert longer_dir.changed_since_backup == ()
    changed = _create(_cfg(tmp_path, "optimizer.learning_rate=0.1",
                                     "data.batch_size=8"))
    with pytest.raises(ConfigError) as refused:
        _take(changed)
    message = str(refused.value)
    # Every key that differs, with both values, and each way forward with what it does.
    assert (f"{run.root} holds a backup made under another config (data.batch_size: 32 -> "
            "8, optimizer.learning_rate: 0.0005 -> 0.1); nothing was changed; to resume it "
            "with these changes, pass --resume-anyway; to resume it as it was, rerun with "
            f"--config {run.backup_params}; to start over, pass --start-over (the run is "
            f"moved to {run.root}.old-<date>-<time>, nothing is deleted)") in message
    assert "--overwrite" not in message
    assert (run.backup / "chief" / "checkpoint").is_file()  # nothing lost
    assert "epochs: 2" in run.backup_params.read_text()  # until longer's first backup

    anyway = _create(_cfg(tmp_path, "optimizer.learning_rate=0.1"))
    anyway_dir = _take(anyway, resume_anyway=True)
    anyway_dir.release()
    assert anyway.resuming
    assert anyway_dir.changed_since_backup == ("optimizer.learning_rate: 0.0005 -> 0.1",)
    # Once a backup is written under the new config (not before: the one on disk is the
    # old config's), that is what a rerun compares with.
    assert "learning_rate: 0.0005" in run.backup_params.read_text()
    anyway_dir.keep_config_with_backup()
    assert "learning_rate: 0.1" in run.backup_params.read_text()


def test_an_edited_params_yaml_given_back_is_compared_with_the_backups_config(tmp_path):
    """params.yaml is the user's to edit; ``--config RUN/params.yaml`` after an edit used to
    resume silently under the edit, as the comparison was with params.yaml itself."""
    run = _interrupted(tmp_path)
    run.params.write_text(run.params.read_text().replace("dropout: 0.1", "dropout: 0.3"))
    edited = _create(load_config(run.params))
    with pytest.raises(ConfigError, match=r"another config \(model.dropout: 0.1 -> 0.3\)"):
        _take(edited)
    as_it_was = _create(load_config(run.backup_params))  # the way forward named
    as_it_was_dir = _take(as_it_was)
    as_it_was_dir.release()


def test_resume_anyway_refuses_another_encoder_task_or_optimizer(tmp_path):
    _interrupted(tmp_path)
    for override, key in (("optimizer.name=sgd", "optimizer.name"),
                          ("model.kind=cnn", "model.kind"),
                          ("optimizer.ema_decay=0.99", "optimizer.ema_decay")):
        with pytest.raises(ConfigError, match=rf"--resume-anyway: {key}: .* since the backup "
                                              rf"was made, and a backup cannot be resumed "
                                              rf"under another {key}; to resume it as it was"):
            _take(_create(_cfg(tmp_path, override)), resume_anyway=True)


def test_start_over_moves_the_run_aside_and_deletes_nothing(tmp_path):
    run = _interrupted(tmp_path)
    (run.root / "history.csv").write_text("epoch,loss\n0,1.0\n")
    over = _create(_cfg(tmp_path, "optimizer.learning_rate=0.1"))
    over_dir = _take(over, start_over=True)
    over_dir.release()
    (aside,) = tmp_path.glob("run.old-*")
    assert (aside / "backup" / "chief" / "checkpoint").read_text() == "x"
    assert (aside / "history.csv").is_file()
    assert "learning_rate: 0.0005" in (aside / "params.yaml").read_text()
    assert not over.resuming and not (run.root / "history.csv").exists()
    assert "learning_rate: 0.1" in run.params.read_text()
    again = _create(_cfg(tmp_path, "optimizer.learning_rate=0.1"))
    again_dir = _take(again, start_over=True)  # a second start-over in one second: another name
    again_dir.release()
    assert len(list(tmp_path.glob("run.old-*"))) == 2


def test_a_resumed_run_counts_the_time_trained_before_it(tmp_path):
    run = _interrupted(tmp_path)
    status = json.loads(run.status.read_text())
    status.update(state="running", train_seconds=125.0)  # as a killed run's last epoch left
    run.status.write_text(json.dumps(status))
    resumed = _create(_cfg(tmp_path))
    resumed_dir = _take(resumed)
    resumed_dir.release()
    assert 125.0 <= resumed_dir.train_seconds() < 125.0 + 60
    assert json.loads(run.status.read_text())["train_seconds"] >= 125.0
    fresh = _create(_cfg(tmp_path, "name=fresh"))
    fresh_dir = _take(fresh)
    fresh_dir.release()
    assert fresh_dir.train_seconds() < 60


def _back_up(root, epoch: int, step: int, steps_per_epoch: int) -> None:
    """The backup a run killed at (epoch, step) leaves: BackupAndRestore's position
    variables in backup/chief and the batches per fit epoch in input_state.json."""
    import tensorflow as tf

    checkpoint = tf.train.Checkpoint(ckpt_saved_epoch=tf.Variable(epoch, dtype=tf.int64),
                                     ckpt_saved_batch=tf.Variable(step, dtype=tf.int64))
    checkpoint.save(str(root / "backup" / "chief" / "ckpt"))
    (root / "input_state.json").write_text(json.dumps({"fit_steps_per_epoch": steps_per_epoch}))


def test_a_resume_may_change_where_data_is_served_from_and_what_is_logged(tmp_path):
    ctx = _create(_cfg(tmp_path, "data.service.address=localhost:1"))
    ctx_dir = _take(ctx)
    ctx_dir.keep_config_with_backup()
    ctx_dir.release()
    _back_up(tmp_path / "run", epoch=1, step=4, steps_per_epoch=10)
    again = _create(_cfg(tmp_path, "data.service.address=localhost:2",
                                   "tracking.tensorboard=false", "trainer.epochs=9",
                                   "trainer.profiler_port=6009",
                                   "trainer.profiler_listen_all=true"))
    # a new dispatcher port, no TensorBoard, longer, a profiler server: the same training,
    # resumed without --resume-anyway, its input after the 10 + 5 batches it had read
    assert again.resuming
    again_dir = _take(again)
    again_dir.release()
    assert again_dir.changed_since_backup == ()
    assert again.resumed_batches() == 15


def test_a_finished_run_is_trained_again_only_under_its_own_config(tmp_path):
    ctx = _create(_cfg(tmp_path, "trainer.epochs=2"))
    ctx_dir = _take(ctx)
    ctx_dir.status("finished")
    ctx_dir.release()

    same = _create(_cfg(tmp_path, "trainer.epochs=2", "tracking.tensorboard=false"))
    same_dir = _take(same)  # the same training (other logging): trained again, as before
    same_dir.status("finished")
    same_dir.release()
    params = (tmp_path / "run" / "params.yaml").read_text()
    for changed in ("optimizer.learning_rate=0.1", "trainer.epochs=5"):
        other = _create(_cfg(tmp_path, "trainer.epochs=2", changed))
        with pytest.raises(ConfigError, match=r"holds a finished run with another config \("
                                              rf"{changed.split('=')[0]}: .* -> .*\); "
                                              "nothing was changed; pass --start-over to "
                                              "train it again \\(the finished run is moved"):
            _take(other)
        assert (tmp_path / "run" / "params.yaml").read_text() == params
    other_dir = _take(other, start_over=True)  # train it again under the new config
    assert "epochs: 5" in (tmp_path / "run" / "params.yaml").read_text()
    other_dir.release()
    (aside,) = tmp_path.glob("run.old-*")  # the finished run, kept
    assert (aside / "params.yaml").read_text() == params


def test_a_folder_of_other_files_is_never_taken_as_a_run_directory(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "backup").mkdir()  # someone's own "backup" folder
    (tmp_path / "run" / "backup" / "thesis.tex").write_text("keep")
    for start_over in (False, True):
        with pytest.raises(ConfigError, match=rf"{tmp_path / 'run'} is not a tfapp run "
                                              r"directory \(no params.yaml\) and holds other "
                                              r"files \(backup\); nothing was changed"):
            _take(_create(_cfg(tmp_path)), start_over=start_over)
    assert sorted(p.name for p in (tmp_path / "run").rglob("*")) == ["backup", "thesis.tex"]
    (tmp_path / "empty").mkdir()
    ctx = _create(_cfg(tmp_path, "name=empty"))  # an empty folder is a new run
    ctx_dir = _take(ctx)
    ctx_dir.release()


def test_a_moved_run_directory_still_resumes(tmp_path):
    ctx = _create(_cfg(tmp_path / "a"))
    ctx_dir = _take(ctx)
    ctx_dir.keep_config_with_backup()
    ctx_dir.release()
    _back_up(tmp_path / "a" / "run", epoch=0, step=6, steps_per_epoch=10)
    (tmp_path / "a" / "run").rename(tmp_path / "moved")  # output_dir and name both change
    moved = _create(load_config(None, [f"output_dir={tmp_path}", "name=moved"]))
    assert moved.resuming
    moved_dir = _take(moved)  # where a run lives is not part of its training
    moved_dir.release()
    assert moved_dir.changed_since_backup == ()
    assert moved.resumed_batches() == 7  # the backup's position, read in its new place


def test_a_stored_config_of_another_task_differs_by_its_task(tmp_path):
    """Each task has its own config class: comparing a run's params.yaml of one task with a
    rerun under another names the task first (no key of one class is read off the other)."""
    changes = differences(load_config(None, ["task=classifier"]),
                          load_config(None, ["task=ner"]))
    assert changes[0] == ("task", "classifier", "ner", "never")
    assert ("data.label_column", "label", None, "must_match") in changes
