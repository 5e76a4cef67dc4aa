"""Convert a Hugging Face BERT-family checkpoint directory into tfapp's TF-Hub modules.

``convert_hf_bert`` is what ``python -m tfapp.hub convert --from DIR --out HUB_DIR`` runs.
DIR is a Hugging Face checkpoint as ``save_pretrained`` writes it::

    config.json               model_type (FAMILIES): sizes, activation, eps, ...
    model.safetensors         the weights (or model.safetensors.index.json + shards)
    vocab.txt                 WordPiece vocabulary (else tokenizer.json's)
    sentencepiece.bpe.model   XLM-RoBERTa's tokenizer instead
    tokenizer_config.json     do_lower_case (or tokenizer.json's normalizer)

The weights are read with the ``safetensors`` package into numpy arrays (no torch),
mapped onto tfapp's own ``BertEncoder`` (``tfapp.models.bert.hf_weight_name`` gives each
Hugging Face name; Dense kernels are transposed) and exported with
``tfapp.hub.export.export_bert_modules``, exactly as ``build-bert`` does, so the result
works as ``model.hub_handle: HUB_DIR``.

What is checked, because a silent mismatch would give a model that runs but is wrong:
the architecture (plain post-LN BERT with absolute positions), the activation (HF
``gelu`` is the exact erf form; ``gelu_new``/``gelu_pytorch_tanh`` the tanh one), the
LayerNorm epsilon, every encoder weight present with the right shape, and the
vocabulary fitting the word embedding.

Families (``FAMILIES``): all are post-LN BERT encoders with absolute positions, so each
maps onto the same ``BertEncoder``. ``bert`` (BERT, multilingual BERT, MiniLM) as is;
``distilbert`` renames its layers (``q_lin``, ``sa_layer_norm``, ``ffn.lin1``, ...) and has
no token types (one zero type row: the same sums) and no pooler; ``electra`` (ELECTRA's
discriminator or generator) has BERT's names, no pooler, and narrower embeddings
projected to hidden_size (``BertConfig.embedding_size``); ``xlm-roberta`` has BERT's
names under ``roberta.``, positions that start at padding_idx + 1 (the rows before are
dropped), one token type, and a SentencePiece tokenizer (exported with
``tfapp.data.text.sentencepiece_preprocess``, fairseq's ids). A checkpoint without a pooler
gets a seeded random one, recorded in the metadata. Pickle checkpoints (``pytorch_model.bin``,
``*.pt``, ``*.ckpt``) are refused and never opened: unpickling runs arbitrary code.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from tfapp.config import ConfigError
from tfapp.errors import DataError
from tfapp.textio import decode_strict

import numpy as np

__all__ = ["HF_ACTIVATIONS", "convert_hf_bert", "read_hf_bert"]

log = logging.getLogger("tfapp")

# Hugging Face hidden_act -> tfapp BertConfig.activation.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_approx", "gelu_pytorch_tanh": "gelu_approx",
                  "gelu_fast": "gelu_approx", "relu": "relu"}
# model_type -> prefix of the encoder in its task models (BertForMaskedLM,
# DistilBertForSequenceClassification, ElectraForPreTraining, ...); their heads ("cls.",
# "classifier.", "discriminator_predictions.", ...) are not the encoder and are ignored.
FAMILIES = {"bert": "bert.", "distilbert": "distilbert.", "electra": "electra.",
            "xlm-roberta": "roberta."}
# XLM-R's tokenizer: a SentencePiece model with fairseq's ids
# (tfapp.data.text.sentencepiece_preprocess).
SENTENCEPIECE_MODEL = "sentencepiece.bpe.model"
SUPPORTED_MODEL_TYPES = tuple(FAMILIES)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# DistilBERT's config keys -> BERT's (its LayerNorms always use eps 1e-12).
_DISTILBERT_CONFIG = {"dim": "hidden_size", "n_layers": "num_hidden_layers",
                      "n_heads": "num_attention_heads", "hidden_dim": "intermediate_size",
                      "activation": "hidden_act", "dropout": "hidden_dropout_prob",
                      "attention_dropout": "attention_probs_dropout_prob"}
# DistilBERT's layer names -> BertModel's (after "transformer.layer.N." / "encoder.layer.N.").
_DISTILBERT_LAYER = {"attention.q_lin": "attention.self.query",
                     "attention.k_lin": "attention.self.key",
                     "attention.v_lin": "attention.self.value",
                     "attention.out_lin": "attention.output.dense",
                     "sa_layer_norm": "attention.output.LayerNorm",
                     "ffn.lin1": "intermediate.dense", "ffn.lin2": "output.dense",
                     "output_layer_norm": "output.LayerNorm"}
IGNORED = ("embeddings.position_ids",)  # a buffer, not a weight


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(decode_strict(path.read_bytes(), str(path)))  # BOM dropped
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path} is not valid JSON ({err}); re-save the checkpoint with "
                          "save_pretrained") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object; expected a Hugging Face config")
    return data


def _distilbert_as_bert(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    """A DistilBERT config.json in BERT's keys: one token type, eps 1e-12."""
    if cfg.get("sinusoidal_pos_embds"):
        raise ConfigError(f"{path}: sinusoidal_pos_embds is true; tfapp converts DistilBERT "
                          "with learned position embeddings only (the released checkpoints)")
    out = {bert: cfg[key] for key, bert in _DISTILBERT_CONFIG.items() if key in cfg}
    keep = ("model_type", "vocab_size", "max_position_embeddings", "initializer_range")
    return {**{k: cfg[k] for k in keep if k in cfg}, **out, "type_vocab_size": 1,
            "layer_norm_eps": 1e-12}


