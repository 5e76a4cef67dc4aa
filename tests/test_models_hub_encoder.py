"""load_hub_encoder: a working handle loads; every bad handle is one clear line.

Also ``runtime.deterministic``: TensorFlow's op determinism refuses unseeded random ops,
and a saved module's dropout keeps the seed it was saved with (none, for most modules).
"""

from __future__ import annotations

import socket

from tfapp import compat
from tfapp.config import ClassifierModelConfig, ConfigError
from tfapp.hub.export import ReusableBertEncoder, export_encoder, float32_policy
from tfapp.models.bert import BertConfig, BertEncoder, dummy_inputs
from tfapp.models.classifier import build_classifier
from tfapp.models.hub_encoder import HubHandleError, load_hub_encoder, unseeded_random_ops

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

CFG = BertConfig(vocab_size=30, hidden_size=16, num_layers=1, num_heads=2,
                 intermediate_size=32, max_position_embeddings=16)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    with float32_policy():
        encoder = BertEncoder(CFG, seed=0)
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
        "unreachable": lambda: f"https://127.0.0.1:{_closed_port()}/bert.tar.gz",
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


@pytest.fixture
def op_determinism():
    """``runtime.deterministic=true`` for one test (it is process-wide)."""
    compat.enable_op_determinism()  # as runtime.setup does
    yield
    assert compat.disable_op_determinism(), "op determinism stays on in this test process"


def _train_batch() -> tuple[dict[str, tf.Tensor], np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(4, CFG.vocab_size, size=(8, 8)).astype(np.int32)
    return ({"input_word_ids": tf.constant(ids), "input_mask": tf.ones_like(ids),
             "input_type_ids": tf.zeros_like(ids)}, np.array([0, 1] * 4, np.float32))


def test_deterministic_fine_tuning_reads_the_module_natively_and_repeats_exactly(
        encoder_dir, op_determinism):
    x, y = _train_batch()
    runs = []
    for _ in range(2):
        tf.keras.utils.set_random_seed(5)  # what runtime.setup does with runtime.seed
        model = build_classifier(ClassifierModelConfig(kind="bert"), num_classes=2,
                                 multi_label=False, seq_length=8, hub_handle=encoder_dir)
        # The Hub layer's saved dropout would be refused; the native encoder's is seeded.
        assert isinstance(model.get_layer("bert_encoder"), BertEncoder)
        before = [w.numpy() for w in model.weights]
        model.compile(optimizer=tf.keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
        model.fit(x, y, batch_size=4, epochs=2, verbose=0)
        runs.append([w.numpy() for w in model.weights])
        assert any(not np.array_equal(a, b) for a, b in zip(before, runs[-1], strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(*runs, strict=True))


@pytest.fixture(scope="module")
def foreign_dir(tmp_path_factory) -> str:
    """A module tfapp cannot read natively (no get_bert_config, like most Hub encoders),
    traced without a seed, as a module saved without a global seed is. Module-scoped, so
    it is saved before ``op_determinism`` (Keras refuses to trace unseeded dropout then)."""
    tf.random.set_seed(None)
    with float32_policy():
        root = ReusableBertEncoder(BertEncoder(CFG, seed=1))
    del root.get_bert_config
    handle = str(tmp_path_factory.mktemp("hub") / "foreign")
    tf.saved_model.save(root, handle)
    return handle


def test_deterministic_fine_tuning_of_an_unseeded_module_is_one_clear_line(
        foreign_dir, op_determinism):
    assert unseeded_random_ops(hub.load(foreign_dir))  # its dropout ops
    with pytest.raises(HubHandleError, match=r"^runtime.deterministic=true: the module '.*"
                       r"foreign' fine-tunes with \d+ unseeded random op") as err:
        build_classifier(ClassifierModelConfig(kind="bert"), num_classes=2, multi_label=False,
                         seq_length=8, hub_handle=foreign_dir)
    assert "\n" not in str(err.value) and "model.trainable=false" in str(err.value)
    # A frozen encoder runs no dropout: determinism has nothing to refuse.
    tf.keras.utils.set_random_seed(5)  # the head's dropout is seeded, as in runtime.setup
    frozen = build_classifier(ClassifierModelConfig(kind="bert", trainable=False), num_classes=2,
                              multi_label=False, seq_length=8, hub_handle=foreign_dir)
    assert isinstance(frozen.get_layer("bert_encoder"), hub.KerasLayer)
    assert frozen.predict(_train_batch()[0], verbose=0).shape == (8, 1)
