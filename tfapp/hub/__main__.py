"""``python -m tfapp.hub`` (also ``tfapp hub``): build and inspect TF-Hub BERT modules.

    python -m tfapp.hub build-bert --corpus corpus.txt --out hub/tiny \\
        --layers 2 --hidden 128 --heads 2 --intermediate 256 --vocab-size 4000

writes ``hub/tiny/{encoder,preprocessor,vocab.txt,tfapp_hub.json}``; use it with
``model.hub_handle=hub/tiny`` (the preprocessor is found next to the encoder).

    python -m tfapp.hub resolve builtin:tiny

prints the encoder and preprocessor a handle resolves to (building builtin:tiny once).

    python -m tfapp.hub convert --from hf_checkpoint_dir --out hub/minilm

turns a Hugging Face BERT checkpoint (config.json, model.safetensors, vocab.txt,
tokenizer_config.json) into the same pair of modules (see docs/hub.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp.cli import run_main, setup_logging
from tfapp.config import ConfigError
from tfapp.hub.builder import BuildParams, build_bert_hub, read_corpus
from tfapp.hub.convert import convert_hf_bert
from tfapp.hub.handles import resolve_hub_handle
from tfapp.models.bert_config import BertConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tfapp.hub",
                                     description="Build, convert and resolve TF-Hub BERT modules.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    b = sub.add_parser("build-bert", help="random-init BERT + WordPiece vocab -> TF-Hub modules",
                       description="Learn a WordPiece vocab from a corpus, build a randomly "
                                   "initialised BERT and export OUT/encoder (reusable "
                                   "SavedModel), OUT/preprocessor, OUT/vocab.txt and "
                                   "OUT/tfapp_hub.json.")
    b.add_argument("--corpus", nargs="+", required=True, metavar="FILE",
                   help="paths or globs, local or gs://, .gz read too: text files (one text "
                        "per line), .csv/.tsv (see --text-column), .jsonl or .tfrecord")
    b.add_argument("--text-column", default="text",
                   help="column (csv/tsv) or key (jsonl) holding the text (default: text)")
    b.add_argument("--out", required=True, metavar="DIR", help="output directory (new)")
    b.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    b.add_argument("--layers", type=int, default=2, help="transformer layers (default 2)")
    b.add_argument("--hidden", type=int, default=128, help="hidden width (default 128)")
    b.add_argument("--heads", type=int, default=2, help="attention heads (default 2)")
    b.add_argument("--intermediate", type=int, default=256,
                   help="feed-forward width (default 256)")
    b.add_argument("--max-positions", type=int, default=512,
                   help="longest sequence the position embedding covers (default 512)")
    b.add_argument("--vocab-size", type=int, default=4000,
                   help="target WordPiece vocab size; small corpora give fewer (default 4000)")
    b.add_argument("--lower-case", action=argparse.BooleanOptionalAction, default=True,
                   help="lower-case and strip accents: an uncased model (default: on)")
    b.add_argument("--seed", type=int, default=0, help="weight initialisation seed (default 0)")
    b.add_argument("--dropout", type=float, default=0.1,
                   help="dropout inside the encoder while fine-tuning (default 0.1)")
    b.add_argument("--seq-length", type=int, default=128,
                   help="default sequence length of the preprocessor (default 128)")
    b.add_argument("--quiet", action="store_true", help="print only errors")

    c = sub.add_parser("convert", help="Hugging Face BERT checkpoint -> TF-Hub modules",
                       description="Convert a Hugging Face BERT checkpoint directory "
                                   "(config.json, model.safetensors, vocab.txt, "
                                   "tokenizer_config.json) into the same OUT/encoder + "
                                   "OUT/preprocessor pair build-bert writes. Reads safetensors "
                                   "only: pickle checkpoints (pytorch_model.bin) are refused.")
    c.add_argument("--from", dest="src", required=True, metavar="DIR",
                   help="Hugging Face checkpoint directory (save_pretrained layout)")
    c.add_argument("--out", required=True, metavar="DIR", help="output directory (new)")
    c.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    c.add_argument("--lower-case", action=argparse.BooleanOptionalAction, default=None,
                   help="override the casing read from tokenizer_config.json")
    c.add_argument("--seq-length", type=int, default=None,
                   help="default sequence length of the preprocessor (default: 128, or the "
                        "model's max_position_embeddings if shorter)")
    c.add_argument("--quiet", action="store_true", help="print only errors")

    r = sub.add_parser("resolve", help="print the encoder and preprocessor a handle resolves to")
    r.add_argument("handle", help="builtin:tiny, a local directory, a URL or gs:// path")
    return parser


def _build(args: argparse.Namespace) -> int:

    # Named by their flags here (the model's own checks name BertConfig fields).
    for flag in ("layers", "hidden", "heads", "intermediate", "max_positions", "vocab_size",
                 "seq_length"):
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} {getattr(args, flag)} must be >= 1")
    if args.hidden % args.heads:
        raise ConfigError(f"--hidden {args.hidden} is not divisible by --heads {args.heads}; "
                          "pick a multiple")
    if not 0.0 <= args.dropout < 1.0:
        raise ConfigError(f"--dropout {args.dropout} must be in [0, 1)")

    bert = BertConfig(vocab_size=args.vocab_size, hidden_size=args.hidden,
                      num_layers=args.layers, num_heads=args.heads,
                      intermediate_size=args.intermediate,
                      max_position_embeddings=args.max_positions, dropout=args.dropout,
                      attention_dropout=args.dropout)
    params = BuildParams(bert, lower_case=args.lower_case, seed=args.seed,
                         seq_length=args.seq_length)
    start = time.monotonic()
    texts = read_corpus(args.corpus, text_column=args.text_column)
    out = build_bert_hub(texts, args.out, params, overwrite=args.overwrite)
    if not args.quiet:
        meta = json.loads((out / "tfapp_hub.json").read_text(encoding="utf-8"))
        print(f"built BERT ({bert.num_layers} layers, hidden {bert.hidden_size}, "
              f"{bert.num_heads} heads, vocab {meta['vocab_size']} from {len(texts)} texts, "
              f"{meta['num_parameters']:,} parameters) in {time.monotonic() - start:.1f}s")
        print(f"  encoder:      {out / 'encoder'}")
        print(f"  preprocessor: {out / 'preprocessor'}")
        print(f"  vocab:        {out / 'vocab.txt'}")
        print(f"use it with: model.hub_handle={out}")
    return 0


def _convert(args: argparse.Namespace) -> int:

    start = time.monotonic()
    out = convert_hf_bert(args.src, args.out, lower_case=args.lower_case,
                          seq_length=args.seq_length, overwrite=args.overwrite)
    if not args.quiet:
        meta = json.loads((out / "tfapp_hub.json").read_text(encoding="utf-8"))
        cfg = meta["bert_config"]
        print(f"converted BERT ({cfg['num_layers']} layers, hidden {cfg['hidden_size']}, "
              f"{cfg['num_heads']} heads, vocab {meta['vocab_size']}, "
              f"{'uncased' if meta['lower_case'] else 'cased'}, "
              f"{meta['num_parameters']:,} parameters) in {time.monotonic() - start:.1f}s")
        print(f"  encoder:      {out / 'encoder'}")
        print(f"  preprocessor: {out / 'preprocessor'}")
        print(f"use it with: model.hub_handle={out}")
    return 0


def _resolve(args: argparse.Namespace) -> int:

    encoder, preprocessor = resolve_hub_handle(args.handle)
    print(f"encoder: {encoder}")
    print(f"preprocessor: {preprocessor or '(none; set model.hub_preprocessor)'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging()
    # SavedModel writes log "Assets written to ..." at INFO for every module; not news.
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    commands = {"build-bert": _build, "convert": _convert, "resolve": _resolve}
    return run_main(lambda: commands[args.command](args))


if __name__ == "__main__":
    sys.exit(main())
