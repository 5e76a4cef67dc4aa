"""The training loop, the one every run goes through: config -> run context -> task ->
compiled model -> fit -> finish.

``train`` runs the classifier, the generator, masked-LM pretraining (``task=mlm``) and
every tuning trial; ``find_learning_rate`` is the LR range test on the same model and
pipeline. Where things are decided: the runtime and XLA in ``RunContext.create``
(``training/context.py``), the run directory's lock, status and time trained in
``RunDirectory`` (``training/run_directory.py``), its file names in ``RunLayout``
(``run_layout.py``), the data pipeline (snapshot, cache, service) in each task's
``build_inputs``.

Only the chief writes the run directory (params.yaml, logs, checkpoints, exports);
other workers of a multi-worker run write into scratch directories, because every
worker must take part in collective saves.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tfapp.atomic import read_state, write_text
from tfapp.config import ConfigError, ExperimentConfig
from tfapp.models.hub_encoder import built_encoder
from tfapp.run_layout import RunLayout
from tfapp.runtime import Runtime
from tfapp.tracking import profiler, wandb_run
from tfapp.training import fit as fit_lib
from tfapp.training.callbacks import (
    EpochStatus,
    history_row,
    plot_curves,
    read_history,
    standard_callbacks,
)
from tfapp.training.context import RunContext
from tfapp.training.lr_finder import LRFindResult, find_lr, plot_lr_find
from tfapp.training.metrics import AUC_NOTE
from tfapp.training.optimizers import build_optimizer, build_schedule
from tfapp.training.plan import TrainingPlan, plan_training, resolve_steps_per_execution
from tfapp.training.run_directory import RunDirectory
from tfapp.training.run_header import build_header, format_header, save_header
from tfapp.training.schedule_plot import plot_schedule
from tfapp.training.step_logs import LearningRateLogger, StepLogger
from tfapp.training.task import Inputs, Task

log = logging.getLogger("tfapp")


@dataclass
class TrainResult:
    """What a run produced; ``summary()`` is what the train command prints."""

    run_dir: Path
    paths: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    history: dict = field(default_factory=dict)
    seconds: float = 0.0
    lines: list = field(default_factory=list)
    try_it: str = ""  # a command that uses the export (the task's TaskOutput.try_it)
    source: str = ""  # which evaluation the metrics (and the export) are from
    model: object = field(default=None, repr=False)  # the trained tf.keras model

    def summary(self) -> str:
        out = [f"run directory:   {self.run_dir}"]
        labels = {"params": "config", "header": "run header", "schedule": "lr schedule",
                  "logs": "TensorBoard", "checkpoints": "checkpoints",
                  "exported": "exported model", "curves": "curves", "history": "history"}
        for key, label in labels.items():
            if self.paths.get(key):
                out.append(f"{label + ':':16} {self.paths[key]}")
        if self.metrics:
            shown = ", ".join(f"{k}={v:.4f}" for k, v in self.metrics.items()
                              if isinstance(v, int | float))
            out.append(f"final metrics:   {shown}")
            if self.source:
                out.append(f"{'':17}({self.source})")
            if "val_auc" in self.metrics and ("val_report_auc" in self.metrics
                                              or "test_auc" in self.metrics):
                out.append(f"{'':17}({AUC_NOTE})")
        out.extend(self.lines)
        out.append(f"took {self.seconds:.0f}s; view with: tensorboard --logdir {self.run_dir}")
        if self.try_it:
            out.append(f"try it:          {self.try_it}")
        return "\n".join(out)


def profile_lines(run: RunLayout) -> list[str]:
    """Where a profiled run's capture is and the command that summarises it."""
    sessions = profiler.find_sessions(run.logs) if run.logs.is_dir() else []
    if not sessions:
        return ["profile:         no capture was written (trainer.profile_steps past the "
                "run's last step?)"]
    return [f"profile:         {sessions[-1]}",
            f"{'':17}summary: python -m tfapp.profile summary {run.root}"]


def _peak_learning_rate(ctx: RunContext, task: Task, model, inputs: Inputs, *,
                        resuming: bool) -> tuple[float, str]:
    """The schedule's peak and where it came from; ``auto`` runs the LR range test first
    on the real model (weights restored after) at the real global batch, so its
    suggestion is used as is (no replica scaling). A resumed run reuses its suggestion."""
    cfg, rt, run = ctx.cfg, ctx.runtime, ctx.layout
    o = cfg.optimizer
    if o.learning_rate != "auto":
        lr = rt.scaled_learning_rate(o.learning_rate, o.scale_lr_by_replicas)
        scaled = o.scale_lr_by_replicas and rt.num_replicas > 1
        return lr, (f"optimizer.learning_rate x {rt.num_replicas} replicas" if scaled
                    else "optimizer.learning_rate")
    saved = read_state(run.lr_find_json, "LR range test") if resuming else None
    if saved is not None:
        found = LRFindResult(**saved)
    else:
        found = find_lr(ctx, model, inputs.train, loss=task.build_losses(inputs))
        found.save_json(run.lr_find_json)
        plot_lr_find(found, run.lr_find_png, title=f"{cfg.name}: LR range test")
        found.check_usable()  # no training at a rate read off noise
    log.info("optimizer.learning_rate=auto: %s", found.describe())
    return found.suggestion, "auto: LR range test, lr_find.png"


