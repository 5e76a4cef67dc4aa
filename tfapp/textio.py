"""The bytes of a user's text file (or stdin) as text and lines, the way csv/json see them.

Every reader of user text goes through here: ``tfapp.data.formats`` (data files), the BERT
``vocab.txt`` reader, ``predict --input`` and ``generate``'s prompts, config YAML files and
Hugging Face JSON files. So everywhere:

* a UTF-8 byte order mark at the start is dropped (editors on Windows write one);
* lines end at ``"\\n"`` (a ``"\\r\\n"`` ending too) and nowhere else. ``str.splitlines``
  also breaks at ``\\x0b \\x0c \\x1c-\\x1e \\x85 \\u2028 \\u2029`` and a lone ``\\r``, which
  are legal inside a JSON string or a text line, so a valid row would be cut in two and
  every later line number would be off;
* undecodable bytes are reported as ``FILE:LINE: not valid UTF-8 text ...``, never as a
  ``UnicodeDecodeError`` traceback.

No TensorFlow here: the command-line readers use it before TensorFlow is loaded.
"""

from __future__ import annotations

import codecs
import io
import json
import re
import sys
from collections.abc import Iterator
from typing import BinaryIO

from tfapp.errors import DataError

__all__ = ["NOT_UTF8", "STDIN", "decode", "decode_strict", "has_undecodable", "split_lines",
           "text_lines", "stdin_lines", "iter_lines", "csv_text_stream", "json_line"]

BOM = "\ufeff"
STDIN = "<stdin>"
NOT_UTF8 = "not valid UTF-8 text (re-save the file as UTF-8)"
# What errors="surrogateescape" turns each undecodable byte into.
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def decode(raw: bytes) -> str:
    """UTF-8 text without a leading BOM; undecodable bytes are kept as lone surrogates
    (U+DC80..U+DCFF) so that a reader can name the row they are in, or skip only it."""
    text = raw.decode("utf-8", errors="surrogateescape")
    return text[1:] if text.startswith(BOM) else text


def has_undecodable(text: str) -> bool:
    """Whether ``text`` (from ``decode``) holds bytes that were not UTF-8."""
    return _UNDECODABLE.search(text) is not None


# A JSON "\\ud800" escape: half a surrogate pair, which json.loads takes but no UTF-8
# record, message or file can hold (the first one named; a whole pair is checked below).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def json_line(line: str) -> object:
    """``json.loads`` of one JSONL line, also raising ``json.JSONDecodeError`` for an
    escape of half a surrogate pair ("\\ud800"), so readers report it as invalid JSON."""
    obj = json.loads(line)
    if "\\u" in line:  # only lines with escapes can hold one: the rest skip the check
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            at = _SURROGATE_ESCAPE.search(line)
            raise json.JSONDecodeError(f"{at.group() if at else 'an escape'}: half a "
                                       "surrogate pair, not text", line,
                                       at.start() if at else 0) from None
    return obj


def split_lines(text: str) -> list[str]:
    """The lines of ``text``: ended by "\\n" (one "\\r" before it is dropped) and nothing
    else; a final "\\n" ends the last line rather than starting an empty one."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


_BLOCK = 8 << 20


def iter_lines(stream: BinaryIO) -> Iterator[str]:
    """The lines of a binary ``stream``, read in blocks (memory does not grow with the
    file) and cut as ``split_lines(decode(stream.read()))`` would cut them."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    rest, first = "", True
    while True:
        block = stream.read(_BLOCK)
        text = decoder.decode(block or b"", final=not block)
        if first and text:
            text, first = (text[1:] if text.startswith(BOM) else text), False
        lines = (rest + text).split("\n")
        rest = lines.pop()
        for line in lines:
            yield line[:-1] if line.endswith("\r") else line
        if not block:
            break
    if rest:
        yield rest[:-1] if rest.endswith("\r") else rest


class _Raw(io.RawIOBase):
    """A raw stream over any object with ``read(n)`` (a GFile, a GzipFile)."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def csv_text_stream(stream: BinaryIO) -> Iterator[str]:
    """The lines of ``stream`` for ``csv.reader``, read in blocks: they end at "\\r",
    "\\n" or "\\r\\n", kept in the line (what csv expects of ``newline=""``); a BOM is
    dropped and undecodable bytes survive as surrogates (``has_undecodable``)."""
    text = io.TextIOWrapper(io.BufferedReader(_Raw(stream), _BLOCK), encoding="utf-8",
                            errors="surrogateescape", newline="")
    first = True
    for line in text:
        if first:
            line, first = (line[1:] if line.startswith(BOM) else line), False
            if not line:
                continue
        yield line


def decode_strict(raw: bytes, name: str) -> str:
    """UTF-8 text without a leading BOM, for readers that have no bad rows to skip:
    raises ``DataError`` ``name:LINE: not valid UTF-8 text ...`` at the first bad byte."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1  # the numbering of split_lines
        raise DataError(f"{name}:{line}: {NOT_UTF8}") from None
    return text[1:] if text.startswith(BOM) else text


def text_lines(raw: bytes, name: str) -> list[str]:
    """The lines of a whole text file (or stream) ``name``, as ``decode_strict`` and
    ``split_lines`` make them."""
    return split_lines(decode_strict(raw, name))


def stdin_lines() -> list[str]:
    """The lines of standard input, read as bytes (whatever the locale's encoding) and
    checked as ``text_lines`` does, named ``<stdin>`` in messages."""
    if sys.stdin is None:  # started with stdin closed
        raise DataError(f"{STDIN}: standard input is closed; give the texts another way")
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        raw = buffer.read()
    else:  # a text-only stream (no bytes beneath): its text, as bytes again
        raw = sys.stdin.read().encode("utf-8", errors="surrogateescape")
    return text_lines(raw, STDIN)
