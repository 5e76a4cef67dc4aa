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

import json
import logging
import sys
import time
from collections.abc import Sequence
from types import SimpleNamespace

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import cli
from tfapp.config import ConfigError
from tfapp.hub.builder import BuildParams, build_bert_hub, read_corpus
from tfapp.hub.convert import convert_hf_bert
from tfapp.hub.handles import resolve_hub_handle
from tfapp.models.bert_config import BertConfig

import click

CORPUS_HELP = ("Paths or globs, local or gs://, .gz read too: text files (one text per line), "
               ".csv/.tsv (see --text-column), .jsonl or .tfrecord; several may follow one "
               "--corpus.")


@click.group("hub", cls=cli.Group, help="""Build, convert and resolve TF-Hub BERT modules.

    `build-bert` learns a WordPiece vocab and builds a random-init BERT, `convert` turns a
    Hugging Face BERT checkpoint into the same pair of modules, `resolve` prints what a
    handle resolves to. See docs/hub.md.""")
def group() -> None:
    # SavedModel writes log "Assets written to ..." at INFO for every module; not news.
    logging.getLogger("tensorflow").setLevel(logging.WARNING)


def _corpus(args: SimpleNamespace) -> list[str]:
    """--corpus a b c: click's options take one value each; the files after the first
    arrive as the command's arguments."""
    return [*args.corpus, *args.more_corpus]


@group.add_command
@cli.command("build-bert", """Random-init BERT + WordPiece vocab -> TF-Hub modules.

    Learns a WordPiece vocab from a corpus, builds a randomly initialised BERT and exports
    OUT/encoder (reusable SavedModel), OUT/preprocessor, OUT/vocab.txt and
    OUT/tfapp_hub.json.""")
@click.option("--corpus", multiple=True, required=True, metavar="FILE", help=CORPUS_HELP)
@click.argument("more_corpus", nargs=-1, metavar="[FILE]...")
@click.option("--text-column", default="text", show_default=True,
              help="Column (csv/tsv) or key (jsonl) holding the text.")
@click.option("--out", required=True, metavar="DIR", help="Output directory (new).")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@click.option("--layers", type=int, default=2, show_default=True, help="Transformer layers.")
@click.option("--hidden", type=int, default=128, show_default=True, help="Hidden width.")
@click.option("--heads", type=int, default=2, show_default=True, help="Attention heads.")
@click.option("--intermediate", type=int, default=256, show_default=True,
              help="Feed-forward width.")
@click.option("--max-positions", type=int, default=512, show_default=True,
              help="Longest sequence the position embedding covers.")
@click.option("--vocab-size", type=int, default=4000, show_default=True,
              help="Target WordPiece vocab size; small corpora give fewer.")
@click.option("--lower-case/--no-lower-case", default=True, show_default=True,
              help="Lower-case and strip accents: an uncased model.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Weight initialisation seed.")
@click.option("--dropout", type=float, default=0.1, show_default=True,
              help="Dropout inside the encoder while fine-tuning.")
@click.option("--seq-length", type=int, default=128, show_default=True,
              help="Default sequence length of the preprocessor.")
@click.option("--whole-words", is_flag=True,
              help="A vocabulary of whole words only (no subword pieces): a word the corpus "
                   "does not hold is one [UNK]. For a small model trained from scratch.")
def build_bert(args: SimpleNamespace) -> int:
    return _build(args)


@group.add_command
@cli.command("convert", """Hugging Face BERT checkpoint -> TF-Hub modules.

    Converts a Hugging Face BERT checkpoint directory (config.json, model.safetensors,
    vocab.txt, tokenizer_config.json) into the same OUT/encoder + OUT/preprocessor pair
    build-bert writes. Reads safetensors only: pickle checkpoints (pytorch_model.bin) are
    refused.""")
@click.option("--from", "src", required=True, metavar="DIR",
              help="Hugging Face checkpoint directory (save_pretrained layout).")
@click.option("--out", required=True, metavar="DIR", help="Output directory (new).")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@click.option("--lower-case/--no-lower-case", default=None,
              help="Override the casing read from tokenizer_config.json.")
@click.option("--seq-length", type=int, default=None,
              help="Default sequence length of the preprocessor (default: 128, or the "
                   "model's max_position_embeddings if shorter).")
def convert(args: SimpleNamespace) -> int:
    return _convert(args)


@group.add_command
@cli.command("resolve", "Print the encoder and preprocessor a handle resolves to.")
@click.argument("handle")
def resolve(args: SimpleNamespace) -> int:
    """HANDLE: builtin:tiny, a local directory, a URL or gs:// path."""
    return _resolve(args)


command = group


def _build(args: SimpleNamespace) -> int:

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
                         seq_length=args.seq_length, whole_words=args.whole_words)
    start = time.monotonic()
    texts = read_corpus(_corpus(args), text_column=args.text_column)
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


def _convert(args: SimpleNamespace) -> int:

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


def _resolve(args: SimpleNamespace) -> int:

    encoder, preprocessor = resolve_hub_handle(args.handle)
    print(f"encoder: {encoder}")
    print(f"preprocessor: {preprocessor or '(none; set model.hub_preprocessor)'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(group, argv, "python -m tfapp.hub")


if __name__ == "__main__":
    sys.exit(main())