def _step_callbacks(cfg: ExperimentConfig, plan: TrainingPlan, schedule,
                    layout: RunLayout) -> list:
    """Per-optimizer-step learning rate in TensorBoard; a log line every log_every_steps."""
    cbs: list = []
    if cfg.tracking.tensorboard:
        cbs.append(LearningRateLogger(layout.logs / "train", schedule))
    if cfg.trainer.log_every_steps:
        cbs.append(StepLogger(cfg.trainer.log_every_steps, plan.total_steps,
                              plan.effective_batch))
    return cbs


def train(cfg: ExperimentConfig, *, task: type[Task], runtime: Runtime | None = None,
          start_over: bool = False, resume_anyway: bool = False,
          callbacks: Sequence = ()) -> TrainResult:
    """Run the experiment ``cfg`` describes end to end with its ``task`` class (the caller
    looks it up: ``tfapp.tasks.get_task``); ``runtime`` reuses one already set up (``tune``
    hands each trial its once-built runtime). A rerun resumes the run's backup
    (``resume_anyway``: under a changed config); ``start_over`` moves the run aside and
    starts a new one (``RunDirectory.take``). ``callbacks``: the caller's own Keras
    callbacks, run after tfapp's (the Python API's ``callbacks=``)."""
    ctx = RunContext.create(cfg, task=task, runtime=runtime)
    with RunDirectory.take(ctx, start_over=start_over,
                           resume_anyway=resume_anyway) as directory:
        return _train(ctx, directory, user_callbacks=list(callbacks))


