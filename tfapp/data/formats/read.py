"""The one table from a file's format to its reader.

``parsed_rows`` reads a file of rows (csv, tsv, jsonl, parquet, text lines, tfrecord, a
TFDS dataset), ``tagged_sentences`` a file of tagged words (conll, jsonl), and
``estimated_rows`` counts a file's rows without parsing them. What a row must hold and
how bad rows are handled is the caller's (``tfapp.data.rows``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tfapp.data.formats import conll, delimited, jsonl, parquet, text, tfrecord
from tfapp.data.formats.files import Hint, Parsed
from tfapp.errors import DataError

__all__ = ["estimated_rows", "parsed_rows", "tagged_sentences"]

DELIMITERS = {"csv": ",", "tsv": "\t"}


def parsed_rows(path: str, fmt: str, columns: list[str], hint: Hint, *,
                text_column: str | None, label_column: str | None = None,
                verbatim: bool = False, kept: Sequence[str] = (), split: str = "train"
                ) -> Iterator[Parsed]:
    """The rows of ``path`` (a TFDS dataset: its name, ``split`` by default) holding
    ``columns``. ``label_column``: the one holding labels (typed files check it so);
    ``kept``: columns carried through as they are, of any type. A text line is the text
    of ``text_column`` (None: the rows need more than one text, which a line cannot
    hold), exactly as written with ``verbatim``, else with its fastText labels."""
    if fmt in DELIMITERS:
        return delimited.rows(path, DELIMITERS[fmt], columns, hint)
    if fmt == "jsonl":
        return jsonl.rows(path, columns, hint)
    if fmt == "parquet":
        return parquet.rows(path, columns, hint, label_column, kept)
    if fmt == "text":
        if text_column is None:
            raise DataError(f"{path}: plain text lines hold one text; rows of "
                            f"{' and '.join(columns)} need csv, tsv, jsonl, parquet or "
                            "tfrecord")
        return text.rows(path, text_column, label_column, verbatim)
    if fmt == "tfrecord":
        return tfrecord.rows(path, columns, hint)
    if fmt == "tfds":
        return tfrecord.tfds_rows(path, split, columns, hint)
    raise DataError(f"data.format={fmt} cannot be prepared from files")


def tagged_sentences(path: str, fmt: str, tag_column: int
                     ) -> Iterator[tuple[int, list[str], list[str], tuple[int, str] | None]]:
    """``(line, words, tags, problem)`` of each sentence of a ``conll`` or ``jsonl``
    file, tags as written."""
    return conll.sentences(path, tag_column) if fmt == "conll" else jsonl.sentences(path)


def estimated_rows(path: str, fmt: str) -> int | None:
    """About how many rows ``path`` holds, read without parsing (for a progress bar's
    ETA): a Parquet file's own count, else the newlines of a local uncompressed file less
    its header line; None when it cannot be told cheaply."""
    if fmt == "parquet":
        with parquet.open_parquet(path) as handle:
            return handle.metadata.num_rows
    if "://" in path or path.endswith(".gz") or fmt == "tfrecord":
        return None
    lines = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            lines += block.count(b"\n")
    return max(0, lines - (fmt in DELIMITERS))
