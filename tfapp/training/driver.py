"""The fit driver: config -> runtime -> task -> compiled model -> fit -> finish.

Only the chief writes the run directory (params.yaml, logs, checkpoints, exports);
other workers of a multi-worker run write into scratch directories, because every
worker must take part in collective saves.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tfapp import runtime as runtime_lib
from tfapp.config import ConfigError, ExperimentConfig, save_params
from tfapp.tasks import get_task
from tfapp.tracking import wandb_run
from tfapp.training.accumulation import wrap_for_accumulation
from tfapp.training.callbacks import plot_curves, standard_callbacks
from tfapp.training.lr_finder import LRFindResult, find_lr, plot_lr_find
from tfapp.training.optimizers import build_optimizer, build_schedule
from tfapp.training.plan import TrainingPlan, plan_training, resolve_jit_compile
from tfapp.training.run_header import build_header, format_header, save_header
from tfapp.training.schedule_plot import plot_schedule
from tfapp.training.status import write_status
from tfapp.training.step_logs import LearningRateLogger, StepLogger

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
        out.extend(self.lines)
        out.append(f"took {self.seconds:.0f}s; view with: tensorboard --logdir {self.run_dir}")
        return "\n".join(out)


def _check_writable(run_dir: Path) -> None:
    """Fail before any training if the run directory cannot be written."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write_probe_{os.getpid()}"
        probe.write_bytes(b"x" * 4096)
        probe.unlink()
    except OSError as err:
        raise ConfigError(f"output directory {run_dir} is not writable ({err.strerror}); "
                          "set output_dir= to a writable place") from None


def _with_accumulation(model, steps: int, rt: runtime_lib.Runtime):
    return wrap_for_accumulation(model, steps, rt.num_replicas)


def _peak_learning_rate(cfg: ExperimentConfig, rt: runtime_lib.Runtime, *, model, inputs,
                        task, run_dir: Path, jit: bool, resuming: bool) -> tuple[float, str]:
    """The schedule's peak and where it came from; ``auto`` runs the LR range test first
    on the real model (weights restored after) at the real global batch, so its
    suggestion is used as is (no replica scaling). A resumed run reuses its suggestion."""
    o = cfg.optimizer
    if o.learning_rate != "auto":
        lr = rt.scaled_learning_rate(o.learning_rate, o.scale_lr_by_replicas)
        scaled = o.scale_lr_by_replicas and rt.num_replicas > 1
        return lr, (f"optimizer.learning_rate x {rt.num_replicas} replicas" if scaled
                    else "optimizer.learning_rate")
    saved = run_dir / "lr_find.json"
    if resuming and saved.is_file():
        found = LRFindResult.load_json(saved)
    else:
        found = find_lr(model, inputs.train, optimizer_cfg=o, loss=task.build_losses(),
                        strategy=rt.strategy,
                        accumulation=cfg.trainer.gradient_accumulation_steps, jit_compile=jit)
        found.save_json(saved)
        plot_lr_find(found, run_dir / "lr_find.png", title=f"{cfg.name}: LR range test")
        found.check_usable()  # no training at a rate read off noise
    log.info("optimizer.learning_rate=auto: %s", found.describe())
    return found.suggestion, "auto: LR range test, lr_find.png"


def _step_callbacks(cfg: ExperimentConfig, plan: TrainingPlan, schedule,
                    log_dir: Path) -> list:
    """Per-optimizer-step learning rate in TensorBoard; a log line every log_every_steps."""
    cbs: list = []
    if cfg.tracking.tensorboard:
        cbs.append(LearningRateLogger(log_dir / "train", schedule))
    if cfg.trainer.log_every_steps:
        cbs.append(StepLogger(cfg.trainer.log_every_steps, plan.total_steps,
                              plan.effective_batch))
    return cbs


