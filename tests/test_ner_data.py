"""NER readers: CoNLL columns and JSONL, schemes read into IOB2, bad rows, unseen tags."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tfapp.config import load_config
from tfapp.data.examples.ner import load_ner_splits
from tfapp.data.rows.bad_rows import BadRowPolicy, BadRowReport
from tfapp.data.rows.read import file_formats, iter_rows
from tfapp.data.rows.spec import RowSpec
from tfapp.errors import DataError

import pytest

CONLL = ("\ufeff-DOCSTART- -X- -X- O\r\n\r\n"
         "Anna NNP B-NP I-PER\r\nlives VBZ B-VP O\r\nin IN B-PP O\r\n"
         "New NNP B-NP I-LOC\r\nYork NNP I-NP I-LOC\r\n. . O O\r\n\r\n"
         "-DOCSTART- -X- -X- O\n\n"
         "Bob NNP B-NP I-PER\nand CC O O\nAl NNP B-NP B-PER\n")


def _cfg(*overrides):
    return load_config(None, ["task=ner", *overrides]).data


def iter_tagged(path, data, *, split, mode, report):
    """The sentences of ``path`` as evaluate reads them: (words, tags), first line."""
    spec = RowSpec.from_config("tagged", data)
    rows = iter_rows(file_formats(path, spec), spec, split=split)
    for row in BadRowPolicy(mode, report, split).good(rows):
        yield SimpleNamespace(words=row.values[0], tags=row.values[1], origin=(row.file, row.line))


def test_conll_iob1_with_docstart_bom_and_crlf(tmp_path):
    path = tmp_path / "train.conll"
    path.write_bytes(CONLL.encode())
    got = list(iter_tagged(str(path), _cfg("data.tag_scheme=iob1"), split="train", mode="fail",
                      report=BadRowReport()))
    assert [s.words for s in got] == [["Anna", "lives", "in", "New", "York", "."],
                                      ["Bob", "and", "Al"]]
    assert got[0].tags == ["B-PER", "O", "O", "B-LOC", "I-LOC", "O"]
    assert got[1].tags == ["B-PER", "O", "B-PER"]
    assert got[0].origin == (str(path), 3) and got[1].origin == (str(path), 12)


def test_tag_column_and_bad_line(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("Anna B-PER x\nParis B-LOC\n\nBob B-PER x\n")
    cfg = _cfg("data.tag_column=1")
    got = list(iter_tagged(str(path), cfg, split="train", mode="fail", report=BadRowReport()))
    assert [s.tags for s in got] == [["B-PER", "B-LOC"], ["B-PER"]]
    # column 2 exists only on some lines: the short line is named, its sentence dropped
    cfg = _cfg("data.tag_column=2")
    with pytest.raises(DataError, match=r"train.txt:2: has 2 column\(s\), no tag in "
                                        r"data.tag_column=2"):
        list(iter_tagged(str(path), cfg, split="train", mode="fail", report=BadRowReport()))


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
        list(iter_tagged(str(path), cfg, split="train", mode="fail", report=BadRowReport()))
    report = BadRowReport()
    got = list(iter_tagged(str(path), cfg, split="train", mode="skip", report=report))
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
    from tfapp.data.examples.ner import gold_tags
    assert gold_tags(splits, splits.prepared.validation) == [["B-PER"]]
    assert splits.entity_types == ["LOC", "PER"]


def test_all_outside_training_data_is_refused(tmp_path):
    train = tmp_path / "train.conll"
    train.write_text("just O\nwords O\n")
    with pytest.raises(DataError, match="tags no entity at all"):
        load_ner_splits(_cfg(f"data.train_files={train}", "data.validation_split=0"), 1)


@pytest.mark.parametrize("overrides, message", [
    (["task=ner", "data.text_column=x"], "unknown config key 'data.text_column'"),
    (["task=ner", "model.pooling=mean_max"], "unknown config key 'model.pooling'.*'model.pooling' "
     "belongs to task classifier, not to task ner"),
    (["task=ner", "model.kind=cnn"], "model.kind: task 'ner' needs model.kind=bert"),
    (["task=ner", "data.format=csv"], "data.format: task ner reads conll or jsonl"),
    (["task=ner", "data.tag_column=0"], "data.tag_column: 0 is the word itself"),
    (["data.tag_scheme=bioes"], "unknown config key 'data.tag_scheme'"),
    (["task=generator", "model.kind=seq2seq", "data.tag_column=2"],
     "unknown config key 'data.tag_column'.*belongs to task ner, not to task generator"),
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
    assert [s.rows for s in splits.prepared.splits()] == [4000, 400, 400]


# One text in each scheme: "Anna Berg" and "Bob Lee" (adjacent PER), Oslo (LOC), ACME (ORG).
SCHEME_FILES = {
    "iob1": "Anna I-PER\nBerg I-PER\nBob B-PER\nLee I-PER\nvisit O\nOslo I-LOC\n\n"
            "ACME I-ORG\nhires O\n",
    "iob2": "Anna B-PER\nBerg I-PER\nBob B-PER\nLee I-PER\nvisit O\nOslo B-LOC\n\n"
            "ACME B-ORG\nhires O\n",
    "bioes": "Anna B-PER\nBerg E-PER\nBob B-PER\nLee E-PER\nvisit O\nOslo S-LOC\n\n"
             "ACME S-ORG\nhires O\n"}
SCHEME_IOB2 = [["B-PER", "I-PER", "B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
# entities the configured scheme's strict reading would lose or cut, per (file, configured)
CONVERTED = {("iob1", "iob1"): 0, ("iob1", "iob2"): 3, ("iob1", "bioes"): 4,
             ("iob2", "iob1"): 0, ("iob2", "iob2"): 0, ("iob2", "bioes"): 4,
             ("bioes", "iob1"): 4, ("bioes", "iob2"): 4, ("bioes", "bioes"): 0}


@pytest.mark.parametrize("written, configured", sorted(CONVERTED))
def test_each_scheme_read_under_each_configured_scheme(written, configured, tmp_path, caplog):
    path = tmp_path / f"{written}.conll"
    path.write_text(SCHEME_FILES[written])
    caplog.set_level("INFO", "tfapp.data")
    got = list(iter_tagged(str(path), _cfg(f"data.tag_scheme={configured}"), split="train",
                      mode="fail", report=BadRowReport()))
    assert [s.tags for s in got] == SCHEME_IOB2  # the same four entities, whatever the config
    converted = CONVERTED[written, configured]
    line = f"data: {path}: {written.upper()} tags (data.tag_scheme={configured}): 4 entities " \
           f"read, {converted} converted, 0 refused"
    if converted:
        line += (f" (converted: read as {written.upper()}, which data.tag_scheme={configured} "
                 f"would read as O or cut, first at line 1; set data.tag_scheme={written} to "
                 "say what the data is)")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING" if converted else "INFO", line)]


def test_iob1_starts_mixed_with_iob2_are_both_read(tmp_path, caplog):
    path = tmp_path / "mixed.conll"
    path.write_text("Anna B-PER\nBerg I-PER\nin O\nOslo I-LOC\n\nACME I-ORG\nand O\nBob B-PER\n")
    caplog.set_level("INFO", "tfapp.data")
    got = list(iter_tagged(str(path), _cfg(), split="train", mode="fail", report=BadRowReport()))
    assert [s.tags for s in got] == [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-PER"]]
    assert caplog.records[-1].getMessage().startswith(
        f"data: {path}: IOB1 tags (data.tag_scheme=iob2): 4 entities read, 2 converted, 0 "
        "refused (converted: read as IOB1, which data.tag_scheme=iob2 would read as O or cut, "
        "first at line 4;")


BIOES_AND_IOB = ("Anna S-PER\nleft O\n\n"      # 1-2: BIOES
                 "Bob B-PER\nLee I-PER\nleft O\n\n"  # 4-6: IOB2's B-PER I-PER: never ends
                 "in O\nOslo I-LOC\n\n"          # 8-9: an IOB1 start
                 "Al B-PER\nBerg E-LOC\n\n"      # 11-12: the type changes mid-entity
                 "Ed B-ORG\nCo E-ORG\n")         # 14-15: BIOES
BIOES_REFUSED = [
    (4, "tag 'B-PER' begins a BIOES entity that never ends (next comes 'O', not I-PER or "
        "E-PER; a one-word entity is S-PER)"),
    (9, "tag 'I-LOC' begins an entity, as in IOB1, in a file of BIOES tags (E-, S-), where an "
        "entity begins with B- or S-; write the file in one scheme"),
    (12, "tag 'E-LOC' changes the type of the BIOES entity that 'B-PER' begins (its B-, I- and "
         "E- tags have one type)")]


@pytest.mark.parametrize("configured", ["bioes", "iob2"])
def test_bioes_mixed_with_iob_is_refused_naming_file_and_line(configured, tmp_path, caplog):
    path = tmp_path / "mixed.conll"
    path.write_text(BIOES_AND_IOB)
    cfg = _cfg(f"data.tag_scheme={configured}")
    line, why = BIOES_REFUSED[0]
    with pytest.raises(DataError) as err:
        list(iter_tagged(str(path), cfg, split="train", mode="fail", report=BadRowReport()))
    assert str(err.value) == (f"{path}:{line}: {why} (fix the data, or set "
                              "data.on_bad_rows=skip to drop such rows)")
    report = BadRowReport()
    caplog.set_level("INFO", "tfapp.data")
    got = list(iter_tagged(str(path), cfg, split="train", mode="skip", report=report))
    assert [s.tags for s in got] == [["B-PER", "O"], ["B-ORG", "I-ORG"]]
    assert [(b.line, b.problem) for b in report.examples] == BIOES_REFUSED
    converted = 0 if configured == "bioes" else 2  # IOB2 reads neither S-PER nor B-ORG E-ORG
    tail = "" if not converted else " (converted: read as BIOES"
    assert caplog.records[-1].levelname == "WARNING"
    assert caplog.records[-1].getMessage().startswith(
        f"data: {path}: BIOES tags (data.tag_scheme={configured}): 2 entities read, "
        f"{converted} converted, 4 refused{tail}")


def test_jsonl_bioes_refusal_names_the_sentences_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"tokens": ["Anna"], "tags": ["S-PER"]}\n'
                    '{"tokens": ["Bob", "Lee"], "tags": ["B-PER", "I-PER"]}\n')
    with pytest.raises(DataError, match=r"train.jsonl:2: tag 'B-PER' begins a BIOES entity "
                                        r"that never ends \(the sentence ends before an E-PER"):
        list(iter_tagged(str(path), _cfg(), split="train", mode="fail", report=BadRowReport()))


# CoNLL-2003 as published: IOB1 (I- begins an entity; B- only between two of one type),
# four columns, -DOCSTART- lines.
CONLL2003_IOB1 = """-DOCSTART- -X- O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O
to TO I-VP O
boycott VB I-VP O
British JJ I-NP I-MISC
lamb NN I-NP O
. . O O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER

