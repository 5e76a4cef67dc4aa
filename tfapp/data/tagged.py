"""Tagged sentences for token classification: CoNLL columns and JSONL, read into IOB2.

CoNLL-2003 style files hold one word per line with whitespace-separated columns (the
word first, the tag in ``data.tag_column``), a blank line between sentences and
``-DOCSTART-`` lines between documents (skipped). JSONL files hold one sentence per line:
``{"tokens": [...], "tags": [...]}``. Tags of ``data.tag_scheme`` (IOB1, IOB2, BIOES) are
read into IOB2 (``tfapp.tasks.ner.tags``).

A sentence is one row for ``data.on_bad_rows``: a bad line (too few columns, a tag that
is not of the scheme, bytes that are not UTF-8) fails naming ``FILE:LINE`` or, with
``skip``, drops its sentence and is counted in the ``BadRowReport``. Bytes are decoded
and split into lines by ``tfapp.data.textio`` (BOM dropped, "\\n" endings only), as for
every other reader.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfapp.atomic import write_text
from tfapp.config import DataConfig
from tfapp.data.errors import DataError
from tfapp.data.sources import (  # the classifier reader's file handling and bad-row policy
    BadRow,
    BadRowPolicy,
    BadRowReport,
    open_source,
    resolve_files,
)
from tfapp.data.textio import NOT_UTF8, has_undecodable, iter_lines, json_line
from tfapp.demo import DEMO_DIR
from tfapp.tasks.ner.tags import OUTSIDE, split_tag, tag_names, tag_problem, to_iob2

__all__ = ["TaggedSentence", "NerSplits", "read_tagged", "load_ner_splits", "demo_ner_file",
           "read_tag_vocab", "keep_known_tags"]

log = logging.getLogger("tfapp.data")

DOCSTART = "-DOCSTART-"
_JSONL = (".jsonl", ".json", ".ndjson")


def demo_ner_file(split: str) -> str:
    """Path of the NER demo CoNLL file shipped inside the package (train/validation/test)."""
    return str(DEMO_DIR / f"ner_{split}.conll")


@dataclass
class TaggedSentence:
    """One sentence: its words, their IOB2 tags, and where it starts (file, line)."""

    words: list[str]
    tags: list[str]
    origin: tuple[str, int]


def _format(path: str, configured: str) -> str:
    if configured in ("conll", "jsonl"):
        return configured
    name = path[:-3] if path.endswith(".gz") else path
    return "jsonl" if name.lower().endswith(_JSONL) else "conll"


def _conll(path: str, tag_column: int, scheme: str):
    """(line, words, tags, problem) per sentence of a CoNLL file; tags in ``scheme``."""
    with open_source(path) as fh:
        yield from _conll_sentences(iter_lines(fh), tag_column)


def _conll_sentences(lines: Iterator[str], tag_column: int):
    start, words, tags, problem, blank = 0, [], [], None, True
    for number, line in enumerate(itertools.chain(lines, [""]), start=1):
        blank = blank and not line.strip()
        fields = line.split()
        if not fields or fields[0] == DOCSTART:
            if words or problem:
                yield start, words, tags, problem
            start, words, tags, problem = 0, [], [], None
            continue
        start = start or number
        if problem:
            continue
        if has_undecodable(line):
            problem = (number, NOT_UTF8)
        elif not -len(fields) <= tag_column < len(fields) or len(fields) < 2:
            problem = (number, f"has {len(fields)} column(s), no tag in data.tag_column="
                               f"{tag_column} (set it to the tag's column)")
        else:
            words.append(fields[0])
            tags.append(fields[tag_column])
    if blank:
        yield 1, [], [], (1, "empty file (no tagged words)")


def _jsonl(path: str):
    with open_source(path) as fh:
        yield from _jsonl_sentences(iter_lines(fh))


def _jsonl_sentences(lines: Iterator[str]):
    blank = True
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        blank = False
        if has_undecodable(line):
            yield number, [], [], (number, NOT_UTF8)
            continue
        try:
            obj = json_line(line)
        except json.JSONDecodeError as err:
            yield number, [], [], (number, f"not valid JSON ({err.msg} at column {err.colno})")
            continue
        words, tags = (obj.get("tokens"), obj.get("tags")) if isinstance(obj, dict) else (0, 0)
        if not (isinstance(words, list) and isinstance(tags, list)
                and all(isinstance(x, str) for x in words + tags)):
            yield number, [], [], (number, 'expected {"tokens": [strings], "tags": [strings]}')
        elif len(words) != len(tags):
            yield number, [], [], (number, f"{len(words)} tokens but {len(tags)} tags")
        elif any(not w.strip() or len(w.split()) > 1 for w in words):
            yield number, [], [], (number, "a token is empty or holds whitespace")
        else:
            yield number, words, tags, None
    if blank:
        yield 1, [], [], (1, "empty file (no JSON lines)")


def read_tagged(spec: str, data_cfg: DataConfig, *, split: str, mode: str,
                report: BadRowReport) -> list[TaggedSentence]:
    """The tagged sentences of the files in ``spec`` (one split), tags read into IOB2.

    Bad sentences fail or are recorded in ``report`` per ``mode``; raises when none remains.
    """
    what = f"data.{split}_files"
    bad = BadRowPolicy(mode, report, split)
    scheme = data_cfg.tag_scheme
    out: list[TaggedSentence] = []
    for path in resolve_files(spec, what):
        conll = _format(path, data_cfg.format) == "conll"
        rows = _conll(path, data_cfg.tag_column, scheme) if conll else _jsonl(path)
        for start, words, tags, problem in rows:
            if problem is None and not words:
                continue
            if problem is None:
                for i, tag in enumerate(tags):
                    why = tag_problem(tag, scheme)
                    if why:
                        # CoNLL: the tag's own line; JSONL: the sentence's line
                        problem = (start + i if conll else start, why)
                        break
            if problem is not None:
                bad(path, problem[0], problem[1])
                continue
            out.append(TaggedSentence(words, to_iob2(tags, scheme), (path, start)))
    if not out:
        raise DataError(f"{what}: no usable sentences in '{spec}' "
                        f"({report.per_split.get(split, 0)} bad row(s) skipped: "
                        f"{report.summary()})")
    return out


# ------------------------------------------------------------------------------ splits
@dataclass
class NerSplits:
    """The prepared splits of a tagged dataset and its tag vocabulary (IOB2, from the
    training data).

    Attributes:
      prepared: the prepared train / validation / test splits (``tfapp.data.splits``).
      tag_names: the model's labels in id order: O, then B-/I- of each entity type.
      report: sentences dropped with on_bad_rows=skip.
      unknown: split -> tags of its data that are not in ``tag_names`` (its sentences
        with one are left out).
    """

    prepared: Any
    tag_names: list[str]
    report: BadRowReport = field(default_factory=BadRowReport)
    unknown: dict[str, list[str]] = field(default_factory=dict)

    @property
    def entity_types(self) -> list[str]:
        return sorted({split_tag(t)[1] for t in self.tag_names if t != OUTSIDE})


def write_tag_vocab(names: list[str], path: str | Path) -> Path:
    return write_text(path, json.dumps({"tags": names, "scheme": "iob2"}, indent=2,
                                       ensure_ascii=False) + "\n")


def read_tag_vocab(path: str | Path) -> list[str]:
    try:
        names = [str(n) for n in json.loads(Path(path).read_text(encoding="utf-8"))["tags"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(f"{path}: not a readable NER labels.json ({err}); delete it to "
                        "rebuild the tag vocabulary from the training data") from None
    return names


def keep_known_tags(sentences: list[TaggedSentence], names: list[str], *, split: str,
                    mode: str, report: BadRowReport, known_from: str = "the training data's"
                    ) -> list[TaggedSentence]:
    """Sentences whose tags are all in ``names``; others are bad rows (one line each)."""
    known, bad, kept = set(names), BadRowPolicy(mode, report, split), []
    types = ", ".join(sorted({split_tag(t)[1] for t in names if t != OUTSIDE}))
    for s in sentences:
        unseen = next((t for t in s.tags if t not in known), None)
        if unseen is None:
            kept.append(s)
            continue
        bad(s.origin[0], s.origin[1], f"tag '{unseen}' in this sentence: entity type "
                                      f"'{split_tag(unseen)[1]}' is not among "
                                      f"{known_from} ({types})")
    if not kept:
        raise DataError(f"data.{split}_files: no usable sentences left after dropping "
                        f"{report.per_split.get(split, 0)} bad row(s): {report.summary()}")
    return kept


def load_ner_splits(data_cfg: DataConfig, seed: int, tag_vocab_path: Path | str | None = None,
                    *, keep_vocab: bool = True) -> NerSplits:
    """Prepare (or reuse) the train/validation/test sentences and settle the tags.

    ``train_files: demo`` reads the shipped demo (and its validation and test files when
    none are given). The tag vocabulary is read from ``tag_vocab_path`` when it exists and
    ``keep_vocab`` (a resumed run), else built from the training tags and written there.
    A sentence holding a tag outside it is a bad row (under fail: one line naming its
    file and line; under skip: left out). Without validation (test) files a seeded
    fraction of train is held out, as for the classifier.
    """
    from tfapp.data.prepare import RowSpec
    from tfapp.data.splits import prepared_splits

    train_spec, val_spec, test_spec = (data_cfg.train_files, data_cfg.validation_files,
                                       data_cfg.test_files)
    if train_spec.strip() == "demo":
        train_spec = demo_ner_file("train")
        val_spec = val_spec or demo_ner_file("validation")
        test_spec = test_spec or demo_ner_file("test")
    prepared = prepared_splits(train_spec, val_spec, test_spec,
                               RowSpec.from_config("tagged", data_cfg), data_cfg, seed=seed)
    path = Path(tag_vocab_path) if tag_vocab_path else None
    if path is not None and keep_vocab and path.exists():
        names, known_from = read_tag_vocab(path), f"{path}'s"
    else:
        types = [split_tag(t)[1] for t in prepared.train.manifest.labels if t != OUTSIDE]
        if not types:
            raise DataError(f"data.train_files: '{train_spec}' tags no entity at all (every "
                            f"tag is O); check data.tag_column and data.tag_scheme")
        names, known_from = tag_names(types), "the training data's"
        if path is not None:
            write_tag_vocab(names, path)
    prepared.check_held_out(data_cfg, "sentences")
    out = NerSplits(prepared, names, prepared.report)
    types = ", ".join(sorted({split_tag(t)[1] for t in names if t != OUTSIDE}))
    for split in prepared.splits():
        unknown = [t for t in split.manifest.labels if t not in set(names)]
        if not unknown:
            continue
        first = min(unknown, key=lambda t: _origin_order(split.manifest.first_seen[t]))
        where, _, line = split.manifest.first_seen[first].rpartition(":")
        among = known_from if split.name == "train" else "the training data's"
        problem = (f"tag '{first}' in this sentence: entity type '{split_tag(first)[1]}' "
                   f"is not among {among} ({types})")
        BadRowPolicy(data_cfg.on_bad_rows, BadRowReport(), split.name)(where, line, problem)
        out.unknown[split.name] = unknown
        if len(out.report.examples) < 5:
            out.report.examples.append(BadRow(where, line, problem))
    return out


def _origin_order(origin: str) -> tuple[str, int]:
    where, _, line = origin.rpartition(":")
    return where, int(line) if line.isdigit() else 0
