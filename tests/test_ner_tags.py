"""NER tag schemes, strict entity spans and entity scores against hand-worked values."""

from __future__ import annotations

from tfapp.data.text.tags import (
    EntityCounts,
    SchemeEvidence,
    begun,
    from_spans,
    read_entities,
    spans,
    tag_names,
    tag_problem,
)
from tfapp.tasks.ner.scores import entity_report, format_entity_report

import pytest


def to_iob2(tags: list[str], scheme: str) -> list[str]:
    """``tags`` of ``scheme`` as IOB2 (malformed fragments, which hold no entity, are O)."""
    return from_spans(spans(tags, scheme), len(tags))


def test_iob2_strict_spans_edges():
    # entity at the start and at the end of the sentence
    assert spans(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]
    # adjacent entities of one type are two entities
    assert spans(["B-PER", "B-PER", "I-PER"]) == [("PER", 0, 1), ("PER", 1, 3)]
    # an I- with no B- before it is no entity (strict); one of another type ends the open one
    assert spans(["I-ORG", "I-ORG", "O"]) == []
    assert spans(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 1)]


def test_bioes_strict_spans_and_conversion():
    tags = ["S-PER", "S-PER", "O", "B-LOC", "I-LOC", "E-LOC"]
    assert spans(tags, "bioes") == [("PER", 0, 1), ("PER", 1, 2), ("LOC", 3, 6)]
    assert to_iob2(tags, "bioes") == ["B-PER", "B-PER", "O", "B-LOC", "I-LOC", "I-LOC"]
    assert spans(["B-PER", "I-PER", "O"], "bioes") == []  # B- that never E-nds
    assert spans(["I-LOC", "E-LOC", "B-ORG", "E-ORG"], "bioes") == [("ORG", 2, 4)]
    assert spans(["B-PER", "E-LOC"], "bioes") == []
    assert to_iob2(["B-PER", "I-PER", "S-LOC"], "bioes") == ["O", "O", "B-LOC"]