def _roberta_positions_offset(cfg: dict[str, Any]) -> int:
    """RoBERTa numbers positions from padding_idx + 1 (fairseq): rows before are unused."""
    return int(cfg.get("pad_token_id", 1)) + 1


def _roberta_as_bert(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    """An XLM-R config.json with the position rows it uses (see ``_encoder_weights``)."""
    offset = _roberta_positions_offset(cfg)
    positions = int(cfg.get("max_position_embeddings", 514)) - offset
    if positions < 4:
        raise ConfigError(f"{path}: max_position_embeddings {positions + offset} leaves no room "
                          f"for positions after padding_idx + 1 = {offset}")
    return {**cfg, "max_position_embeddings": positions,
            "type_vocab_size": cfg.get("type_vocab_size", 1)}


def _bert_config(cfg: dict[str, Any], path: Path):
    from tfapp.models.bert import BertConfig

    model_type = cfg.get("model_type", "")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(f"{path}: model_type '{model_type}' is not supported; tfapp converts "
                          f"{', '.join(SUPPORTED_MODEL_TYPES)} checkpoints (BERT, multilingual "
                          "BERT, MiniLM, DistilBERT, ELECTRA, XLM-RoBERTa and their task models)")
    if model_type == "distilbert":
        cfg = _distilbert_as_bert(cfg, path)
    if model_type == "xlm-roberta":
        cfg = _roberta_as_bert(cfg, path)
    position = cfg.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise ConfigError(f"{path}: position_embedding_type '{position}' is not supported; only "
                          "absolute position embeddings (the original BERT) convert")
    act = cfg.get("hidden_act", "gelu")
    if act not in HF_ACTIVATIONS:
        raise ConfigError(f"{path}: hidden_act '{act}' is not supported; expected one of "
                          f"{', '.join(HF_ACTIVATIONS)}")
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads", "intermediate_size") if k not in cfg]
    if missing:
        raise ConfigError(f"{path}: lacks {', '.join(missing)}; not a {model_type} config.json")
    embedding_size = cfg.get("embedding_size")  # ELECTRA; a projection only when it differs
    if embedding_size is not None and int(embedding_size) == int(cfg["hidden_size"]):
        embedding_size = None
    try:
        return BertConfig(
            vocab_size=int(cfg["vocab_size"]), hidden_size=int(cfg["hidden_size"]),
            num_layers=int(cfg["num_hidden_layers"]), num_heads=int(cfg["num_attention_heads"]),
            intermediate_size=int(cfg["intermediate_size"]),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 512)),
            type_vocab_size=int(cfg.get("type_vocab_size", 2)),
            dropout=float(cfg.get("hidden_dropout_prob", 0.1)),
            attention_dropout=float(cfg.get("attention_probs_dropout_prob", 0.1)),
            initializer_range=float(cfg.get("initializer_range", 0.02)),
            layer_norm_epsilon=float(cfg.get("layer_norm_eps", 1e-12)),
            activation=HF_ACTIVATIONS[act],
            embedding_size=None if embedding_size is None else int(embedding_size))
    except ValueError as err:
        raise ConfigError(f"{path}: {err}") from None


