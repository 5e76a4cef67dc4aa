"""BERT text preprocessing with the interface of the official TF-Hub preprocessors.

``BertPreprocessor`` is a ``tf.Module`` that can be saved with ``tf.saved_model.save`` and
loaded back with plain ``hub.load``; it then behaves like ``bert_en_uncased_preprocess``:

* ``pre.tokenize(strings)`` -> int32 RaggedTensor ``[batch, (words), (wordpieces)]``;
* ``pre.bert_pack_inputs([seg_a, seg_b], seq_length=N)`` -> dict of int32 ``[batch, N]``
  ``input_word_ids`` / ``input_mask`` / ``input_type_ids`` laid out as
  ``[CLS] a [SEP] b [SEP]`` and trimmed round-robin (tensorflow-text's
  ``RoundRobinTrimmer``) when the segments do not fit;
* ``pre(strings)`` = tokenize + pack at the default ``seq_length``.

As in tf-models' ``export_tfhub_lib.BertPackInputsSavedModelWrapper``, ``bert_pack_inputs``
is a sub-object whose ``__call__`` is traced for one or two segments of ragged rank 1 or 2
with ``seq_length`` as a scalar int32 *tensor*, so a loaded module packs to any length
(``hub.KerasLayer(pre.bert_pack_inputs, arguments=dict(seq_length=N))`` works). The vocab
travels inside the SavedModel as an asset (``pre.vocab_file``), like the official encoders.

``make_bert_preprocess_fn`` turns either such a SavedModel (any handle ``hub.load`` takes)
or a vocab file into the batched ``fn(text[, text_pair]) -> features`` that tf.data maps.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from typing import Any

from tfapp.data.text.vocab import read_vocab
from tfapp.errors import DataError

import tensorflow as tf
import tensorflow_text as tf_text

__all__ = ["BertPreprocessor", "FastBertPacker", "PackInputs", "make_bert_preprocess_fn",
           "pack_segments", "FEATURE_KEYS", "vocab_tokens"]

FEATURE_KEYS = ("input_word_ids", "input_mask", "input_type_ids")

_SPECIAL = {"padding_id": "[PAD]", "unknown_id": "[UNK]", "start_of_sequence_id": "[CLS]",
            "end_of_segment_id": "[SEP]", "mask_id": "[MASK]"}


def pack_segments(segments: list[tf.RaggedTensor], seq_length: int | tf.Tensor, *,
                  start_of_sequence_id: int, end_of_segment_id: int,
                  padding_id: int, double_separator: bool = False) -> dict[str, tf.Tensor]:
    """Pack 1-2 token segments into fixed-length BERT inputs (the official packing rule).

    Each segment is ``[batch, (tokens)]`` or ``[batch, (words), (wordpieces)]``. Segments are
    trimmed round-robin to ``seq_length - (num_segments + 1)`` tokens (room for ``[CLS]`` and
    one ``[SEP]`` per segment), combined, and padded with ``padding_id``.

    ``double_separator``: RoBERTa's (XLM-R's) layout instead, ``<s> a </s></s> b </s>``
    (one more separator, so room for ``2 * num_segments`` specials) with every type id 0.
    """
    if not isinstance(segments, list | tuple):
        segments = [segments]
    if not 1 <= len(segments) <= 2:
        raise ValueError(f"bert_pack_inputs takes 1 or 2 segments, got {len(segments)}")
    segments = [s.merge_dims(1, -1) if s.shape.rank > 2 else s for s in segments]
    segments = [tf.cast(s, tf.int32) for s in segments]
    budget = seq_length - (2 * len(segments) if double_separator else len(segments) + 1)
    trimmed = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(segments)
    if double_separator and len(trimmed) == 2:
        first = trimmed[0]
        end = tf.fill([first.nrows(), 1], tf.cast(end_of_segment_id, first.dtype))
        trimmed = [tf.concat([first, tf.RaggedTensor.from_tensor(end)], axis=1), trimmed[1]]
    combined, type_ids = tf_text.combine_segments(
        trimmed, start_of_sequence_id=start_of_sequence_id, end_of_segment_id=end_of_segment_id)
    word_ids, _ = tf_text.pad_model_inputs(combined, seq_length, pad_value=padding_id)
    type_ids, mask = tf_text.pad_model_inputs(type_ids, seq_length, pad_value=0)
    if double_separator:
        type_ids = tf.zeros_like(type_ids)
    # pad_model_inputs loses the static shape; state it (batch, seq_length) as tf-models does.
    shape = tf.stack([segments[0].nrows(out_type=tf.int32), tf.cast(seq_length, tf.int32)])
    return {
        "input_word_ids": tf.reshape(tf.cast(word_ids, tf.int32), shape),
        "input_mask": tf.reshape(tf.cast(mask, tf.int32), shape),
        "input_type_ids": tf.reshape(tf.cast(type_ids, tf.int32), shape),
    }


# The modules' tf.functions hold no Python control flow on tensors, so they are traced
# with autograph=False: autograph would only rewrite tensorflow_text's Python source on
# every trace, and tf.saved_model.save traces each function once more.
class _Tokenize(tf.Module):
    """``pre.tokenize``: strings ``[batch]`` -> int32 ``[batch, (words), (wordpieces)]``."""

    def __init__(self, vocab_asset: tf.saved_model.Asset, lower_case: bool,
                 special_ids: dict[str, int]):
        super().__init__(name="tokenize")
        # The table reads the vocab through the asset, so a SavedModel carries its own copy
        # in assets/ and never points back at the original file.
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                vocab_asset, key_dtype=tf.string, key_index=tf.lookup.TextFileIndex.WHOLE_LINE,
                value_dtype=tf.int64, value_index=tf.lookup.TextFileIndex.LINE_NUMBER),
            default_value=special_ids["unknown_id"])
        self._tokenizer = tf_text.BertTokenizer(
            self._table, token_out_type=tf.int32, lower_case=lower_case, unknown_token="[UNK]")
        self._special_ids = dict(special_ids)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def __call__(self, strings: tf.Tensor) -> tf.RaggedTensor:
        return self._tokenizer.tokenize(strings)

    @tf.function(input_signature=[], autograph=False)
    def get_special_tokens_dict(self) -> dict[str, tf.Tensor]:
        """Special token ids and vocab size, as the official ``tokenize`` sub-object offers."""
        out = {k: tf.constant(v, tf.int32) for k, v in self._special_ids.items()}
        out["vocab_size"] = tf.cast(self._table.size(), tf.int32)
        return out


class PackInputs(tf.Module):
    """``pre.bert_pack_inputs(segments, seq_length=N)`` with an overridable default length.

    The traced function lives on the instance (a closure over the default), mirroring
    tf-models' ``BertPackInputsSavedModelWrapper``: SavedModel keeps the traces for one or
    two segments of ragged rank 1 or 2 with a tensor ``seq_length``, so a loaded module
    accepts any length.
    """

    def __init__(self, default_seq_length: int, special_ids: dict[str, int],
                 double_separator: bool = False):
        super().__init__(name="bert_pack_inputs")
        ids = dict(start_of_sequence_id=special_ids["start_of_sequence_id"],
                   end_of_segment_id=special_ids["end_of_segment_id"],
                   padding_id=special_ids["padding_id"], double_separator=double_separator)

        @tf.function(autograph=False)
        def call(inputs, seq_length=default_seq_length):
            return pack_segments(list(inputs), seq_length, **ids)

        self.__call__ = call
        for ragged_rank in (1, 2):
            for num_segments in (1, 2):
                call.get_concrete_function(
                    [tf.RaggedTensorSpec([None] * (ragged_rank + 1), tf.int32)
                     for _ in range(num_segments)],
                    seq_length=tf.TensorSpec([], tf.int32))

    def __call__(self, inputs, seq_length=None):  # noqa: D105 (pre-save calls)
        # Python looks special methods up on the type; route to the traced instance function.
        call = self.__dict__["__call__"]
        return call(inputs) if seq_length is None else call(inputs, seq_length=seq_length)


def read_bert_vocab(vocab_file: str | os.PathLike) -> tuple[list[str], dict[str, int]]:
    """The vocab and its special-token ids; [PAD] [UNK] [CLS] [SEP] must be present, and
    every line one token: a duplicate makes TensorFlow's lookup table fail when the module
    is built or loaded, and an empty line or a token with a space, tab or CR (a CRLF file)
    inside can never be matched (BERT splits text at whitespace first)."""
    vocab = read_vocab(vocab_file)
    index: dict[str, int] = {}
    for i, tok in enumerate(vocab):
        if not tok:
            raise DataError(f"{vocab_file}:{i + 1}: empty line; a BERT vocab has one token on "
                            "every line: remove the line (or restore its token)")
        if any(ch in " \t\r\v\f" for ch in tok):
            crlf = " (CRLF line ends: save the file with LF line ends)" if tok.endswith("\r") \
                else ""
            raise DataError(f"{vocab_file}:{i + 1}: token {tok!r} has whitespace inside{crlf}; "
                            "a BERT vocab has one token, without spaces, on every line")
        if tok in index:
            raise DataError(f"{vocab_file}:{i + 1}: token {tok!r} is already on line "
                            f"{index[tok] + 1}; a BERT vocab lists each token once")
        index[tok] = i
    missing = [tok for key, tok in _SPECIAL.items() if tok not in index and key != "mask_id"]
    if missing:
        raise DataError(f"{vocab_file}: vocab lacks the special token(s) {', '.join(missing)}; "
                        "a BERT vocab needs [PAD] [UNK] [CLS] [SEP]")
    return vocab, {k: index[t] for k, t in _SPECIAL.items() if t in index}


class BertPreprocessor(tf.Module):
    """WordPiece tokenizer + BERT packer from a ``vocab.txt``, saveable as a TF-Hub module.

    Args:
      vocab_file: BERT vocab (one token per line; must hold [PAD] [UNK] [CLS] [SEP]).
      lower_case: lower-case and strip accents before WordPiece (uncased models).
      seq_length: default length of ``__call__`` and of ``bert_pack_inputs``.
    """

    def __init__(self, vocab_file: str | os.PathLike, lower_case: bool = True,
                 seq_length: int = 128):
        super().__init__(name="bert_preprocessor")
        vocab, special = read_bert_vocab(vocab_file)
        if seq_length < 3:
            raise DataError(f"seq_length {seq_length} is too small for [CLS] text [SEP]; use >= 3")
        self.seq_length = int(seq_length)
        self.vocab_size = len(vocab)
        self.special_ids = dict(special)
        # Public attributes as on the official BERT SavedModels: the vocab asset and casing.
        self.vocab_file = tf.saved_model.Asset(str(vocab_file))
        self.do_lower_case = tf.Variable(bool(lower_case), trainable=False, name="do_lower_case")
        self.tokenize = _Tokenize(self.vocab_file, lower_case, special)
        self.bert_pack_inputs = PackInputs(self.seq_length, special)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def __call__(self, strings: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.bert_pack_inputs([self.tokenize(strings)], seq_length=self.seq_length)


class FastBertPacker(tf.Module):
    """The vocab-file path of ``make_bert_preprocess_fn``: same ids, several times faster.

    tensorflow-text's ``FastBertTokenizer`` (LinMaxMatch WordPiece in one C++ op) gives the
    same wordpiece ids as ``BertTokenizer`` -- the tests check both against a plain-Python
    reference -- without the words dimension (``[batch, (wordpieces)]``), which packing
    flattens anyway. Not a Hub preprocessor: export ``BertPreprocessor`` for that.
    """

    def __init__(self, vocab_file: str | os.PathLike, lower_case: bool = True):
        super().__init__(name="fast_bert_packer")
        self.vocab_path = str(vocab_file)
        vocab, special = read_bert_vocab(vocab_file)
        self._ids = {k: special[k] for k in ("start_of_sequence_id", "end_of_segment_id",
                                             "padding_id")}
        self._tokenizer = tf_text.FastBertTokenizer(
            vocab, token_out_type=tf.int32, unknown_token="[UNK]",
            lower_case_nfd_strip_accents=bool(lower_case))

    def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        return self._tokenizer.tokenize(strings)

    def bert_pack_inputs(self, segments: list[tf.RaggedTensor],
                         seq_length: int) -> dict[str, tf.Tensor]:
        return pack_segments(list(segments), seq_length, **self._ids)


@functools.lru_cache(maxsize=8)
def _load_hub_preprocessor(handle: str, digest: str) -> Any:
    """``hub.load(handle)``, checked to be a BERT preprocessor; once per process for each
    handle and content (``digest``: ``_preprocessor_digest``, so a handle whose files
    changed is loaded again). A preprocessor holds no state that training changes (its
    vocab table is read-only): every run of a process (each tune trial, a test's several
    runs) shares the one loaded module."""
    del digest  # a cache key only
    import tensorflow_hub as hub

    try:
        module = hub.load(handle)
    except Exception as err:  # hub/SavedModel errors are long multi-line dumps
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DataError(f"cannot load the BERT preprocessor '{handle}' ({first[:200]}); give a "
                        "TF-Hub preprocessor handle or directory, or leave it empty and set a "
                        "vocab file") from None
    for attr in ("tokenize", "bert_pack_inputs"):
        if not hasattr(module, attr):
            raise DataError(f"'{handle}' is not a BERT preprocessor SavedModel (no .{attr}); "
                            "give one with the TF-Hub tokenize/bert_pack_inputs interface")
    return module


def make_bert_preprocess_fn(*, hub_preprocessor: str = "", vocab_file: str = "",
                            lower_case: bool = True,
                            seq_length: int) -> Callable[..., dict[str, tf.Tensor]]:
    """Batched ``fn(text[, text_pair]) -> {input_word_ids, input_mask, input_type_ids}``.

    ``text``/``text_pair`` are string tensors ``[batch]``; the features are int32
    ``[batch, seq_length]`` with a static ``seq_length`` (XLA/TPU need it). Uses
    ``hub.load(hub_preprocessor)`` when given (an official or tfapp-exported preprocessor),
    else tensorflow-text's ``FastBertTokenizer`` on ``vocab_file`` (``FastBertPacker``;
    the same ids as ``BertPreprocessor``). Map it after ``batch`` for vectorised
    tokenisation.
    """
    digest = _preprocessor_digest(hub_preprocessor) if hub_preprocessor else ""
    if hub_preprocessor:
        module = _load_hub_preprocessor(hub_preprocessor, digest)
    elif vocab_file:
        module = FastBertPacker(vocab_file, lower_case=lower_case)
    else:
        raise DataError("BERT preprocessing needs model.hub_preprocessor (a preprocessor "
                        "SavedModel) or a vocab file; set one of them")
    tokenize, pack = module.tokenize, module.bert_pack_inputs

    def preprocess(text: tf.Tensor, text_pair: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        segments = [tokenize(text)]
        if text_pair is not None:
            segments.append(tokenize(text_pair))
        features = pack(segments, seq_length=seq_length)
        return {k: tf.ensure_shape(tf.cast(features[k], tf.int32), [None, seq_length])
                for k in FEATURE_KEYS}

    preprocess.module = module  # keep the (loaded) module alive as long as the fn
    preprocess.vocab_size = len(vocab_tokens(module)) or None
    # What decides the output ids: snapshots and caches of the preprocessed data are keyed
    # by it, so a changed vocab, casing, length or preprocessor never reuses stale ids.
    source = digest or _file_digest(vocab_file, vocab_file)
    preprocess.fingerprint = (f"bert:{'hub' if hub_preprocessor else 'vocab'}:{source}:"
                              f"lower={bool(lower_case)}:seq={seq_length}")
    return preprocess


def vocab_tokens(module: Any) -> list[str]:
    """The word pieces of a preprocessor (tfapp's or an official one) from its vocab
    asset, or its vocab file; empty when it has none."""
    path = getattr(module, "vocab_path", None)
    asset = getattr(module, "vocab_file", None)
    if path is None and asset is not None:
        path = getattr(asset, "asset_path", None)
        path = path.numpy().decode() if path is not None else None
    if path is None:
        return []
    with tf.io.gfile.GFile(path) as fh:
        return [line.rstrip("\n") for line in fh]


def _preprocessor_digest(handle: str) -> str:
    """What names a preprocessor SavedModel's content: its saved_model.pb's digest (every
    save writes a new one), or ``handle`` itself when it is not a folder (a tfhub.dev URL
    names a fixed version)."""
    return _file_digest(os.path.join(handle, "saved_model.pb"), handle)


def _file_digest(path: str, fallback: str) -> str:
    """sha256 of a file's bytes (local or gs://), or ``fallback`` when it is not a file."""
    try:
        with tf.io.gfile.GFile(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()[:16]
    except (tf.errors.OpError, OSError):
        return fallback  # e.g. a tfhub.dev URL: the handle itself names a fixed version