def test_iob1_conversion():
    tags = ["I-PER", "I-PER", "B-PER", "O", "I-LOC"]
    assert spans(tags, "iob1") == [("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 5)]
    assert to_iob2(tags, "iob1") == ["B-PER", "I-PER", "B-PER", "O", "B-LOC"]


def test_tag_problems():
    # a tag of any scheme is a tag: which scheme a file is in is read from its tags
    assert tag_problem("B-PER") is None and tag_problem("O") is None
    assert tag_problem("E-PER") is None and tag_problem("S-PER") is None
    assert tag_problem("X-LOC") == ("tag 'X-LOC' is not an IOB1, IOB2 or BIOES tag (O, or B-, "
                                    "I-, E- or S- and the entity type, e.g. B-PER)")
    assert tag_problem("PER") is not None
    assert tag_problem("B-") is not None
    assert tag_names(["PER", "LOC", "PER"]) == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def test_entity_report_hand_computed():
    gold = [["B-PER", "I-PER", "O", "B-LOC"],   # start and end of sentence
            ["B-PER", "B-PER", "I-PER", "O"],   # adjacent entities of one type
            ["O", "B-ORG", "I-ORG"],
            ["B-LOC", "O", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-LOC"],   # both right
            ["B-PER", "I-PER", "I-PER", "O"],   # one PER over both: wrong span
            ["O", "I-ORG", "I-ORG"],            # I- without B-: no entity predicted
            ["B-ORG", "O", "B-LOC"]]            # wrong type, spurious LOC
    r = entity_report(gold, pred)
    # gold 6 entities (PER 3, LOC 2, ORG 1), predicted 5 (PER 2, LOC 2, ORG 1), right 2
    assert r["precision"] == pytest.approx(2 / 5)
    assert r["recall"] == pytest.approx(2 / 6)
    assert r["f1"] == pytest.approx(4 / 11)
    assert r["token_accuracy"] == pytest.approx(10 / 14)
    assert r["per_type"]["PER"] == pytest.approx(
        {"precision": 0.5, "recall": 1 / 3, "f1": 0.4, "support": 3})
    assert r["per_type"]["LOC"] == pytest.approx(
        {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2})
    assert r["per_type"]["ORG"] == pytest.approx(
        {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1})
    # seqeval's default mode opens an entity at a stray I- (sentence 3's ORG is found,
    # sentence 4's B-ORG still spurious): 3 right of 6 predicted, 6 gold
    assert r["mode"] == "seqeval strict IOB2"
    assert r["default_mode"] == pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5})
    text = format_entity_report(r)
    assert text.splitlines()[1].split() == ["LOC", "0.500", "0.500", "0.500", "2"]
    assert "F1 0.3636 (seqeval strict IOB2)" in text
    assert "entity F1 0.5000 in seqeval's default mode" in text


def test_entity_report_bioes_data():
    gold = to_iob2(["S-PER", "O", "B-LOC", "E-LOC"], "bioes")
    pred = to_iob2(["S-PER", "O", "B-LOC", "I-LOC"], "bioes")  # LOC never ends: none
    r = entity_report([gold], [pred])
    assert (r["precision"], r["recall"], r["f1"]) == pytest.approx((1.0, 0.5, 2 / 3))


def test_majority_tag_baseline_scores_zero():
    gold = [["B-PER", "O", "O"], ["O", "B-LOC", "I-LOC"]]
    r = entity_report(gold, [["O"] * 3, ["O"] * 3])
    assert r["f1"] == 0.0 and r["token_accuracy"] == pytest.approx(3 / 6)


def _evidence(*sentences):
    """SchemeEvidence of a CoNLL file of these sentences (line numbers as in the file)."""
    evidence, line = SchemeEvidence(), 1
    for tags in sentences:
        evidence.add(tags, list(range(line, line + len(tags))))
        line += len(tags) + 1  # the blank line between sentences
    return evidence


def test_a_files_scheme_is_read_from_its_tags():
    # B- begins every entity: IOB2 (and valid IOB1: the readings agree)
    assert _evidence(["B-PER", "I-PER", "O", "B-LOC"], ["B-PER", "B-PER"]).scheme == "iob2"
    # an I- that begins an entity (first in a sentence, after O, after another type): IOB1
    assert _evidence(["B-PER", "I-PER", "O"], ["O", "I-LOC"]) == SchemeEvidence(iob1=6)
    assert _evidence(["I-ORG", "O"]) == SchemeEvidence(iob1=1)
    assert _evidence(["B-PER", "I-LOC"]).scheme == "iob1"
    # any E- or S-: BIOES, whatever else the file holds (that is refused when read)
    assert _evidence(["I-PER"], ["O", "S-LOC"]) == SchemeEvidence(bioes=4, iob1=1)
    assert _evidence(["I-PER"], ["O", "S-LOC"]).scheme == "bioes"
    assert _evidence(["B-PER", "E-PER", "I-PER"]) == SchemeEvidence(bioes=2, iob1=3)


def test_read_entities_in_the_files_scheme():
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC"]
    # B-/I- files: B- begins, I- continues its type or else begins one (IOB1 and IOB2 alike)
    assert read_entities(iob1, "iob1") == ([("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 5)], None)
    assert read_entities(["B-PER", "I-PER", "O", "B-LOC"], "iob2") == (
        [("PER", 0, 2), ("LOC", 3, 4)], None)
    assert read_entities(["B-PER", "I-LOC"], "iob1") == ([("PER", 0, 1), ("LOC", 1, 2)], None)
    # BIOES strictly; a sentence that is no well-formed BIOES: its token's index and why
    assert read_entities(["B-PER", "I-PER", "E-PER", "S-LOC"], "bioes") == (
        [("PER", 0, 3), ("LOC", 3, 4)], None)
    assert read_entities(["B-PER", "I-PER", "O"], "bioes") == ([], (
        0, "tag 'B-PER' begins a BIOES entity that never ends (next comes 'O', not I-PER or "
           "E-PER; a one-word entity is S-PER)"))
    assert read_entities(["S-LOC", "B-PER"], "bioes") == ([], (
        1, "tag 'B-PER' begins a BIOES entity that never ends (the sentence ends before an "
           "E-PER; a one-word entity is S-PER)"))
    assert read_entities(["B-PER", "I-PER", "E-LOC"], "bioes") == ([], (
        2, "tag 'E-LOC' changes the type of the BIOES entity that 'B-PER' begins (its B-, I- "
           "and E- tags have one type)"))
    assert read_entities(["S-PER", "O", "I-LOC"], "bioes") == ([], (
        2, "tag 'I-LOC' begins an entity, as in IOB1, in a file of BIOES tags (E-, S-), where "
           "an entity begins with B- or S-; write the file in one scheme"))
    assert read_entities(["O", "E-PER"], "bioes") == ([], (
        1, "tag 'E-PER' ends no entity (no B-PER before it: a BIOES entity is B-PER ... E-PER, "
           "or S-PER for one word)"))


def test_entity_counts_converted_and_refused():
    counts = EntityCounts(scheme="iob1")
    tags = ["I-PER", "I-PER", "B-PER", "O", "I-LOC"]
    # read as IOB1: PER 0-2 and LOC 4-5 are what strict IOB2 would lose; PER 2-3 it reads
    counts.add(tags, read_entities(tags, "iob1")[0], "iob2", [10, 11, 12, 13, 14])
    assert (counts.read, counts.converted, counts.first_converted) == (3, 2, 10)
    counts.add(["B-PER"], [("PER", 0, 1)], "iob2", [16])
    assert (counts.read, counts.converted) == (4, 2)
    assert begun(["B-PER", "I-PER", "E-LOC", "O", "I-ORG", "S-PER"]) == 4
    counts.refused += begun(["B-PER", "I-PER", "E-LOC"])
    assert counts.describe("a.conll", "iob2") == (
        "a.conll: IOB1 tags (data.tag_scheme=iob2): 4 entities read, 2 converted, 2 refused "
        "(converted: read as IOB1, which data.tag_scheme=iob2 would read as O or cut, first "
        "at line 10; set data.tag_scheme=iob1 to say what the data is)")
    assert EntityCounts("iob2", 5).describe("b.conll", "iob1") == (
        "b.conll: IOB2 tags (data.tag_scheme=iob1): 5 entities read, 0 converted, 0 refused")
