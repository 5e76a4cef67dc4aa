"""The shape of a BERT encoder: ``BertConfig``, with no TensorFlow to load.

The one description of a BERT's sizes: the encoder (``tfapp.models.bert``) is built from
it, a Hub module's ``tfapp_hub.json`` stores it, and ``python -m tfapp.hub build-bert``
(``tfapp.hub.builder.BuildParams``) and ``convert`` fill it in. Kept apart from the
encoder so that describing a module (e.g. the builtin one's cache key) loads no TensorFlow.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["ACTIVATIONS", "BertConfig"]

# Hugging Face "gelu" is the exact erf form (as in the original BERT); "gelu_new" /
# "gelu_pytorch_tanh" are the tanh approximation.
ACTIVATIONS = ("gelu", "gelu_approx", "relu")


@dataclass
class BertConfig:
    """Size and regularisation of a BERT encoder.

    Attributes:
      vocab_size: WordPiece vocabulary size (rows of the word embedding).
      hidden_size: width of every layer (must be divisible by num_heads).
      num_layers: transformer layers.
      num_heads: attention heads per layer.
      intermediate_size: width of the feed-forward (GELU) layer.
      max_position_embeddings: longest sequence the position embedding covers.
      type_vocab_size: segment ids (2 for sentence pairs).
      dropout: dropout on embeddings and on each sublayer's output (training only).
      attention_dropout: dropout on the attention probabilities (training only).
      initializer_range: stddev of the truncated-normal weight initialiser.
      layer_norm_epsilon: LayerNorm epsilon (1e-12 in the original BERT).
      activation: feed-forward activation: gelu (exact, erf), gelu_approx (tanh) or relu.
      embedding_size: width of the embeddings when it differs from hidden_size (ELECTRA):
        a dense layer projects the normalised embeddings to hidden_size. None (the default,
        BERT) has no projection and is left out of ``to_dict``, so the configs, metadata
        and cache keys of every existing module stay what they were.
    """

    vocab_size: int
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1
    initializer_range: float = 0.02
    layer_norm_epsilon: float = 1e-12
    activation: str = "gelu"
    embedding_size: int | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"BertConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"BertConfig.hidden_size={self.hidden_size} is not divisible by "
                             f"num_heads={self.num_heads}; pick a multiple")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got "
                                 f"{getattr(self, name)}")
        if self.embedding_size is not None and int(self.embedding_size) < 1:
            raise ValueError(f"BertConfig.embedding_size must be >= 1 or None, got "
                             f"{self.embedding_size}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"BertConfig.activation='{self.activation}' is unknown; choose one "
                             f"of: {', '.join(ACTIVATIONS)}")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def embedding_width(self) -> int:
        """Width of the word/position/type embeddings (hidden_size unless projected)."""
        return self.embedding_size or self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["embedding_size"] is None:  # BERT: the dict every module written so far holds
            del d["embedding_size"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BertConfig:
        """Build from a dict, ignoring unknown keys (files written by newer versions)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def num_parameters(self, include_embeddings: bool = True) -> int:
        """Trainable parameter count (used for FLOP estimates and logs)."""
        h, i = self.hidden_size, self.intermediate_size
        per_layer = 4 * (h * h + h) + 2 * 2 * h + (h * i + i) + (i * h + h)
        total = self.num_layers * per_layer + h * h + h  # + pooler
        if include_embeddings:
            e = self.embedding_width
            total += (self.vocab_size + self.max_position_embeddings
                      + self.type_vocab_size) * e + 2 * e
            if self.embedding_size is not None:
                total += e * h + h  # the projection to hidden_size
        return total
