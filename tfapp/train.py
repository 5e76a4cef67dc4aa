"""Train a model: ``python -m tfapp.train [--config FILE] [key=value ...]``.

With no arguments it fine-tunes the BERT classifier on the demo data shipped with
tfapp, using a tiny BERT that tfapp builds once and loads through TF-Hub.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import types
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import cli
from tfapp.config import ConfigError, ExperimentConfig, load_config, with_values
from tfapp.tasks import get_task
from tfapp.training.faults import worker_loss_explained

import click


@cli.command(
    "train",
    """Train the experiment a config describes.

    Writes params.yaml, TensorBoard logs, checkpoints and the exported model into
    output_dir/name. Train by steps with trainer.max_steps, trainer.eval_every_steps and
    trainer.log_every_steps; the run header (run_header.txt) and lr_schedule.png show the
    plan before the first step. Pick a learning rate with tfapp lr-find, or
    optimizer.learning_rate=auto.""",
    config=True, resume_module="tfapp.train")
@click.option("--start-over", "--overwrite", "start_over", is_flag=True,
              help="Start the run again from scratch: the run directory is moved to "
                   "NAME.old-<date>-<time> beside it (nothing is deleted).")
@click.option("--resume-anyway", is_flag=True,
              help="Resume the run's backup under a config that changed since it was made "
                   "(refused without this; never for another task, encoder or optimizer, "
                   "nor for a change of a weight's shape).")
def command(cfg: ExperimentConfig, args: SimpleNamespace) -> int:
    if args.start_over and args.resume_anyway:
        raise ConfigError("--start-over and --resume-anyway exclude each other: start over, "
                          "or resume; give one")
    from tfapp.training.driver import train  # TensorFlow loads only past config checks

    with worker_loss_explained():  # a lost peer: one line and exit 75, not a traceback
        result = train(cfg, task=get_task(cfg.task), start_over=args.start_over,
                       resume_anyway=args.resume_anyway)
    print(result.summary())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.train")


def _dotted(overrides: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"trainer": {"epochs": 2}, "model.units": 8}`` -> ``{"trainer.epochs": 2,
    "model.units": 8}``."""
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, dict):
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_from(config: str | os.PathLike | ExperimentConfig | None,
                overrides: dict[str, Any]) -> ExperimentConfig:
    """A checked config: the defaults (``None``), a YAML file or a config object, with
    Python ``overrides`` (a group's keys as a dict, or dotted names) applied as the
    command line's ``key=value`` would be."""
    values = _dotted(overrides)
    if isinstance(config, ExperimentConfig):
        return with_values(config, values, source="overrides") if values else config
    # JSON is YAML: strings stay strings ("1e-3" too), lists and numbers keep their type.
    return load_config(config, [f"{k}={json.dumps(v)}" for k, v in values.items()])


def run(config: str | os.PathLike | ExperimentConfig | None = None, *,
        callbacks: Sequence = (), start_over: bool = False, resume_anyway: bool = False,
        **overrides: Any):
    """Train from Python as the command does (a rerun resumes; ``start_over`` moves the
    old run aside) and return its ``TrainResult``: ``metrics``, ``paths``, ``run_dir``,
    ``history`` and the trained ``model``. ``callbacks``: Keras callbacks run inside
    tfapp's loop, after its own. This is ``tfapp.train(...)``."""
    cfg = config_from(config, overrides)
    if not logging.getLogger().handlers:  # a notebook: show the run's progress lines
        cli.setup_logging()
    from tfapp.training.driver import train

    return train(cfg, task=get_task(cfg.task), start_over=start_over,
                 resume_anyway=resume_anyway, callbacks=callbacks)


class _CallableModule(types.ModuleType):
    """``tfapp.train(...)`` calls ``run``: importing this module binds it as the package's
    ``train`` attribute, over anything else of that name, so the module itself is made
    callable (the data model's documented way to customise a module: a
    ``types.ModuleType`` subclass set as its ``__class__``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return run(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
