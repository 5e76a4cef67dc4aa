"""Generator input pipeline: cleaning, vocabulary, exact windows and pairs, batches."""

import gzip
import json

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import load_config
from tfapp.data.examples import generator as tl
from tfapp.data.input.reader import read_batches
from tfapp.data.text import words
from tfapp.errors import DataError

import numpy as np
import pytest
import tensorflow as tf
from conftest import clean_lines, prepared_rows

S, E = words.START_ID, words.END_ID


def gen_cfg(*overrides):
    return load_config(None, ["task=generator", "model.kind=seq2seq", *overrides])


def test_standardize_and_clean_lines():
    out = words.standardize(tf.constant(["  The Old Man's  BOAT, at dawn!  ", "Hi -- there"]))
    assert [t.decode() for t in out.numpy()] == ["the old man's boat at dawn", "hi there"]
    kept = words.standardize(tf.constant(["Hi, there."]), strip_punctuation=False)
    assert kept.numpy()[0].decode() == "hi, there."
    lines = ["# header", "A line.", "   ", "!!!", "Chapter 2", "Another LINE"]
    assert clean_lines(lines, drop_regex=r"^(#|Chapter)") == ["a line", "another line"]
    with pytest.raises(DataError, match="data.drop_regex"):
        clean_lines(lines, drop_regex="(unclosed")


def test_vocabulary_specials_and_frequency(tmp_path):
    vocab = words.build_vocabulary(["b a a", "c a b", "[end] a"], vocab_size=6)
    assert vocab[:4] == ["", "[UNK]", "[START]", "[END]"]
    assert vocab[4:] == ["a", "b"]  # by frequency, cut at vocab_size; "[end]" is no special
    table = words.vocabulary_table(vocab)
    assert words.word_ids(table, tf.constant(["a b zzz", ""])).to_list() == [[4, 5, 1], []]
    path = words.save_vocabulary(vocab, tmp_path / "vocab.txt")
    assert words.load_vocabulary(path) == vocab
    (tmp_path / "bad.txt").write_text("a\nb\n")
    with pytest.raises(DataError, match="not a tfapp generator vocabulary"):
        words.load_vocabulary(tmp_path / "bad.txt")


def windows(lines, context_words, target_words):
    out = words.continuation_windows(tf.ragged.constant(lines, tf.int64), context_words,
                                  target_words)
    return {k: v.numpy() for k, v in out.items()}


def test_continuation_windows_exact():
    ex = windows([[10, 11, 12, 13]], context_words=3, target_words=2)
    np.testing.assert_array_equal(ex["encoder_ids"], [
        [S, 0, 0],        # nothing read yet: predict the line opening
        [S, 10, 0],
        [S, 10, 11],
        [10, 11, 12],     # the window slides: [START] falls out
        [11, 12, 13],     # the whole line read: predict [END]
    ])
    np.testing.assert_array_equal(ex["labels"], [
        [10, 11], [11, 12], [12, 13], [13, E], [E, 0]])
    np.testing.assert_array_equal(ex["decoder_ids"], [
        [S, 10], [S, 11], [S, 12], [S, 13], [S, E]])
    assert ex["encoder_ids"].dtype == ex["labels"].dtype == np.int32
    two = windows([[5], [6, 7]], 4, 3)
    assert len(two["labels"]) == 2 + 3 and two["line"].tolist() == [0, 0, 1, 1, 1]


def test_pair_examples_exact():
    ex = words.pair_windows(tf.ragged.constant([[10, 11, 12], []], tf.int64),
                         tf.ragged.constant([[20], [21, 22, 23, 24]], tf.int64),
                         context_words=3, target_words=3)
    np.testing.assert_array_equal(ex["encoder_ids"], [[S, 10, 11], [S, 0, 0]])
    np.testing.assert_array_equal(ex["labels"], [[20, E, 0], [21, 22, 23]])
    np.testing.assert_array_equal(ex["decoder_ids"], [[S, 20, E], [S, 21, 22]])


def test_prompt_encoder_ids_match_training_windows():
    ids = tf.ragged.constant([[], [10], [10, 11, 12, 13, 14]], dtype=tf.int64)
    out = words.prompt_encoder_ids(ids, 3).numpy()
    np.testing.assert_array_equal(out, [[S, 0, 0], [S, 10, 0], [12, 13, 14]])
    line = [10, 11, 12, 13, 14]
    np.testing.assert_array_equal(windows([line], 3, 2)["encoder_ids"][len(line)], out[2])
    first = words.prompt_encoder_ids(ids, 3, keep="first").numpy()
    np.testing.assert_array_equal(first[2], [S, 10, 11])


def dataset(data, split, cfg, *, batch: int, training: bool):
    examples = tl.generator_examples(data, getattr(data, split), cfg)
    return read_batches(examples, cfg, batch_size=batch, training=training, seed=0)


