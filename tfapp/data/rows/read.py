"""The one front end every command reads user rows through.

``iter_rows`` gives the rows of files (``file_formats``) one at a time as ``Row``s, good or
bad, as the files are read (``evaluate``, ``predict --data``, Beam, the corpora of
``build-bert`` and ``pretrain``: ``read_texts``); ``prepare`` reads a file a ``RowBatch``
at a time, through the column-wise fast path where it can (``columnar.fast_rows``) and
``python_rows`` otherwise. Either way a file is parsed by its format's one reader
(``tfapp.data.formats.read``) and a row checked by one set of checks (``spec.convert``).

Tagged sentences (NER) are read in IOB2 from the scheme each file is written in, read
from its tags (a first pass over the file), whatever ``data.tag_scheme`` says
(``tfapp.data.text.tags``): ``tagged_rows`` counts the entities it read, converted (those
``data.tag_scheme`` would have lost) and refused, and ``log_entity_counts`` logs them per
file, so no entity becomes ``O`` silently. A sentence is one row for ``data.on_bad_rows``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence

from tfapp.data.formats.files import TRAIN_FILES, detect_format, resolve_files
from tfapp.data.formats.read import parsed_rows, tagged_sentences
from tfapp.data.rows.bad_rows import SKIP_OPTION, BadRowPolicy, BadRowReport, SourceLog
from tfapp.data.rows.columnar import Batcher, RowBatch
from tfapp.data.rows.names import KnownNames
from tfapp.data.rows.spec import Row, RowSpec, convert, kept_value
from tfapp.data.text.tags import (
    EntityCounts,
    SchemeEvidence,
    begun,
    from_spans,
    read_entities,
)
from tfapp.errors import DataError, Setting

__all__ = ["file_formats", "iter_rows", "log_entity_counts", "python_rows",
           "read_texts", "tagged_rows"]

log = logging.getLogger("tfapp.data")


def _checked(path: str, fmt: str, spec: RowSpec, counts: EntityCounts,
             kept: Sequence[str] = (), split: str = "train"
             ) -> Iterator[tuple[int | str, tuple | None, str | None, dict]]:
    """``(line, values, problem, kept values)`` of every row of one file: no values for a
    bad row (``problem`` says why) nor for a row that is no example (a blank corpus
    text); ``counts``: a tagged file's entities."""
    tagged = spec.kind == "tagged"
    if tagged or fmt == "conll":  # else a corpus read from tagged words: the words joined
        for start, words, tags, problem in (
                tagged_rows(path, fmt, spec.tag_column, spec.tag_scheme, counts) if tagged
                else tagged_sentences(path, fmt, -1)):
            if problem is not None:
                yield problem[0], None, problem[1], {}
            elif words:
                yield start, (words, tags) if tagged else (" ".join(words),), None, {}
        return
    extra = [c for c in kept if c not in spec.columns]
    text_column, label_column, verbatim = spec.text_lines()
    if kept:  # a text line has no columns to keep
        text_column = None
    rows = parsed_rows(path, fmt, spec.columns + extra, spec.hint, text_column=text_column,
                       label_column=label_column, verbatim=verbatim, kept=extra, split=split)
    for line, fields, problem in rows:
        values = None
        if problem is None:
            problem, values = convert(fields, spec)
        yield line, values, problem, ({c: kept_value(fields.get(c)) for c in kept}
                                      if values is not None else {})


def python_rows(path: str, fmt: str, spec: RowSpec, log_: SourceLog) -> Iterator[RowBatch]:
    """The good rows of one file in ``RowBatch``es, read and checked row by row; bad rows,
    label counts (and a tagged file's entities) go to ``log_``."""
    batcher = Batcher(spec)
    for line, values, problem, _ in _checked(path, fmt, spec, log_.entities):
        if problem is not None:
            log_.bad(line, problem)
            continue
        if values is None:
            continue
        if spec.kind in ("labelled", "tagged"):  # a sentence is one row: its first line
            for name in values[-1]:
                log_.count_label(name, line)
        done = batcher.add(line, values)
        if done is not None:
            yield done
    done = batcher.flush()
    if done is not None:
        yield done


