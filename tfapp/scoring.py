"""Score input rows with an export, streaming: ``predict --data FILES --output OUT``.

The rows (``tfapp.data.input.input_rows``) are read on a tf.data thread, in batches that never
straddle a part, prefetched while the model scores the batch before; the model's
predictions (``ExportedModel.predict_rows``) and the kept columns are written part by
part (``tfapp.parts``) as they come. Memory holds a few batches and one part, whatever the
input's size.

The batches carry only the texts as tensors; what goes with them (each row's kept
columns, the bad rows, which part they belong to) waits on the Python side, keyed by
the batch's number, until the main loop takes the batch.

``--shard I/N``: part ``k`` belongs to process ``k % N``. Each process reads the whole
input (reading is a small cost beside the model) and scores only its parts, so N
processes on one folder write every row once, whatever the number of input files.

``output_flags`` and ``score_files`` are the ``--data FILES --output OUT`` side of a
command (``predict``; ``generate``, whose model is its decoder behind ``predict_rows``):
the flags checked, the job that a rerun must match, the progress line and the summary.
``evaluate_to`` is ``evaluate``'s (the command's and the Python API's): the export's own
streaming evaluation, its per-row predictions written to the same kind of output.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tfapp.config import load_config
from tfapp.data.formats.files import resolve_files
from tfapp.data.input.input_rows import InputRows, describe_files, describe_input
from tfapp.data.rows.bad_rows import BadRowPolicy, BadRowReport
from tfapp.data.rows.spec import Row
from tfapp.errors import ConfigError, Setting
from tfapp.parts import Output, RowParts, keep_columns
from tfapp.progress import Progress
from tfapp.run_layout import RunLayout

__all__ = ["Batch", "Batches", "Summary", "evaluate_to", "model_identity", "output_flags",
           "parse_shard", "predictions", "refuse_keep_without_output",
           "refuse_kept_outputs", "run_data", "score_files",
           "score_to", "scored_rows"]

log = logging.getLogger("tfapp")

#: rows per part file: what a kill can cost, and what a rerun skips at once
PART_ROWS = 10000
#: rows read and sorted by length together
BATCH = 256
#: rows per model call (of a batch sorted by length)
CALL = 32


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` of ``--shard`` as (I, N); one line when it is not that."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise ConfigError(f"--shard {text}: give I/N with 0 <= I < N, e.g. --shard 0/4 in the "
                          "first of four processes")
    return int(m.group(1)), int(m.group(2))


@dataclass
class Batch:
    """One batch of rows of one part: their texts (columns of ``texts``, one list per model
    input), kept columns, the bad rows among them, and whether the part ends with it.
    ``position``: the input records passed when it was cut; ``error``: what stopped the
    reading (raised by the consumer, in its own thread)."""

    part: int
    texts: list[list[str]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    bad: list[Row] = field(default_factory=list)
    last: bool = False
    position: int = 0
    error: Exception | None = None


class Batches:
    """The records of ``rows`` as ``Batch``es of at most ``batch_size`` rows, cut at part
    boundaries (``part_rows`` records each), leaving out the parts in ``skip`` and those
    of other shards. A part's last batch says so (``last``), also when all its rows were
    bad or it is the input's end. ``records``: the input records passed (all of them, once
    iterated to the end)."""

    def __init__(self, rows: InputRows, *, batch_size: int, part_rows: int, skip: set[int],
                 shard: tuple[int, int] = (0, 1)):
        self.rows, self.batch_size, self.part_rows = rows, batch_size, part_rows
        self.skip, self.shard = skip, shard
        self.records = 0

    def __iter__(self) -> Iterator[Batch]:
        index, count = self.shard
        pending: Batch | None = None
        for number, record in enumerate(self.rows):
            self.records = number + 1
            part = number // self.part_rows
            if pending is not None and (part != pending.part
                                        or len(pending.kept) >= self.batch_size):
                pending.last = part != pending.part
                yield pending
                pending = None
            if part % count != index or part in self.skip:
                continue
            if pending is None:
                pending = Batch(part, [[] for _ in self.rows.columns])
            pending.position = number + 1
            if record.problem is not None:
                pending.bad.append(record)
                continue
            for column, text in zip(pending.texts, record.values, strict=True):
                column.append(text)
            pending.kept.append(record.kept)
        if pending is not None:
            pending.last = True
            yield pending


@dataclass
class Summary:
    """What a scoring run did: rows written, parts written now and before, the input
    records, and whether the output is complete (other shards may still be at work)."""

    rows: int
    parts_written: int
    parts_before: int
    records: int
    complete: bool
    report: BadRowReport


class _Feed:
    """``Batches`` behind tf.data: ``__call__`` is the generator tf.data runs on its
    thread, yielding each batch's number and texts; the rest of the batch waits in
    ``waiting`` for the consumer."""

    def __init__(self, source: Batches, inputs: int):
        self.source, self.inputs = source, inputs
        self.waiting: dict[int, Batch] = {}

    def __call__(self):
        import numpy as np

        number = 0
        try:
            for batch in self.source:
                self.waiting[number] = batch
                yield number, tuple(np.array([t.encode() for t in c], dtype=object)
                                    for c in batch.texts)
                number += 1
        except Exception as err:  # noqa: BLE001  (handed to the consumer's thread)
            self.waiting[number] = Batch(-1, [[] for _ in range(self.inputs)], error=err)
            yield number, tuple(np.zeros([0], object) for _ in range(self.inputs))


def _scored(model: Any, source: Batches, policy: BadRowPolicy
            ) -> Iterator[tuple[Batch, list[dict[str, Any]]]]:
    """Each batch of ``source`` and the model's predictions of its rows (the kept columns
    first), read ahead on a tf.data thread; bad rows go to ``policy`` in input order."""
    import tensorflow as tf

    inputs = len(source.rows.columns)
    feed = _Feed(source, inputs)
    text = tf.TensorSpec([None], tf.string)
    dataset = tf.data.Dataset.from_generator(
        feed, output_signature=(tf.TensorSpec([], tf.int64), (text,) * inputs)).prefetch(2)
    for number, texts in dataset:
        batch = feed.waiting.pop(int(number))
        if batch.error is not None:
            raise batch.error
        for bad in batch.bad:
            policy(bad.file, bad.line, bad.problem)
        yield batch, scored_rows(model, texts, batch.kept) if batch.kept else []


def scored_rows(model: Any, texts: Sequence[Any], kept: list[dict[str, Any]]
                ) -> list[dict[str, Any]]:
    """The output rows of one batch: each row's ``kept`` columns, then its prediction
    (``model.predict_rows``, called as ``_by_length`` does). ``texts``: one column per
    model input (a string tensor ``[n]`` or a list of str). What ``predict --data`` writes
    and what the Beam model handler (``tfapp.beam_inference``) yields, so the two agree."""
    import tensorflow as tf

    columns = tuple(tf.convert_to_tensor(c, tf.string) for c in texts)
    predictions = _by_length(model, columns)
    return [{**k, **p} for k, p in zip(kept, predictions, strict=True)]


def _by_length(model: Any, texts: tuple) -> list[dict[str, Any]]:
    """``model.predict_rows`` of a batch's texts, called on slices of ``CALL`` rows taken
    in order of length (characters: what is known before tokenising), and returned in
    input order. An export computes a call only as far as its longest row, as Hugging
    Face's pipeline pads each batch to its longest, so similar lengths together pad less."""
    import numpy as np
    import tensorflow as tf

    size = tf.strings.length(texts[0])
    for more in texts[1:]:
        size += tf.strings.length(more)
    order = np.argsort(size.numpy(), kind="stable")
    out: list[dict[str, Any]] = [{}] * len(order)
    for start in range(0, len(order), CALL):
        rows = order[start:start + CALL]
        taken = [tf.gather(t, rows) for t in texts]
        for i, p in zip(rows, model.predict_rows(taken[0], taken[1] if len(taken) > 1 else None),
                        strict=True):
            out[i] = p
    return out


