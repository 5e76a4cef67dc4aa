"""Weights & Biases tracking of one training run (``tracking.wandb``).

The driver calls ``start`` before training and ``WandbRun.finish`` after the export; the
``WandbLogger`` callback logs metrics per step (``batch/*`` against ``optimizer_step``)
and per epoch (``epoch/*`` against ``epoch``, validation included) into the active run.

It never waits for a person: without an API key (``WANDB_API_KEY`` or a ``wandb login``
netrc entry) an ``online`` request runs ``offline`` instead, the run lives in
``RUN_DIR/wandb/offline-run-*`` and ``wandb sync`` uploads it later. The key is read by
wandb itself from the environment; tfapp never copies it into the config, params.yaml,
the run's config on W&B or any report.
"""

from __future__ import annotations

import logging
import netrc
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfapp import compat
from tfapp.config import ExperimentConfig
from tfapp.run_layout import RunLayout

import tensorflow as tf

log = logging.getLogger("tfapp")


def has_api_key() -> bool:
    """An API key wandb would use: WANDB_API_KEY, or a netrc entry for its host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = re.sub(r"^https?://", "", os.environ.get("WANDB_BASE_URL", "api.wandb.ai"))
    try:
        return netrc.netrc().authenticators(host.split("/")[0]) is not None
    except (OSError, netrc.NetrcParseError):
        return False


#: what tfapp passes to wandb.init when neither the config nor the environment says
DEFAULT_PROJECT, DEFAULT_MODE = "tfapp", "offline"


def display_name(cfg: ExperimentConfig) -> str:
    """The run's name in W&B: its name, but ``trial_N`` for a search trial (whose run
    folder is ``trial_N/run_0``; ``trial_N/run_M`` for a repeat, tune.executions > 1)."""
    trial = Path(cfg.output_dir).name
    if any(t.startswith("search:") for t in cfg.tracking.wandb.tags) and \
            trial.startswith("trial_"):
        return trial if cfg.name == "run_0" else f"{trial}/{cfg.name}"
    return cfg.name


def init_args(cfg: ExperimentConfig, run_dir: Path,
              env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """wandb.init's project, entity, name, group, tags, dir and requested mode.

    Precedence, for each: a ``tracking.wandb`` key set in the config, then the WANDB_*
    variable (left for wandb.init to read itself: tfapp passes None), then tfapp's
    default (project tfapp, mode offline, the run's name, one group per search, the run
    directory). Tags add up: the config's, then WANDB_TAGS (comma-separated).
    """
    env = os.environ if env is None else env
    w = cfg.tracking.wandb

    def unless_env(var: str, default: Any) -> Any:
        return None if env.get(var) else default

    # Tuner trials carry a "search:NAME" tag (tfapp.tuning): one W&B group per search.
    group = next((t.split(":", 1)[1] for t in w.tags if t.startswith("search:")), None)
    tags = list(w.tags) + [t.strip() for t in env.get("WANDB_TAGS", "").split(",")
                           if t.strip() and t.strip() not in w.tags]
    mode = w.mode if w.mode != "auto" else (env.get("WANDB_MODE") or DEFAULT_MODE)
    return dict(project=w.project or unless_env("WANDB_PROJECT", DEFAULT_PROJECT),
                entity=w.entity or None,  # wandb reads WANDB_ENTITY, else the key's
                name=unless_env("WANDB_NAME", display_name(cfg)),
                group=unless_env("WANDB_RUN_GROUP", group),
                tags=tags or None,
                dir=unless_env("WANDB_DIR", str(run_dir)),
                mode=mode)


def resolve_mode(requested: str) -> str:
    if requested == "online" and not has_api_key():
        log.warning("tracking.wandb.mode=online but no W&B API key (WANDB_API_KEY or `wandb "
                    "login`): logging offline; upload later with `wandb sync`")
        return "offline"
    return requested


def run_config(cfg: ExperimentConfig) -> dict[str, Any]:
    """The resolved config as a plain dict (what params.yaml holds; it has no secrets)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)


