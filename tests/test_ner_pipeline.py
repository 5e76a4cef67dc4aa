"""NER inputs: tags on first word pieces (hand-worked), windows, and their re-joining."""

from __future__ import annotations

import functools

from tfapp.config import load_config

import numpy as np
import pytest

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "anna", "mull", "##er", "visit", "##s",
         "oslo"]
TAGS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
CONLL = "Anna B-PER\nMuller I-PER\nvisits O\nOslo B-LOC\n\nOslo B-LOC\n"


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def preprocess(vocab):
    """One preprocessor per length for the module: the windowing traced for it (the
    tokenizer included, seconds a trace) is cached per preprocessor, so tests share it."""
    from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn

    return functools.cache(lambda n: make_bert_preprocess_fn(vocab_file=vocab, seq_length=n))


def ner_data(tmp_path, pre, seq_length, *overrides):
    from tfapp.data.examples.ner import count_windows, load_ner_splits

    path = tmp_path / "train.conll"
    if not path.exists():  # rewritten, it would be other data (a new modification time)
        path.write_text(CONLL)
    cfg = load_config(None, ["task=ner", f"data.seq_length={seq_length}",
                             f"data.train_files={path}", "data.validation_split=0",
                             *overrides]).data
    splits = load_ner_splits(cfg, 0)
    return count_windows(splits, pre, seq_length), cfg


def _batches(tmp_path, preprocess, seq_length, *overrides):
    from tfapp.data.examples.ner import ner_examples
    from tfapp.data.input.reader import read_batches

    pre = preprocess(seq_length)
    data, cfg = ner_data(tmp_path, pre, seq_length, *overrides)
    assert data.tag_names == TAGS
    ds = read_batches(ner_examples(data, data.train, pre, seq_length), cfg,
                      batch_size=8, training=False, seed=0)
    (features, labels), = list(ds.as_numpy_iterator())
    return data, features, labels


def test_tags_go_to_first_pieces(tmp_path, preprocess):
    data, features, labels = _batches(tmp_path, preprocess, 10)
    assert data.counts["train"] == [2] and data.sentences["train"] == 2  # a window each
    # [CLS] anna mull ##er visit ##s oslo [SEP] [PAD] [PAD]
    np.testing.assert_array_equal(features["input_word_ids"][0], [2, 5, 6, 7, 8, 9, 10, 3, 0, 0])
    np.testing.assert_array_equal(features["input_mask"][0], [1] * 8 + [0] * 2)
    # B-PER on anna, I-PER on mull (not ##er), O on visit, B-LOC on oslo; the rest ignored
    np.testing.assert_array_equal(labels[0], [-1, 3, 4, -1, 0, -1, 1, -1, -1, -1])
    np.testing.assert_array_equal(labels[1], [-1, 1, -1, -1, -1, -1, -1, -1, -1, -1])


def test_long_sentence_windows_and_rejoin(tmp_path, preprocess):
    from tfapp.data.examples.ner import eval_windows, gold_tags
    from tfapp.tasks.ner.task import predict_tags

    data, features, labels = _batches(tmp_path, preprocess, 4)  # 2 pieces per window
    assert data.counts["train"] == [4]  # 3 windows, then 1
    np.testing.assert_array_equal(features["input_word_ids"],
                                  [[2, 5, 6, 3], [2, 7, 8, 3], [2, 9, 10, 3], [2, 10, 3, 0]])
    np.testing.assert_array_equal(labels, [[-1, 3, 4, -1], [-1, -1, 0, -1], [-1, -1, 1, -1],
                                           [-1, 1, -1, -1]])
    # Re-joining windows gives every word its tag back, in order: a "model" that answers
    # each window's own labels tags every sentence as its gold tags.
    answers = iter(labels)

    def call(features):
        return np.stack([np.maximum(next(answers), 0) for _ in features["input_word_ids"]])

    pre = preprocess(4)
    gold = gold_tags(data, data.train)
    assert gold == [["B-PER", "I-PER", "O", "B-LOC"], ["B-LOC"]]
    windows = eval_windows(data, data.train, pre, 4, 8)
    assert predict_tags(call, windows, data.tag_names) == gold