def predictions(model: Any, rows: InputRows, *, batch_size: int = BATCH, mode: str = "fail",
                report: BadRowReport | None = None) -> Iterator[dict[str, Any]]:
    """The prediction of every row of ``rows``, in order, one dict each (the kept columns
    and ``model.predict_rows``'s keys): what ``predict --data`` writes, as an iterator
    (the Python API's ``Predictor.predict`` of files)."""
    report = BadRowReport() if report is None else report
    policy = BadRowPolicy(mode, report, "input", skip_option="on_bad_rows='skip'")
    source = Batches(rows, batch_size=batch_size, part_rows=1 << 62, skip=set())
    for _, scored in _scored(model, source, policy):
        yield from scored


def score_to(model: Any, rows: InputRows, out: Output, *, batch_size: int = BATCH,
             part_rows: int = PART_ROWS, shard: tuple[int, int] = (0, 1), mode: str = "fail",
             progress: Progress | None = None, what: str = "predict") -> Summary:
    """Score every row of ``rows`` of this ``shard`` with ``model`` (an
    ``ExportedModel``, or anything with its ``predict_rows``) into ``out``, skipping the
    parts already there; bad rows stop the run (``mode="fail"``: one line naming
    file:line) or are left out and counted. ``what``: the command, for the log."""
    done = out.open(sole_writer=shard[1] == 1)
    report = BadRowReport()
    if out.complete:
        return Summary(0, 0, 0, 0, True, report)
    policy = BadRowPolicy(mode, report, "input")  # its data.on_bad_rows: --on-bad-rows
    source = Batches(rows, batch_size=batch_size, part_rows=part_rows, skip=done, shard=shard)
    scored = written = 0
    buffer: list[dict[str, Any]] = []
    for batch, predicted in _scored(model, source, policy):
        buffer.extend(predicted)
        scored += len(predicted)
        if batch.last:
            out.write(batch.part, buffer)
            buffer, written = [], written + 1
        if progress is not None:
            progress.update(scored, batch.position)
    if progress is not None:
        progress.close()
    records = source.records
    complete = out.finish(math.ceil(records / part_rows))
    if report.count:
        log.warning("%s: %s", what, report.summary())
    return Summary(scored, written, len(done), records, complete, report)