the DT I-NP O
letter NN I-NP O
from IN I-PP O
Hans NNP I-NP I-PER
Schmidt NNP I-NP I-PER
Anna NNP B-NP B-PER
Berg NNP I-NP I-PER
in IN I-PP O
Bonn NNP I-NP I-LOC
"""


def test_iob1_data_with_the_default_iob2_config_loses_no_entity(tmp_path, caplog):
    """The real-world case: CoNLL-2003's IOB1 files trained with data.tag_scheme=iob2 (the
    default) read every entity that begins with I- as O; now all are read, and said."""
    from tfapp.data.examples.ner import gold_tags

    train = tmp_path / "eng.train"
    train.write_text(CONLL2003_IOB1)
    caplog.set_level("INFO", "tfapp.data")
    splits = load_ner_splits(_cfg(f"data.train_files={train}", "data.validation_split=0"), 1)
    assert sorted(gold_tags(splits, splits.prepared.train)) == sorted([
        ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"],
        ["B-PER", "I-PER"],
        ["O", "O", "O", "B-PER", "I-PER", "B-PER", "I-PER", "O", "B-LOC"]])
    assert splits.entity_types == ["LOC", "MISC", "ORG", "PER"]
    entities = splits.prepared.train.manifest.sources[0].entities
    assert entities == {"scheme": "iob1", "read": 7, "converted": 6, "refused": 0,
                        "first_converted": 3}
    assert (f"data: {train}: IOB1 tags (data.tag_scheme=iob2): 7 entities read, 6 converted, "
            "0 refused (converted: read as IOB1, which data.tag_scheme=iob2 would read as O or "
            "cut, first at line 3; set data.tag_scheme=iob1 to say what the data is)"
            ) in [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
