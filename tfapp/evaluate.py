"""Evaluate an exported classifier on a labelled file (a tagger on a tagged one, a
generator on text: perplexity and token accuracy).

    python -m tfapp.evaluate --model runs/classifier --data test.csv
    python -m tfapp.evaluate --model runs/ner --data test.conll
    python -m tfapp.evaluate --model runs/generator --data test.txt
Columns, format and label handling default to the run's own params.yaml; override them
with --text-column / --text-pair-column / --label-column / --format.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from tfapp import cli
from tfapp.config import ConfigError
from tfapp.run_layout import RunLayout
from tfapp.serving import EVALUATE, Evaluation
from tfapp.tasks import load_export

# The data keys evaluate takes as flags: its errors name the flag, not the config key.
_FLAGS = {"set data.on_bad_rows=skip": "pass --on-bad-rows skip",
          "data.test_files": "--data", "data.text_pair_column":
          "--text-pair-column", "data.text_column": "--text-column",
          "data.label_column": "--label-column", "data.format": "--format"}


def _in_flag_terms(err: ConfigError) -> ConfigError:
    message = str(err)
    for key, flag in _FLAGS.items():
        message = message.replace(key, flag)
    return type(err)(message)


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfapp.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="run directory or its export/")
    parser.add_argument("--data", required=True,
                        help="labelled file(s): path, glob or gs:// (csv, tsv, jsonl, ...)")
    parser.add_argument("--text-column")
    parser.add_argument("--text-pair-column")
    parser.add_argument("--label-column")
    parser.add_argument("--format", choices=("auto", "csv", "tsv", "jsonl", "text", "tfrecord",
                                             "conll"),
                        help="the files' format; each kind of export takes those it reads "
                             "(NER: auto, conll, jsonl) and refuses the rest")
    parser.add_argument("--on-bad-rows", choices=("fail", "skip"),
                        help="a row that cannot be read: stop (fail), or leave it out and "
                             "count it (skip); default: the run's data.on_bad_rows")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    cli.setup_logging()

    def body() -> int:
        try:
            return evaluate()
        except ConfigError as err:
            raise _in_flag_terms(err) from None

    def evaluate() -> int:
        # The export's own format (by its marker) reads the data and scores it; the flags
        # are handed over as data config keys, and each format takes those it can honour.
        model = load_export(args.model, EVALUATE)
        flags = {key: getattr(args, key) for key in ("text_column", "text_pair_column",
                                                     "label_column", "format", "on_bad_rows")}
        return _print(model.evaluate(args.data, RunLayout(args.model).params, flags),
                      as_json=args.json)

    return cli.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
