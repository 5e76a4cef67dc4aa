"""Masked-LM examples: a corpus of texts -> BERT features, one text per example or packed
into full sequences (``tfapp.data.text.packing``). The masks are drawn later, anew at
every step (``tfapp.data.text.masking``, the task's last stage).
"""

from __future__ import annotations

from typing import Any

from tfapp.config import MlmDataConfig
from tfapp.data.input import reader
from tfapp.data.input.parse import cached_counts, split_rows
from tfapp.data.input.splits import SplitData, prepared_splits, resolve_demo
from tfapp.data.rows.spec import RowSpec
from tfapp.data.text.packing import PACK_TEXTS, pack_texts
from tfapp.errors import ConfigError

import tensorflow as tf

__all__ = ["corpus", "demo_files", "mlm_examples"]


def demo_files(data_cfg: MlmDataConfig) -> tuple[str, str, str]:
    """(train, "", "") file specs, ``demo`` mapped to the shipped unlabelled reviews."""
    return resolve_demo(data_cfg, "reviews_unlabelled.txt", fill=False)


def corpus(data_cfg: MlmDataConfig, rows: RowSpec, seed: int) -> SplitData:
    """The prepared corpus (a masked-LM run holds nothing out); one line when it holds no
    text."""
    split = prepared_splits(demo_files(data_cfg)[0], "", "", rows, data_cfg, seed=seed,
                            what="data.train_files (pretrain --corpus)").train
    if not split.rows:
        raise ConfigError(f"data.train_files: the corpus '{data_cfg.train_files}' holds no "
                          "text")
    return split


def mlm_examples(split: SplitData, preprocess: Any, seq_length: int, *,
                 pack: bool, vocab: list[str]) -> reader.Examples:
    """How the corpus is read and tokenised: one text per example padded to
    ``seq_length`` or, with ``pack``, texts packed one after another into full sequences
    (counted once per file: one tokenising pass, cached)."""
    def texts(rows: int) -> Any:
        return split_rows(split, {"text": tf.io.FixedLenFeature([], tf.string)}, rows)

    if pack:
        index = {t: i for i, t in enumerate(vocab)}
        tokenize = preprocess.module.tokenize

        def encode(chunk: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            packed = pack_texts(tokenize, chunk["text"], seq_length, index["[CLS]"],
                                index["[SEP]"])
            rows = tf.shape(packed["input_word_ids"])[0]
            # A sequence's id: its chunk's first text's, times 2**16, plus its row.
            ids = chunk["id"][0] * (1 << 16) + tf.range(rows, dtype=tf.int64)
            return {**packed, "id": ids}

        read = lambda rows: texts(PACK_TEXTS)  # noqa: E731  (counts fix the chunk)
        counts = cached_counts(
            "mlm", split, (PACK_TEXTS, str(preprocess.fingerprint), seq_length), read(0),
            lambda chunk: tf.cast(tf.shape(encode(chunk)["input_word_ids"])[:1], tf.int64))
        source = split.source(counts[:, 0].tolist())
    else:
        def encode(chunk: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            return {**preprocess(chunk["text"]), "id": chunk["id"]}

        read, source = texts, split.source()
    return reader.Examples(task="mlm", split=split, source=source, read=read, encode=encode,
                           what="packed sequence" if pack else "text")
