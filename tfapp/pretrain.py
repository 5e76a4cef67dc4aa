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

import argparse
import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import cli
from tfapp.config import ConfigError, ExperimentConfig, MaskedLmConfig, load_config
from tfapp.tasks import get_task
from tfapp.tasks.mlm.task import hub_module_dir

_D = MaskedLmConfig()
_STEPS, _LOG_EVERY = 1000, 100


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tfapp.pretrain",
        description="Continue masked-LM pretraining (15% of tokens chosen, 80/10/10 "
                    "[MASK]/random/kept, optional whole-word masking) of a BERT Hub module on "
                    "a text corpus, inside the resolved distribution strategy, and export the "
                    "adapted encoder as a new TF-Hub module pair. TensorBoard: mlm_loss, "
                    "masked_accuracy under the run directory's logs/.")
    p.add_argument("--corpus", nargs="+", required=True, metavar="FILE",
                   help="paths or globs, local or gs://, .gz read too: text files (one text "
                        "per line), .csv/.tsv (see --text-column), .jsonl or .tfrecord")
    p.add_argument("--text-column", default="text",
                   help="column (csv/tsv) or key (jsonl) holding the text (default: text)")
    p.add_argument("--hub", required=True, metavar="HUB_DIR",
                   help="module to adapt: a directory from build-bert/convert/pretrain, or "
                        "builtin:tiny")
    p.add_argument("--out", required=True, metavar="NEW_HUB_DIR", help="output directory (new)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out, and train a finished run of it again")
    p.add_argument("--steps", type=int, default=_STEPS,
                   help=f"optimizer steps, rounded up to whole --log-every (trainer.max_steps; "
                        f"default {_STEPS})")
    p.add_argument("--batch-size", type=int, default=_D.data.batch_size,
                   help=f"sequences per replica per step (data.batch_size; default "
                        f"{_D.data.batch_size})")
    p.add_argument("--seq-length", type=int, default=0,
                   help="tokens per sequence (data.seq_length; default: the module's default "
                        "length)")
    p.add_argument("--mask-rate", type=float, default=_D.mlm.mask_rate,
                   help=f"share of tokens predicted (mlm.mask_rate; default {_D.mlm.mask_rate})")
    p.add_argument("--whole-word-masking", action="store_true",
                   help="mask whole words (all their ## pieces) together (mlm.whole_word)")
    p.add_argument("--max-predictions", type=int, default=_D.mlm.max_predictions,
                   help="most predicted tokens per sequence (mlm.max_predictions; default: "
                        "enough for nearly all)")
    p.add_argument("--log-every", type=int, default=_LOG_EVERY,
                   help=f"steps per TensorBoard point (trainer.eval_every_steps; default "
                        f"{_LOG_EVERY})")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of shuffling and masking (runtime.seed; default 0)")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="any config key, e.g. optimizer.learning_rate=1e-4 "
                        "runtime.strategy=mirrored output_dir=runs name=adapt")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


_OVERRIDE = re.compile(r"^[a-z_]+(\.[a-z_]+)*=")


def _module_seq_length(hub: str) -> int:
    """The module's default sequence length (its tfapp_hub.json), 128 if it has none."""

    _, _, meta = hub_module_dir(hub, "--hub")
    return int(meta.get("default_seq_length", 128))


def _config(args: argparse.Namespace) -> ExperimentConfig:
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


def main(argv: Sequence[str] | None = None) -> int:
    # Flags may come between the overrides (`--out DIR key=value --steps 10 key=value`).
    args = _parser().parse_intermixed_args(argv)
    # `--corpus a.txt runtime.strategy=mirrored`: nargs="+" swallows the trailing overrides;
    # hand back those that look like key=value and are not files.
    for item in list(args.corpus):
        if _OVERRIDE.match(item) and not Path(item).exists():
            args.corpus.remove(item)
            args.overrides.append(item)
    cli.setup_logging(args.verbose)
    logging.getLogger("tensorflow").setLevel(logging.WARNING)

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


if __name__ == "__main__":
    sys.exit(main())