class WandbRun:
    """An active W&B run of one tfapp training run."""

    def __init__(self, run, mode: str):
        self.run, self.mode = run, mode

    def callbacks(self, cfg: ExperimentConfig) -> list[tf.keras.callbacks.Callback]:
        return [WandbLogger(every=getattr(cfg.trainer, "log_every_steps", 0) or 1)]

    @property
    def directory(self) -> Path:
        """The run's local folder (``RUN_DIR/wandb/offline-run-...`` offline)."""
        return Path(self.run.dir).parent

    def finish(self, result=None, *, failed: bool = False) -> list[str]:
        """Summary metrics and the exported model (artifact), then close the run.

        Returns lines for the train command's summary (where the run is, how to upload).
        """
        import wandb

        if result is not None:
            for key, value in result.metrics.items():
                if isinstance(value, int | float):
                    self.run.summary[key] = float(value)
            images = {name: wandb.Image(str(path)) for name, path in
                      (("curves", result.paths.get("curves")),
                       ("confusion_matrix", RunLayout(result.run_dir).confusion_matrix))
                      if path and Path(path).is_file()}
            if images:
                self.run.log(images)
            exported = result.paths.get("exported")
            if exported and Path(exported).is_dir():
                name = re.sub(r"[^\w.\-]", "_", f"{self.run.config.get('name', 'model')}-model")
                artifact = wandb.Artifact(name, type="model",
                                          metadata={"task": self.run.config.get("task")})
                artifact.add_dir(str(exported))
                self.run.log_artifact(artifact)
        directory, url = self.directory, self.run.get_url() if self.mode == "online" else None
        self.run.finish(exit_code=1 if failed else 0)
        if self.mode == "offline":
            return [f"W&B (offline):   {directory}; upload with: wandb sync {directory}"]
        return [f"W&B:             {url}"] if url else []


def start(cfg: ExperimentConfig, run_dir: Path, is_chief: bool = True) -> WandbRun | None:
    """Start the W&B run ``cfg.tracking.wandb`` asks for (None when off or not the chief)."""
    w = cfg.tracking.wandb
    if not w.enabled or not is_chief:
        return None
    args = init_args(cfg, run_dir)
    requested = args.pop("mode")
    if requested == "disabled":
        return None
    # No prompts, no console capture, no banner: CI has no TTY and the log stays readable.
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_CONSOLE", "off")
    import wandb

    mode = resolve_mode(requested)
    args.update(
        config=run_config(cfg),
        job_type="train", sync_tensorboard=bool(w.sync_tensorboard and cfg.tracking.tensorboard),
        reinit="finish_previous",
        settings=wandb.Settings(console="off", silent=True, init_timeout=90))
    try:
        run = wandb.init(mode=mode, **args)
    except Exception as err:  # noqa: BLE001 (wandb raises several kinds on network trouble)
        if mode != "online":
            raise
        log.warning("W&B online start failed (%s); logging offline instead", err)
        mode = "offline"
        run = wandb.init(mode=mode, **args)
    # Own prefixes: "train/..." and "validation/..." are the TensorBoard runs that
    # sync_tensorboard brings in (and a glob step metric would be stamped onto those too).
    run.define_metric("optimizer_step")
    run.define_metric("batch/*", step_metric="optimizer_step", summary="none")
    run.define_metric("epoch")
    run.define_metric("epoch/*", step_metric="epoch", summary="none")
    # The summary holds one value per metric, the exported model's (WandbRun.finish): not
    # also each curve's last point (the last epoch's, not the best) under other names.
    # (sync_tensorboard names some without their run: epoch_*, Keras's batch_* and
    # evaluation_*_vs_iterations.)
    for synced in ("train/*", "validation/*", "test/*", "epoch_*", "batch_*", "evaluation_*"):
        run.define_metric(synced, summary="none")
    log.info("W&B %s run '%s' in %s", mode, run.name, Path(run.dir).parent)
    return WandbRun(run, mode)


class WandbLogger(tf.keras.callbacks.Callback):
    """Logs Keras's running metrics every ``every`` optimizer steps and each epoch's
    metrics (validation included) into the active W&B run; a no-op without one."""

    def __init__(self, every: int = 1):
        super().__init__()
        self.every = max(1, every)
        self._last = -1
        # The logs stay tensors (only the row it logs is read); it still reads the step
        # (optimizer.iterations) at every execution end while a W&B run is active.
        compat.accept_tensor_logs(self)

    def _run(self):
        import wandb

        return wandb.run

    def on_train_batch_end(self, batch, logs=None):
        run = self._run()
        if run is None:
            return  # no step read without a run
        step = int(self.model.optimizer.iterations.numpy())
        if step == self._last or step % self.every:
            return
        self._last = step
        row = {f"batch/{k}": float(v) for k, v in (logs or {}).items()
               if isinstance(v, int | float) or getattr(v, "shape", None) == ()}
        row["batch/learning_rate"] = compat.current_learning_rate(self.model.optimizer)
        row["optimizer_step"] = step
        run.log(row)

    def on_epoch_end(self, epoch, logs=None):
        run = self._run()
        if run is None:
            return
        row = {f"epoch/{k}": float(v) for k, v in (logs or {}).items()
               if isinstance(v, int | float) or getattr(v, "shape", None) == ()}
        row["epoch"] = epoch + 1
        run.log(row)


