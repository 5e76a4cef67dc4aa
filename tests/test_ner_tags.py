"""NER tag schemes, strict entity spans and entity scores against hand-worked values."""

from __future__ import annotations

from tfapp.tasks.ner.scores import entity_report, format_entity_report
from tfapp.tasks.ner.tags import spans, tag_names, tag_problem, to_iob2

import pytest


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
    text = format_entity_report(r)
    assert text.splitlines()[1].split() == ["LOC", "0.500", "0.500", "0.500", "2"]
    assert "F1 0.3636" in text


def test_entity_report_bioes_data():
    gold = to_iob2(["S-PER", "O", "B-LOC", "E-LOC"], "bioes")
    pred = to_iob2(["S-PER", "O", "B-LOC", "I-LOC"], "bioes")  # LOC never ends: none
    r = entity_report([gold], [pred])
    assert (r["precision"], r["recall"], r["f1"]) == pytest.approx((1.0, 0.5, 2 / 3))


def test_majority_tag_baseline_scores_zero():
    gold = [["B-PER", "O", "O"], ["O", "B-LOC", "I-LOC"]]
    r = entity_report(gold, [["O"] * 3, ["O"] * 3])
    assert r["f1"] == 0.0 and r["token_accuracy"] == pytest.approx(3 / 6)
