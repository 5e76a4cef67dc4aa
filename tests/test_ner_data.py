"""NER readers: CoNLL columns and JSONL, schemes read into IOB2, bad rows, unseen tags."""

from __future__ import annotations

import json

from tfapp.config import load_config
from tfapp.data.errors import DataError
from tfapp.data.sources import BadRowReport
from tfapp.data.tagged import load_ner_splits, read_tagged

import pytest

CONLL = ("\ufeff-DOCSTART- -X- -X- O\r\n\r\n"
         "Anna NNP B-NP I-PER\r\nlives VBZ B-VP O\r\nin IN B-PP O\r\n"
         "New NNP B-NP I-LOC\r\nYork NNP I-NP I-LOC\r\n. . O O\r\n\r\n"
         "-DOCSTART- -X- -X- O\n\n"
         "Bob NNP B-NP I-PER\nand CC O O\nAl NNP B-NP B-PER\n")


def _cfg(*overrides):
    return load_config(None, ["task=ner", *overrides]).data


def test_conll_iob1_with_docstart_bom_and_crlf(tmp_path):
    path = tmp_path / "train.conll"
    path.write_bytes(CONLL.encode())
    got = read_tagged(str(path), _cfg("data.tag_scheme=iob1"), split="train", mode="fail",
                      report=BadRowReport())
    assert [s.words for s in got] == [["Anna", "lives", "in", "New", "York", "."],
                                      ["Bob", "and", "Al"]]
    assert got[0].tags == ["B-PER", "O", "O", "B-LOC", "I-LOC", "O"]
    assert got[1].tags == ["B-PER", "O", "B-PER"]
    assert got[0].origin == (str(path), 3) and got[1].origin == (str(path), 12)


def test_tag_column_and_bad_line(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("Anna B-PER x\nParis B-LOC\n\nBob B-PER x\n")
    cfg = _cfg("data.tag_column=1")
    got = read_tagged(str(path), cfg, split="train", mode="fail", report=BadRowReport())
    assert [s.tags for s in got] == [["B-PER", "B-LOC"], ["B-PER"]]
    # column 2 exists only on some lines: the short line is named, its sentence dropped
    cfg = _cfg("data.tag_column=2")
    with pytest.raises(DataError, match=r"train.txt:2: has 2 column\(s\), no tag in "
                                        r"data.tag_column=2"):
        read_tagged(str(path), cfg, split="train", mode="fail", report=BadRowReport())


def test_jsonl_bioes_and_skip(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [{"tokens": ["Zoë", "Müller", "visits", "Oslo"], "tags": ["B-PER", "E-PER", "O",
                                                                     "S-LOC"]},
            {"tokens": ["bad"], "tags": ["B-PER", "O"]},
            {"tokens": ["Oslo"], "tags": ["X-LOC"]}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    cfg = _cfg("data.tag_scheme=bioes")
    with pytest.raises(DataError, match=r"train.jsonl:2: 1 tokens but 2 tags \(fix the data, "
                                        r"or set data.on_bad_rows=skip"):
        read_tagged(str(path), cfg, split="train", mode="fail", report=BadRowReport())
    report = BadRowReport()
    got = read_tagged(str(path), cfg, split="train", mode="skip", report=report)
    assert [s.tags for s in got] == [["B-PER", "I-PER", "O", "B-LOC"]]
    assert report.count == 2 and "train.jsonl:3: tag 'X-LOC' is not an IOB1, IOB2 or BIOES tag" in \
        report.summary()


def test_splits_vocab_and_unseen_validation_tag(tmp_path):
    train, val = tmp_path / "train.conll", tmp_path / "val.conll"
    train.write_text("Anna B-PER\nin O\nOslo B-LOC\n\nBob B-PER\n")
    val.write_text("Bob B-PER\n\nACME B-ORG\nhires O\n")
    vocab = tmp_path / "labels.json"
    with pytest.raises(DataError, match=r"val.conll:3: tag 'B-ORG' in this sentence: entity "
                                        r"type 'ORG' is not among the training data's "
                                        r"\(LOC, PER\)"):
        load_ner_splits(_cfg(f"data.train_files={train}", f"data.validation_files={val}"), 1,
                        vocab)
    splits = load_ner_splits(_cfg(f"data.train_files={train}", f"data.validation_files={val}",
                                  "data.on_bad_rows=skip"), 1, vocab)
    assert splits.tag_names == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert json.loads(vocab.read_text())["tags"] == splits.tag_names
    assert splits.unknown == {"validation": ["B-ORG"]}
    from tfapp.data.token_classification import gold_tags
    assert gold_tags(_data(splits), splits.prepared.validation) == [["B-PER"]]
    assert splits.entity_types == ["LOC", "PER"]


def _data(splits):
    from tfapp.data.token_classification import NerData

    return NerData(splits)


def test_all_outside_training_data_is_refused(tmp_path):
    train = tmp_path / "train.conll"
    train.write_text("just O\nwords O\n")
    with pytest.raises(DataError, match="tags no entity at all"):
        load_ner_splits(_cfg(f"data.train_files={train}", "data.validation_split=0"), 1)


@pytest.mark.parametrize("overrides, message", [
    (["task=ner", "data.text_column=x"], "data.text_column: task 'ner' does not use it"),
    (["task=ner", "model.pooling=mean_max"], "model.pooling: task 'ner' does not use it"),
    (["task=ner", "model.kind=cnn"], "model.kind: task 'ner' needs model.kind=bert"),
    (["task=ner", "data.format=csv"], "data.format: task ner reads conll or jsonl"),
    (["task=ner", "data.tag_column=0"], "data.tag_column: 0 is the word itself"),
    (["data.tag_scheme=bioes"], "data.tag_scheme: task 'classifier' does not use it"),
    (["task=generator", "model.kind=seq2seq", "data.tag_column=2"],
     "data.tag_column: task 'generator' does not use it"),
    (["data.format=conll"], "data.format: conll is read by task ner only"),
])
def test_config_rules(overrides, message):
    from tfapp.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_shipped_demo_is_what_the_seeded_script_writes(tmp_path):
    from tfapp.demo import DEMO_DIR
    from tfapp.demo.make_ner_corpus import main

    main(tmp_path)
    for split in ("train", "validation", "test"):
        assert (tmp_path / f"ner_{split}.conll").read_text() == \
            (DEMO_DIR / f"ner_{split}.conll").read_text(), split
    splits = load_ner_splits(_cfg("data.train_files=demo"), 1)
    assert splits.entity_types == ["DATE", "LOC", "ORG", "PER"]
    assert [s.rows for s in splits.prepared.splits()] == [900, 200, 200]
