"""WordPiece vocab builder and BertPreprocessor: exact ids against a plain-Python reference."""

import shutil
import unicodedata

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.data.text.bert_preprocess import (
    BertPreprocessor,
    FastBertPacker,
    make_bert_preprocess_fn,
)
from tfapp.data.text.vocab import build_wordpiece_vocab, read_vocab, write_vocab
from tfapp.errors import DataError

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", "'", "the", "movie",
         "was", "great", "not", "good", "film", "i", "it", "bad", "un", "##believ", "##able",
         "##s", "##ly", "act", "##ing", "cafe", "t", "don", "a", "b", "c", "##a", "##b", "##c"]

SENTENCES = [
    "The movie was GREAT!",
    "I don't like it.",
    "Unbelievable acting, truly bad films",
    "Café, abc cab.",
    "",
    "xyz the the the the the the the the the the the the",
]


# ----------------------------------------------------------------- reference implementation
def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def ref_basic_tokenize(text: str, lower_case: bool) -> list[str]:
    if lower_case:
        text = "".join(c for c in unicodedata.normalize("NFD", text.lower())
                       if unicodedata.category(c) != "Mn")
    words = []
    for chunk in text.split():
        cur = ""
        for ch in chunk:
            if _is_punct(ch):
                if cur:
                    words.append(cur)
                words.append(ch)
                cur = ""
            else:
                cur += ch
        if cur:
            words.append(cur)
    return words


def ref_wordpiece(word: str, vocab: dict[str, int]) -> list[int]:
    ids, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                ids.append(vocab[piece])
                break
            end -= 1
        if end == start:  # no piece matched: the whole word is unknown
            return [vocab["[UNK]"]]
        start = end
    return ids


def ref_tokenize(text: str, vocab: list[str], lower_case: bool = True) -> list[list[int]]:
    index = {t: i for i, t in enumerate(vocab)}
    return [ref_wordpiece(w, index) for w in ref_basic_tokenize(text, lower_case)]


def ref_pack(a: list[int], b: list[int] | None, seq_length: int) -> tuple[list, list, list]:
    segs = [a] if b is None else [a, b]
    budget = seq_length - len(segs) - 1
    take = [0] * len(segs)
    while sum(take) < budget and any(t < len(s) for t, s in zip(take, segs, strict=True)):
        for i, s in enumerate(segs):  # round robin, one token at a time
            if take[i] < len(s) and sum(take) < budget:
                take[i] += 1
    ids, types = [2], [0]
    for i, s in enumerate(segs):
        ids += s[:take[i]] + [3]
        types += [i] * (take[i] + 1)
    pad = seq_length - len(ids)
    return ids + [0] * pad, [1] * len(ids) + [0] * pad, types + [0] * pad


def flat(pieces: list[list[int]]) -> list[int]:
    return [i for w in pieces for i in w]


# ----------------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    return str(write_vocab(VOCAB, tmp_path_factory.mktemp("vocab") / "vocab.txt"))


@pytest.fixture(scope="module")
def pre(vocab_file):
    return BertPreprocessor(vocab_file, lower_case=True, seq_length=12)


@pytest.fixture(scope="module")
def saved_pre(pre, tmp_path_factory):
    """``pre`` saved once for the module's tests (a save traces every function again)."""
    folder = tmp_path_factory.mktemp("saved") / "preprocessor"
    tf.saved_model.save(pre, str(folder))
    return folder


def test_tokenize_matches_reference(pre):
    got = pre.tokenize(tf.constant(SENTENCES))
    assert isinstance(got, tf.RaggedTensor) and got.dtype == tf.int32
    assert got.shape.rank == 3
    for text, row in zip(SENTENCES, got.to_list(), strict=True):
        assert row == ref_tokenize(text, VOCAB), text
    # A few spelled out, so the reference itself is pinned down.
    assert got.to_list()[0] == [[9], [10], [11], [12], [7]]
    assert got.to_list()[2][:2] == [[19, 20, 21], [24, 25]]  # un ##believ ##able, act ##ing
    assert got.to_list()[3][0] == [26]  # café -> cafe (accent stripped)


