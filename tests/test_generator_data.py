"""Generator input pipeline: cleaning, vocabulary, exact windows and pairs, batches."""

import gzip
import json

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import load_config
from tfapp.data import text_lines as tl
from tfapp.data.errors import DataError

import numpy as np
import pytest
import tensorflow as tf

S, E = tl.START_ID, tl.END_ID


def gen_cfg(*overrides):
    return load_config(None, ["task=generator", "model.kind=seq2seq", *overrides])


def test_standardize_and_clean_lines():
    out = tl.standardize(tf.constant(["  The Old Man's  BOAT, at dawn!  ", "Hi -- there"]))
    assert [t.decode() for t in out.numpy()] == ["the old man's boat at dawn", "hi there"]
    kept = tl.standardize(tf.constant(["Hi, there."]), strip_punctuation=False)
    assert kept.numpy()[0].decode() == "hi, there."
    lines = ["# header", "A line.", "   ", "!!!", "Chapter 2", "Another LINE"]
    assert tl.clean_lines(lines, drop_regex=r"^(#|Chapter)") == ["a line", "another line"]
    with pytest.raises(DataError, match="data.drop_regex"):
        tl.clean_lines(lines, drop_regex="(unclosed")


def test_vocabulary_specials_and_frequency(tmp_path):
    vocab = tl.build_vocabulary(["b a a", "c a b", "[end] a"], vocab_size=6)
    assert vocab[:4] == ["", "[UNK]", "[START]", "[END]"]
    assert vocab[4:] == ["a", "b"]  # by frequency, cut at vocab_size; "[end]" is no special
    vec = tl.make_vectorizer(vocab)
    assert vec(tf.constant(["a b zzz", ""])).to_list() == [[4, 5, 1], []]
    path = tl.save_vocabulary(vocab, tmp_path / "vocab.txt")
    assert tl.load_vocabulary(path) == vocab
    (tmp_path / "bad.txt").write_text("a\nb\n")
    with pytest.raises(DataError, match="not a tfapp generator vocabulary"):
        tl.load_vocabulary(tmp_path / "bad.txt")


def test_continuation_windows_exact():
    ex = tl.continuation_windows([[10, 11, 12, 13]], context_words=3, target_words=2)
    np.testing.assert_array_equal(ex.encoder_ids, [
        [S, 0, 0],        # nothing read yet: predict the line opening
        [S, 10, 0],
        [S, 10, 11],
        [10, 11, 12],     # the window slides: [START] falls out
        [11, 12, 13],     # the whole line read: predict [END]
    ])
    np.testing.assert_array_equal(ex.labels, [
        [10, 11], [11, 12], [12, 13], [13, E], [E, 0]])
    np.testing.assert_array_equal(ex.decoder_ids, [
        [S, 10], [S, 11], [S, 12], [S, 13], [S, E]])
    assert ex.encoder_ids.dtype == ex.labels.dtype == np.int32
    assert len(tl.continuation_windows([[5], [6, 7]], 4, 3)) == 2 + 3


def test_pair_examples_exact():
    ex = tl.pair_examples([([10, 11, 12], [20]), ([], [21, 22, 23, 24])], context_words=3,
                          target_words=3)
    np.testing.assert_array_equal(ex.encoder_ids, [[S, 10, 11], [S, 0, 0]])
    np.testing.assert_array_equal(ex.labels, [[20, E, 0], [21, 22, 23]])
    np.testing.assert_array_equal(ex.decoder_ids, [[S, 20, E], [S, 21, 22]])


def test_prompt_encoder_ids_match_training_windows():
    ids = tf.ragged.constant([[], [10], [10, 11, 12, 13, 14]], dtype=tf.int64)
    out = tl.prompt_encoder_ids(ids, 3).numpy()
    np.testing.assert_array_equal(out, [[S, 0, 0], [S, 10, 0], [12, 13, 14]])
    line = [10, 11, 12, 13, 14]
    windows = tl.continuation_windows([line], 3, 2).encoder_ids
    np.testing.assert_array_equal(windows[len(line)], out[2])  # same rule as training
    first = tl.prompt_encoder_ids(ids, 3, keep="first").numpy()
    np.testing.assert_array_equal(first[2], [S, 10, 11])