def model_identity(model: Any) -> dict[str, Any]:
    """The model part of an output's job (``parts.Output``): the export's resolved path
    and the size of its graph, so a rerun resumes only with the same export, and one
    written again in place (another size) is not taken for it."""
    export = model.path.resolve()
    return {"model": str(export), "model_bytes": (export / "saved_model.pb").stat().st_size}


def evaluate_to(model: Any, data: str, params: Path, flags: dict[str, Any],
                output: str | None = None, *, part_rows: int = PART_ROWS,
                keep: Sequence[str] = ()) -> Any:
    """``model.evaluate`` of the files ``data`` (an ``Evaluation``); with ``output``
    (``OUT.jsonl|.csv|.parquet``, or such a folder ``OUT/``) its per-row predictions and
    gold labels or tags are written there as they are scored, in parts of ``part_rows``
    rows, as ``predict --output`` writes, each row led by its ``keep`` columns. The
    output's job is the model, the input files, ``flags`` and ``keep``: a rerun after a
    kill writes only the parts that are missing, another job's output is refused."""
    keep = list(keep)
    refuse_keep_without_output(keep, output)
    if output is None:
        return model.evaluate(data, params, flags)
    Output(output, {}).precheck()
    refuse_kept_outputs(keep, model.evaluation_columns, "that evaluate writes")
    files = resolve_files(data, Setting("data.test_files"))
    sink = RowParts(Output(output, {
        **model_identity(model),
        "input": {"files": describe_files(files),
                  "flags": {k: v for k, v in sorted(flags.items()) if v is not None},
                  "keep": keep},
        "part_rows": part_rows}), part_rows)
    evaluation = model.evaluate(data, params, flags, rows=sink.add, keep=keep)
    sink.close()
    return evaluation