def train(cfg: ExperimentConfig) -> TrainResult:
    """Run the experiment ``cfg`` describes end to end."""
    started = time.time()
    rt = runtime_lib.setup(cfg.runtime)
    run_dir = runtime_lib.worker_dir(cfg.run_dir, rt)
    _check_writable(run_dir)
    paths: dict = {"params": save_params(cfg, run_dir)}
    write_status(run_dir, "running")

    global_batch = rt.global_batch_size(cfg.data.batch_size)
    jit = resolve_jit_compile(cfg, rt)
    log.info("runtime: %s", rt.describe(cfg.data.batch_size))

    task = get_task(cfg.task)(cfg, rt, run_dir)
    # Before any TensorBoard writer exists, so tracking.wandb.sync_tensorboard sees them all.
    tracker = wandb_run.start(cfg, run_dir, rt.is_chief)  # None unless tracking.wandb.enabled
    try:
        inputs = task.build_inputs()
        # Epochs, or max_steps / eval_every_steps as "virtual epochs" (see plan.py).
        plan = plan_training(cfg, inputs.num_train_examples, global_batch)
        callbacks, cb_paths = standard_callbacks(
            cfg, run_dir, monitor=cfg.trainer.monitor or task.default_monitor,
            has_validation=inputs.validation is not None)
        backup = cb_paths["backup"]
        resuming = backup.is_dir() and any(backup.iterdir())
        if not resuming:
            cb_paths["history"].unlink(missing_ok=True)
        with rt.strategy.scope():
            model = task.build_model(inputs)
            model = _with_accumulation(model, cfg.trainer.gradient_accumulation_steps, rt)
        lr, lr_source = _peak_learning_rate(cfg, rt, model=model, inputs=inputs, task=task,
                                            run_dir=run_dir, jit=jit, resuming=resuming)
        schedule = build_schedule(cfg.optimizer, peak=lr, total_steps=plan.total_steps)
        with rt.strategy.scope():
            optimizer = build_optimizer(cfg.optimizer, schedule=schedule)
            model.compile(optimizer=optimizer, loss=task.build_losses(),
                          metrics=task.build_metrics(), jit_compile=jit,
                          steps_per_execution=cfg.trainer.steps_per_execution)
        examples = {"train": inputs.num_train_examples,
                    "validation": inputs.num_validation_examples}
        header = build_header(cfg, rt, plan, examples=examples, warmup=schedule.warmup_steps,
                              peak_lr=lr, lr_source=lr_source, jit_compile=jit)
        log.info("%s", format_header(header))
        header_paths = save_header(header, run_dir)
        paths["header"] = header_paths["run_header.txt"]
        evals = [(i + 1) * plan.fit_steps_per_epoch // plan.accumulation
                 for i in range(plan.fit_epochs)]
        paths["schedule"] = plot_schedule(schedule, plan.total_steps,
                                          run_dir / "lr_schedule.png",
                                          warmup_steps=schedule.warmup_steps, eval_steps=evals)
        callbacks += _step_callbacks(cfg, plan, schedule, cb_paths["logs"])
        callbacks += task.callbacks(model, inputs)
        callbacks += tracker.callbacks(cfg) if tracker else []
        verbose = 1 if (rt.is_chief and sys.stderr.isatty()) else 2
        history = model.fit(inputs.train, validation_data=inputs.validation,
                            validation_steps=inputs.validation_steps,
                            epochs=plan.fit_epochs, steps_per_epoch=plan.fit_steps_per_epoch,
                            callbacks=callbacks, verbose=verbose)
        nan_stop = callbacks[0]
        if nan_stop.bad_batch is not None:
            raise ConfigError(
                f"training stopped: the loss became NaN/inf near optimizer step "
                f"{int(model.optimizer.iterations)} (epoch "
                f"{len(history.history.get('loss', []))} batch {nan_stop.bad_batch}); lower "
                "optimizer.learning_rate (python -m tfapp.lr_find suggests one) or set "
                "optimizer.clipnorm; checkpoints from earlier evaluations are kept in "
                f"{cb_paths['checkpoints']}")
        finished = task.finish(model, inputs)
    except BaseException as err:
        state = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
        write_status(run_dir, state, error=str(err).splitlines()[0] if str(err) else state)
        if tracker:
            tracker.finish(failed=True)
        raise

    # BackupAndRestore deletes its checkpoint after a finished fit but leaves the folder.
    if rt.is_chief and cb_paths["backup"].is_dir() and not any(cb_paths["backup"].iterdir()):
        cb_paths["backup"].rmdir()  # (the folder is shared by all workers: the chief's)
    paths.update({k: v for k, v in cb_paths.items() if k != "backup" and Path(v).exists()})
    curves = plot_curves(cb_paths["history"], run_dir / "curves.png")
    if curves:
        paths["curves"] = curves
    result = TrainResult(run_dir=run_dir, paths=paths, history=history.history,
                         seconds=time.time() - started, model=model)
    result.metrics = {k: v[-1] for k, v in history.history.items() if v}
    result.metrics.update(finished.pop("metrics", {}))
    result.lines = finished.pop("lines", [])
    result.paths.update(finished)
    if tracker:  # summary metrics, the exported model as an artifact
        result.lines += tracker.finish(result)
    write_status(run_dir, "finished", metrics={k: float(v) for k, v in result.metrics.items()
                                                if isinstance(v, int | float)})
    if not rt.is_chief:  # drop this worker's scratch copy and its empty parents
        shutil.rmtree(run_dir, ignore_errors=True)
        for parent in (run_dir.parent, run_dir.parent.parent):
            if parent.name.startswith((".workers", f"{rt.task_type}_")) and parent.is_dir() \
                    and not any(parent.iterdir()):
                parent.rmdir()
    return result