def test_single_segment_truncation_and_padding(pre):
    out = pre(tf.constant(SENTENCES))
    assert set(out) == {"input_word_ids", "input_mask", "input_type_ids"}
    for key, value in out.items():
        assert value.dtype == tf.int32 and value.shape == (len(SENTENCES), 12), key
    for i, text in enumerate(SENTENCES):
        ids, mask, types = ref_pack(flat(ref_tokenize(text, VOCAB)), None, 12)
        np.testing.assert_array_equal(out["input_word_ids"][i], ids)
        np.testing.assert_array_equal(out["input_mask"][i], mask)
        np.testing.assert_array_equal(out["input_type_ids"][i], types)
    # The long sentence is cut to exactly 12 with [SEP] last; the empty one is [CLS] [SEP].
    assert out["input_word_ids"][5, -1] == 3 and out["input_mask"][5].numpy().sum() == 12
    np.testing.assert_array_equal(out["input_word_ids"][4], [2, 3] + [0] * 10)


@pytest.mark.parametrize("seq_length", [6, 9, 16])
def test_pairs_get_type_ids_and_round_robin_trim(pre, seq_length):
    a, b = SENTENCES[2:6], SENTENCES[0:4][::-1]
    out = pre.bert_pack_inputs([pre.tokenize(tf.constant(a)), pre.tokenize(tf.constant(b))],
                               seq_length=seq_length)
    for i in range(len(a)):
        ids, mask, types = ref_pack(flat(ref_tokenize(a[i], VOCAB)),
                                    flat(ref_tokenize(b[i], VOCAB)), seq_length)
        np.testing.assert_array_equal(out["input_word_ids"][i], ids)
        np.testing.assert_array_equal(out["input_mask"][i], mask)
        np.testing.assert_array_equal(out["input_type_ids"][i], types)
    # "xyz the the ..." (13 pieces) + "The movie was GREAT!" (5) at 9: 3 + 3 (round robin).
    if seq_length == 9:
        np.testing.assert_array_equal(out["input_type_ids"][3], [0, 0, 0, 0, 0, 1, 1, 1, 1])


def test_saved_and_hub_loaded_preprocessor_is_identical(pre, saved_pre):
    assert (saved_pre / "assets" / "vocab.txt").read_text().split("\n")[:3] == VOCAB[:3]
    loaded = hub.load(str(saved_pre))
    strings = tf.constant(SENTENCES)
    for key, value in pre(strings).items():
        np.testing.assert_array_equal(loaded(strings)[key], value)
    assert loaded.tokenize(strings).to_list() == pre.tokenize(strings).to_list()
    segs = [loaded.tokenize(strings), loaded.tokenize(strings[::-1])]
    want = pre.bert_pack_inputs([pre.tokenize(strings), pre.tokenize(strings[::-1])],
                                seq_length=20)
    got = loaded.bert_pack_inputs(segs, seq_length=20)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])
    # The official usage pattern: a KerasLayer over the packer with a fixed seq_length.
    packer = hub.KerasLayer(loaded.bert_pack_inputs, arguments=dict(seq_length=7))
    assert packer([segs[0]])["input_word_ids"].shape == (len(SENTENCES), 7)
    assert bool(loaded.do_lower_case.numpy())
    assert loaded.tokenize.get_special_tokens_dict()["vocab_size"].numpy() == len(VOCAB)


def test_make_bert_preprocess_fn_in_tf_data(vocab_file, saved_pre):
    by_vocab = make_bert_preprocess_fn(vocab_file=vocab_file, seq_length=10)
    by_hub = make_bert_preprocess_fn(hub_preprocessor=str(saved_pre), seq_length=10)
    ds = tf.data.Dataset.from_tensor_slices((SENTENCES, SENTENCES[::-1])).batch(4)
    outs = []
    for fn in (by_vocab, by_hub):
        mapped = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)
        assert mapped.element_spec["input_word_ids"].shape.as_list() == [None, 10]
        outs.append(list(mapped.as_numpy_iterator()))
    for x, y in zip(*outs, strict=True):
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])
    first = outs[0][0]
    ids, _, types = ref_pack(flat(ref_tokenize(SENTENCES[0], VOCAB)),
                             flat(ref_tokenize(SENTENCES[-1], VOCAB)), 10)
    np.testing.assert_array_equal(first["input_word_ids"][0], ids)
    np.testing.assert_array_equal(first["input_type_ids"][0], types)