def _lower_case(src: Path) -> bool | None:
    """do_lower_case from tokenizer_config.json, else tokenizer.json's normalizer."""
    tok_cfg = src / "tokenizer_config.json"
    if tok_cfg.is_file():
        data = _read_json(tok_cfg)
        if "do_lower_case" in data:
            lower = bool(data["do_lower_case"])
            strip = data.get("strip_accents")
            if strip is not None and bool(strip) != lower:
                # tensorflow-text lower-cases and strips accents together (or neither).
                raise ConfigError(f"{tok_cfg}: do_lower_case={lower} with strip_accents={strip} "
                                  "cannot be reproduced by the TF-Hub preprocessor (it lower-cases "
                                  "and strips accents together); pass --lower-case or "
                                  "--no-lower-case to choose")
            return lower
    tok_json = src / "tokenizer.json"
    if tok_json.is_file():
        normalizer = _read_json(tok_json).get("normalizer") or {}
        if normalizer.get("type") == "BertNormalizer" and "lowercase" in normalizer:
            return bool(normalizer["lowercase"])
    return None


def _vocab_from_tokenizer_json(src: Path, tmp: Path) -> Path:
    """The WordPiece vocabulary of ``tokenizer.json`` written as ``tmp``/vocab.txt in id
    order (transformers 5 saves a BERT tokenizer as tokenizer.json only)."""
    tok_json = src / "tokenizer.json"
    if not tok_json.is_file():
        raise ConfigError(f"{src} has no vocab.txt (nor tokenizer.json); a BERT-family "
                          "checkpoint needs its WordPiece vocab: save its tokenizer with "
                          "save_pretrained into the same directory")
    model = _read_json(tok_json).get("model") or {}
    vocab = model.get("vocab")
    if model.get("type") != "WordPiece" or not isinstance(vocab, dict) \
            or model.get("continuing_subword_prefix", "##") != "##":
        raise ConfigError(f"{tok_json} is not a WordPiece tokenizer with '##' continuations "
                          f"(model type '{model.get('type')}'); tfapp's preprocessor is BERT's "
                          "WordPiece: give a checkpoint with a vocab.txt")
    by_id = {i: tok for tok, i in vocab.items()}
    if sorted(by_id) != list(range(len(vocab))):
        raise ConfigError(f"{tok_json}: the WordPiece ids are not 0..{len(vocab) - 1} (each "
                          "once); re-save the tokenizer with save_pretrained")
    out = tmp / "vocab.txt"
    out.write_text("".join(by_id[i] + "\n" for i in range(len(by_id))), encoding="utf-8")
    return out


