"""TF-Hub export: reusable encoder SavedModel + preprocessor, reloaded without tfapp."""

from __future__ import annotations

import json
import textwrap

import tfapp  # noqa: F401
from tfapp.atomic import atomic_directory
from tfapp.data.text.bert_preprocess import BertPreprocessor
from tfapp.data.text.vocab import build_wordpiece_vocab, write_vocab
from tfapp.hub.export import (
    export_bert_modules,
    export_encoder,
    float32_policy,
    read_metadata,
)
from tfapp.models.bert import BertConfig, BertEncoder, stable_weight_name

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
from conftest import run_python

SENTENCES = [
    "The movie was great and the acting was superb.",
    "I did not like the food, it was cold.",
    "What a wonderful day at the beach!",
    "The service was slow but the staff were friendly.",
    "Terrible battery life; the phone died twice.",
    "An average hotel with a very nice view.",
]
PROBE = ["the movie was great", "terrible food, slow service!", "unseen zebra words"]
SEQ = 16


@pytest.fixture(scope="module")
def hub_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    vocab = write_vocab(build_wordpiece_vocab(SENTENCES, 120), root / "vocab_src.txt")
    cfg = BertConfig(vocab_size=len(vocab.read_text().splitlines()), hidden_size=32,
                     num_layers=2, num_heads=2, intermediate_size=64,
                     max_position_embeddings=64, dropout=0.2, attention_dropout=0.2)
    with float32_policy():
        encoder = BertEncoder(cfg, seed=5).build_weights()
    out = export_bert_modules(encoder, vocab, root / "bert", lower_case=True,
                              default_seq_length=SEQ)
    pre = BertPreprocessor(vocab, lower_case=True, seq_length=SEQ)
    return out, encoder, pre


def test_layout_and_metadata(hub_dir):
    out, encoder, _ = hub_dir
    for name in ("encoder/saved_model.pb", "preprocessor/saved_model.pb", "vocab.txt",
                 "tfapp_hub.json", "encoder/assets/vocab.txt", "preprocessor/assets/vocab.txt"):
        assert (out / name).is_file(), name
    meta = read_metadata(out)
    assert meta["encoder"] == "encoder" and meta["preprocessor"] == "preprocessor"
    assert meta["lower_case"] is True and meta["default_seq_length"] == SEQ
    assert meta["vocab_size"] == encoder.cfg.vocab_size
    assert BertConfig.from_dict(meta["bert_config"]) == encoder.cfg
    # No temporary directories are left beside the result.
    assert sorted(p.name for p in out.parent.iterdir()) == ["bert", "vocab_src.txt"]


