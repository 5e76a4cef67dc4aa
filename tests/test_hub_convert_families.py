"""More encoder families through ``python -m tfapp.hub convert``: tiny checkpoints that
transformers + PyTorch wrote (tests/fixtures/hf/<family>/, made by
scripts/make_hf_fixtures.py) with PyTorch's own outputs. Converted here without torch, the
preprocessor must give the HF tokenizer's ids and the encoder PyTorch's hidden states."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import ConfigError
from tfapp.hub.__main__ import main as hub_main
from tfapp.hub.convert import convert_hf_bert, read_hf_bert

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
FAMILIES = ["multilingual_bert", "distilbert", "electra", "xlm_roberta"]
ATOL = 1e-4


def _texts(family: str) -> dict:
    return json.loads((FIXTURES / family / "texts.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module", params=FAMILIES)
def converted(request, tmp_path_factory):
    family = request.param
    out = tmp_path_factory.mktemp(family) / "hub"
    seq = _texts(family)["seq_length"]
    if family == "distilbert":  # one through the command line
        assert hub_main(["convert", "--from", str(FIXTURES / family), "--out", str(out),
                         "--seq-length", str(seq), "--quiet"]) == 0
    else:
        convert_hf_bert(FIXTURES / family, out, seq_length=seq)
    # Loaded once per family: hub.load is the slow part of these tests.
    return (family, out, dict(np.load(FIXTURES / family / "expected.npz")),
            hub.load(str(out / "preprocessor")), hub.load(str(out / "encoder")))


def _packed(pre, family: str, key: str) -> dict[str, np.ndarray]:
    meta = _texts(family)
    texts = meta[key]
    if key == "pairs":
        segments = [pre.tokenize(tf.constant([a for a, _ in texts])),
                    pre.tokenize(tf.constant([b for _, b in texts]))]
    else:
        segments = [pre.tokenize(tf.constant(texts))]
    x = pre.bert_pack_inputs(segments, seq_length=tf.constant(meta["seq_length"]))
    return {k: v.numpy() for k, v in x.items()}


@pytest.mark.parametrize("key", ["texts", "pairs"])
def test_preprocessor_ids_equal_the_hf_tokenizer(converted, key):
    family, _, want, pre, _ = converted
    got = _packed(pre, family, key)
    np.testing.assert_array_equal(got["input_word_ids"], want[f"{key}_input_ids"])
    np.testing.assert_array_equal(got["input_mask"], want[f"{key}_attention_mask"])
    if f"{key}_token_type_ids" in want:
        np.testing.assert_array_equal(got["input_type_ids"], want[f"{key}_token_type_ids"])


@pytest.mark.parametrize("converted", ["multilingual_bert"], indirect=True)
def test_multilingual_ids_keep_case_accents_and_split_cjk(converted):
    """What the ids above mean for multilingual BERT: cased, accents kept, each CJK
    character its own token, Latin words around CJK still WordPiece-split."""
    _, out, _, pre, _ = converted
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    ids = pre.tokenize(tf.constant(["东京是日本的首都。", "Über München, café naïve.",
                                    "Straße"])).merge_dims(1, -1).to_list()
    assert [vocab[i] for i in ids[0]] == list("东京是日本的首都。")
    assert [vocab[i] for i in ids[1]] == ["Über", "München", ",", "café", "naïve", "."]
    assert [vocab[i] for i in ids[2]] == ["Stra", "##ße"]
    assert json.loads((out / "tfapp_hub.json").read_text())["lower_case"] is False


@pytest.mark.parametrize("converted", ["xlm_roberta"], indirect=True)
def test_xlm_roberta_layout(converted):
    """What the ids above mean for XLM-R: fairseq's specials, <s> a </s></s> b </s>,
    type ids 0, padding 1, a character the model lacks as <unk> (3), <mask> last."""
    family, _, want, pre, _ = converted
    x = _packed(pre, family, "pairs")
    ids, mask = x["input_word_ids"][0], x["input_mask"][0]
    n = int(mask.sum())
    a = len(pre.tokenize(tf.constant(["我爱东京"]))[0])
    assert ids[0] == 0 and ids[a + 1] == ids[a + 2] == 2 and ids[n - 1] == 2
    assert set(ids[n:].tolist()) == {1} and not x["input_type_ids"].any()
    snowman = pre.tokenize(tf.constant(["☃"]))[0].numpy().tolist()
    assert 3 in snowman
    special = {k: int(v) for k, v in pre.tokenize.get_special_tokens_dict().items()}
    assert special["mask_id"] == special["vocab_size"] - 1 == 89


@pytest.mark.parametrize("key", ["texts", "pairs"])
def test_encoder_matches_pytorch(converted, key):
    family, _, want, pre, enc = converted
    x = _packed(pre, family, key)  # tfapp's own type ids: DistilBERT must ignore them
    got = enc(x, training=False)["sequence_output"].numpy()
    expected = want[f"{key}_last_hidden_state"]
    if family == "xlm_roberta":
        # Padding positions differ by design: HF gives padding tokens position padding_idx,
        # tfapp the next position. Both masks hide them from every real token.
        real = want[f"{key}_attention_mask"].astype(bool)
        assert not real.all()
        got, expected = got[real], expected[real]
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=0)
    if f"{key}_pooled" in want:
        np.testing.assert_allclose(enc(x, training=False)["pooled_output"].numpy(),
                                   want[f"{key}_pooled"], atol=ATOL, rtol=0)


def test_metadata_records_the_family(converted):
    family, out, *_ = converted
    meta = json.loads((out / "tfapp_hub.json").read_text())
    bert = meta["bert_config"]
    random_pooler = meta["converted_from"]["randomly_initialised"]
    if family in ("multilingual_bert", "xlm_roberta"):
        assert random_pooler == [] and "embedding_size" not in bert
    else:  # neither family has a pooler: a seeded random one, recorded
        assert random_pooler == ["pooler/bias", "pooler/kernel"]
    if family == "distilbert":
        assert bert["type_vocab_size"] == 1 and bert["layer_norm_epsilon"] == 1e-12
    if family == "electra":
        assert bert["embedding_size"] == 8 and bert["hidden_size"] == 16
    if family == "xlm_roberta":  # positions 2.. of HF's 34 rows; SentencePiece preprocessor
        assert bert["max_position_embeddings"] == 32 and bert["type_vocab_size"] == 1
        assert meta["tokenizer"] == "sentencepiece" and "vocab_file" not in meta
        assert (out / meta["sentencepiece_model"]).read_bytes() == \
            (FIXTURES / family / "sentencepiece.bpe.model").read_bytes()
        assert meta["vocab_size"] == json.loads(
            (FIXTURES / family / "config.json").read_text())["vocab_size"]


def test_converted_dir_is_a_model_hub_handle(converted):
    from tfapp.hub.handles import resolve_hub_handle
    from tfapp.models.hub_encoder import load_hub_encoder, native_encoder_from_hub

    family, out, _, pre, enc = converted
    encoder, preprocessor = resolve_hub_handle(str(out))
    assert Path(encoder) == out / "encoder" and Path(preprocessor) == out / "preprocessor"
    layer = load_hub_encoder(encoder, trainable=True)
    projection = 2 if family == "electra" else 0
    assert len(layer.trainable_weights) == 2 * 16 + 5 + 2 + projection
    # The native encoder (mixed precision's path) reads the same weights back.
    native = native_encoder_from_hub(encoder)
    assert native is not None
    x = _packed(pre, family, "texts")
    np.testing.assert_allclose(native(x, training=False)["sequence_output"].numpy(),
                               enc(x, training=False)["sequence_output"].numpy(),
                               atol=1e-5, rtol=0)


def _copy(family: str, dst: Path, **config_changes) -> Path:
    shutil.copytree(FIXTURES / family, dst)
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**cfg, **config_changes}))
    return dst


def test_refusals_are_one_line(tmp_path, capsys):
    def error(src: Path) -> str:
        capsys.readouterr()
        code = hub_main(["convert", "--from", str(src), "--out", str(tmp_path / "bad")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("tfapp: error: ") and "\n" not in err, err
        assert not (tmp_path / "bad").exists()
        return err

    msg = error(_copy("distilbert", tmp_path / "sin", sinusoidal_pos_embds=True))
    assert "sinusoidal_pos_embds is true" in msg
    msg = error(_copy("electra", tmp_path / "deberta", model_type="deberta-v2"))
    assert "model_type 'deberta-v2' is not supported; tfapp converts bert, distilbert, " \
           "electra" in msg
    src = _copy("multilingual_bert", tmp_path / "nocjk")
    tok_cfg = json.loads((src / "tokenizer_config.json").read_text())
    (src / "tokenizer_config.json").write_text(json.dumps({**tok_cfg,
                                                           "tokenize_chinese_chars": False}))
    assert "tokenize_chinese_chars is false" in error(src)
    # Neither vocab.txt nor tokenizer.json; a tokenizer.json that is not WordPiece.
    src = _copy("electra", tmp_path / "novocab")
    tok_json = json.loads((src / "tokenizer.json").read_text())
    (src / "tokenizer.json").unlink()
    assert "has no vocab.txt (nor tokenizer.json)" in error(src)
    tok_json["model"]["type"] = "BPE"
    (src / "tokenizer.json").write_text(json.dumps(tok_json))
    assert "is not a WordPiece tokenizer" in error(src)
    # XLM-R: no SentencePiece model; one from another model; English RoBERTa (byte BPE).
    src = _copy("xlm_roberta", tmp_path / "nospm")
    (src / "sentencepiece.bpe.model").unlink()
    assert "has no sentencepiece.bpe.model" in error(src)
    src = _copy("xlm_roberta", tmp_path / "bigger", vocab_size=95)
    assert "88 pieces, so 90 fairseq ids, but config.json says vocab_size 95" in error(src)
    (src / "sentencepiece.bpe.model").write_bytes(b"not a model")
    assert "is not a SentencePiece model" in error(src)
    assert "model_type 'roberta' is not supported" in error(
        _copy("xlm_roberta", tmp_path / "roberta", model_type="roberta"))


def test_vocab_txt_and_tokenizer_json_read_the_same(tmp_path):
    """transformers 5 writes tokenizer.json only (the fixtures); older checkpoints and most
    Hub repos ship vocab.txt. Both give the same vocabulary (in id order, which the
    tokenizer.json holds as a mapping) and casing."""
    src = _copy("electra", tmp_path / "vt")
    tok_json = json.loads((src / "tokenizer.json").read_text())
    vocab = tok_json["model"]["vocab"]
    (src / "vocab.txt").write_text("".join(t + "\n" for t in sorted(vocab, key=vocab.get)),
                                   encoding="utf-8")
    (src / "tokenizer.json").unlink()
    from_txt = read_hf_bert(src)
    from_json = read_hf_bert(FIXTURES / "electra")
    assert from_txt[2] == from_json[2] and from_txt[2][:3] == ["[PAD]", "[UNK]", "[CLS]"]
    assert from_txt[2][vocab["movie"]] == "movie" and from_json[3] is from_txt[3] is True
    # ids not 0..n-1: refused rather than written shifted
    (src / "vocab.txt").unlink()
    vocab["movie"] = len(vocab) + 5
    (src / "tokenizer.json").write_text(json.dumps(tok_json))
    with pytest.raises(ConfigError, match="ids are not 0"):
        read_hf_bert(src)


def test_bert_config_embedding_size_stays_out_of_bert_dicts():
    """BERTs' configs, metadata and the builtin module's cache key are what they were
    before embedding_size existed; a projected config round-trips."""
    from tfapp.hub.handles import BUILTIN_MODULES
    from tfapp.models.bert_config import BertConfig

    assert "embedding_size" not in BertConfig(vocab_size=10).to_dict()
    assert "embedding_size" not in BUILTIN_MODULES["tiny"][0].to_json()
    electra = BertConfig(vocab_size=10, hidden_size=16, embedding_size=8)
    assert BertConfig.from_dict(electra.to_dict()) == electra
    # +8*16+16 for the projection, embeddings 8 wide instead of 16
    assert electra.num_parameters() - BertConfig(vocab_size=10, hidden_size=16
                                                 ).num_parameters() == \
        (8 * 16 + 16) - (10 + 512 + 2 + 2) * 8
    with pytest.raises(ValueError, match="embedding_size must be >= 1"):
        BertConfig(vocab_size=10, embedding_size=0)


def test_masked_lm_head_on_a_projected_encoder():
    """pretrain on a converted ELECTRA: the head's transform is embedding-wide, so the
    tied projection onto the (narrower) word table works."""
    from tfapp.hub.export import float32_policy
    from tfapp.models.bert import BertConfig, BertEncoder, dummy_inputs
    from tfapp.models.mlm import BertMaskedLM

    with float32_policy():
        enc = BertEncoder(BertConfig(vocab_size=30, hidden_size=16, num_heads=2,
                                     intermediate_size=32, embedding_size=8), seed=0)
        mlm = BertMaskedLM(enc)
        x = dummy_inputs(2, 6)
        x["masked_lm_positions"] = tf.constant([[1, 2], [3, 0]])
        logits = mlm(x, training=False)
    assert logits.shape == (2, 2, 30)


@pytest.mark.parametrize("converted", ["xlm_roberta"], indirect=True)
def test_pretrain_refuses_a_sentencepiece_module(converted, tmp_path, capsys):
    from tfapp.pretrain import main as pretrain_main

    _, out, *_ = converted
    (tmp_path / "corpus.txt").write_text("a text\nanother text\n")
    code = pretrain_main(["--corpus", str(tmp_path / "corpus.txt"), "--hub", str(out),
                          "--out", str(tmp_path / "adapted"), "--steps", "2",
                          f"output_dir={tmp_path / 'runs'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "tokenizes with SentencePiece" in err and "\n" not in err, err
    assert not (tmp_path / "adapted").exists()


def test_one_token_type_is_added_to_every_token():
    """type_vocab_size 1 (XLM-R, DistilBERT): the row is added whatever the type id, as
    the model saw it in training; a one-hot of id 1 would silently drop it instead."""
    from tfapp.hub.export import float32_policy
    from tfapp.models.bert import BertConfig, BertEncoder, dummy_inputs

    with float32_policy():
        enc = BertEncoder(BertConfig(vocab_size=30, hidden_size=8, num_heads=2,
                                     intermediate_size=16, type_vocab_size=1), seed=0)
        x = dummy_inputs(1, 5)
        zeros = enc(x, training=False)["sequence_output"].numpy()
        ones = enc({**x, "input_type_ids": tf.ones_like(x["input_type_ids"])},
                   training=False)["sequence_output"].numpy()
        enc.embeddings.token_type_embeddings.assign(tf.zeros([1, 8]))
        without = enc(x, training=False)["sequence_output"].numpy()
    np.testing.assert_array_equal(zeros, ones)
    assert np.abs(zeros - without).max() > 1e-3  # the row does count