def _train(ctx: RunContext, directory: RunDirectory, *, user_callbacks: list) -> TrainResult:
    cfg, run = ctx.cfg, ctx.layout
    paths: dict = {"params": directory.params}
    log.info("runtime: %s", ctx.describe())

    task = ctx.task(ctx)
    # Before any TensorBoard writer exists, so tracking.wandb.sync_tensorboard sees them all.
    tracker = wandb_run.start(cfg, run.root, ctx.is_chief)  # None unless tracking.wandb.enabled
    try:
        inputs = task.build_inputs()
        # Epochs, or max_steps / eval_every_steps as "virtual epochs" (see plan.py).
        plan = plan_training(cfg, inputs.num_train_examples,
                             ctx.runtime.global_batch_size(cfg.data.batch_size),
                             inputs.batches_per_pass)
        # With the backup's (epoch, step), where a resumed run's input resumes.
        write_text(run.input_state, json.dumps({
            "fit_steps_per_epoch": plan.fit_steps_per_epoch,
            "batches_per_pass": plan.batches_per_pass, "global_batch": plan.global_batch,
            "seed": cfg.runtime.seed}) + "\n")
        callbacks, nan_stop = standard_callbacks(
            cfg, run, backup=ctx.run.backup, monitor=cfg.trainer.monitor or task.default_monitor,
            has_validation=inputs.validation is not None,
            changed=directory.changed_since_backup,
            on_backup=directory.keep_config_with_backup)
        resuming = ctx.resuming
        if not resuming:  # starting over: an earlier attempt's history and best are not ours
            run.history.unlink(missing_ok=True)
            shutil.rmtree(run.checkpoints, ignore_errors=True)
        model, ctx = fit_lib.build_model(ctx, task, inputs)  # ctx: XLA settled for the model
        lr, lr_source = _peak_learning_rate(ctx, task, model, inputs, resuming=resuming)
        schedule = build_schedule(cfg.optimizer, peak=lr, total_steps=plan.total_steps)
        with ctx.runtime.strategy.scope():  # metrics hold variables: made in the scope
            optimizer = build_optimizer(cfg.optimizer, schedule=schedule)
            loss, metrics = task.build_losses(inputs), task.build_metrics(inputs)
        spe, spe_source = resolve_steps_per_execution(cfg, ctx.runtime, plan)
        fit_lib.compile_model(ctx, model, optimizer=optimizer, loss=loss, metrics=metrics,
                              steps_per_execution=spe)
        examples = {"train": inputs.num_train_examples,
                    "validation": inputs.num_validation_examples}
        header = build_header(cfg, ctx.runtime, plan, examples=examples,
                              warmup=schedule.warmup_steps, peak_lr=lr, lr_source=lr_source,
                              jit_compile=ctx.jit_compile, jit_reason=ctx.jit_reason,
                              encoder=_encoder_line(model),
                              steps_per_execution=(spe, spe_source))
        log.info("%s", format_header(header))
        paths["header"] = save_header(header, run)
        evals = [(i + 1) * plan.fit_steps_per_epoch // plan.accumulation
                 for i in range(plan.fit_epochs)]
        paths["schedule"] = plot_schedule(schedule, plan.total_steps, run.lr_schedule_png,
                                          warmup_steps=schedule.warmup_steps, eval_steps=evals)
        callbacks += _step_callbacks(cfg, plan, schedule, run)
        # Metric callbacks first: what they add to the epoch logs reaches every callback after.
        callbacks = task.metric_callbacks(model, inputs) + callbacks + task.callbacks(model,
                                                                                    inputs)
        callbacks += tracker.callbacks(cfg) if tracker else []
        callbacks += user_callbacks  # last: they see every log key tfapp's callbacks add
        # First: an epoch's time is on record before its backup, so a kill loses none.
        callbacks.insert(0, EpochStatus(directory.status))
        history = fit_lib.fit(ctx, model, inputs.train, validation=inputs.validation,
                              validation_steps=inputs.validation_steps,
                              epochs=plan.fit_epochs, steps_per_epoch=plan.fit_steps_per_epoch,
                              callbacks=callbacks)
        # Keras's history holds this process's epochs; a resumed run's is the whole run's.
        history = read_history(run.history) or history
        if nan_stop.bad_batch is not None:
            raise ConfigError(
                f"training stopped: the loss became NaN/inf near optimizer step "
                f"{int(model.optimizer.iterations.numpy())} (epoch "
                f"{len(next(iter(history.values()), []))} batch {nan_stop.bad_batch}); lower "
                "optimizer.learning_rate (python -m tfapp.lr_find suggests one) or set "
                "optimizer.clipnorm; checkpoints from earlier evaluations are kept in "
                f"{run.checkpoints}")
        best = _restore_best(model, run, fit_epochs=plan.fit_epochs)
        finished = task.finish(model, inputs, history)
    except BaseException as err:
        state = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
        try:
            directory.status(state, error=str(err).splitlines()[0] if str(err) else state)
        except OSError as status_err:  # (the full disk that failed the run, say)
            log.warning("could not record '%s' in %s: %s", state, ctx.layout.status,
                        status_err)
        if tracker:
            tracker.finish(failed=True)
        raise

    for key, path in (("logs", run.logs), ("checkpoints", run.checkpoints),
                      ("history", run.history)):
        if path.exists():
            paths[key] = path
    curves = plot_curves(run.history, run.curves)
    if curves:
        paths["curves"] = curves
    result = TrainResult(run_dir=run.root, paths=paths, history=history,
                         seconds=directory.train_seconds(), model=model)
    row = history_row(run.history, best["epoch"]) if best else {}
    result.metrics = ({k: row[k] for k in [*history, *row] if k in row} if row
                      else {k: v[-1] for k, v in history.items() if v})
    if best:
        step = (f", optimizer step {evals[best['epoch'] - 1]}"
                if best["epoch"] <= len(evals) else "")
        result.source = (f"the model of epoch {best['epoch']} of {plan.fit_epochs}{step}: "
                         f"the best {best['monitor']}, {best['value']:.4g}")
    result.metrics.update(finished.metrics)
    result.lines = list(finished.lines)
    result.try_it = finished.try_it
    result.paths.update(finished.paths)
    if cfg.trainer.profile_steps and ctx.is_chief:
        result.lines += profile_lines(run)
    if tracker:  # summary metrics, the exported model as an artifact
        result.lines += tracker.finish(result)
    directory.status("finished", metrics={k: float(v) for k, v in result.metrics.items()
                                    if isinstance(v, int | float)})
    directory.end()
    return result


def _encoder_line(model) -> str:
    """The BERT encoder ``model`` holds and why, for the run header ("" for none)."""
    encoder = built_encoder(model)
    return encoder.describe() if encoder else ""


def _restore_best(model, run: RunLayout, *, fit_epochs: int) -> dict | None:
    """Load the best evaluation's weights (``BestCheckpoint``) into ``model`` so the export,
    the reports and the final metrics describe it; returns its record (None: no
    checkpoint, the last weights stay)."""
    record = run.best()
    if record is None:
        return None
    if record["epoch"] != fit_epochs:
        log.info("restoring the weights of epoch %d (best %s %.4g) for the export",
                 record["epoch"], record["monitor"], record["value"])
        model.load_weights(str(run.checkpoints / record["checkpoint"])).expect_partial()
    return record


def find_learning_rate(cfg: ExperimentConfig, *, task: type[Task]) -> LRFindResult:
    """The LR range test for the experiment ``cfg``: its runtime, data pipeline and model,
    built with a scratch run directory so the real one stays untouched."""
    with tempfile.TemporaryDirectory(prefix="tfapp-lr-find-") as scratch:
        ctx = RunContext.create(cfg, task=task, run_dir=scratch)
        log.info("LR range test: %s", ctx.describe())
        built = task(ctx)
        inputs = built.build_inputs()
        model, ctx = fit_lib.build_model(ctx, built, inputs)
        return find_lr(ctx, model, inputs.train, loss=built.build_losses(inputs))
