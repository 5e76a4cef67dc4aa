"""The fit driver: config -> runtime -> task -> compiled model -> fit -> finish.

Only the chief writes the run directory (params.yaml, logs, checkpoints, exports);
other workers of a multi-worker run write into scratch directories, because every
worker must take part in collective saves.
"""

from __future__ import annotations

import json
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
from tfapp.training.accumulation import AccumulatingModel
from tfapp.training.callbacks import plot_curves, standard_callbacks
from tfapp.training.optimizers import build_optimizer

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
        labels = {"params": "config", "logs": "TensorBoard", "checkpoints": "checkpoints",
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


def _write_status(run_dir: Path, state: str, **extra) -> None:
    status = {"state": state, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "pid": os.getpid(),
              **extra}
    tmp = run_dir / ".status.json.tmp"
    tmp.write_text(json.dumps(status, indent=1))
    os.replace(tmp, run_dir / "status.json")


def steps_per_epoch(cfg: ExperimentConfig, num_examples: int, global_batch: int) -> int:
    if cfg.trainer.steps_per_epoch:
        return cfg.trainer.steps_per_epoch
    steps = num_examples // global_batch
    if steps < 1:
        raise ConfigError(f"data.batch_size: the training split has {num_examples} examples, "
                          f"fewer than one global batch ({global_batch}); lower data.batch_size")
    return steps


def _with_accumulation(model, steps: int, rt: runtime_lib.Runtime):
    if steps <= 1:
        return model
    if rt.num_replicas > 1:
        # Applying inside a tf.cond would need a cross-replica merge_call there, which
        # MirroredStrategy does not support; with several replicas the global batch is
        # already replicas x data.batch_size.
        raise ConfigError(f"trainer.gradient_accumulation_steps={steps} runs on one replica; "
                          f"with {rt.num_replicas} replicas raise data.batch_size instead")
    if not getattr(model, "_is_graph_network", False):
        raise ConfigError("trainer.gradient_accumulation_steps > 1 needs a functional model "
                          f"({type(model).__name__} has its own train_step); set it to 1")
    return AccumulatingModel.wrap(model, steps)


def train(cfg: ExperimentConfig) -> TrainResult:
    """Run the experiment ``cfg`` describes end to end."""
    started = time.time()
    rt = runtime_lib.setup(cfg.runtime)
    run_dir = runtime_lib.worker_dir(cfg.run_dir, rt)
    _check_writable(run_dir)
    paths: dict = {"params": save_params(cfg, run_dir)}
    _write_status(run_dir, "running")

    global_batch = rt.global_batch_size(cfg.data.batch_size)
    # Hub encoders (bert) and the LSTM baseline (rnn) recompile every step under XLA.
    jit = rt.default_jit_compile(cfg.trainer.jit_compile,
                                 recompiles_under_xla=cfg.model.kind in ("bert", "rnn"))
    if jit and rt.kind == "mirrored" and rt.device_kind == "CPU":
        raise ConfigError("trainer.jit_compile: XLA cannot run MirroredStrategy over CPU "
                          "devices (its CPU backend binds one device); set "
                          "trainer.jit_compile=false")
    lr = rt.scaled_learning_rate(cfg.optimizer.learning_rate, cfg.optimizer.scale_lr_by_replicas)
    log.info("runtime: %s", rt.describe(cfg.data.batch_size))

    task = get_task(cfg.task)(cfg, rt, run_dir)
    # Before any TensorBoard writer exists, so tracking.wandb.sync_tensorboard sees them all.
    tracker = wandb_run.start(cfg, run_dir, rt.is_chief)  # None unless tracking.wandb.enabled
    try:
        inputs = task.build_inputs()
        spe = steps_per_epoch(cfg, inputs.num_train_examples, global_batch)
        total_steps = spe * cfg.trainer.epochs // cfg.trainer.gradient_accumulation_steps
        log.info("training: %d examples, %d epochs x %d steps, global batch %d, "
                 "%d optimizer steps, lr %.3g, jit_compile=%s, steps_per_execution=%d",
                 inputs.num_train_examples, cfg.trainer.epochs, spe, global_batch,
                 total_steps, lr, jit, cfg.trainer.steps_per_execution)
        with rt.strategy.scope():
            model = task.build_model(inputs)
            model = _with_accumulation(model, cfg.trainer.gradient_accumulation_steps, rt)
            optimizer = build_optimizer(cfg.optimizer, peak=lr, total_steps=total_steps)
            model.compile(optimizer=optimizer, loss=task.build_losses(),
                          metrics=task.build_metrics(), jit_compile=jit,
                          steps_per_execution=cfg.trainer.steps_per_execution)
        callbacks, cb_paths = standard_callbacks(
            cfg, run_dir, monitor=cfg.trainer.monitor or task.default_monitor,
            has_validation=inputs.validation is not None)
        backup = cb_paths["backup"]
        if not (backup.is_dir() and any(backup.iterdir())):  # a fresh start, not a resume
            cb_paths["history"].unlink(missing_ok=True)
        callbacks += task.callbacks(model, inputs)
        callbacks += tracker.callbacks(cfg) if tracker else []
        verbose = 1 if (rt.is_chief and sys.stderr.isatty()) else 2
        history = model.fit(inputs.train, validation_data=inputs.validation,
                            validation_steps=inputs.validation_steps,
                            epochs=cfg.trainer.epochs, steps_per_epoch=spe,
                            callbacks=callbacks, verbose=verbose)
        nan_stop = callbacks[0]
        if nan_stop.bad_batch is not None:
            raise ConfigError(
                f"training stopped: the loss became NaN/inf at epoch "
                f"{len(history.history.get('loss', []))} batch {nan_stop.bad_batch}; lower "
                "optimizer.learning_rate or set optimizer.clipnorm; checkpoints from earlier "
                f"epochs are kept in {cb_paths['checkpoints']}")
        finished = task.finish(model, inputs)
    except BaseException as err:
        state = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
        _write_status(run_dir, state, error=str(err).splitlines()[0] if str(err) else state)
        if tracker:
            tracker.finish(failed=True)
        raise

    # BackupAndRestore deletes its checkpoint after a finished fit but leaves the folder.
    if cb_paths["backup"].is_dir() and not any(cb_paths["backup"].iterdir()):
        cb_paths["backup"].rmdir()
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
    _write_status(run_dir, "finished", metrics={k: float(v) for k, v in result.metrics.items()
                                                if isinstance(v, int | float)})
    if not rt.is_chief:  # drop this worker's scratch copy and its empty parents
        shutil.rmtree(run_dir, ignore_errors=True)
        for parent in (run_dir.parent, run_dir.parent.parent):
            if parent.name.startswith((".workers", f"{rt.task_type}_")) and parent.is_dir() \
                    and not any(parent.iterdir()):
                parent.rmdir()
    return result
