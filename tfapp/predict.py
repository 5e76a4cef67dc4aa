"""Classify texts, or find their entities with a tagger: a few given on the command line,
or every row of files, streamed into an output file.

    tfapp predict --model runs/classifier --data test.csv --keep id --output preds.csv
    tfapp predict --model runs/ner --data 'docs/*.jsonl' --output entities.jsonl
    tfapp predict --model runs/classifier "great battery life" "broke in a week"
    tfapp predict --model runs/classifier --input texts.txt --json

With --data, rows are read as training reads them (csv, tsv, jsonl, text lines, tfrecord,
parquet, a prepared folder; the run's text column unless --text-column says otherwise),
scored in batches and written as they come into part files that appear whole. A rerun
after a kill resumes where it stopped; --shard I/N splits the rows among N processes
writing into one folder (--output OUT/).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from tfapp import cli, textio
from tfapp.config import ConfigError
from tfapp.serving import PREDICT, first_calls
from tfapp.tasks import load_export

import click

# The config keys predict (and beam_predict) take as flags: errors name the flag, not the key.
FLAGS = {"data.text_column": "--text-column", "data.text_pair_column": "--text-pair-column",
          "data.format": "--format", "data.on_bad_rows": "--on-bad-rows"}


def read_input(path: str) -> list[str]:
    """The texts of ``--input PATH``: the non-blank lines of the file (of stdin for '-'),
    stripped; a file that is missing or unreadable is a ConfigError."""
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


def _predict_data(args: SimpleNamespace) -> int:
    """``--data FILES --output OUT``: every row scored into OUT, streaming."""
    from tfapp.scoring import output_flags, run_data, score_files

    if args.texts or args.input or args.pair:
        raise ConfigError("--data reads the texts from files; leave out the TEXT arguments, "
                          "--input and --pair (the pair's column is --text-pair-column)")
    shard, keep = output_flags(args)  # refusals before the model loads
    data = run_data(args.model)
    model = load_export(args.model, PREDICT)
    columns = [args.text_column or getattr(data, "text_column", "text")]
    if model.text_pair:
        columns.append(args.text_pair_column or getattr(data, "text_pair_column", "")
                       or "text_pair")
    elif args.text_pair_column:
        raise ConfigError("--text-pair-column: this model reads one text per row; leave it "
                          "out")
    return score_files(model, args, command="predict", columns=columns, keep=keep,
                       shard=shard, data=data)


@cli.command("predict", __doc__)
@click.argument("texts", nargs=-1, metavar="[TEXT]...")
@click.option("--model", required=True, help="Run directory or its export/.")
@click.option("--data", metavar="FILES",
              help="Rows to score: path, glob, comma-joined, gs://, or a prepared folder.")
@click.option("--text-column", help="With --data: default the run's data.text_column.")
@click.option("--text-pair-column",
              help="With --data, a sentence-pair model: default the run's data.text_pair_column.")
@cli.file_output_options(shard_verb="score",
                         batch_help="rows read and sorted by length together (scored 32 "
                                    "at a time)")
@click.option("--input", help="File with one text per line ('-' = stdin); printed to stdout.")
@click.option("--pair", multiple=True, help="Second text of a sentence pair (once per text).")
@click.option("--json", is_flag=True,
              help="One JSON object per text with every class probability.")
def command(args: SimpleNamespace) -> int:
    cli.check_file_output_counts(args)
    if args.data:
        try:
            return _predict_data(args)
        except ConfigError as err:
            raise err.in_flag_terms(FLAGS) from None
    if args.output or args.keep:
        raise ConfigError("--output and --keep go with --data FILES (rows read from files); "
                          "texts given as arguments or --input are printed")
    texts = list(args.texts) + (read_input(args.input) if args.input else [])
    if not texts:
        raise ConfigError("no texts given; pass them as arguments, with --input FILE, or "
                          "--data FILES --output OUT")
    pairs = list(args.pair) or None
    if pairs is not None and len(pairs) != len(texts):
        raise ConfigError(f"--pair given {len(pairs)} times for {len(texts)} texts")

    # The export's own format (by its marker) says what a prediction prints.
    model = load_export(args.model, PREDICT)
    with first_calls(len(texts)):
        lines = model.predict_lines(texts, pairs, as_json=args.json)
    for line in lines:
        print(line)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.predict")


if __name__ == "__main__":
    sys.exit(main())
