"""Masked-LM domain adaptation: ``python -m tfapp.pretrain --corpus FILE... --hub HUB_DIR
--out NEW_HUB_DIR [key=value ...]``.

Continues BERT's masked-LM pretraining of a tfapp Hub module (``build-bert``,
``tfapp.hub convert`` or an earlier ``pretrain``; ``builtin:tiny`` too) on your texts and
writes a new encoder + preprocessor pair, used as ``model.hub_handle=NEW_HUB_DIR``.

The flags are shorthands for ``task=mlm`` config keys, and the run goes through the same
training loop as ``python -m tfapp.train`` (run directory ``output_dir/name`` with
params.yaml, status.json, TensorBoard logs and backups; rerunning resumes). Any other
override (``runtime.*``, ``optimizer.*``, ``trainer.*``, ``tracking.*``) applies as there.
See docs/hub.md.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import cli
from tfapp.config import ConfigError, ExperimentConfig, MaskedLmConfig, load_config
from tfapp.tasks import get_task
from tfapp.tasks.mlm.task import hub_module_dir

import click

_D = MaskedLmConfig()
_STEPS, _LOG_EVERY = 1000, 100


_OVERRIDE = re.compile(r"^[a-z_]+(\.[a-z_]+)*=")


def _module_seq_length(hub: str) -> int:
    """The module's default sequence length (its tfapp_hub.json), 128 if it has none."""

    _, _, meta = hub_module_dir(hub, "--hub")
    return int(meta.get("default_seq_length", 128))


def _config(args: SimpleNamespace) -> ExperimentConfig:
    """The masked-LM run the flags describe (flags checked first)."""

    for name in ("steps", "batch_size", "log_every"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1")
    if not 0.0 < args.mask_rate < 1.0:
        raise ConfigError(f"--mask-rate {args.mask_rate} must be in (0, 1)")
    log_every = min(args.log_every, args.steps)
    return load_config(None, [
        "task=mlm", f"name=pretrain_{Path(args.out).name}",
        f"model.hub_handle={args.hub}", f"data.train_files={','.join(args.corpus)}",
        f"data.text_column={args.text_column}",
        f"data.seq_length={args.seq_length or _module_seq_length(args.hub)}",
        f"data.batch_size={args.batch_size}", f"runtime.seed={args.seed}",
        f"trainer.max_steps={-(-args.steps // log_every) * log_every}",
        f"trainer.eval_every_steps={log_every}", f"mlm.mask_rate={args.mask_rate}",
        f"mlm.whole_word={args.whole_word_masking}",
        f"mlm.max_predictions={args.max_predictions}", f"mlm.output={args.out}",
        f"mlm.overwrite={args.overwrite}", *args.overrides])


@cli.command(
    "pretrain",
    """Continue masked-LM pretraining of a BERT Hub module on a text corpus.

    15% of tokens chosen, 80/10/10 [MASK]/random/kept, optional whole-word masking;
    inside the resolved distribution strategy; the adapted encoder is exported as a new
    TF-Hub module pair, used as model.hub_handle=NEW_HUB_DIR. The flags are shorthands for
    task=mlm config keys, and the run goes through the same training loop as tfapp train
    (run directory output_dir/name with params.yaml, status.json, TensorBoard logs: mlm_loss
    and masked_accuracy, backups; rerunning resumes). Any other override (runtime.*,
    optimizer.*, trainer.*, tracking.*) applies as there. See docs/hub.md.""")
@click.option("--corpus", multiple=True, required=True, metavar="FILE",
              help="Paths or globs, local or gs://, .gz read too: text files (one text per "
                   "line), .csv/.tsv (see --text-column), .jsonl or .tfrecord; several may "
                   "follow one --corpus.")
@click.option("--text-column", default="text", show_default=True,
              help="Column (csv/tsv) or key (jsonl) holding the text.")
@click.option("--hub", required=True, metavar="HUB_DIR",
              help="Module to adapt: a directory from build-bert/convert/pretrain, or "
                   "builtin:tiny.")
@click.option("--out", required=True, metavar="NEW_HUB_DIR", help="Output directory (new).")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing --out, and train a finished run of it again.")
@click.option("--steps", type=int, default=_STEPS, show_default=True,
              help="Optimizer steps, rounded up to whole --log-every (trainer.max_steps).")
@click.option("--batch-size", type=int, default=_D.data.batch_size, show_default=True,
              help="Sequences per replica per step (data.batch_size).")
@click.option("--seq-length", type=int, default=0,
              help="Tokens per sequence (data.seq_length; default: the module's default "
                   "length).")
@click.option("--mask-rate", type=float, default=_D.mlm.mask_rate, show_default=True,
              help="Share of tokens predicted (mlm.mask_rate).")
@click.option("--whole-word-masking", is_flag=True,
              help="Mask whole words (all their ## pieces) together (mlm.whole_word).")
@click.option("--max-predictions", type=int, default=_D.mlm.max_predictions,
              help="Most predicted tokens per sequence (mlm.max_predictions; default: "
                   "enough for nearly all).")
@click.option("--log-every", type=int, default=_LOG_EVERY, show_default=True,
              help="Steps per TensorBoard point (trainer.eval_every_steps).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of shuffling and masking (runtime.seed).")
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
def command(args: SimpleNamespace) -> int:
    # `--corpus a.txt b.txt runtime.strategy=mirrored`: the files after the first arrive
    # among the arguments; those that look like key=value and are not files are overrides.
    args.corpus = list(args.corpus)
    overrides = []
    for item in args.overrides:
        if _OVERRIDE.match(item) and not Path(item).exists():
            overrides.append(item)
        else:
            args.corpus.append(item)
    args.overrides = overrides
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    argv = click.get_current_context().meta.get("tfapp.argv")

    def body() -> int:
        cfg = _config(args)
        from tfapp.training.driver import train

        # A finished run: train it again (the old one is moved aside).
        result = train(cfg, task=get_task(cfg.task), start_over=args.overwrite)
        print("\n".join(result.lines))
        print(f"run directory: {result.run_dir}; TensorBoard: tensorboard --logdir "
              f"{result.run_dir}")
        return 0

    return cli.run_main(body, resume=lambda: cli.resume_line(
        "tfapp.pretrain", argv, _config(args).run_dir))


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.pretrain")


if __name__ == "__main__":
    sys.exit(main())
