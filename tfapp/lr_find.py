"""Find a learning rate: ``python -m tfapp.lr_find [--config FILE] [key=value ...]``.

Runs the learning-rate range test (an exponential sweep, Smith 2017) on the experiment's
real model and data pipeline for at most ``optimizer.lr_find_steps`` optimizer steps,
writes a plot of loss vs learning rate with the suggestion marked, and prints the
suggestion. The run directory and any trained model are left untouched.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import cli
from tfapp.config import ConfigError, ExperimentConfig
from tfapp.tasks import get_task

import click


@cli.command(
    "lr-find",
    """Find a learning rate: the LR range test.

    Sweeps the learning rate exponentially from optimizer.lr_find_min to
    optimizer.lr_find_max over at most optimizer.lr_find_steps steps on the real model and
    data, plots loss vs learning rate and prints the suggested rate. Leaves the run
    directory untouched. optimizer.learning_rate=auto in train runs the same test first.""",
    config=True)
@click.option("--output", metavar="PNG",
              help="Where to write the plot (default: lr_find_<name>.png in the current "
                   "directory); the numbers go next to it as .json.")
def command(cfg: ExperimentConfig, args: SimpleNamespace) -> int:
    out = Path(args.output or f"lr_find_{cfg.name}.png")
    if out.suffix.lower() != ".png":
        raise ConfigError(f"--output {out}: give a .png path")
    if not out.parent.is_dir():
        raise ConfigError(f"--output {out}: folder {out.parent} does not exist")
    # TensorFlow loads only past the config checks.
    from tfapp.training.driver import find_learning_rate
    from tfapp.training.lr_finder import plot_lr_find

    result = find_learning_rate(cfg, task=get_task(cfg.task))
    plot_lr_find(result, out, title=f"{cfg.name}: LR range test")
    data = result.save_json(out.with_suffix(".json"))
    print(result.describe())
    print(f"plot: {out}\nnumbers: {data}")
    config = "".join(f" --config {path}" for path in args.config)
    print(f"use it: python -m tfapp.train{config} "
          f"optimizer.learning_rate={result.suggestion:.3g}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.lr_find")


if __name__ == "__main__":
    sys.exit(main())