def test_kept_windows_are_read_once_and_give_the_same_tags(tmp_path, preprocess):
    """KeptWindows (the run's evaluations) holds the windows after the first pass, so a
    later evaluation reads the kept batches, not the dataset; above its byte limit it
    keeps nothing and reads the dataset again. Every pass re-joins to the gold tags."""
    from tfapp.data.examples.ner import eval_windows, gold_tags
    from tfapp.tasks.ner.task import KeptWindows, predict_tags

    data, _, labels = _batches(tmp_path, preprocess, 4)  # 4 windows of 2 sentences
    gold = gold_tags(data, data.train)

    def tagger():
        answers = iter(labels)
        return lambda features: np.stack([np.maximum(next(answers), 0)
                                          for _ in features["input_word_ids"]])

    dataset = eval_windows(data, data.train, preprocess(4), 4, 3)
    expected = list(dataset.as_numpy_iterator())
    kept = KeptWindows(dataset)
    assert kept.batches is None
    assert predict_tags(tagger(), kept, data.tag_names) == gold
    assert [len(b["sentence"]) for b in kept.batches] == [3, 1]
    for got, want in zip(kept.batches, expected, strict=True):
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
    first = kept.batches
    assert predict_tags(tagger(), kept, data.tag_names) == gold
    assert kept.batches is first and next(iter(kept)) is first[0]  # no second read

    small = KeptWindows(dataset, limit=sum(v.nbytes for v in expected[0].values()))
    for _ in range(2):
        assert predict_tags(tagger(), small, data.tag_names) == gold
        assert small.batches is None  # too big to keep: the dataset is read each time


def test_snapshot_replays_the_same_windows(tmp_path, preprocess):
    """The stored path (ids narrowed on disk, labels' -1 included) gives back what the
    direct path makes, on the write and on the replay."""
    _, features, labels = _batches(tmp_path, preprocess, 4)
    for _ in range(2):  # write, then replay
        _, got_features, got_labels = _batches(tmp_path, preprocess, 4,
                                               f"data.snapshot={tmp_path / 'snap'}")
        np.testing.assert_array_equal(got_labels, labels)
        assert got_labels.dtype == np.int32
        for key, value in features.items():
            np.testing.assert_array_equal(got_features[key], value)
    assert len([p for p in (tmp_path / "snap").iterdir()]) == 1


def test_datasets_that_cut_alike_share_one_trace(tmp_path, vocab):
    """The windowing (tokenizer included: seconds to trace) is traced once per kind of
    cut, not once per dataset: training and validation batches share one trace, the
    validation and test reports' windows another; both give the hand-worked windows."""
    from tfapp.data.examples.ner import cut_sentences, eval_windows, ner_examples
    from tfapp.data.input.reader import read_batches
    from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn

    # A preprocessor of its own: the module's shared one is traced by the tests before.
    pre = make_bert_preprocess_fn(vocab_file=vocab, seq_length=4)
    data, cfg = ner_data(tmp_path, pre, 4)
    split = data.train
    for training in (True, False):
        read_batches(ner_examples(data, split, pre, 4), cfg, batch_size=2, training=training,
                     seed=0)
    reports = [eval_windows(data, split, pre, 4, 8) for _ in range(2)]
    assert cut_sentences(pre.module, 4).experimental_get_tracing_count() == 1
    assert cut_sentences(pre.module, 4, eval_fields=True).experimental_get_tracing_count() == 1
    for windows in reports:
        (batch,) = list(windows.as_numpy_iterator())
        np.testing.assert_array_equal(batch["input_word_ids"], [[2, 5, 6, 3], [2, 7, 8, 3],
                                                                [2, 9, 10, 3], [2, 10, 3, 0]])
        np.testing.assert_array_equal(batch["word_index"], [[-1, 0, 1, -1], [-1, -1, 2, -1],
                                                            [-1, -1, 3, -1], [-1, 0, -1, -1]])
