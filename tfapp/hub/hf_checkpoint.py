"""tfapp's BERT weights written as a Hugging Face checkpoint: the inverse of ``convert``.

``tfapp.hub.convert`` reads ``BertModel`` names into tfapp's stable weight names; this
module goes the other way for a fine-tuned model (``tfapp export-hf``):

* ``hf_config``: ``config.json`` of a ``BertForSequenceClassification`` /
  ``BertForTokenClassification`` with the encoder's sizes and ``id2label``/``label2id``;
* ``hf_encoder_weights`` / ``hf_head_weights``: the encoder under ``bert.`` (the names
  ``tfapp.models.bert.hf_weight_name`` gives, Dense kernels transposed to PyTorch's
  ``[out, in]``) and the output layer as ``classifier.weight``/``classifier.bias``;
* ``write_tokenizer``: ``vocab.txt``, ``tokenizer_config.json`` and
  ``special_tokens_map.json`` for transformers' ``BertTokenizer``.

Every weight is checked against the encoder the config describes (names and shapes):
a silent mismatch would give a checkpoint that loads with random weights in places.
No TensorFlow at import; ``hf_encoder_weights`` builds the encoder to know its shapes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tfapp.config import ConfigError
from tfapp.hub.convert import HF_ACTIVATIONS
from tfapp.models.bert_config import BertConfig

import numpy as np

__all__ = ["ENCODER_PREFIX", "SEQUENCE_CLASSIFICATION", "TOKEN_CLASSIFICATION",
           "binary_as_two_logits", "hf_config", "hf_encoder_weights", "hf_head_weights",
           "save_weights", "write_tokenizer"]

SEQUENCE_CLASSIFICATION = "BertForSequenceClassification"
TOKEN_CLASSIFICATION = "BertForTokenClassification"
ENCODER_PREFIX = "bert."  # where transformers' task models keep the encoder
# tfapp activation -> Hugging Face hidden_act (the first HF name convert maps to it).
HF_ACTIVATION_NAMES = {ours: theirs for theirs, ours in reversed(HF_ACTIVATIONS.items())}
SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                  "cls_token": "[CLS]", "mask_token": "[MASK]"}


def hf_config(cfg: BertConfig, *, architecture: str, labels: list[str], pad_token_id: int,
              classifier_dropout: float, problem_type: str | None = None) -> dict[str, Any]:
    """``config.json`` of a transformers BERT task model with tfapp's encoder sizes."""
    config: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": "bert",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": HF_ACTIVATION_NAMES[cfg.activation],
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_position_embeddings,
        "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": cfg.initializer_range,
        "layer_norm_eps": cfg.layer_norm_epsilon,
        "position_embedding_type": "absolute",
        "pad_token_id": pad_token_id,
        # tfapp's head dropout (model.dropout), which HF applies before `classifier`.
        "classifier_dropout": classifier_dropout,
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
        "torch_dtype": "float32",
    }
    if problem_type:
        config["problem_type"] = problem_type
    return config


def hf_encoder_weights(weights: dict[str, np.ndarray], cfg: BertConfig, *, pooler: bool,
                       source: str) -> dict[str, np.ndarray]:
    """tfapp's stable encoder weight names -> ``bert.``-prefixed Hugging Face names.

    ``weights`` must hold exactly the encoder ``cfg`` builds, shape for shape (a
    ``ConfigError`` naming ``source`` otherwise); ``pooler`` False leaves the pooler out
    (``BertForTokenClassification`` has none).
    """
    from tfapp.hub.export import float32_policy
    from tfapp.models.bert import BertEncoder, hf_weight_name

    with float32_policy():
        shapes = {n: tuple(v.shape) for n, v in BertEncoder(cfg).named_weights().items()}
    missing = sorted(set(shapes) - set(weights))
    extra = sorted(set(weights) - set(shapes))
    if missing or extra:
        raise ConfigError(f"{source}: its encoder weights are not those of the BERT its config "
                          f"describes (missing {', '.join(missing[:3]) or '-'}; unexpected "
                          f"{', '.join(extra[:3]) or '-'}); the export and the encoder handle "
                          "are from different models")
    out = {}
    for name, shape in shapes.items():
        value = np.asarray(weights[name], dtype=np.float32)
        if tuple(value.shape) != shape:
            raise ConfigError(f"{source}: weight {name} has shape {tuple(value.shape)}, the "
                              f"encoder config implies {shape}; the export and the encoder "
                              "handle are from different models")
        if name.startswith("pooler/") and not pooler:
            continue
        hf_name, transpose = hf_weight_name(name)
        out[ENCODER_PREFIX + hf_name] = np.ascontiguousarray(value.T if transpose else value)
    return out


def binary_as_two_logits(kernel: np.ndarray, bias: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """tfapp's binary head (one sigmoid unit, logit z) as two softmax logits ``[0, z]``:
    softmax([0, z])[1] == sigmoid(z) exactly, so ``BertForSequenceClassification``
    (which reads 1 label as regression) gives tfapp's two probabilities."""
    zeros = np.zeros_like(kernel)
    return np.concatenate([zeros, kernel], axis=1), np.concatenate([np.zeros_like(bias), bias])


def hf_head_weights(kernel: np.ndarray, bias: np.ndarray) -> dict[str, np.ndarray]:
    """The output Dense (kernel ``[hidden, labels]``) as ``classifier.weight/bias``."""
    return {"classifier.weight": np.ascontiguousarray(np.asarray(kernel, np.float32).T),
            "classifier.bias": np.ascontiguousarray(np.asarray(bias, np.float32))}


def save_weights(weights: dict[str, np.ndarray], path: Path) -> None:
    """``model.safetensors`` as transformers writes it (``format: pt`` in the header,
    which transformers checks)."""
    from safetensors.numpy import save_file

    save_file(weights, str(path), metadata={"format": "pt"})


def write_tokenizer(out: Path, vocab_file: Path, *, lower_case: bool,
                    max_length: int) -> None:
    """The files transformers' ``BertTokenizer`` loads. ``do_lower_case`` also strips
    accents (``strip_accents`` unset follows it), as tfapp's preprocessor does;
    ``model_max_length`` is the run's ``data.seq_length``, so ``truncation=True`` cuts
    texts where tfapp did."""
    (out / "vocab.txt").write_bytes(Path(vocab_file).read_bytes())
    tokenizer_config = {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(lower_case),
                        "strip_accents": None, "tokenize_chinese_chars": True,
                        "model_max_length": int(max_length), **SPECIAL_TOKENS}
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n",
                                               encoding="utf-8")
    (out / "special_tokens_map.json").write_text(json.dumps(SPECIAL_TOKENS, indent=2) + "\n",
                                                 encoding="utf-8")
