"""Score files with an export as an Apache Beam pipeline (RunInference), on any runner.

    python -m tfapp.beam_predict --model runs/classifier --data 'test-*.csv' --keep id \\
        --output preds/part --direct_num_workers 2 --direct_running_mode multi_processing
    python -m tfapp.beam_predict --model gs://b/runs/clf --data 'gs://b/in/*.jsonl' \\
        --output gs://b/out/preds --runner DataflowRunner --project P --region R \\
        --temp_location gs://b/tmp --setup_file ./setup.py

Rows are read as ``predict --data`` reads them (csv, tsv, jsonl, text lines, tfrecord,
parquet; the run's text column unless --text-column says otherwise), a file per worker
at a time, spread over the workers, scored in batches and written as JSONL shards
OUTPUT-SSSSS-of-NNNNN.jsonl, one line per row in no particular order (keep an id):
the values ``tfapp predict`` writes. Flags this command does not know (--runner,
--project, --direct_num_workers, ...) are Beam's pipeline options. apache-beam is the
[beam] extra, in a venv of its own (docs/scale_out.md).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import sys
from collections.abc import Sequence
from types import SimpleNamespace

from tfapp import cli
from tfapp.config import ConfigError
from tfapp.parts import keep_columns
from tfapp.predict import FLAGS
from tfapp.serving import PREDICT
from tfapp.tasks import load_export

import click

SUFFIX = ".jsonl"


def _columns(args: SimpleNamespace, model: object, data: object | None) -> list[str]:
    """The model's input columns: the text's, and the pair's for a sentence-pair model."""
    columns = [args.text_column or getattr(data, "text_column", "text")]
    if getattr(model, "text_pair", False):
        columns.append(args.text_pair_column or getattr(data, "text_pair_column", "")
                       or "text_pair")
    elif args.text_pair_column:
        raise ConfigError("--text-pair-column: this model reads one text per row; leave it "
                          "out")
    return columns


def _refuse_existing(prefix: str) -> None:
    """Nothing of the user's is overwritten: Beam's WriteToText replaces shards of the
    same name, so a prefix that already names files is refused."""
    from apache_beam.io.filesystems import FileSystems

    found = FileSystems.match([prefix + "*"])[0].metadata_list
    if found:
        raise ConfigError(f"--output {prefix}: {found[0].path} is already there; give a new "
                          "prefix (this command never overwrites files)")


def _worker_error(err: Exception) -> str | None:
    """The one-line tfapp error a worker raised (a bad row), from the runner's wrapped
    error text; None when the failure is not tfapp's one-line kind."""
    # In this process Beam raises the worker's own exception (its message extended), from
    # worker processes an error whose text holds the worker's traceback.
    text = f"DataError: {err}" if isinstance(err, ConfigError) else str(err)
    m = re.search(r"(?:DataError|ConfigError): (.+)", text)
    # Beam appends the step: "... [while running 'Read']".
    return re.sub(r"\s*\[while running .*$", "", m.group(1)).strip() if m else None