def test_masks_and_batches_from_a_corpus(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("# comment\n" + "\n".join(f"Line {i}: the cat sat." for i in range(40)))
    cfg = gen_cfg(f"data.train_files={corpus}", "data.drop_regex=^#", "data.context_words=4",
                  "data.target_words=3", "data.validation_split=0.25", "data.shuffle_buffer=0")
    data = tl.build_generator_data(cfg.data, seed=0)
    # Lines of 5 words -> 6 windows each; the split goes by whole lines.
    texts, val_texts = data.info["texts"], data.info["validation_texts"]
    assert texts + val_texts == 40 and 4 <= val_texts <= 18
    assert data.size(data.train) == texts * 6
    assert data.size(data.validation) == val_texts * 6
    assert "# comment" not in data.vocabulary and "comment" not in data.vocabulary
    x, y = next(iter(dataset(data, "train", cfg.data, batch=8, training=True)))
    assert x["encoder_ids"].shape == (8, 4) and x["decoder_ids"].shape == (8, 3)
    assert y.shape == (8, 3) and y.dtype == tf.int32
    # Padding is 0 exactly where there is no target word: the loss mask.
    labels = np.concatenate([b[1].numpy() for b in dataset(data, "validation", cfg.data,
                                                           batch=8, training=False)])
    assert labels.shape == (val_texts * 6, 3)
    np.testing.assert_array_equal((labels != 0).sum(1), [3, 3, 3, 3, 2, 1] * val_texts)
    train = dataset(data, "train", cfg.data, batch=8, training=True)
    assert train.element_spec[1].shape == (8, 3)  # drop_remainder: static batch
    assert data.sample_prompts[0] == ""


def test_pairs_tsv_jsonl_and_errors(tmp_path):
    tsv = tmp_path / "p.tsv"
    tsv.write_text("q\ta\nHello there\tHi!\nbad row\n")
    cfg = gen_cfg("data.example_shape=pairs", "data.source_column=q", "data.target_column=a")
    rows = tl.generator_rows(cfg.data)
    with pytest.raises(DataError, match=r"p.tsv:3: has 1 field\(s\) but the header has 2"
                                        r".*on_bad_rows=skip"):
        prepared_rows([tsv], rows, tmp_path)
    assert prepared_rows([tsv], rows, tmp_path, mode="skip") == [
        {"source": "Hello there", "target": "Hi!"}]
    jl = tmp_path / "p.jsonl"
    jl.write_text(json.dumps({"q": "x y", "a": "z"}) + "\n{not json\n")
    assert prepared_rows([jl], rows, tmp_path, mode="skip") == [{"source": "x y", "target": "z"}]
    with pytest.raises(DataError, match=r"no column 'src'.*q, a.*data.source_column"):
        prepared_rows([tsv], tl.generator_rows(gen_cfg("data.example_shape=pairs",
                                                       "data.source_column=src").data),
                      tmp_path)
    with pytest.raises(DataError, match=r"no column 'source' in the first JSON object "
                                        r"\(has: q, a\)"):
        prepared_rows([jl], tl.generator_rows(gen_cfg("data.example_shape=pairs").data),
                      tmp_path)
    # Gzipped files, and plain text refused for pairs.
    gz = tmp_path / "p.tsv.gz"
    gz.write_bytes(gzip.compress(b"q\ta\nHow are you\tFine\n"))
    assert prepared_rows([gz], rows, tmp_path) == [{"source": "How are you", "target": "Fine"}]
    (tmp_path / "p.txt").write_text("a line\n")
    with pytest.raises(DataError, match="plain text lines hold one text"):
        prepared_rows([tmp_path / "p.txt"], rows, tmp_path)


def test_corpus_through_the_shared_readers(tmp_path):
    """A gzipped corpus, a CSV's text column, and a bad JSONL row under data.on_bad_rows."""
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress(b"# head\nThe Cat sat.\n\nA dog ran\n"))
    cfg = gen_cfg("data.drop_regex=^#").data
    texts = [r["text"] for r in prepared_rows([tmp_path / "c.txt.gz"], tl.generator_rows(cfg),
                                              tmp_path)]
    assert clean_lines(texts, cfg.drop_regex) == ["the cat sat", "a dog ran"]
    (tmp_path / "c.csv").write_text('id,body\n1,"Hello, world"\n2,Bye\n')
    body = tl.generator_rows(gen_cfg("data.text_column=body").data)
    assert prepared_rows([tmp_path / "c.csv"], body, tmp_path) == [
        {"text": "Hello, world"}, {"text": "Bye"}]
    (tmp_path / "c.jsonl").write_text('{"text": "one"}\n[2]\n{"text": "three"}\n')
    with pytest.raises(DataError, match=r"c.jsonl:2: expected a JSON object.*on_bad_rows=skip"):
        prepared_rows([tmp_path / "c.jsonl"], tl.generator_rows(cfg), tmp_path)
    assert prepared_rows([tmp_path / "c.jsonl"], tl.generator_rows(cfg), tmp_path,
                         mode="skip") == [{"text": "one"}, {"text": "three"}]


def test_a_drop_regex_tensorflow_cannot_run_is_one_line():
    with pytest.raises(DataError, match=r"data.drop_regex: '\(\?=x\)' uses syntax "
                                        r"TensorFlow's regular expressions \(RE2\) lack"):
        words.drop_matcher("(?=x)")


def test_demo_data_both_shapes():
    cfg = gen_cfg("data.drop_regex=^#").data
    data = tl.build_generator_data(cfg, seed=1)
    assert data.size(data.train) > 10000 and data.info["unk_rate"] == 0.0
    cfg = gen_cfg("data.example_shape=pairs").data
    pairs = tl.build_generator_data(cfg, seed=1)
    x, y = next(iter(dataset(pairs, "train", cfg, batch=32, training=True)))
    assert x["encoder_ids"].shape == (32, 8) and y.shape == (32, 12)
    assert pairs.sample_prompts and pairs.sample_prompts[0].startswith(("what", "where"))
