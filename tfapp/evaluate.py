"""Evaluate an exported classifier on a labelled file (or a tagger on a tagged one).

    python -m tfapp.evaluate --model runs/classifier --data test.csv
    python -m tfapp.evaluate --model runs/ner --data test.conll
Columns, format and label handling default to the run's own params.yaml; override them
with --text-column / --text-pair-column / --label-column / --format.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tfapp import cli
from tfapp.config import ConfigError, DataConfig, load_config
from tfapp.run_layout import RunLayout
from tfapp.serving import LoadedClassifier, export_kind, find_export
from tfapp.tasks.ner.scores import entity_report, format_entity_report
from tfapp.tasks.ner.serving import LoadedTagger, word_tags

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


def _data_config(model: str, args: argparse.Namespace) -> DataConfig:
    params = RunLayout(model).params
    data = load_config(params).data if params.is_file() else DataConfig()
    for flag, key in (("text_column", "text_column"), ("text_pair_column", "text_pair_column"),
                      ("label_column", "label_column"), ("format", "format"),
                      ("on_bad_rows", "on_bad_rows")):
        value = getattr(args, flag)
        if value is not None:
            setattr(data, key, value)
    return data


def _print(result: dict, report: Any, formatter: Callable[[dict], str], *,
           as_json: bool) -> int:
    """The report on stdout (a table, or JSON with the bad rows in it); the bad-row summary
    on stderr."""
    if report.count:
        result["bad_rows"] = report.to_dict()
    print(json.dumps(result, indent=1) if as_json else formatter(result))
    if report.count and not as_json:
        print(report.summary(), file=sys.stderr)
    return 0


def _evaluate_tagger(args: argparse.Namespace) -> int:
    """Entity scores of an exported tagger on tagged CoNLL/JSONL files (the run's
    data.tag_column, data.tag_scheme and data.format, or --format)."""
    from tfapp.data.sources import BadRowReport
    from tfapp.data.tagged import keep_known_tags, read_tagged

    params = RunLayout(args.model).params
    data = load_config(params).data if params.is_file() else load_config(
        None, ["task=ner"]).data
    if args.format in ("auto", "jsonl"):
        data.format = args.format
    if args.on_bad_rows is not None:
        data.on_bad_rows = args.on_bad_rows
    model = LoadedTagger(args.model)
    report = BadRowReport()
    raw = read_tagged(args.data, data, split="test", mode=data.on_bad_rows, report=report)
    sentences = keep_known_tags(raw, model.tag_names, split="test", mode=data.on_bad_rows,
                                report=report, known_from="the model's")
    found = model.entities([" ".join(s.words) for s in sentences])
    result = entity_report([s.tags for s in sentences],
                           [word_tags(s.words, f) for s, f in zip(sentences, found, strict=True)])
    return _print(result, report, format_entity_report, as_json=args.json)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfapp.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="run directory or its export/")
    parser.add_argument("--data", required=True,
                        help="labelled file(s): path, glob or gs:// (csv, tsv, jsonl, ...)")
    parser.add_argument("--text-column")
    parser.add_argument("--text-pair-column")
    parser.add_argument("--label-column")
    parser.add_argument("--format", choices=("auto", "csv", "tsv", "jsonl", "text", "tfrecord"))
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
        from tfapp.data.sources import BadRowReport, LabelVocab, encode_examples, read_examples
        from tfapp.training.metrics import classification_report, format_report

        if export_kind(args.model) == "ner":
            return _evaluate_tagger(args)
        find_export(args.model)  # a clear error before anything slow
        data = _data_config(args.model, args)
        model = LoadedClassifier(args.model)
        multi_label = bool(model.metadata.get("multi_label", data.multi_label))
        data.multi_label = multi_label
        report = BadRowReport()
        raw = read_examples(args.data, data, split="test", mode=data.on_bad_rows, report=report)
        examples = encode_examples(raw, LabelVocab(model.label_names, multi_label),
                                   split="test", mode=data.on_bad_rows, report=report,
                                   known_from="the model")
        probs, _ = model.predict(examples.texts, examples.text_pairs)
        if len(model.label_names) == 2 and not multi_label:
            probs = probs[:, 1:]
        result = classification_report(examples.labels, probs, model.label_names, multi_label)
        return _print(result, report, format_report, as_json=args.json)

    return cli.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
