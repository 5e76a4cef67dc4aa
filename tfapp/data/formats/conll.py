"""CoNLL files of tagged words: one word per line with whitespace-separated columns (the
word first, the tag in ``data.tag_column``), a blank line between sentences and
``-DOCSTART-`` lines between documents (passed over)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from tfapp.data.formats.files import open_source
from tfapp.textio import NOT_UTF8, has_undecodable, iter_lines

__all__ = ["DOCSTART", "sentences"]

DOCSTART = "-DOCSTART-"


def sentences(path: str, tag_column: int
              ) -> Iterator[tuple[int, list[str], list[str], tuple[int, str] | None]]:
    """``(line, words, tags, problem)`` of every sentence, tags as written; a problem is
    ``(line, why)`` of the sentence's first bad line (too few columns, not UTF-8)."""
    with open_source(path) as fh:
        start, words, tags, problem, blank = 0, [], [], None, True
        for number, line in enumerate(itertools.chain(iter_lines(fh), [""]), start=1):
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
