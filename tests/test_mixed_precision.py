"""Mixed precision reaches the BERT encoder: a Hub module's weights in the native encoder.

A restored Hub graph is fixed in float32, so under ``mixed_bfloat16`` the classifier
reads a covered module into ``tfapp.models.bert.BertEncoder`` (same outputs in float32)
and the encoder's matmuls then run in bfloat16; an uncovered module keeps the Hub layer.
"""

from __future__ import annotations

import tfapp  # noqa: F401
from tfapp.config import ClassifierModelConfig
from tfapp.hub.export import ReusableBertEncoder, export_encoder, float32_policy
from tfapp.models.bert import BertConfig, BertEncoder
from tfapp.models.classifier import build_classifier
from tfapp.models.hub_encoder import native_encoder_from_hub

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

SEQ = 12
CFG = BertConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=2,
                 intermediate_size=64, max_position_embeddings=SEQ)


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory) -> str:
    with float32_policy():
        encoder = BertEncoder(CFG, seed=3)
    return str(export_encoder(encoder, tmp_path_factory.mktemp("hub") / "encoder"))


@pytest.fixture
def policy():
    """Set a global policy for one test and put float32 back afterwards."""
    def set_policy(name: str) -> None:
        tf.keras.mixed_precision.set_global_policy(name)
    yield set_policy
    tf.keras.mixed_precision.set_global_policy("float32")


def _batch(n: int = 4) -> dict[str, tf.Tensor]:
    rng = np.random.default_rng(0)
    ids = rng.integers(2, CFG.vocab_size, size=(n, SEQ)).astype(np.int32)
    lengths = np.array([SEQ, 7, 3, SEQ][:n])
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    types = (np.arange(SEQ)[None, :] >= 5).astype(np.int32) * mask
    return {"input_word_ids": tf.constant(ids * mask), "input_mask": tf.constant(mask),
            "input_type_ids": tf.constant(types)}


def test_native_encoder_matches_the_module_in_float32(module_dir):
    native = native_encoder_from_hub(module_dir)
    assert isinstance(native, BertEncoder) and native.compute_dtype == "float32"
    inputs = _batch()
    want = hub.load(module_dir)(inputs, training=False)
    got = native(inputs, training=False)
    for key in ("pooled_output", "sequence_output"):
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), atol=1e-4, rtol=0)


def _matmul_dtypes(fn, *args) -> dict[str, set[str]]:
    """Op type -> dtypes of every matmul in the graph ``fn`` traces (forward + backward)."""
    graph = fn.get_concrete_function(*args).graph
    seen: dict[str, set[str]] = {}
    for op in graph.get_operations():
        if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3"):
            seen.setdefault(op.type, set()).add(op.outputs[0].dtype.name)
    return seen


def test_classifier_encoder_computes_in_bfloat16_under_mixed_bfloat16(module_dir, policy):
    policy("mixed_bfloat16")
    model = build_classifier(ClassifierModelConfig(kind="bert", dropout=0.0), num_classes=2,
                             multi_label=False, seq_length=SEQ, hub_handle=module_dir)
    encoder = model.get_layer("bert_encoder")
    assert isinstance(encoder, BertEncoder), "a covered module must use the native encoder"
    assert encoder.compute_dtype == "bfloat16" and encoder.variable_dtype == "float32"
    assert all(v.dtype == tf.float32 for v in encoder.weights)
    assert model.trainable_weights[0] is encoder.trainable_weights[0]

    inputs = _batch()
    out = encoder(inputs, training=False)
    assert out["sequence_output"].dtype == tf.bfloat16
    assert all(x.dtype == tf.bfloat16 for x in out["encoder_outputs"])
    assert model(inputs).dtype == tf.float32  # probabilities stay float32

    labels = tf.constant([[0.0], [1.0], [1.0], [0.0]])

    @tf.function
    def grads(x, y):
        with tf.GradientTape() as tape:
            loss = tf.keras.losses.binary_crossentropy(y, model(x, training=True))
        return tape.gradient(loss, encoder.trainable_weights)

    # Every attention and dense matmul of the encoder, forward and backward, in bfloat16;
    # only the float32 output layer (logits Dense) and its gradient may be float32.
    dtypes = _matmul_dtypes(grads, inputs, labels)
    assert dtypes["BatchMatMulV2"] == {"bfloat16"}
    graph = grads.get_concrete_function(inputs, labels).graph
    f32 = [op.name for op in graph.get_operations()
           if op.type == "MatMul" and op.outputs[0].dtype == tf.float32]
    assert f32 and all("logits" in name for name in f32), f32
    bf16 = [op for op in graph.get_operations()
            if op.type == "MatMul" and op.outputs[0].dtype == tf.bfloat16]
    # 6 Dense per layer + pooler, forward; each has a matmul for input and kernel grads.
    assert len(bf16) >= 3 * (6 * CFG.num_layers + 1)
    g = grads(inputs, labels)
    assert all(x is not None and x.dtype == tf.float32 and bool(tf.reduce_all(
        tf.math.is_finite(tf.convert_to_tensor(x)))) for x in g)