def _sentencepiece_model(src: Path, vocab_size: int) -> bytes:
    """XLM-R's SentencePiece model, checked to fit the embedding with fairseq's ids (4
    specials before the pieces, SentencePiece's own 3 dropped, <mask> after: pieces + 2)."""
    from tfapp.data.text.sentencepiece_preprocess import sentencepiece_size

    path = src / SENTENCEPIECE_MODEL
    if not path.is_file():
        raise ConfigError(f"{src} has no {SENTENCEPIECE_MODEL}; an XLM-RoBERTa checkpoint needs "
                          "its SentencePiece model (tokenizer.json alone cannot be read by "
                          "tensorflow-text): copy it from the model's repository")
    model = path.read_bytes()
    try:
        pieces = sentencepiece_size(model, str(path))
    except DataError as err:
        raise ConfigError(str(err)) from None
    if pieces + 2 != vocab_size:
        raise ConfigError(f"{path} has {pieces} pieces, so {pieces + 2} fairseq ids, but "
                          f"config.json says vocab_size {vocab_size}; the files are from "
                          "different models")
    return model


def _check_chinese_chars(src: Path) -> None:
    """tensorflow-text's BERT tokenizer always splits CJK characters one per token (as
    BERT, multilingual BERT do); a tokenizer configured not to would get other ids."""
    split = True
    tok_cfg, tok_json = src / "tokenizer_config.json", src / "tokenizer.json"
    if tok_cfg.is_file() and "tokenize_chinese_chars" in (data := _read_json(tok_cfg)):
        split, where = bool(data["tokenize_chinese_chars"]), tok_cfg
    elif tok_json.is_file():
        normalizer = _read_json(tok_json).get("normalizer") or {}
        if normalizer.get("type") == "BertNormalizer":
            split, where = bool(normalizer.get("handle_chinese_chars", True)), tok_json
    if not split:
        raise ConfigError(f"{where}: tokenize_chinese_chars is false; the TF-Hub preprocessor "
                          "(tensorflow-text's BERT tokenizer) always splits CJK characters, so "
                          "its ids would differ from this tokenizer's")


