"""Classify raw texts with an exported model, or find their entities with a tagger.

    python -m tfapp.predict --model runs/classifier "great battery life" "broke in a week"
    python -m tfapp.predict --model runs/classifier --input texts.txt --json
    python -m tfapp.predict --model runs/ner "Anna Berg moved to Oslo on 3 May ."
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tfapp import cli, textio
from tfapp.config import ConfigError
from tfapp.serving import PREDICT
from tfapp.tasks import load_export


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfapp.predict", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("texts", nargs="*", help="texts to classify")
    parser.add_argument("--model", required=True, help="run directory or its export/")
    parser.add_argument("--input", help="file with one text per line ('-' = stdin)")
    parser.add_argument("--pair", action="append", default=None,
                        help="second text of a sentence pair (once per text)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per text with every class probability")
    args = parser.parse_intermixed_args(argv)  # texts may follow a flag
    cli.setup_logging()

    def body() -> int:
        texts = list(args.texts) + (_read_lines(args.input) if args.input else [])
        if not texts:
            raise ConfigError("no texts given; pass them as arguments or with --input FILE")
        if args.pair is not None and len(args.pair) != len(texts):
            raise ConfigError(f"--pair given {len(args.pair)} times for {len(texts)} texts")

        # The export's own format (by its marker) says what a prediction prints.
        model = load_export(args.model, PREDICT)
        for line in model.predict_lines(texts, args.pair, as_json=args.json):
            print(line)
        return 0

    return cli.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