def test_fit_under_mixed_bfloat16_updates_the_native_encoder(module_dir, policy):
    policy("mixed_bfloat16")
    model = build_classifier(ClassifierModelConfig(kind="bert"), num_classes=2, multi_label=False,
                             seq_length=SEQ, hub_handle=module_dir)
    encoder = model.get_layer("bert_encoder")
    before = encoder.named_weights()["layer_0/attention/query/kernel"].numpy().copy()
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
    x = _batch()
    history = model.fit(x, np.array([0, 1, 1, 0], np.float32), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    after = encoder.named_weights()["layer_0/attention/query/kernel"].numpy()
    assert not np.allclose(before, after)


def test_uncovered_module_keeps_the_hub_layer(tmp_path, policy):
    """A BERT module without tfapp's get_bert_config (e.g. an official encoder)."""
    with float32_policy():
        root = ReusableBertEncoder(BertEncoder(CFG, seed=1))
    del root.get_bert_config
    tf.saved_model.save(root, str(tmp_path / "foreign"))
    assert native_encoder_from_hub(str(tmp_path / "foreign")) is None
    assert native_encoder_from_hub(str(tmp_path / "missing")) is None
    policy("mixed_bfloat16")
    model = build_classifier(ClassifierModelConfig(kind="bert"), num_classes=3, multi_label=False,
                             seq_length=SEQ, hub_handle=str(tmp_path / "foreign"))
    assert isinstance(model.get_layer("bert_encoder"), hub.KerasLayer)
    assert model(_batch()).shape == (4, 3)


# --------------------------------------- which encoder was built, and XLA's auto from it


@pytest.fixture(scope="module")
def foreign_dir(tmp_path_factory) -> str:
    """A BERT SavedModel without tfapp's get_bert_config (as an official encoder)."""
    with float32_policy():
        root = ReusableBertEncoder(BertEncoder(CFG, seed=1))
    del root.get_bert_config
    path = tmp_path_factory.mktemp("foreign") / "encoder"
    tf.saved_model.save(root, str(path))
    return str(path)


def _classifier(handle: str, policy_name: str, kind: str = "bert") -> tf.keras.Model:
    tf.keras.mixed_precision.set_global_policy(policy_name)
    try:
        return build_classifier(ClassifierModelConfig(kind=kind, embedding_dim=8, units=8),
                                num_classes=2, multi_label=False, seq_length=SEQ,
                                vocab_size=CFG.vocab_size, hub_handle=handle)
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("module,policy_name,kind,why", [
    ("tfapp", "float32", "hub", "float32 compute: the module as restored"),
    ("tfapp", "mixed_bfloat16", "native", "bfloat16 compute"),
    ("tfapp", "mixed_float16", "native", "float16 compute"),
    ("foreign", "mixed_bfloat16", "hub", "not tfapp's format"),
])
def test_built_encoder_names_the_encoder_and_why(module_dir, foreign_dir, module, policy_name,
                                                 kind, why):
    from tfapp.models.hub_encoder import built_encoder
    from tfapp.training.accumulation import wrap_for_accumulation

    model = _classifier(module_dir if module == "tfapp" else foreign_dir, policy_name)
    built = built_encoder(model)
    assert built is not None and built.kind == kind and why in built.reason, built
    # The gradient-accumulation wrapper is a new model over the same layers: same answer.
    assert built_encoder(wrap_for_accumulation(model, 2)) == built
    assert ("native BertEncoder" if kind == "native" else "TF-Hub SavedModel") in \
        built.describe()


@pytest.fixture(scope="module")
def built_models(module_dir) -> dict:
    """One tiny classifier per encoder case: native (mixed precision), Hub (float32), none."""
    return {"native": _classifier(module_dir, "mixed_bfloat16"),
            "hub": _classifier(module_dir, "float32"),
            "cnn": _classifier("", "float32", kind="cnn")}


@pytest.mark.parametrize("device,encoder,expected,why", [
    ("GPU", "native", True, "compiles once"),   # the case XLA was left off for before
    ("GPU", "hub", False, "recompile every step"),
    ("GPU", "cnn", True, "compiles once"),
    ("GPU", None, False, "recompile every step"),  # bert before the model is built
    ("CPU", "native", False, "off on CPU"),
    ("CPU", "hub", False, "off on CPU"),
    ("TPU", "native", True, "TPU compiles everything"),
    ("TPU", "hub", True, "TPU compiles everything"),
])
def test_xla_auto_follows_the_encoder_built(built_models, device, encoder, expected, why):
    from tfapp.config import load_config
    from tfapp.runtime import Runtime
    from tfapp.tasks.classifier.task import ClassifierTask
    from tfapp.tasks.ner.task import NerTask
    from tfapp.training.plan import resolve_jit_compile_choice

    rt = Runtime(strategy=None, kind="one_device", reason="test", num_replicas=1,
                 precision="float32", device_kind=device)
    kind = "cnn" if encoder == "cnn" else "bert"
    cfg = load_config(None, [f"model.kind={kind}"])
    model = built_models[encoder] if encoder else None
    jit, reason = resolve_jit_compile_choice(
        cfg, rt, recompiles_under_xla=ClassifierTask.recompiles_under_xla(cfg, model))
    assert (jit, why in reason) == (expected, True), reason
    if kind == "bert":  # NER asks the same question of the same encoder
        ner = load_config(None, ["task=ner"])
        assert resolve_jit_compile_choice(
            ner, rt, recompiles_under_xla=NerTask.recompiles_under_xla(ner, model))[0] is jit
    # An explicit setting wins over any encoder.
    pinned = load_config(None, [f"model.kind={kind}", "trainer.jit_compile=false"])
    assert resolve_jit_compile_choice(pinned, rt, recompiles_under_xla=False) == (
        False, "set by trainer.jit_compile")


@pytest.mark.slow
@pytest.mark.parametrize("precision,encoder,why", [
    ("mixed_bfloat16", "native BertEncoder", "bfloat16 compute"),
    ("float32", "TF-Hub SavedModel", "float32 compute"),
])
def test_run_header_names_the_encoder_and_the_reason(tmp_path, tmp_path_factory, precision,
                                                     encoder, why):
    """A real tiny classifier run (builtin:tiny): its header says which encoder was built
    and why, and why XLA is off (CPU). float32 is the session's shared classifier run
    (conftest CLASSIFIER_RUN: precision auto, float32 on every CPU in tests); bfloat16
    trains a run of its own (2 steps)."""
    import json

    from tfapp.config import load_config
    from tfapp.tasks import get_task
    from tfapp.training.driver import train

    from conftest import CLASSIFIER_RUN, REPO, shared_run

    if precision == "float32":
        run = shared_run(tmp_path_factory, *CLASSIFIER_RUN)
        assert json.loads((run / "run_header.json").read_text())["precision"] == "float32"
    else:
        cfg = load_config(REPO / "configs/classifier_local.yaml", [
            f"output_dir={tmp_path}", f"runtime.precision={precision}", "trainer.epochs=1",
            "trainer.steps_per_epoch=2", "trainer.export=false", "data.seq_length=16"])
        try:
            run = train(cfg, task=get_task("classifier")).run_dir
        finally:
            tf.keras.mixed_precision.set_global_policy("float32")
    header = json.loads((run / "run_header.json").read_text())
    assert header["encoder"].startswith(encoder) and why in header["encoder"], header
    assert header["jit_compile"] is False and "off on CPU" in header["jit_compile_reason"]
    text = (run / "run_header.txt").read_text()
    assert f"BERT encoder:         {encoder}" in text, text
    assert "jit_compile:          False (auto: off on CPU" in text, text
