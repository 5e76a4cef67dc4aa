"""load_hub_encoder: a working handle loads; every bad handle is one clear line."""

from __future__ import annotations

import socket

import tfapp  # noqa: F401
from tfapp.config import ConfigError
from tfapp.hub.export import export_encoder, float32_policy
from tfapp.models.bert import BertConfig, BertEncoder, dummy_inputs
from tfapp.models.hub_encoder import HubHandleError, load_hub_encoder

import pytest
import tensorflow as tf


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    cfg = BertConfig(vocab_size=30, hidden_size=16, num_layers=1, num_heads=2,
                     intermediate_size=32, max_position_embeddings=16)
    with float32_policy():
        encoder = BertEncoder(cfg, seed=0)
    return str(export_encoder(encoder, tmp_path_factory.mktemp("hub") / "encoder"))


def test_loads_a_bert_encoder(encoder_dir):
    layer = load_hub_encoder(encoder_dir, trainable=True)
    assert layer.trainable and len(layer.trainable_weights) == 1 * 16 + 5 + 2
    out = layer(dummy_inputs(2, 5))
    assert out["pooled_output"].shape == (2, 16)
    assert out["sequence_output"].shape == (2, 5, 16)
    frozen = load_hub_encoder(encoder_dir, trainable=False)
    assert frozen.trainable_weights == [] and len(frozen.non_trainable_weights) == 23


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _not_bert_module(path) -> str:
    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x):
            return 2.0 * x

    tf.saved_model.save(Doubler(), str(path))
    return str(path)


def _signatures_only(path) -> str:
    module = tf.Module()
    module.f = tf.function(lambda x: {"y": x + 1.0},
                           input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(path), signatures=module.f)
    return str(path)


@pytest.mark.parametrize("case,pattern", [
    ("missing", r"'.*nope' does not exist; expected a TF-Hub BERT encoder"),
    ("empty_dir", r"is not a SavedModel directory \(no saved_model.pb\)"),
    ("file", r"is a file; expected a SavedModel directory"),
    ("not_bert", r"not a BERT encoder \(it takes a float32 tensor and returns a float32 tensor"),
    ("signatures_only", r"cannot be loaded \(Signature name has to be specified"),
    ("unreachable", r"cannot be downloaded or read \(.*refused"),
    ("empty", r"model.hub_handle is empty"),
    ("builtin", r"'builtin:tiny' must be resolved to a directory first"),
])
def test_bad_handles_give_one_clear_line(tmp_path, case, pattern):
    handle = {
        "missing": lambda: str(tmp_path / "nope"),
        "empty_dir": lambda: str(tmp_path),
        "file": lambda: str((tmp_path / "f.txt").absolute()) if (tmp_path / "f.txt").write_text(
            "x") else "",
        "not_bert": lambda: _not_bert_module(tmp_path / "doubler"),
        "signatures_only": lambda: _signatures_only(tmp_path / "sig"),
        # Loopback only: a closed local port fails at once, like an unreachable host.
        "unreachable": lambda: f"http://127.0.0.1:{_closed_port()}/bert.tar.gz",
        "empty": lambda: "",
        "builtin": lambda: "builtin:tiny",
    }[case]()
    with pytest.raises(HubHandleError, match=pattern) as err:
        load_hub_encoder(handle, trainable=True)
    message = str(err.value)
    assert "\n" not in message and len(message) < 400
    assert isinstance(err.value, ConfigError)  # entry points print it as `tfapp: error: ...`
    if case not in ("empty", "builtin"):
        assert handle in message