def _beam_predict(args: SimpleNamespace) -> int:
    from tfapp.beam_inference import ExportModelHandler, local_model, read_file
    from tfapp.data.input.input_rows import InputRows

    import apache_beam as beam
    from apache_beam.ml.inference.base import RunInference
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size {args.batch_size}: must be at least 1")
    keep = keep_columns(args.keep)
    _refuse_existing(args.output)
    # Loaded here once too (from gs://, a local copy): a wrong --model, a pair model
    # without its column or a --keep that takes a prediction's name fail in one line
    # before any worker starts.
    local = local_model(args.model)
    from tfapp.scoring import refuse_kept_outputs, run_data  # TensorFlow: not for --help

    data = run_data(local)
    model = load_export(local, PREDICT)
    columns = _columns(args, model, data)
    refuse_kept_outputs(keep, model.output_columns, "of the prediction")
    rows = InputRows(args.data, columns, keep, fmt=args.format or "auto")
    if rows.manifest is not None:
        raise ConfigError(f"--data {args.data}: a prepared folder; beam_predict reads the raw "
                          "files (csv, tsv, jsonl, text, tfrecord, parquet)")
    fmt, mode = args.format or "auto", args.on_bad_rows or getattr(data, "on_bad_rows", "fail")
    options = PipelineOptions(list(args.pipeline_args), save_main_session=False)
    # Beam's INFO lines (type hints, runner choice, batch sizes) only with -v.
    logging.getLogger("apache_beam").setLevel(logging.INFO if args.verbose else logging.WARNING)
    runner = None
    if options.view_as(StandardOptions).runner is None:
        # Without --runner: the FnApiRunner, the DirectRunner's engine for this pipeline
        # (it honours --direct_num_workers and --direct_running_mode). Beam 2.77's
        # DirectRunner first tries the Prism runner, a binary it downloads from GitHub
        # at the first run (and falls back when it cannot): named, the local run is the
        # same offline and on.
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        runner = FnApiRunner()
    pipeline = beam.Pipeline(runner=runner, options=options)
    _ = (pipeline
         | "Files" >> beam.Create(rows.files)
         # One file per element: Reshuffle hands the files to different workers.
         | "SpreadFiles" >> beam.Reshuffle()
         | "Read" >> beam.FlatMap(read_file, columns, keep, fmt=fmt, mode=mode)
         # A file's rows come out of one reader: spread them before the model.
         | "SpreadRows" >> beam.Reshuffle()
         # The workers load the export where they can read it: --model as given when
         # it is a URL (gs://), else the export folder found here.
         | "Score" >> RunInference(ExportModelHandler(
             args.model if "://" in args.model else str(model.path),
             batch_size=args.batch_size))
         | "Json" >> beam.Map(lambda r: json.dumps(r.inference, ensure_ascii=False))
         | "Write" >> beam.io.WriteToText(args.output, file_name_suffix=SUFFIX))
    try:
        result = pipeline.run()
        result.wait_until_finish()
    except Exception as err:
        line = _worker_error(err)
        if line is None:
            raise
        raise ConfigError(line) from None
    finally:
        if local != args.model:  # the launcher's copy of a gs:// export
            shutil.rmtree(local, ignore_errors=True)
    _report(result, args.output)
    return 0


def _report(result: object, prefix: str) -> None:
    """One line: the rows scored and skipped, from the pipeline's counters (a runner that
    keeps no metrics gives the shards' place only)."""
    from apache_beam.metrics.metric import MetricsFilter

    counts = {}
    try:
        query = result.metrics().query(MetricsFilter().with_namespace("tfapp"))
        for counter in query["counters"]:
            name = counter.key.metric.name
            counts[name] = counts.get(name, 0) + (counter.committed or counter.attempted or 0)
    except (AttributeError, NotImplementedError):
        pass
    line = f"beam_predict: -> {prefix}-*-of-*{SUFFIX}"
    if "rows_read" in counts:
        line = f"beam_predict: {counts['rows_read']:,} rows -> {prefix}-*-of-*{SUFFIX}"
    if counts.get("bad_rows"):
        line += f"; {counts['bad_rows']} bad row(s) skipped"
    print(line, file=sys.stderr)


@cli.command("beam-predict", __doc__)
@click.argument("pipeline_args", nargs=-1, type=click.UNPROCESSED, metavar="[BEAM OPTION]...")
@click.option("--model", required=True, help="Run directory or its export/ (gs:// too).")
@click.option("--data", required=True, metavar="FILES",
              help="Rows to score: path, glob, comma-joined, gs://.")
@click.option("--output", required=True, metavar="PREFIX",
              help="Shards PREFIX-SSSSS-of-NNNNN.jsonl (a new prefix: nothing is "
                   "overwritten).")
@cli.keep_option()
@click.option("--text-column", help="Default: the run's data.text_column.")
@click.option("--text-pair-column",
              help="A sentence-pair model: default the run's data.text_pair_column.")
@click.option("--format", type=click.Choice(["auto", "csv", "tsv", "jsonl", "text", "tfrecord",
                                             "parquet"]),
              help="The files' format (default: from each file's extension).")
@click.option("--on-bad-rows", type=click.Choice(["fail", "skip"]),
              help="A row that cannot be read stops the pipeline (fail) or is left out and "
                   "counted (skip); default: the run's data.on_bad_rows.")
@click.option("--batch-size", type=int, default=256, show_default=True,
              help="The most rows per batch Beam hands the model.")
def command(args: SimpleNamespace) -> int:
    try:
        return _beam_predict(args)
    except ConfigError as err:
        raise err.in_flag_terms(FLAGS) from None


# Beam's own flags (--runner, --project, ...) pass through to PipelineOptions untouched.
command.context_settings = {**command.context_settings, "ignore_unknown_options": True}


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.beam_predict")


if __name__ == "__main__":
    sys.exit(main())
