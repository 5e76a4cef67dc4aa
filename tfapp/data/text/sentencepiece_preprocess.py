"""XLM-RoBERTa's SentencePiece preprocessing with the TF-Hub BERT preprocessor interface.

``SentencepiecePreprocessor`` is saved as the preprocessor of a converted XLM-R module and
offers what tfapp (``make_bert_preprocess_fn``) and TF-Hub users call on
``BertPreprocessor``: ``tokenize(strings)`` -> int32 ``[batch, (pieces)]``,
``bert_pack_inputs(segments, seq_length=N)`` and ``__call__``.

The ids are fairseq's, as Hugging Face's ``XLMRobertaTokenizer`` gives them: the model's
SentencePiece ids shifted by one, with fairseq's specials in front (``<s>`` 0, ``<pad>`` 1,
``</s>`` 2, ``<unk>`` 3; SentencePiece's own ``<unk>``, id 0, becomes 3) and ``<mask>``
last. Pairs are packed as ``<s> a </s></s> b </s>``, type ids all 0, padding id 1.
tensorflow-text's ``SentencepieceTokenizer`` runs the model; the model file travels in the
SavedModel as an asset (``sp_model_file``) and as a graph constant the op reads.
"""

from __future__ import annotations

import os

from tfapp.data.text.bert_preprocess import PackInputs
from tfapp.errors import DataError

import tensorflow as tf
import tensorflow_text as tf_text

__all__ = ["FAIRSEQ_OFFSET", "SentencepiecePreprocessor", "sentencepiece_size"]

FAIRSEQ_OFFSET = 1  # fairseq id = SentencePiece id + 1 (its <s> <pad> </s> <unk> come first)
_SPECIAL = {"start_of_sequence_id": 0, "padding_id": 1, "end_of_segment_id": 2,
            "unknown_id": 3}


def sentencepiece_size(model: bytes, name: str) -> int:
    """Number of pieces in a serialized SentencePiece model (``DataError`` if unreadable)."""
    try:
        sp = tf_text.SentencepieceTokenizer(model=model)
        return int(sp.vocab_size().numpy())
    except Exception as err:  # a corrupt proto is an InternalError/InvalidArgumentError dump
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DataError(f"{name} is not a SentencePiece model ({first[:160]}); give the "
                        "checkpoint's sentencepiece.bpe.model") from None


class _Tokenize(tf.Module):
    """``pre.tokenize``: strings ``[batch]`` -> fairseq ids int32 ``[batch, (pieces)]``."""

    def __init__(self, model: bytes, special_ids: dict[str, int]):
        super().__init__(name="tokenize")
        self._sp = tf_text.SentencepieceTokenizer(model=model, out_type=tf.int32)
        self._special_ids = dict(special_ids)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def __call__(self, strings: tf.Tensor) -> tf.RaggedTensor:
        pieces = self._sp.tokenize(strings)
        unk = self._special_ids["unknown_id"]
        return tf.ragged.map_flat_values(
            lambda v: tf.where(v == 0, tf.constant(unk, tf.int32), v + FAIRSEQ_OFFSET), pieces)

    @tf.function(input_signature=[], autograph=False)
    def get_special_tokens_dict(self) -> dict[str, tf.Tensor]:
        out = {k: tf.constant(v, tf.int32) for k, v in self._special_ids.items()}
        out["vocab_size"] = tf.constant(self._special_ids["mask_id"] + 1, tf.int32)
        return out


class SentencepiecePreprocessor(tf.Module):
    """SentencePiece tokenizer (fairseq ids) + RoBERTa packer, saveable as a TF-Hub module.

    Args:
      model_file: the ``sentencepiece.bpe.model`` of an XLM-RoBERTa checkpoint.
      seq_length: default length of ``__call__`` and of ``bert_pack_inputs``.
    """

    def __init__(self, model_file: str | os.PathLike, seq_length: int = 128):
        super().__init__(name="sentencepiece_preprocessor")
        with open(model_file, "rb") as fh:
            model = fh.read()
        pieces = sentencepiece_size(model, str(model_file))
        if seq_length < 4:
            raise DataError(f"seq_length {seq_length} is too small for <s> text </s>; use >= 4")
        self.seq_length = int(seq_length)
        self.vocab_size = pieces + FAIRSEQ_OFFSET + 1  # + <pad>/<s> shift, + <mask>
        self.special_ids = {**_SPECIAL, "mask_id": self.vocab_size - 1}
        self.sp_model_file = tf.saved_model.Asset(str(model_file))
        self.do_lower_case = tf.Variable(False, trainable=False, name="do_lower_case")
        self.tokenize = _Tokenize(model, self.special_ids)
        self.bert_pack_inputs = PackInputs(self.seq_length, self.special_ids,
                                           double_separator=True)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def __call__(self, strings: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.bert_pack_inputs([self.tokenize(strings)], seq_length=self.seq_length)
