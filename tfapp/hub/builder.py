"""Build a randomly initialised BERT + WordPiece vocab and export them as TF-Hub modules.

``build_bert_hub`` is what ``python -m tfapp.hub build-bert`` runs: read a text corpus,
learn a WordPiece vocabulary from it (``tfapp.data.text.vocab``), build a native BERT
encoder of the requested size (``tfapp.models.bert``) and write the pair of TF-Hub
modules plus metadata (``tfapp.hub.export``)::

    OUT/encoder/        reusable SavedModel (hub.KerasLayer(..., trainable=True))
    OUT/preprocessor/   SavedModel with tokenize / bert_pack_inputs / __call__
    OUT/vocab.txt       the WordPiece vocabulary (also an asset inside both modules)
    OUT/tfapp_hub.json  sizes, lower_case, where the preprocessor is

The weights are random: this is the offline stand-in for a pretrained checkpoint
(no network here), small enough to fine-tune in minutes on a CPU.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tfapp.config import ConfigError
from tfapp.data.rows.bad_rows import SKIP_OPTION
from tfapp.models.bert_config import BertConfig

__all__ = ["BuildParams", "build_bert_hub", "read_corpus", "whole_words_only"]


def _default_bert() -> BertConfig:
    # build-bert's defaults; vocab_size is a target: the corpus decides (never more).
    return BertConfig(vocab_size=4000, hidden_size=128, num_layers=2, num_heads=2,
                      intermediate_size=256, max_position_embeddings=512)


@dataclass(frozen=True)
class BuildParams:
    """Everything that determines a built module (hashed for the builtin cache key).

    Attributes:
      bert: the encoder's shape (``BertConfig``: layers, widths, positions, dropout);
        its ``vocab_size`` is the target WordPiece vocabulary size (a small corpus may
        yield fewer: the module gets the vocabulary learned).
      lower_case: lower-case and strip accents (an uncased model).
      seed: seed of the weight initialisers.
      seq_length: default sequence length of the preprocessor's __call__.
      whole_words: keep only the corpus's words in the vocabulary, no subword pieces, so
        a word outside it is one ``[UNK]``. For a model trained from random weights on a
        small corpus: there a word it never saw would otherwise be read as a string of
        one-letter pieces whose weights were learned inside other words, and the
        fine-tuned model reads a verdict into them.
    """

    bert: BertConfig = field(default_factory=_default_bert)
    lower_case: bool = True
    seed: int = 0
    seq_length: int = 128
    whole_words: bool = False

    def to_json(self) -> str:
        # bert through BertConfig.to_dict: it leaves out the unset embedding_size, so the
        # builtin modules' cache keys did not change when that field was added.
        return json.dumps({**asdict(self), "bert": self.bert.to_dict()}, sort_keys=True)


def read_corpus(files: Sequence[str | os.PathLike], text_column: str = "text", *,
                on_bad_rows: str | None = None) -> list[str]:
    """The texts of the ``--corpus`` files, read by ``tfapp.data.rows.read.read_texts`` (the
    reader every task uses): local paths, globs or ``gs://``, ``.gz``; text files one text
    per line, csv/tsv/jsonl/tfrecord rows their ``text_column``.

    ``on_bad_rows`` is ``data.on_bad_rows`` where the command takes config overrides
    (``pretrain``); ``None`` fails at a malformed row with no skip switch to offer
    (``build-bert``). Raises ``ConfigError`` (a ``DataError``) naming the file.
    """
    from tfapp.data.rows.read import read_texts  # TensorFlow: only when reading

    return read_texts(list(files), text_column=text_column, mode=on_bad_rows or "fail",
                      what="--corpus", column_hint="pass --text-column",
                      skip_option=SKIP_OPTION if on_bad_rows is not None else None)


def whole_words_only(vocab: Sequence[str], texts: Iterable[str], lower_case: bool
                     ) -> list[str]:
    """``vocab`` without its subword pieces (``##...``) and without the letters that are
    in it only as pieces: what is left is whole words of ``texts``, punctuation and digits
    (and the reserved tokens)."""
    fold = str.lower if lower_case else str
    standalone = {w for t in texts for w in re.findall(r"\w+", fold(t)) if len(w) == 1}
    return [t for t in vocab if not t.startswith("##")
            and (len(t) > 1 or not t.isalpha() or t in standalone)]


def build_bert_hub(corpus: Iterable[str], out_dir: str | os.PathLike,
                   params: BuildParams = BuildParams(), *, overwrite: bool = False,
                   extra_metadata: dict | None = None) -> Path:
    """Learn a vocab from ``corpus`` (texts), build a random BERT and export both modules.

    Runs in the calling process without touching its global random state (the
    initialisers are seeded from ``params.seed``) or its mixed-precision policy (the
    module is built in float32). Do not call it inside a distribution strategy scope;
    ``resolve_hub_handle`` builds the builtin module in a subprocess for that reason.
    """
    from tfapp.data.text.vocab import build_wordpiece_vocab, write_vocab
    from tfapp.hub.export import check_out_dir, export_bert_modules, float32_policy
    from tfapp.models.bert import BertEncoder

    import tensorflow as tf

    out_dir = Path(out_dir)
    check_out_dir(out_dir, overwrite)
    if tf.distribute.has_strategy():
        raise ConfigError("build_bert_hub must run outside a distribution strategy scope")
    max_positions = params.bert.max_position_embeddings
    if params.seq_length > max_positions:
        raise ConfigError(f"seq_length {params.seq_length} exceeds max_positions "
                          f"{max_positions}; lower it or raise --max-positions")

    texts = list(corpus)
    vocab = build_wordpiece_vocab(texts, params.bert.vocab_size, lower_case=params.lower_case)
    if params.whole_words:
        vocab = whole_words_only(vocab, texts, params.lower_case)
    cfg = replace(params.bert, vocab_size=len(vocab))
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = write_vocab(vocab, Path(tmp) / "vocab.txt")
        with float32_policy():
            encoder = BertEncoder(cfg, seed=params.seed).build_weights()
        return export_bert_modules(
            encoder, vocab_file, out_dir, lower_case=params.lower_case,
            default_seq_length=params.seq_length, overwrite=overwrite,
            extra_metadata={"build_params": asdict(params), **(extra_metadata or {})})