def refuse_kept_outputs(keep: Sequence[str], columns: Sequence[str], noun: str) -> None:
    """One line when ``--keep`` names one of the ``columns`` the command writes itself
    (``noun``: whose they are, "of the prediction"): a row cannot hold both."""
    taken = [c for c in keep if c in columns]
    if taken:
        raise ConfigError(f"--keep {','.join(keep)}: '{taken[0]}' is a column {noun} "
                          f"({', '.join(columns)}); rename that input column, or leave it "
                          "out of --keep")


def refuse_keep_without_output(keep: Sequence[str], output: str | None) -> None:
    """evaluate's ``--keep`` names columns of the per-row output: nothing to keep them in
    without ``--output`` (checked by the command before its model loads, and here for the
    Python API)."""
    if keep and output is None:
        raise ConfigError(f"--keep {','.join(keep)}: kept columns go into the per-row output; "
                          "give --output OUT too")


def run_data(model_dir: str) -> Any | None:
    """The run's data config (its columns, format, bad-row mode), None without params.yaml
    (an export directory given alone)."""
    params = RunLayout(model_dir).params
    return load_config(params).data if params.is_file() else None


def output_flags(args: SimpleNamespace) -> tuple[tuple[int, int], list[str]]:
    """(shard, kept columns) of ``--data ... --output OUT``'s flags, checked, and the
    refusals of ``--output`` that need no job: all before a model loads."""
    if not args.output:
        raise ConfigError("--data needs --output OUT (.jsonl, .csv or .parquet; OUT/ for a "
                          "folder of part files)")
    shard = parse_shard(args.shard)
    if shard[1] > 1 and not args.output.endswith(("/", os.sep)):
        raise ConfigError(f"--shard {args.shard}: processes share a folder of part files; give "
                          f"--output {args.output}/ (a folder)")
    keep = keep_columns(args.keep)
    Output(args.output, {}).precheck()
    return shard, keep


def score_files(model: Any, args: SimpleNamespace, *, command: str, columns: list[str],
                keep: list[str], shard: tuple[int, int], data: Any | None,
                job: dict[str, Any] | None = None) -> int:
    """``command --data FILES --output OUT``: every row of ``args.data`` (its ``columns``,
    ``keep`` carried through) scored by ``model.predict_rows`` into ``args.output``, part
    by part, resuming the same job (the model, the input, the part size and what ``job``
    adds: a generator's settings); the summary line on stderr. ``data``: the run's data
    config (the default bad-row mode)."""
    refuse_kept_outputs(keep, model.output_columns, "of the prediction" if command == "predict"
                        else f"that {command} writes")
    rows = InputRows(args.data, columns, keep, fmt=args.format or "auto")
    mode = args.on_bad_rows or getattr(data, "on_bad_rows", "fail")
    out = Output(args.output, {**model_identity(model), "input": describe_input(rows),
                               "part_rows": args.part_rows, **(job or {})})
    progress = Progress(command, rows.estimated_rows(), enabled=not args.quiet)
    summary = score_to(model, rows, out, batch_size=args.batch_size, part_rows=args.part_rows,
                       shard=shard, mode=mode, progress=progress, what=command)
    if out.complete:
        print(f"{command}: {args.output} is already complete (its parts were joined before "
              "the last run stopped)", file=sys.stderr)
        return 0
    line = f"{command}: {summary.rows:,} rows in {summary.parts_written} part(s) -> {args.output}"
    if summary.parts_before:
        line += f" ({summary.parts_before} part(s) were already written)"
    if summary.report.count:
        line += f"; {summary.report.count} bad row(s) skipped"
    if not summary.complete:
        line += "; other shards' parts are not all written yet"
    print(line, file=sys.stderr)
    return 0
