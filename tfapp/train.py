"""Train a model: ``python -m tfapp.train [--config FILE] [key=value ...]``.

With no arguments it fine-tunes the BERT classifier on the demo data shipped with
tfapp, using a tiny BERT that tfapp builds once and loads through TF-Hub.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import SimpleNamespace

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import cli
from tfapp.config import ConfigError, ExperimentConfig
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


if __name__ == "__main__":
    sys.exit(main())
