"""Classify raw texts with an exported model, or find their entities with a tagger.

    python -m tfapp.predict --model runs/classifier "great battery life" "broke in a week"
    python -m tfapp.predict --model runs/classifier --input texts.txt --json
    python -m tfapp.predict --model runs/ner "Anna Berg moved to Oslo on 3 May ."
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from tfapp import cli, textio
from tfapp.config import ConfigError
from tfapp.serving import PREDICT
from tfapp.tasks import load_export

import click


def _read_lines(path: str) -> list[str]:
    """The non-blank lines of ``--input`` (a file, or stdin for '-'), stripped."""
    if path == "-":
        lines = textio.stdin_lines()
    else:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"--input {path}: no such file (give a text file, one text per "
                              "line)")
        try:
            raw = p.read_bytes()
        except OSError as err:
            raise ConfigError(f"--input {path}: cannot read ({err.strerror})") from None
        lines = textio.text_lines(raw, path)
    return [line.strip() for line in lines if line.strip()]


@cli.command("predict", __doc__)
@click.argument("texts", nargs=-1, metavar="[TEXT]...")
@click.option("--model", required=True, help="Run directory or its export/.")
@click.option("--input", help="File with one text per line ('-' = stdin).")
@click.option("--pair", multiple=True, help="Second text of a sentence pair (once per text).")
@click.option("--json", is_flag=True,
              help="One JSON object per text with every class probability.")
def command(args: SimpleNamespace) -> int:
    texts = list(args.texts) + (_read_lines(args.input) if args.input else [])
    if not texts:
        raise ConfigError("no texts given; pass them as arguments or with --input FILE")
    pairs = list(args.pair) or None
    if pairs is not None and len(pairs) != len(texts):
        raise ConfigError(f"--pair given {len(pairs)} times for {len(texts)} texts")

    # The export's own format (by its marker) says what a prediction prints.
    model = load_export(args.model, PREDICT)
    for line in model.predict_lines(texts, pairs, as_json=args.json):
        print(line)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.predict")


if __name__ == "__main__":
    sys.exit(main())
