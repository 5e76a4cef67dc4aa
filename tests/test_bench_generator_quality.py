"""The Kneser-Ney reference of scripts/bench_generator_quality.py (no TensorFlow)."""

import importlib.util
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bench_generator_quality.py"
SPECIALS = ["", "[UNK]", "[START]", "[END]"]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_generator_quality", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kneser_ney_bigram_equals_the_hand_computed_value(bench):
    # Bigrams of "<s> a b </s>" and "<s> b </s>": <s> -> {a, b}, a -> {b}, b -> {</s> x2}.
    # Continuation unigrams over the 4 bigram types: a 1/4, b 2/4, </s> 1/4. Discount 0.1:
    # p(a | <s>) = (1 - 0.1)/2 + 0.1 * 2/2 * 1/4 = 0.475; p(</s> | a) = 0 + 0.1 * 1/1 * 1/4.
    lm = bench.kneser_ney(["a b", "b"], SPECIALS + ["a", "b"], order=2, discount=0.1)
    value, tokens = bench.perplexity(lm, ["a"])
    assert tokens == 2  # "a" and one </s>
    assert value == pytest.approx(1 / math.sqrt(0.475 * 0.025), rel=1e-9)  # 9.1766...


def test_fast_kneser_ney_is_nltks_own_and_beats_a_unigram(bench):
    train = ["the cat sat on the mat", "the dog sat on the log", "a cat saw the dog",
             "the cat ate", "a dog ate the cat food", "on the mat the dog sat"]
    test = ["the dog sat on the mat", "a cat sat on the log", "the bird sat"]
    vocabulary = SPECIALS + sorted({w for line in train for w in line.split()})
    train = [*train, "the bird flew"]  # "bird", "flew" are not in the vocabulary: <UNK>
    rows = {}
    for order in (2, 3):
        for discount in (0.1, 0.75):
            fast = bench.perplexity(bench.kneser_ney(train, vocabulary, order, discount), test)
            stock = bench.perplexity(bench.kneser_ney(train, vocabulary, order, discount,
                                                      fast=False), test)
            assert fast[0] == pytest.approx(stock[0], rel=1e-12) and fast[1] == stock[1]
            rows[order, discount] = fast[0]
    assert bench.perplexity(bench.kneser_ney(train, vocabulary, 3), test)[1] == 6 + 6 + 3 + 3
    # A unigram model (continuation shares: the bigram model's back-off) does worse.
    unigram = bench.kneser_ney(train, vocabulary, 2)
    grams = [g for line in test for g in bench.ngrams(bench.padded(line, 2), 2)]
    unigram_ppl = math.exp(-sum(math.log(unigram.estimator.unigram_score(unigram.vocab.lookup(
        w))) for _, w in grams) / len(grams))
    assert max(rows.values()) < unigram_ppl
    assert rows[3, 0.75] < rows[2, 0.75]


def test_make_corpus_lines_nest(bench, tmp_path, capsys):
    # --lines N writes the first N of one seeded shuffle: a learning curve's smaller
    # corpus is part of its larger one.
    (tmp_path / "lib").mkdir()
    sentences = [f"Return the number {w} of items in the list." for w in
                 ("one", "two", "three", "four", "five")]
    (tmp_path / "lib" / "mod.py").write_text("".join(
        f'def f{i}():\n    """{s}"""\n' for i, s in enumerate(sentences)))
    files = {n: tmp_path / f"c{n}.txt" for n in (2, 5, 9)}
    for n, path in files.items():
        assert bench.main(["--make-corpus", "pydoc", str(path), "--lines", str(n),
                           "--stdlib", str(tmp_path / "lib")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{files[2]}: 2 of 5 pydoc lines"
    small, large = (files[n].read_text().splitlines() for n in (2, 9))
    assert sorted(large) == sorted(sentences) and small == large[:2]
    assert files[5].read_text().splitlines() == large
