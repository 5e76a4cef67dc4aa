"""Train a model: ``python -m tfapp.train [--config FILE] [key=value ...]``.

With no arguments it fine-tunes the BERT classifier on the demo data shipped with
tfapp, using a tiny BERT that tfapp builds once and loads through TF-Hub.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import cli
from tfapp.config import ExperimentConfig
from tfapp.tasks import get_task
from tfapp.training.faults import worker_loss_explained


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.config_parser(
        "python -m tfapp.train",
        "Train the experiment a config describes; writes params.yaml, TensorBoard logs, "
        "checkpoints and the exported model into output_dir/name. Train by steps with "
        "trainer.max_steps, trainer.eval_every_steps and trainer.log_every_steps; the run "
        "header (run_header.txt) and lr_schedule.png show the plan before the first step. "
        "Pick a learning rate with python -m tfapp.lr_find, or optimizer.learning_rate=auto.")
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument("--start-over", "--overwrite", dest="start_over", action="store_true",
                        help="start the run again from scratch: the run directory is moved "
                             "to NAME.old-<date>-<time> beside it (nothing is deleted)")
    resume.add_argument("--resume-anyway", action="store_true",
                        help="resume the run's backup under a config that changed since it "
                             "was made (refused without this; never for another task, "
                             "encoder or optimizer, nor for a change of a weight's shape)")

    def body(cfg: ExperimentConfig, args: argparse.Namespace) -> int:
        from tfapp.training.driver import train  # TensorFlow loads only past config checks

        with worker_loss_explained():  # a lost peer: one line and exit 75, not a traceback
            result = train(cfg, task=get_task(cfg.task), start_over=args.start_over,
                           resume_anyway=args.resume_anyway)
        print(result.summary())
        return 0

    return cli.run_config_command(parser, argv, body, resume_module="tfapp.train")


if __name__ == "__main__":
    sys.exit(main())