def test_reload_in_fresh_process_without_tfapp_gives_same_outputs(hub_dir, tmp_path):
    out, encoder, pre = hub_dir
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import tensorflow as tf
        import tensorflow_hub as hub
        import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

        pre = hub.load({str(out / "preprocessor")!r})
        enc = hub.load({str(out / "encoder")!r})
        texts = tf.constant({PROBE!r})
        x = pre(texts)
        tokens = pre.tokenize(texts)
        pack = hub.KerasLayer(pre.bert_pack_inputs, arguments=dict(seq_length=12))
        pair = pack([tokens, pre.tokenize(tf.constant(["a", "b", "c"]))])
        y = enc(x, training=False)
        layer = hub.KerasLayer({str(out / "encoder")!r}, trainable=True)
        z = layer(x)
        assert "tfapp" not in sys.modules, "the module must load without tfapp"
        np.savez({str(tmp_path / "out.npz")!r},
                 pair_ids=pair["input_word_ids"].numpy(), pair_types=pair["input_type_ids"],
                 pooled_layer=z["pooled_output"],
                 n_trainable=len(layer.trainable_weights),
                 **{{k: v.numpy() for k, v in x.items()}},
                 pooled=y["pooled_output"], sequence=y["sequence_output"],
                 default=y["default"], layer0=y["encoder_outputs"][0])
    """)
    proc = run_python(["-c", script], timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(tmp_path / "out.npz")

    x = pre(tf.constant(PROBE))
    for key in ("input_word_ids", "input_mask", "input_type_ids"):
        np.testing.assert_array_equal(got[key], x[key].numpy())
    assert got["input_word_ids"].shape == (3, SEQ)
    assert got["pair_ids"].shape == (3, 12) and got["pair_types"].max() == 1
    expected = encoder(x, training=False)
    assert np.abs(got["pooled"] - expected["pooled_output"].numpy()).max() < 1e-5
    assert np.abs(got["sequence"] - expected["sequence_output"].numpy()).max() < 1e-5
    assert np.abs(got["layer0"] - expected["encoder_outputs"][0].numpy()).max() < 1e-5
    np.testing.assert_array_equal(got["default"], got["pooled"])
    np.testing.assert_allclose(got["pooled_layer"], got["pooled"], atol=1e-6)
    assert int(got["n_trainable"]) == len(encoder.trainable_variables)


def test_reusable_saved_model_attributes(hub_dir):
    out, encoder, _ = hub_dir
    module = hub.load(str(out / "encoder"))
    assert len(module.variables) == len(encoder.variables)
    assert len(module.trainable_variables) == len(encoder.trainable_variables)
    assert all(v.trainable for v in module.trainable_variables)
    assert list(module.regularization_losses) == []
    # __call__(inputs, training) is traced once per Python value of training.
    trainings = sorted(fn.structured_input_signature[0][1]
                       for fn in module.__call__.concrete_functions)
    assert trainings == [False, True]
    assert json.loads(module.get_bert_config().numpy()) == encoder.cfg.to_dict()
    assert bool(module.do_lower_case().numpy()) is True
    assert module.vocab_file.asset_path.numpy().decode().endswith("vocab.txt")


def test_training_flag_switches_dropout(hub_dir):
    out, _, pre = hub_dir
    module = hub.load(str(out / "encoder"))
    x = pre(tf.constant(PROBE))
    a = module(x, training=False)["sequence_output"].numpy()
    np.testing.assert_array_equal(a, module(x, training=False)["sequence_output"].numpy())
    b = module(x, training=True)["sequence_output"].numpy()
    assert np.abs(a - b).max() > 1e-3


def test_fine_tuning_through_the_hub_layer_gets_the_native_gradients(hub_dir):
    # hub.KerasLayer fine-tuning differentiates the restored graph, inside tf.function as
    # fit does: every variable gets a gradient, equal to the native encoder's (dropout
    # off), so the saved hand-written gradients (exact GELU) hold.
    out, encoder, pre = hub_dir
    layer = hub.KerasLayer(str(out / "encoder"), trainable=True)
    x = pre(tf.constant(PROBE))

    @tf.function
    def grads(model, variables):
        with tf.GradientTape() as tape:
            y = model(x, training=False)
            loss = tf.reduce_sum(y["pooled_output"]) + tf.reduce_sum(y["sequence_output"] ** 2)
        return [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]

    by_name = {stable_weight_name(v.name): v for v in layer.trainable_variables}
    native = encoder.named_weights()
    assert set(by_name) == set(native)
    names = sorted(native)
    got = grads(layer, [by_name[n] for n in names])
    expected = grads(encoder, [native[n] for n in names])
    for name, a, b in zip(names, got, expected, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-4, rtol=1e-4, err_msg=name)
    assert np.abs(got[names.index("embeddings/word_embeddings")].numpy()).sum() > 0


def test_export_requires_a_float32_encoder(tmp_path):
    cfg = BertConfig(vocab_size=20, hidden_size=16, num_layers=1, num_heads=2,
                     intermediate_size=32, max_position_embeddings=16)
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        encoder = BertEncoder(cfg).build_weights()
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    with pytest.raises(ValueError, match="float32"):
        export_encoder(encoder, tmp_path / "enc")
    assert not (tmp_path / "enc").exists()
    assert list(tmp_path.iterdir()) == []


def test_export_refuses_an_existing_directory(hub_dir, tmp_path):
    out, encoder, _ = hub_dir
    with pytest.raises(tfapp.config.ConfigError, match="already exists.*--overwrite"):
        export_bert_modules(encoder, out / "vocab.txt", out, lower_case=True)


def test_overwrite_replaces_only_a_module_dir_or_an_empty_folder(hub_dir, tmp_path):
    out, encoder, _ = hub_dir
    mine = tmp_path / "my_files"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    with pytest.raises(tfapp.config.ConfigError, match="not a tfapp module directory .*"
                                                       "nothing was replaced"):
        export_bert_modules(encoder, out / "vocab.txt", mine, lower_case=True, overwrite=True)
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"]
    empty = tmp_path / "empty"
    empty.mkdir()
    export_bert_modules(encoder, out / "vocab.txt", empty, lower_case=True, overwrite=True)
    assert (empty / "tfapp_hub.json").is_file()
    export_bert_modules(encoder, out / "vocab.txt", empty, lower_case=True, overwrite=True)
    assert (empty / "encoder" / "saved_model.pb").is_file()  # a module dir: replaced


def test_atomic_directory_semantics(tmp_path):
    final = tmp_path / "mod"
    with pytest.raises(RuntimeError), atomic_directory(final) as tmp:
        (tmp / "half").write_text("x")
        raise RuntimeError("crash mid-write")
    assert list(tmp_path.iterdir()) == []  # nothing half-written, no temp dir left

    with atomic_directory(final) as tmp:
        (tmp / "v1").write_text("1")
    assert (final / "v1").is_file()
    with pytest.raises(FileExistsError):
        with atomic_directory(final):
            pass
    with atomic_directory(final, overwrite=True) as tmp:
        (tmp / "v2").write_text("2")
    assert sorted(p.name for p in final.iterdir()) == ["v2"]

    # Losing a race: another writer renames its result into place while we write;
    # theirs is kept and ours discarded without an error.
    other = tmp_path / "race"
    with atomic_directory(other) as tmp:
        (tmp / "ours").write_text("o")
        other.mkdir()
        (other / "theirs").write_text("t")
    assert sorted(p.name for p in other.iterdir()) == ["theirs"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mod", "race"]
