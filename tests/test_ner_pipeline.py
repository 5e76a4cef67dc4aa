"""NER inputs: tags on first word pieces (hand-worked), windows, and their re-joining."""

from __future__ import annotations

from tfapp.config import load_config
from tfapp.data.tagged import TaggedSentence

import numpy as np
import pytest

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "anna", "mull", "##er", "visit", "##s",
         "oslo"]
TAGS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
SENTENCES = [TaggedSentence(["Anna", "Muller", "visits", "Oslo"],
                            ["B-PER", "I-PER", "O", "B-LOC"], ("x", 1)),
             TaggedSentence(["Oslo"], ["B-LOC"], ("x", 6))]


@pytest.fixture(scope="module")
def preprocess(tmp_path_factory):
    from tfapp.data.bert_preprocess import make_bert_preprocess_fn

    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    return lambda n: make_bert_preprocess_fn(vocab_file=str(vocab), seq_length=n)


def _batches(preprocess, seq_length):
    from tfapp.data.token_classification import make_ner_dataset, window_sentences

    pre = preprocess(seq_length)
    data = window_sentences(SENTENCES, pre.module.tokenize, seq_length, "validation")
    cfg = load_config(None, ["task=ner", f"data.seq_length={seq_length}"]).data
    ds = make_ner_dataset(data, pre, TAGS, cfg, batch_size=8, training=False, seed=0)
    (features, labels), = list(ds.as_numpy_iterator())
    return data, features, labels


def test_tags_go_to_first_pieces(preprocess):
    data, features, labels = _batches(preprocess, 10)
    assert data.counts == [[1, 2, 2, 1], [1]] and data.windows == [1, 1]
    # [CLS] anna mull ##er visit ##s oslo [SEP] [PAD] [PAD]
    np.testing.assert_array_equal(features["input_word_ids"][0], [2, 5, 6, 7, 8, 9, 10, 3, 0, 0])
    np.testing.assert_array_equal(features["input_mask"][0], [1] * 8 + [0] * 2)
    # B-PER on anna, I-PER on mull (not ##er), O on visit, B-LOC on oslo; the rest ignored
    np.testing.assert_array_equal(labels[0], [-1, 3, 4, -1, 0, -1, 1, -1, -1, -1])
    np.testing.assert_array_equal(labels[1], [-1, 1, -1, -1, -1, -1, -1, -1, -1, -1])


def test_long_sentence_windows_and_rejoin(preprocess):
    from tfapp.data.token_classification import first_pieces, rejoin

    data, features, labels = _batches(preprocess, 4)  # 2 pieces per window
    assert data.windows == [3, 1] and len(data) == 4
    np.testing.assert_array_equal(features["input_word_ids"],
                                  [[2, 5, 6, 3], [2, 7, 8, 3], [2, 9, 10, 3], [2, 10, 3, 0]])
    np.testing.assert_array_equal(labels, [[-1, 3, 4, -1], [-1, -1, 0, -1], [-1, -1, 1, -1],
                                           [-1, 1, -1, -1]])
    assert first_pieces([1, 2, 2, 1], 2) == [(0, 1), (0, 2), (1, 2), (2, 2)]
    assert first_pieces([1, 0, 3], 2) == [(0, 1), None, (0, 2)]
    # re-joining the windows' labels gives every word its tag back, in order
    assert rejoin(data, labels) == [[3, 4, 0, 1], [1]]


def test_snapshot_replays_the_same_windows(preprocess, tmp_path):
    """The stored path (ids narrowed on disk, labels' -1 included) gives back what the
    direct path makes, on the write and on the replay."""
    from tfapp.data.token_classification import make_ner_dataset, window_sentences

    pre = preprocess(4)
    data = window_sentences(SENTENCES, pre.module.tokenize, 4, "validation")
    _, features, labels = _batches(preprocess, 4)
    cfg = load_config(None, ["task=ner", "data.seq_length=4",
                             f"data.snapshot={tmp_path / 'snap'}"]).data
    for _ in range(2):  # write, then replay
        ds = make_ner_dataset(data, pre, TAGS, cfg, batch_size=8, training=False, seed=0)
        (got_features, got_labels), = list(ds.as_numpy_iterator())
        np.testing.assert_array_equal(got_labels, labels)
        assert got_labels.dtype == np.int32
        for key, value in features.items():
            np.testing.assert_array_equal(got_features[key], value)
    assert len(list((tmp_path / "snap").iterdir())) == 1
