"""The default models judged as a user judges them: on plain sentences written by hand
(tests/fixtures/plain/) that no demo row holds, and on the examples the README and
``--help`` show. The same check by hand:

    tfapp train
    tfapp evaluate --model runs/classifier --data tests/fixtures/plain/reviews.csv
    tfapp train --config configs/ner.yaml
    tfapp evaluate --model runs/ner --data tests/fixtures/plain/entities.conll

The two trainings take minutes, so they carry the ``long`` mark (``pytest -m long``); the
checks that the fixtures stay out of the demo data run in CI.
"""

from __future__ import annotations

import csv
import json
import re
import shlex

from tfapp.demo import DEMO_DIR, EXAMPLES

import pytest
from conftest import REPO, run_tfapp

PLAIN = REPO / "tests" / "fixtures" / "plain"


def _texts(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _entity_words(path) -> set[str]:
    """The words tagged PER, LOC or ORG in a CoNLL file."""
    words = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1][2:] in {"PER", "LOC", "ORG"}:
            words.add(parts[0])
    return words


def test_the_plain_reviews_are_no_demo_rows():
    plain = {row["text"].lower() for row in _texts(PLAIN / "reviews.csv")}
    assert len(plain) == 50
    for split in ("train", "validation", "test"):
        demo = {row["text"].lower() for row in _texts(DEMO_DIR / f"reviews_{split}.csv")}
        assert not plain & demo, split


def test_no_name_of_the_plain_tagged_sentences_is_in_the_ner_demo():
    """The tagger is judged on names it never saw: no word of a person, place or
    organisation of the plain sentences is part of any entity of the demo, except the
    kind words of organisations ("Bank", "Radio")."""
    from tfapp.demo.make_ner_corpus import ORG_KINDS

    plain = _entity_words(PLAIN / "entities.conll") - set(ORG_KINDS)
    assert len(plain) > 80
    for split in ("train", "validation", "test"):
        assert not plain & _entity_words(DEMO_DIR / f"ner_{split}.conll"), split


def _examples_in_docs(task: str) -> list[list[str]]:
    """The texts of every ``predict --model runs/<task> ...`` line of the README and of the
    command's --help."""
    from tfapp import predict

    found = []
    for text in ((REPO / "README.md").read_text(encoding="utf-8"), predict.__doc__ or ""):
        for line in text.splitlines():
            m = re.search(rf"predict --model runs/{task} (.+)$", line.strip())
            if m and not m.group(1).startswith("--"):
                found.append(shlex.split(m.group(1)))
    return found


def test_the_docs_show_the_demo_examples():
    """README and predict --help show the examples a default run suggests (the long tests
    below check that the default models answer them right)."""
    shown = _examples_in_docs("classifier")
    assert shown and all(texts == list(EXAMPLES["classifier"]) for texts in shown), shown


@pytest.mark.long
def test_the_default_classifier_labels_plain_sentences(tmp_path):
    proc = run_tfapp("train", [f"output_dir={tmp_path}"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "classifier"
    last = proc.stdout.strip().splitlines()[-1]
    assert last == f'try it:          tfapp predict --model {run} "great battery life" ' \
                   '"broke in a week"', last
    proc = run_tfapp("evaluate", ["--model", str(run), "--data", str(PLAIN / "reviews.csv"),
                                  "--json"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["accuracy"] >= 0.9, proc.stdout
    proc = run_tfapp("predict", ["--model", str(run), *EXAMPLES["classifier"]], timeout=300)
    assert [line.split("\t")[0] for line in proc.stdout.splitlines()] == \
        ["positive", "negative"], proc.stdout


@pytest.mark.long
def test_the_default_tagger_finds_entities_in_plain_sentences(tmp_path):
    proc = run_tfapp("train", ["--config", str(REPO / "configs" / "ner.yaml"),
                               f"output_dir={tmp_path}"], timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "ner"
    proc = run_tfapp("evaluate", ["--model", str(run), "--data",
                                  str(PLAIN / "entities.conll"), "--json"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["f1"] >= 0.8, proc.stdout
    proc = run_tfapp("predict", ["--model", str(run), "--json", *EXAMPLES["ner"]],
                     timeout=300)
    entities = json.loads(proc.stdout.splitlines()[0])["entities"]
    assert [(e["type"], e["text"]) for e in entities] == \
        [("PER", "Anna Berg"), ("LOC", "Brindle"), ("DATE", "3 May")], entities