def tagged_rows(path: str, fmt: str, tag_column: int, scheme: str, counts: EntityCounts
                ) -> Iterator[tuple[int, list[str], list[str], tuple[int, str] | None]]:
    """``(line, words, IOB2 tags, problem)`` of each sentence of one file: ``problem`` is
    ``(line, why)`` of a bad sentence (CoNLL: the offending tag's own line; JSONL: the
    sentence's), whose words and tags are then of no use. Tags are read in the scheme
    the file is written in (a first pass reads it: ``SchemeEvidence``), converted from
    it; ``counts`` counts the entities read, converted (from what ``scheme``, the
    configured one, would read) and refused."""
    conll = fmt == "conll"

    def where(start: int, tags: list[str]) -> list[int]:
        return [start + i for i in range(len(tags))] if conll else [start] * len(tags)

    evidence = SchemeEvidence()
    for start, _, tags, problem in tagged_sentences(path, fmt, tag_column):
        if problem is None and tags:
            evidence.add(tags, where(start, tags))
    counts.scheme = evidence.scheme
    for start, words, tags, problem in tagged_sentences(path, fmt, tag_column):
        if problem is None and not words:
            continue
        found: list = []
        if problem is None:
            lines = where(start, tags)
            found, why = read_entities(tags, counts.scheme)
            if why is not None:
                counts.refused += begun(tags)
                problem = (lines[why[0]], why[1])
            else:
                counts.add(tags, found, scheme, lines)
        if problem is not None:
            yield start, words, tags, problem
            continue
        yield start, words, from_spans(found, len(tags)), None


def log_entity_counts(name: str, counts: EntityCounts | dict, configured: str) -> None:
    """Log one file's entity counts: a warning when entities were converted or refused."""
    if isinstance(counts, dict):
        counts = EntityCounts(**counts)
    level = logging.WARNING if counts.converted or counts.refused else logging.INFO
    log.log(level, "data: %s", counts.describe(name, configured))


def file_formats(files: str | Sequence[str | os.PathLike], spec: RowSpec,
                 what: str | Setting = TRAIN_FILES) -> list[tuple[str, str]]:
    """(path, format) of every file of ``files`` (paths, globs, comma-joined; a TFDS name
    with ``data.format=tfds``) read as ``spec``: resolved and told before any is read, so
    a missing file or an unknown extension fails first; ``what`` names the setting."""
    if spec.format == "tfds":
        if not isinstance(files, str):
            raise DataError(what, ": data.format=tfds takes one dataset name, not files")
        return [(files, "tfds")]
    sources = [(path, detect_format(path, spec.format, spec.kind))
               for path in resolve_files(files, what)]
    if any(fmt == "tfds" for _, fmt in sources):
        raise DataError("data.format=tfds takes a dataset name, not files")
    return sources


def iter_rows(sources: list[tuple[str, str]], spec: RowSpec, *, split: str = "train",
              kept: Sequence[str] = (), known: KnownNames | None = None) -> Iterator[Row]:
    """Every row of the files ``sources`` (``file_formats``) read as ``spec``, in file and
    row order, one at a time as the files are read: a good row's values, a bad row's
    problem (the caller's policy decides: ``BadRowPolicy.good``; a blank corpus text is no
    row at all). ``kept``: columns carried through as each row's ``kept``, of any type;
    ``known``: the labels (tags) a row may hold, a row with another one is a bad row."""
    for path, fmt in sources:
        counts = EntityCounts()
        for line, values, problem, kept_values in _checked(path, fmt, spec, counts, kept,
                                                           split):
            unknown = known.unknown(values[-1]) if known and values is not None else None
            if problem is not None or unknown is not None:
                yield Row(path, line, problem=problem or known.problem(unknown))
            elif values is not None:
                yield Row(path, line, values, kept_values)
        if spec.kind == "tagged":
            log_entity_counts(path, counts, spec.tag_scheme)


def read_texts(files: str | Sequence[str | os.PathLike], *, text_column: str = "text",
               mode: str = "fail", report: BadRowReport | None = None,
               what: str = "data.train_files", column_hint: str = "set data.text_column",
               skip_option: str | None = SKIP_OPTION) -> list[str]:
    """The texts of a corpus (rows of kind ``texts``: ``detect_format`` tells how each file
    holds them), in file and row order, blank texts left out. Bad rows (and empty files)
    fail or, with ``mode='skip'``, are recorded in ``report`` (a new one, logged here, when
    none is given). ``what`` names the setting in messages, ``column_hint`` the fix for a
    missing column and ``skip_option`` the switch that skips bad rows (``None``: the
    command has none). Raises when no text remains.
    """
    own_report = report is None
    report = BadRowReport() if report is None else report
    spec = RowSpec(kind="texts", text_column=text_column, column_hint=column_hint)
    rows = iter_rows(file_formats(files, spec, what), spec)
    texts = [row.values[0] for row in BadRowPolicy(mode, report, "train", skip_option).good(rows)]
    if own_report and report.count:
        log.warning("data: %s", report.summary())
    if not texts:
        skipped = f" ({report.summary()})" if report.count else ""
        shown = files if isinstance(files, str) else ", ".join(os.fspath(p) for p in files)
        raise DataError(what, f": '{shown}' holds no text{skipped}; give files with "
                        "at least one non-empty text")
    return texts
