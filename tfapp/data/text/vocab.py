"""WordPiece vocabularies: learn one from a corpus, write it, read it back.

The learner is tensorflow-text's ``bert_vocab_from_dataset`` (the tool behind the
official BERT vocabularies): it splits text into words with BERT's basic tokenizer
(the same splitting ``BertTokenizer`` uses at run time, so the vocabulary fits the
tokenizer) and grows a subword vocabulary up to ``vocab_size``. Reserved tokens come
first, so ``[PAD]`` is id 0 -- the id the packers pad with and ``input_mask`` ignores.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from tfapp.atomic import write_text
from tfapp.errors import DataError
from tfapp.textio import text_lines

import tensorflow as tf

__all__ = ["RESERVED_TOKENS", "build_wordpiece_vocab", "write_vocab", "read_vocab"]

RESERVED_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def build_wordpiece_vocab(texts: Iterable[str], vocab_size: int, lower_case: bool = True
                          ) -> list[str]:
    """Learn a WordPiece vocabulary of at most ``vocab_size`` tokens from ``texts``.

    ``RESERVED_TOKENS`` take the first ids in their order (``[PAD]`` first, so padding is
    id 0). The learner may return fewer than ``vocab_size`` tokens when the corpus is
    small: every word it keeps is then a whole token.
    """
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bvd

    reserved = list(RESERVED_TOKENS)
    if vocab_size <= len(reserved):
        raise DataError(f"vocab_size {vocab_size} must exceed the {len(reserved)} reserved "
                        "tokens; give a larger vocab_size")
    corpus = [t for t in texts if isinstance(t, str) and t.strip()]
    if not corpus:
        raise DataError("cannot build a WordPiece vocabulary from an empty corpus; "
                        "give at least one non-empty text")
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(corpus, tf.string)).batch(1024)
    vocab = bvd.bert_vocab_from_dataset(
        dataset,
        vocab_size=vocab_size,
        reserved_tokens=reserved,
        bert_tokenizer_params=dict(lower_case=lower_case),
        learn_params={},
    )
    # The learner puts reserved tokens first already; enforce it (and no duplicates) so a
    # change in the tool cannot silently move [PAD] away from id 0.
    rest = [t for t in vocab if t not in set(reserved)]
    return (reserved + rest)[:vocab_size]


def write_vocab(tokens: Sequence[str], path: str | os.PathLike) -> Path:
    """Write one token per line (the BERT ``vocab.txt`` format), atomically."""
    path = Path(path)
    bad = [t for t in tokens if not t or "\n" in t or "\r" in t]
    if bad:
        raise DataError(f"vocabulary token {bad[0]!r} is empty or holds a line break")
    return write_text(path, "".join(t + "\n" for t in tokens))


def read_vocab(path: str | os.PathLike) -> list[str]:
    """Read a ``vocab.txt`` (local or gs://): one token per line, line i is id i."""
    path = str(path)
    if not tf.io.gfile.exists(path):
        raise DataError(f"vocab file not found: {path} (give a BERT vocab.txt, one token "
                        "per line, or build one with tfapp.data.text.vocab.build_wordpiece_vocab)")
    with tf.io.gfile.GFile(path, "rb") as fh:
        raw = fh.read()
    # Lines end at "\n" only and a BOM is dropped: a BOM kept would rename token 0 (a token
    # may be any character, U+2028 included, so no other line break is one).
    tokens = text_lines(raw, path)
    if not tokens:
        raise DataError(f"{path}: vocab file is empty; give a BERT vocab.txt")
    return tokens