def _load_safetensors(src: Path) -> dict[str, np.ndarray]:
    try:
        from safetensors.numpy import load_file
    except ImportError:
        raise ConfigError("converting needs the 'safetensors' package; pip install safetensors") \
            from None
    single, index = src / "model.safetensors", src / "model.safetensors.index.json"
    if single.is_file():
        files = [single]
    elif index.is_file():
        weight_map = _read_json(index).get("weight_map") or {}
        files = [src / name for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if not files or missing:
            raise ConfigError(f"{index} names missing shard(s): {', '.join(missing) or '-'}; "
                              "copy the whole checkpoint directory")
    else:
        pickles = sorted(p.name for p in src.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise ConfigError(f"{src} holds only a pickle checkpoint ({', '.join(pickles)}), which "
                              "tfapp never loads (unpickling runs arbitrary code); save it as "
                              "model.safetensors (transformers: model.save_pretrained(dir, "
                              "safe_serialization=True)) and convert that")
        raise ConfigError(f"{src} has no model.safetensors; expected a Hugging Face checkpoint "
                          "directory (config.json, model.safetensors, vocab.txt)")
    weights: dict[str, np.ndarray] = {}
    for f in files:
        try:
            weights.update(load_file(str(f)))
        except Exception as err:  # corrupt header, bfloat16 (numpy has no such dtype), ...
            raise ConfigError(f"{f} cannot be read by safetensors.numpy ({str(err)[:200]}); "
                              "re-save it in float32 or float16") from None
    return weights


def _distilbert_names(raw: dict[str, np.ndarray], cfg) -> dict[str, np.ndarray]:
    """DistilBERT's weights under BertModel's names, plus its (absent) token types as one
    zero row: adding zeros is what DistilBERT does."""
    out = {}
    for name, value in raw.items():
        m = re.fullmatch(r"transformer\.layer\.(\d+)\.(.+)\.(weight|bias)", name)
        if m and m.group(2) in _DISTILBERT_LAYER:
            name = f"encoder.layer.{m.group(1)}.{_DISTILBERT_LAYER[m.group(2)]}.{m.group(3)}"
        out[name] = value
    out.setdefault("embeddings.token_type_embeddings.weight",
                   np.zeros((1, cfg.embedding_width), np.float32))
    return out


def _encoder_weights(raw: dict[str, np.ndarray], cfg, src: Path, model_type: str = "bert",
                     position_offset: int = 0) -> tuple[dict[str, np.ndarray], list[str]]:
    """Stable tfapp weight name -> float32 array; also the names that had to be
    initialised (the pooler, when a checkpoint was saved without it)."""
    from tfapp.hub.export import float32_policy
    from tfapp.models.bert import BertEncoder, hf_weight_name

    # Task models prefix the encoder with "bert." (the family's prefix); old TF-converted
    # checkpoints name LayerNorm parameters gamma/beta instead of weight/bias.
    prefix = FAMILIES[model_type]
    if any(k.startswith(prefix) for k in raw):
        raw = {k[len(prefix):]: v for k, v in raw.items() if k.startswith(prefix)}
    raw = {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta",
                                                                     "LayerNorm.bias"): v
           for k, v in raw.items()}
    if model_type == "distilbert":
        raw = _distilbert_names(raw, cfg)
    positions = "embeddings.position_embeddings.weight"
    if position_offset and positions in raw:  # XLM-R: position i is row i + offset
        raw[positions] = raw[positions][position_offset:]

    with float32_policy():
        shapes = {n: tuple(v.shape) for n, v in BertEncoder(cfg).named_weights().items()}
    out: dict[str, np.ndarray] = {}
    missing, initialised = [], []
    for name, shape in shapes.items():
        hf_name, transpose = hf_weight_name(name)
        if hf_name not in raw:
            missing.append(hf_name)
            continue
        value = np.asarray(raw[hf_name], dtype=np.float32)
        if transpose:
            value = value.T
        if name == "embeddings/word_embeddings" and value.shape[0] != shape[0]:
            raise ConfigError(f"{src}: word embeddings have {value.shape[0]} rows but config.json "
                              f"says vocab_size {shape[0]}; the files are from different models")
        if tuple(value.shape) != shape:
            raise ConfigError(f"{src}: weight {hf_name} has shape {tuple(value.shape)}, "
                              f"config.json implies {shape}; the files are from different models")
        out[name] = value
    pooler = [m for m in missing if m.startswith("pooler.")]
    if len(pooler) == len(missing) and pooler:
        # BertForMaskedLM and some exports drop the pooler (add_pooling_layer=False). It
        # only feeds pooled_output; start it as BERT does (random), and say so.
        initialised = sorted(n for n in shapes if n.startswith("pooler/"))
        log.warning("%s has no pooler weights; pooled_output comes from a randomly "
                    "initialised pooler (fine-tuning trains it; or use model.pooling=mean_max)",
                    src)
    elif missing:
        raise ConfigError(f"{src}: the checkpoint lacks {len(missing)} {model_type} encoder "
                          f"weight(s), e.g. {', '.join(missing[:3])}; is it a {model_type} "
                          "checkpoint? "
                          f"(found e.g. {', '.join(sorted(raw)[:3])})")
    return out, initialised


def read_hf_bert(src: str | os.PathLike, *, lower_case: bool | None = None):
    """(BertConfig, {stable name: array}, vocab tokens, lower_case, pooler names
    initialised) from a Hugging Face BERT-family checkpoint directory (``FAMILIES``);
    ``ConfigError`` for anything unusable. The vocab is vocab.txt's, else tokenizer.json's."""
    from tfapp.data.text.bert_preprocess import read_bert_vocab

    src = Path(src).expanduser()
    if not src.is_dir():
        raise ConfigError(f"--from {src}: no such directory; give a Hugging Face checkpoint "
                          "directory (config.json, model.safetensors, vocab.txt)")
    if not (src / "config.json").is_file():
        raise ConfigError(f"{src} has no config.json; expected a Hugging Face checkpoint directory "
                          "(config.json, model.safetensors, vocab.txt)")
    hf_config = _read_json(src / "config.json")
    cfg = _bert_config(hf_config, src / "config.json")
    if hf_config["model_type"] == "xlm-roberta":
        model = _sentencepiece_model(src, cfg.vocab_size)
        weights, initialised = _encoder_weights(
            _load_safetensors(src), cfg, src, "xlm-roberta",
            position_offset=_roberta_positions_offset(hf_config))
        return cfg, weights, model, False, initialised
    vocab_file = src / "vocab.txt"
    with tempfile.TemporaryDirectory() as tmp:
        if not vocab_file.is_file():
            vocab_file = src / "tokenizer.json"
            checked = _vocab_from_tokenizer_json(src, Path(tmp))
        else:
            checked = vocab_file
        try:
            vocab, _ = read_bert_vocab(checked)
        except DataError as err:
            raise ConfigError(str(err).replace(str(checked), str(vocab_file))) from None
    if len(vocab) > cfg.vocab_size:
        raise ConfigError(f"{vocab_file} has {len(vocab)} tokens but the model only "
                          f"{cfg.vocab_size} embeddings; the files are from different models")
    _check_chinese_chars(src)
    if lower_case is None:
        lower_case = _lower_case(src)
    if lower_case is None:
        raise ConfigError(f"{src}: casing unknown (no do_lower_case in tokenizer_config.json or "
                          "tokenizer.json); pass --lower-case (uncased model) or --no-lower-case")
    weights, initialised = _encoder_weights(_load_safetensors(src), cfg, src,
                                            hf_config["model_type"])
    return cfg, weights, vocab, lower_case, initialised


def convert_hf_bert(src: str | os.PathLike, out_dir: str | os.PathLike, *,
                    lower_case: bool | None = None, seq_length: int | None = None,
                    overwrite: bool = False, seed: int = 0) -> Path:
    """Convert the checkpoint at ``src`` into OUT/{encoder,preprocessor,vocab.txt,
    tfapp_hub.json} (written atomically; nothing is left behind on failure).

    ``lower_case`` None reads the casing from the tokenizer config; ``seq_length`` (the
    preprocessor's default length) None is 128 or the model's maximum if shorter.
    """
    from tfapp.hub.export import check_out_dir, export_bert_modules, float32_policy
    from tfapp.models.bert import BertEncoder

    import tensorflow as tf

    out_dir = Path(out_dir)
    check_out_dir(out_dir, overwrite)
    if tf.distribute.has_strategy():
        raise ConfigError("convert_hf_bert must run outside a distribution strategy scope")
    cfg, weights, vocab, lower_case, initialised = read_hf_bert(src, lower_case=lower_case)
    sentencepiece = isinstance(vocab, bytes)
    if seq_length is None:
        seq_length = min(128, cfg.max_position_embeddings)
    if not 3 <= seq_length <= cfg.max_position_embeddings:
        raise ConfigError(f"--seq-length {seq_length} must be in [3, "
                          f"{cfg.max_position_embeddings}] (the model's max_position_embeddings)")
    with float32_policy():
        encoder = BertEncoder(cfg, seed=seed).build_weights()
    for name in initialised:  # keep the seeded random pooler
        weights[name] = encoder.named_weights()[name].numpy()
    encoder.assign_named_weights(weights)
    with tempfile.TemporaryDirectory() as tmp:
        # The vocab is written to a temp file so the exported asset is named vocab.txt
        # whatever the source directory is called (and whether it came from tokenizer.json).
        if sentencepiece:
            vocab_copy = Path(tmp) / SENTENCEPIECE_MODEL
            vocab_copy.write_bytes(vocab)
        else:
            vocab_copy = Path(tmp) / "vocab.txt"
            vocab_copy.write_text("".join(tok + "\n" for tok in vocab), encoding="utf-8")
        return export_bert_modules(
            encoder, vocab_copy, out_dir, lower_case=lower_case, default_seq_length=seq_length,
            overwrite=overwrite, sentencepiece=sentencepiece,
            extra_metadata={"converted_from": {"source": str(Path(src).resolve()),
                                               "format": "huggingface-safetensors",
                                               "randomly_initialised": initialised}})
