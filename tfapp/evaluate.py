"""Evaluate an exported classifier on a labelled file (a tagger on a tagged one, a
generator on text: perplexity and token accuracy).

    python -m tfapp.evaluate --model runs/classifier --data test.csv
    python -m tfapp.evaluate --model runs/ner --data test.conll
    python -m tfapp.evaluate --model runs/generator --data test.txt
    python -m tfapp.evaluate --model runs/classifier --data test.csv --keep id --output rows.csv
Columns, format and label handling default to the run's own params.yaml; override them
with --text-column / --text-pair-column / --label-column / --format. --output also writes
each row's prediction next to its gold label (a tagger: words, tags and gold tags), in
part files as ``predict --output`` writes them; --keep carries a classifier's input
columns (an id) into it.

There is no --shard: the metrics count every row in one process (docs/serving.md says
why).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from types import SimpleNamespace

from tfapp import cli
from tfapp.config import ConfigError
from tfapp.parts import Output, keep_columns
from tfapp.run_layout import RunLayout
from tfapp.serving import EVALUATE, Evaluation
from tfapp.tasks import load_export

import click

# The config keys evaluate takes as flags: its errors name the flag, not the key.
_FLAGS = {"data.test_files": "--data", "data.text_column": "--text-column",
          "data.text_pair_column": "--text-pair-column",
          "data.label_column": "--label-column", "data.format": "--format",
          "data.on_bad_rows": "--on-bad-rows"}


def _print(evaluation: Evaluation, *, as_json: bool) -> int:
    """The report on stdout (a table, or JSON with the bad rows in it); the bad-row summary
    on stderr."""
    result, report = evaluation.result, evaluation.report
    if report.count:
        result["bad_rows"] = report.to_dict()
    print(json.dumps(result, indent=1) if as_json else evaluation.render(result))
    if report.count and not as_json:
        print(report.summary(), file=sys.stderr)
    return 0


@cli.command("evaluate", __doc__)
@click.option("--model", required=True, help="Run directory or its export/.")
@click.option("--data", required=True,
              help="Labelled file(s): path, glob or gs:// (csv, tsv, jsonl, parquet, ...).")
@click.option("--text-column", help="Default: the run's data.text_column.")
@click.option("--text-pair-column", help="Default: the run's data.text_pair_column.")
@click.option("--label-column", help="Default: the run's data.label_column.")
@click.option("--format",
              type=click.Choice(["auto", "csv", "tsv", "jsonl", "parquet", "text", "tfrecord",
                                "conll"]),
              help="The files' format (default: the run's data.format); each kind of export "
                   "takes those it reads (NER: auto, conll, jsonl) and refuses the rest.")
@click.option("--on-bad-rows", type=click.Choice(["fail", "skip"]),
              help="A row that cannot be read: stop (fail), or leave it out and count it "
                   "(skip); default: the run's data.on_bad_rows.")
@click.option("--output", metavar="OUT",
              help="Also write each row's prediction and gold label: OUT.jsonl, OUT.csv or "
                   "OUT.parquet (a file), or such a name ending in / (a folder of parts).")
@cli.keep_option()
@click.option("--part-rows", type=int, default=10000, show_default=True,
              help="With --output: rows per part file.")
@click.option("--json", is_flag=True, help="Print the report as JSON.")
def command(args: SimpleNamespace) -> int:
    from tfapp.scoring import evaluate_to, refuse_keep_without_output

    if args.part_rows < 1:
        raise ConfigError(f"--part-rows {args.part_rows}: must be at least 1")
    keep = keep_columns(args.keep)
    refuse_keep_without_output(keep, args.output)
    try:
        if args.output:
            Output(args.output, {}).precheck()  # a refusal before the model loads
        # The export's own format (by its marker) reads the data and scores it; the flags
        # are handed over as data config keys, and each format takes those it can honour.
        model = load_export(args.model, EVALUATE)
        flags = {key: getattr(args, key) for key in ("text_column", "text_pair_column",
                                                     "label_column", "format", "on_bad_rows")}
        evaluation = evaluate_to(model, args.data, RunLayout(args.model).params, flags,
                                 args.output, part_rows=args.part_rows, keep=keep)
    except ConfigError as err:
        raise err.in_flag_terms(_FLAGS) from None
    return _print(evaluation, as_json=args.json)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.evaluate")


if __name__ == "__main__":
    sys.exit(main())
