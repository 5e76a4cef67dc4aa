"""Tagged sentences for token classification: CoNLL columns and JSONL, read into IOB2.

CoNLL-2003 style files hold one word per line with whitespace-separated columns (the
word first, the tag in ``data.tag_column``), a blank line between sentences and
``-DOCSTART-`` lines between documents (skipped). JSONL files hold one sentence per line:
``{"tokens": [...], "tags": [...]}``. Tags are read into IOB2 (``tfapp.data.text.tags``)
in the scheme each file is written in, read from its tags (a first pass over the file),
whatever ``data.tag_scheme`` says: ``tagged_rows`` counts the entities it read, converted
(those ``data.tag_scheme`` would have lost) and refused, and ``log_entity_counts`` logs
them per file, so no entity becomes ``O`` silently.

A sentence is one row for ``data.on_bad_rows``: a bad line (too few columns, a tag of no
scheme, a tag that breaks its file's scheme, bytes that are not UTF-8) fails naming
``FILE:LINE`` or, with ``skip``, drops its sentence and is counted in the
``BadRowReport``. Bytes are decoded and split into lines by ``tfapp.textio`` (BOM
dropped, "\\n" endings only), as for every other reader.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tfapp.atomic import write_text
from tfapp.config import NerDataConfig
from tfapp.data.sources import (  # the classifier reader's file handling and bad-row policy
    BadRowPolicy,
    BadRowReport,
    open_source,
    resolve_files,
)
from tfapp.data.text.tags import (
    OUTSIDE,
    EntityCounts,
    SchemeEvidence,
    begun,
    from_spans,
    read_entities,
    split_tag,
    tag_problem,
)
from tfapp.demo import DEMO_DIR
from tfapp.errors import DataError, Setting
from tfapp.textio import NOT_UTF8, has_undecodable, iter_lines, json_line

__all__ = ["TaggedSentence", "iter_tagged", "tagged_rows", "demo_ner_file",
           "read_tag_vocab", "keep_known_tags", "iter_known_tags", "log_entity_counts"]

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


def _conll(path: str, tag_column: int):
    """(line, words, tags, problem) per sentence of a CoNLL file, tags as written."""
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


Row = tuple[int, list[str], list[str], tuple[int, str] | None]


def tagged_rows(path: str, fmt: str, tag_column: int, scheme: str, counts: EntityCounts
                ) -> Iterator[Row]:
    """``(line, words, IOB2 tags, problem)`` of each sentence of one file: ``problem`` is
    ``(line, why)`` of a bad sentence (CoNLL: the offending tag's own line; JSONL: the
    sentence's), whose words and tags are then of no use. Tags are read in the scheme
    the file is written in (a first pass reads it: ``SchemeEvidence``), converted from
    it; ``counts`` counts the entities read, converted (from what ``scheme``, the
    configured one, would read) and refused."""
    conll = _format(path, fmt) == "conll"

    def sentences():
        return _conll(path, tag_column) if conll else _jsonl(path)

    def where(start: int, tags: list[str]) -> list[int]:
        return [start + i for i in range(len(tags))] if conll else [start] * len(tags)

    evidence = SchemeEvidence()
    for start, _, tags, problem in sentences():
        if problem is None and tags:
            evidence.add(tags, where(start, tags))
    counts.scheme = evidence.scheme
    for start, words, tags, problem in sentences():
        if problem is None and not words:
            continue
        found: list = []
        if problem is None:
            lines = where(start, tags)
            why = _first_tag_problem(tags)
            if why is None:
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


def _first_tag_problem(tags: list[str]) -> tuple[int, str] | None:
    for i, tag in enumerate(tags):
        why = tag_problem(tag)
        if why:
            return i, why
    return None


def log_entity_counts(name: str, counts: EntityCounts | dict, configured: str) -> None:
    """Log one file's entity counts: a warning when entities were converted or refused."""
    if isinstance(counts, dict):
        counts = EntityCounts(**counts)
    level = logging.WARNING if counts.converted or counts.refused else logging.INFO
    log.log(level, "data: %s", counts.describe(name, configured))


def iter_tagged(spec: str, data_cfg: NerDataConfig, *, split: str, mode: str,
                report: BadRowReport) -> Iterator[TaggedSentence]:
    """The tagged sentences of the files in ``spec`` (one split), tags read into IOB2, one
    at a time as the files are read (a streaming evaluation holds none of them). Bad
    sentences fail or are recorded in ``report`` per ``mode``; an empty result is the
    caller's to refuse."""
    what = Setting(f"data.{split}_files")
    bad = BadRowPolicy(mode, report, split)
    scheme = data_cfg.tag_scheme
    for path in resolve_files(spec, what):
        counts = EntityCounts()
        for start, words, tags, problem in tagged_rows(path, data_cfg.format,
                                                       data_cfg.tag_column, scheme, counts):
            if problem is not None:
                bad(path, problem[0], problem[1])
                continue
            yield TaggedSentence(words, tags, (path, start))
        log_entity_counts(path, counts, scheme)


# ------------------------------------------------------------------------------ splits
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
    kept = list(iter_known_tags(sentences, names, split=split, mode=mode, report=report,
                                known_from=known_from))
    if not kept:
        raise DataError(Setting(f"data.{split}_files"), ": no usable sentences left after "
                        f"dropping {report.per_split.get(split, 0)} bad row(s): "
                        f"{report.summary()}")
    return kept


def iter_known_tags(sentences: Iterable[TaggedSentence], names: list[str], *, split: str,
                    mode: str, report: BadRowReport, known_from: str = "the training data's"
                    ) -> Iterator[TaggedSentence]:
    """``keep_known_tags`` one sentence at a time (an empty result is the caller's)."""
    known, bad = set(names), BadRowPolicy(mode, report, split)
    types = ", ".join(sorted({split_tag(t)[1] for t in names if t != OUTSIDE}))
    for s in sentences:
        unseen = next((t for t in s.tags if t not in known), None)
        if unseen is None:
            yield s
            continue
        bad(s.origin[0], s.origin[1], f"tag '{unseen}' in this sentence: entity type "
                                      f"'{split_tag(unseen)[1]}' is not among "
                                      f"{known_from} ({types})")
