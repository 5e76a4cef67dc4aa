"""Masked-LM domain adaptation: ``python -m tfapp.pretrain --corpus FILE... --hub HUB_DIR
--out NEW_HUB_DIR [key=value ...]``.

Continues BERT's masked-LM pretraining of a tfapp Hub module (``build-bert``,
``tfapp.hub convert`` or an earlier ``pretrain``; ``builtin:tiny`` too) on your texts and
writes a new encoder + preprocessor pair, used as ``model.hub_handle=NEW_HUB_DIR``.
``runtime.*`` (strategy, precision), ``optimizer.*`` (learning rate, schedule) and
``trainer.jit_compile``/``trainer.steps_per_execution`` overrides apply as in
``python -m tfapp.train``. See docs/hub.md.
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
from tfapp.hub.mlm import MlmParams

_D = MlmParams()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tfapp.pretrain",
        description="Continue masked-LM pretraining (15% of tokens chosen, 80/10/10 "
                    "[MASK]/random/kept, optional whole-word masking) of a BERT Hub module on "
                    "a text corpus, inside the resolved distribution strategy, and export the "
                    "adapted encoder as a new TF-Hub module pair. TensorBoard: mlm_loss, "
                    "masked_accuracy under --logdir.")
    p.add_argument("--corpus", nargs="+", required=True, metavar="FILE",
                   help="paths or globs, local or gs://, .gz read too: text files (one text "
                        "per line), .csv/.tsv (see --text-column), .jsonl or .tfrecord")
    p.add_argument("--text-column", default="text",
                   help="column (csv/tsv) or key (jsonl) holding the text (default: text)")
    p.add_argument("--hub", required=True, metavar="HUB_DIR",
                   help="module to adapt: a directory from build-bert/convert/pretrain, or "
                        "builtin:tiny")
    p.add_argument("--out", required=True, metavar="NEW_HUB_DIR", help="output directory (new)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--steps", type=int, default=_D.steps,
                   help=f"optimizer steps (default {_D.steps})")
    p.add_argument("--batch-size", type=int, default=_D.batch_size,
                   help=f"sequences per replica per step (default {_D.batch_size})")
    p.add_argument("--seq-length", type=int, default=_D.seq_length,
                   help="tokens per sequence (default: the module's default length)")
    p.add_argument("--mask-rate", type=float, default=_D.mask_rate,
                   help=f"share of tokens predicted (default {_D.mask_rate})")
    p.add_argument("--whole-word-masking", action="store_true",
                   help="mask whole words (all their ## pieces) together")
    p.add_argument("--max-predictions", type=int, default=_D.max_predictions,
                   help="most predicted tokens per sequence (default: enough for nearly all)")
    p.add_argument("--log-every", type=int, default=_D.log_every,
                   help=f"steps per TensorBoard point (default {_D.log_every})")
    p.add_argument("--seed", type=int, default=_D.seed,
                   help="seed of shuffling and masking (default 0)")
    p.add_argument("--logdir", metavar="DIR",
                   help="TensorBoard directory (default: runs/pretrain/<NEW_HUB_DIR name>)")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="runtime.*, optimizer.*, trainer.jit_compile, "
                        "trainer.steps_per_execution, e.g. optimizer.learning_rate=1e-4")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


_OVERRIDE = re.compile(r"^[a-z_]+\.[a-z_.]+=")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # `--corpus a.txt runtime.strategy=mirrored`: nargs="+" swallows the trailing overrides;
    # hand back those that look like key=value and are not files.
    for item in list(args.corpus):
        if _OVERRIDE.match(item) and not Path(item).exists():
            args.corpus.remove(item)
            args.overrides.append(item)
    cli.setup_logging(args.verbose)
    logging.getLogger("tensorflow").setLevel(logging.WARNING)

    def body() -> int:
        from tfapp.config import ConfigError, load_config
        from tfapp.hub.builder import read_corpus
        from tfapp.hub.mlm import continue_pretraining

        cfg = load_config(None, args.overrides)
        for name in ("steps", "batch_size", "log_every"):
            if getattr(args, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1")
        params = MlmParams(steps=args.steps, batch_size=args.batch_size,
                           seq_length=args.seq_length, mask_rate=args.mask_rate,
                           whole_word=args.whole_word_masking,
                           max_predictions=args.max_predictions, log_every=args.log_every,
                           seed=args.seed)
        if not 0.0 < params.mask_rate < 1.0:
            raise ConfigError(f"--mask-rate {params.mask_rate} must be in (0, 1)")
        texts = read_corpus(args.corpus, text_column=args.text_column,
                            on_bad_rows=cfg.data.on_bad_rows)
        logdir = args.logdir or Path("runs") / "pretrain" / Path(args.out).name
        summary = continue_pretraining(texts, args.hub, args.out, params, cfg, logdir=logdir,
                                       overwrite=args.overwrite)
        h = summary["history"]
        print(f"masked-LM: {summary['steps']} steps on {len(texts)} texts; mlm_loss "
              f"{h['mlm_loss'][0]:.3f} -> {h['mlm_loss'][-1]:.3f}, masked_accuracy "
              f"{h['masked_accuracy'][0]:.3f} -> {h['masked_accuracy'][-1]:.3f}")
        print(f"TensorBoard: {logdir}")
        print(f"use it with: model.hub_handle={args.out}")
        return 0

    return cli.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