def test_masks_and_batches_from_a_corpus(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("# comment\n" + "\n".join(f"Line {i}: the cat sat." for i in range(40)))
    cfg = gen_cfg(f"data.train_files={corpus}", "data.drop_regex=^#", "data.context_words=4",
                  "data.target_words=3", "data.validation_split=0.25", "data.shuffle_buffer=0")
    data = tl.build_generator_data(cfg.data, global_batch_size=8, seed=0)
    # 30 train lines of 5 words -> 6 windows each; 10 validation lines.
    assert data.num_train_examples == 30 * 6 and data.num_validation_examples == 10 * 6
    assert data.info["texts"] == 30 and "# comment" not in data.vocabulary
    x, y = next(iter(data.train(None)))
    assert x["encoder_ids"].shape == (8, 4) and x["decoder_ids"].shape == (8, 3)
    assert y.shape == (8, 3) and y.dtype == tf.int32
    # Padding is 0 exactly where there is no target word: the loss mask.
    labels = np.concatenate([b[1].numpy() for b in data.validation(None)])
    assert labels.shape == (60, 3)
    np.testing.assert_array_equal((labels != 0).sum(1), [3, 3, 3, 3, 2, 1] * 10)
    assert data.train(None).element_spec[1].shape == (8, 3)  # drop_remainder: static batch
    assert data.sample_prompts[0] == ""


def test_read_pairs_tsv_jsonl_and_errors(tmp_path):
    tsv = tmp_path / "p.tsv"
    tsv.write_text("q\ta\nHello there\tHi!\nbad row\n")
    cfg = gen_cfg("data.example_shape=pairs", "data.source_column=q", "data.target_column=a")
    with pytest.raises(DataError, match=r"p.tsv:3: has 1 field\(s\) but the header has 2"
                                        r".*on_bad_rows=skip"):
        tl.read_pairs(str(tsv), cfg.data)
    cfg.data.on_bad_rows = "skip"
    assert tl.read_pairs(str(tsv), cfg.data) == [("Hello there", "Hi!")]
    jl = tmp_path / "p.jsonl"
    jl.write_text(json.dumps({"q": "x y", "a": "z"}) + "\n{not json\n")
    assert tl.read_pairs(str(jl), cfg.data) == [("x y", "z")]
    with pytest.raises(DataError, match=r"no column 'src'.*q, a.*data.source_column"):
        tl.read_pairs(str(tsv), gen_cfg("data.source_column=src").data)
    with pytest.raises(DataError, match=r"no column 'source' in the first JSON object "
                                        r"\(has: q, a\)"):
        tl.read_pairs(str(jl), gen_cfg().data)
    with pytest.raises(DataError, match="no files match"):
        tl.read_pairs(str(tmp_path / "missing*.tsv"), cfg.data)
    # The shared reader: gzipped files, and plain text refused for pairs.
    gz = tmp_path / "p.tsv.gz"
    gz.write_bytes(gzip.compress(b"q\ta\nHow are you\tFine\n"))
    assert tl.read_pairs(str(gz), cfg.data) == [("How are you", "Fine")]
    (tmp_path / "p.txt").write_text("a line\n")
    with pytest.raises(DataError, match="plain text lines hold one text"):
        tl.read_pairs(str(tmp_path / "p.txt"), cfg.data)


def test_corpus_through_the_shared_reader(tmp_path):
    """A gzipped corpus, a CSV's text column, and a bad JSONL row under data.on_bad_rows."""
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress(b"# head\nThe Cat sat.\n\nA dog ran\n"))
    cfg = gen_cfg("data.drop_regex=^#").data
    assert tl.clean_lines(tl.read_corpus(str(tmp_path / "c.txt.gz"), cfg),
                          cfg.drop_regex) == ["the cat sat", "a dog ran"]
    (tmp_path / "c.csv").write_text('id,body\n1,"Hello, world"\n2,Bye\n')
    assert tl.read_corpus(str(tmp_path / "c.csv"),
                          gen_cfg("data.text_column=body").data) == ["Hello, world", "Bye"]
    (tmp_path / "c.jsonl").write_text('{"text": "one"}\n[2]\n{"text": "three"}\n')
    with pytest.raises(DataError, match=r"c.jsonl:2: expected a JSON object.*on_bad_rows=skip"):
        tl.read_corpus(str(tmp_path / "c.jsonl"), cfg, "validation")
    assert tl.read_corpus(str(tmp_path / "c.jsonl"),
                          gen_cfg("data.on_bad_rows=skip").data) == ["one", "three"]


def test_demo_data_both_shapes():
    data = tl.build_generator_data(gen_cfg("data.drop_regex=^#").data, global_batch_size=32,
                                   seed=1)
    assert data.num_train_examples > 10000 and data.info["unk_rate"] == 0.0
    pairs = tl.build_generator_data(gen_cfg("data.example_shape=pairs").data,
                                    global_batch_size=32, seed=1)
    x, y = next(iter(pairs.train(None)))
    assert x["encoder_ids"].shape == (32, 8) and y.shape == (32, 12)
    assert pairs.sample_prompts and pairs.sample_prompts[0].startswith(("what", "where"))
