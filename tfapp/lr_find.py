"""Find a learning rate: ``python -m tfapp.lr_find [--config FILE] [key=value ...]``.

Runs the learning-rate range test (an exponential sweep, Smith 2017) on the experiment's
real model and data pipeline for at most ``optimizer.lr_find_steps`` optimizer steps,
writes a plot of loss vs learning rate with the suggestion marked into the run directory
(``lr_range_test.png`` and ``.json``; ``--output`` elsewhere), and prints the suggestion
with the train command that uses it: the user's config and overrides, learning rate set.
Nothing else of the run directory, and no trained model, is touched; ``train`` takes a run
directory holding only these files as a new run.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import cli
from tfapp.config import ConfigError, ExperimentConfig
from tfapp.run_layout import RunLayout
from tfapp.tasks import get_task

import click


@cli.command(
    "lr-find",
    """Find a learning rate: the LR range test.

    Sweeps the learning rate exponentially from optimizer.lr_find_min to
    optimizer.lr_find_max over at most optimizer.lr_find_steps steps on the real model and
    data, plots loss vs learning rate into the run directory (lr_range_test.png; a train
    run still starts there as a new run) and prints the suggested rate with the train
    command, your config files and overrides kept, that uses it.
    optimizer.learning_rate=auto in train runs the same test first.""",
    config=True)
@click.option("--output", metavar="PNG",
              help="Where to write the plot (default: lr_range_test.png in the run "
                   "directory, output_dir/name); the numbers go next to it as .json.")
def command(cfg: ExperimentConfig, args: SimpleNamespace) -> int:
    out = Path(args.output) if args.output else RunLayout(cfg.run_dir).lr_range_test_png
    if out.suffix.lower() != ".png":
        raise ConfigError(f"--output {out}: give a .png path")
    if args.output and not out.parent.is_dir():
        raise ConfigError(f"--output {out}: folder {out.parent} does not exist")
    # TensorFlow loads only past the config checks.
    from tfapp.training.driver import find_learning_rate
    from tfapp.training.lr_finder import plot_lr_find

    result = find_learning_rate(cfg, task=get_task(cfg.task))
    out.parent.mkdir(parents=True, exist_ok=True)  # the run directory, made only now
    plot_lr_find(result, out, title=f"{cfg.name}: LR range test")
    data = result.save_json(out.with_suffix(".json"))
    print(result.describe())
    print(f"plot: {out}\nnumbers: {data}")
    print("use it: " + suggested_command(args.config, args.overrides, result.suggestion))
    return 0


def suggested_command(configs: str | Sequence[str] | None, overrides: Sequence[str],
                      learning_rate: float) -> str:
    """The train command the user ran lr_find with: the same config file(s) and overrides,
    with ``optimizer.learning_rate`` set to the suggestion (shell-quoted)."""
    files = [configs] if isinstance(configs, str) else list(configs or [])
    kept = [o for o in overrides
            if o.split("=", 1)[0].lstrip("+~") != "optimizer.learning_rate"]
    words = ["python", "-m", "tfapp.train"]
    for f in files:
        words += ["--config", f]
    return shlex.join([*words, *kept, f"optimizer.learning_rate={learning_rate:.3g}"])


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.lr_find")


if __name__ == "__main__":
    sys.exit(main())