def test_a_hub_preprocessor_is_loaded_once_per_content(saved_pre, tmp_path):
    """Runs of one process (tune trials) share the loaded module; the same folder saved
    again with another vocab of the same size is loaded again and fingerprinted apart:
    its ids differ."""
    folder = str(tmp_path / "pre")
    shutil.copytree(saved_pre, folder)
    a = make_bert_preprocess_fn(hub_preprocessor=folder, seq_length=10)
    b = make_bert_preprocess_fn(hub_preprocessor=folder, seq_length=10)
    assert b.module is a.module and b.fingerprint == a.fingerprint
    swapped = VOCAB[:9] + [VOCAB[10], VOCAB[9]] + VOCAB[11:]  # "movie" <-> "the"
    shutil.rmtree(folder)
    tf.saved_model.save(BertPreprocessor(write_vocab(swapped, tmp_path / "v2" / "vocab.txt"),
                                         seq_length=12), folder)
    c = make_bert_preprocess_fn(hub_preprocessor=folder, seq_length=10)
    assert c.module is not a.module and c.fingerprint != a.fingerprint
    text = tf.constant(["the movie"])
    assert a(text)["input_word_ids"].numpy()[0, :4].tolist() == [2, 9, 10, 3]
    assert c(text)["input_word_ids"].numpy()[0, :4].tolist() == [2, 10, 9, 3]


def test_fast_packer_gives_the_same_ids_as_the_hub_interface(pre, vocab_file):
    fast = FastBertPacker(vocab_file)
    strings = tf.constant(SENTENCES + ["Ünïcödé, tabs\tand  spaces!?", "x" * 150 + " the"])
    for a, b in ((fast.tokenize(strings), pre.tokenize(strings).merge_dims(1, 2)),):
        assert a.to_list() == b.to_list()
    for seq_length in (5, 12):
        want = pre.bert_pack_inputs([pre.tokenize(strings), pre.tokenize(strings[::-1])],
                                    seq_length=seq_length)
        got = fast.bert_pack_inputs([fast.tokenize(strings), fast.tokenize(strings[::-1])],
                                    seq_length=seq_length)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])


def test_learned_vocab_roundtrip_and_pad_is_zero(tmp_path):
    corpus = ["the movie was great", "the film was not good", "unbelievably bad acting"] * 20
    vocab = build_wordpiece_vocab(corpus, vocab_size=60)
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(vocab) <= 60 and len(set(vocab)) == len(vocab)
    assert "movie" in vocab and "##s" not in vocab[:5]
    path = write_vocab(vocab, tmp_path / "v" / "vocab.txt")
    assert read_vocab(path) == vocab
    pre = BertPreprocessor(path, seq_length=8)
    ids = pre(tf.constant(["the movie was great"]))["input_word_ids"].numpy()[0]
    index = {t: i for i, t in enumerate(vocab)}
    assert ids.tolist() == [2] + [index[w] for w in "the movie was great".split()] + [3, 0, 0]


def test_bad_vocab_inputs_raise_one_line_errors(tmp_path):
    with pytest.raises(DataError, match="vocab file not found"):
        BertPreprocessor(tmp_path / "nope.txt")
    write_vocab(["[PAD]", "[UNK]", "hello"], tmp_path / "partial.txt")
    with pytest.raises(DataError, match=r"lacks the special token\(s\) \[CLS\], \[SEP\]"):
        BertPreprocessor(tmp_path / "partial.txt")
    with pytest.raises(DataError, match="empty corpus"):
        build_wordpiece_vocab(["", "  "], vocab_size=50)
    with pytest.raises(DataError, match="must exceed"):
        build_wordpiece_vocab(["a b"], vocab_size=5)
    with pytest.raises(DataError, match="cannot load the BERT preprocessor"):
        make_bert_preprocess_fn(hub_preprocessor=str(tmp_path / "missing"), seq_length=8)
    with pytest.raises(DataError, match="needs model.hub_preprocessor"):
        make_bert_preprocess_fn(seq_length=8)
