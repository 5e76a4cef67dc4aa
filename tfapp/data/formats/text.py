"""Plain text files: one row per non-blank line.

A line is the text exactly as written (``verbatim``: a corpus, whose filters such as the
generator's ``data.drop_regex`` see the raw line), or a labelled example whose
fastText-style ``__label__X`` prefixes carry the labels. Lines end at "\\n" only: they
may hold U+2028, \\x0c, ...
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tfapp.data.formats.files import Parsed, nonblank_lines
from tfapp.textio import NOT_UTF8, has_undecodable

__all__ = ["rows"]

_FASTTEXT_LABEL = "__label__"


def rows(path: str, text_column: str, label_column: str | None, verbatim: bool = False
         ) -> Iterator[Parsed]:
    """One row per non-blank line, its text as ``text_column`` (and with
    ``label_column``, its labels)."""
    for number, line in nonblank_lines(path):
        yield (_row(number, line, text_column, label_column, verbatim) if line is not None
               else (1, None, "empty file (no text lines)"))


def _row(number: int, line: str, text_column: str, label_column: str | None,
         verbatim: bool) -> Parsed:
    if has_undecodable(line):
        return number, None, NOT_UTF8
    if verbatim:
        return number, {text_column: line}, None
    labels: list[str] = []
    words = line.split()
    while words and words[0].startswith(_FASTTEXT_LABEL):
        labels.append(words.pop(0)[len(_FASTTEXT_LABEL):])
    fields: dict[str, Any] = {text_column: " ".join(words)}
    if label_column:
        if not labels:
            return number, None, (f"no label: start the line with {_FASTTEXT_LABEL}LABEL "
                                  "(fastText style)")
        fields[label_column] = labels if len(labels) > 1 else labels[0]
    return number, fields, None
