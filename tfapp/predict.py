"""Classify raw texts with an exported model, or find their entities with a tagger.

    python -m tfapp.predict --model runs/classifier "great battery life" "broke in a week"
    python -m tfapp.predict --model runs/classifier --input texts.txt --json
    python -m tfapp.predict --model runs/ner "Anna Berg moved to Oslo on 3 May ."
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tfapp import cli, textio
from tfapp.config import ConfigError
from tfapp.serving import LoadedClassifier, export_kind
from tfapp.tasks.ner.serving import LoadedTagger


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


def _print_entities(model_dir: str, texts: list[str], *, as_json: bool) -> int:
    """Each text, then one line per entity: type, start-end (characters), score, text."""

    for text, found in zip(texts, LoadedTagger(model_dir).entities(texts), strict=True):
        if as_json:
            print(json.dumps({"text": text, "entities": found}, ensure_ascii=False))
            continue
        print(text)
        for e in found:
            print(f"  {e['type']}\t{e['start']}-{e['end']}\t{e['score']:.3f}\t{e['text']}")
    return 0


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

        if export_kind(args.model) == "ner":
            return _print_entities(args.model, texts, as_json=args.json)
        model = LoadedClassifier(args.model)
        probs, labels = model.predict(texts, args.pair)
        for i, (text, label) in enumerate(zip(texts, labels, strict=True)):
            if args.json:
                print(json.dumps({"text": text, "label": label,
                                  "probabilities": dict(zip(model.label_names,
                                                            map(float, probs[i]),
                                                            strict=True))}))
            else:
                print(f"{label}\t{probs[i].max():.3f}\t{text}")
        return 0

    return cli.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
