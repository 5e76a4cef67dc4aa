"""Repetition in generated text beside held-out human lines (docs/generator.md, "Repetition").

    # a finished run: its export continues the first words of its test lines
    python scripts/bench_generator_repetition.py --run runs/generator [--json rep.json]

    # any export and any held-out lines (one a line)
    python scripts/bench_generator_repetition.py --model runs/generator --lines held_out.txt

    # a corpus: split and trained as scripts/bench_generator_quality.py does, then measured
    python scripts/bench_generator_repetition.py --corpus pydoc.txt --out /tmp/rep

The first ``--texts`` (100) held-out lines with more than ``--prompt-words`` (3) words,
cleaned as the run cleans text (lowercase, punctuation stripped), are cut after their
first three words; the export continues each opening under every decoding setting of the
grid: greedy, top-k sampling (the run's ``generation.top_k`` and ``temperature``, mean of
``--seeds`` seeds) and beam search, each with ``no_repeat_ngram_size`` in ``--ngram-sizes``
and ``repetition_penalty`` in ``--penalties``. Per setting:

* **repeated 3-grams**: of all the 3-grams of the continuations (each continuation on its
  own), the share that repeat one earlier in the same continuation (pooled: repeats over
  3-grams, all texts); **repeated 2-grams** and **repeated words** likewise (human text
  reuses its function words: a decoder that never does is not writing like it either);
* **distinct-2** (Li et al. 2016): distinct bigrams over all bigrams of the continuations;
* words per continuation.

The human row measures the rest of the same lines. The **LM perplexity** is the export's
``score`` of all the held-out lines (what ``tfapp evaluate`` prints): no decoding setting
reaches that function, so it is printed once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))

from bench_generator_quality import run_lines, split_corpus, train_run  # noqa: E402


def repeat_counts(words: Sequence[str], n: int) -> tuple[int, int]:
    """(n-grams of ``words`` that repeat an earlier one of ``words``, n-grams)."""
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return len(grams) - len(set(grams)), len(grams)


def repeated_share(texts: Sequence[Sequence[str]], n: int) -> float:
    """Pooled share of repeated n-grams: each text's repeats of its own earlier n-grams,
    over all texts' n-grams (0 when no text has n words)."""
    counts = [repeat_counts(t, n) for t in texts]
    total = sum(c[1] for c in counts)
    return sum(c[0] for c in counts) / total if total else 0.0


def distinct(texts: Sequence[Sequence[str]], n: int) -> float:
    """distinct-n: distinct n-grams over all n-grams of ``texts`` (Li et al. 2016)."""
    grams = [tuple(t[i:i + n]) for t in texts for i in range(len(t) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def measure(texts: Sequence[Sequence[str]]) -> dict:
    """The row of one setting: its continuations' repetition, diversity and length."""
    return {"repeated_3grams": repeated_share(texts, 3), "repeated_2grams":
            repeated_share(texts, 2), "repeated_words": repeated_share(texts, 1),
            "distinct_2": distinct(texts, 2),
            "words": statistics.fmean(len(t) for t in texts) if texts else 0.0}


def held_out(lines: Sequence[str], texts: int, prompt_words: int) -> list[tuple[str, list]]:
    """(opening, the rest's words) of the first ``texts`` cleaned lines longer than
    ``prompt_words`` words."""
    from tfapp.data.text.words import standardize

    import tensorflow as tf

    if not lines:
        return []
    cleaned = [c.decode("utf-8") for c in standardize(tf.constant(list(lines)), True).numpy()]
    out = []
    for line in filter(None, cleaned):
        words = line.split()
        if len(words) > prompt_words:
            out.append((" ".join(words[:prompt_words]), words[prompt_words:]))
        if len(out) == texts:
            break
    return out


def settings_grid(defaults: dict, ngram_sizes: Sequence[int], penalties: Sequence[float],
                  seeds: int) -> list[dict]:
    """One dict per row: name, method, the generate settings and the seeds to average."""
    rows = []
    for method in ("greedy", "top_k", "beam"):
        for n in ngram_sizes:
            for p in penalties:
                name = {"greedy": "greedy", "beam": f"beam ({defaults['num_beams']})",
                        "top_k": f"top-k {defaults['top_k']}, T {defaults['temperature']:g}"
                        }[method]
                rows.append({"name": f"{name}, n {n}, penalty {p:g}", "method": method,
                             "settings": {"method": method, "no_repeat_ngram_size": n,
                                          "repetition_penalty": p},
                             "seeds": list(range(seeds)) if method == "top_k" else [0]})
    return rows


def run_grid(predictor, pairs: list[tuple[str, list]], grid: list[dict]) -> list[dict]:
    """The rows of ``grid``: ``predictor`` (``tfapp.load``) continuing ``pairs``'
    openings, measured; with one continuation of the first opening as an example."""
    prompts = [p for p, _ in pairs]
    rows = []
    for row in grid:
        per_seed = []
        for seed in row["seeds"]:
            out = predictor.generate(prompts, seed=seed, **row["settings"])
            per_seed.append(measure([t.split() for t in out]))
        result = {k: statistics.fmean(m[k] for m in per_seed) for k in per_seed[0]}
        rows.append({**row, **result, "example": f"{prompts[0]} | {out[0]}"})
    return rows


def lm_perplexity(predictor, lines: Sequence[str]) -> float:
    """The export's LM perplexity of ``lines`` (``tfapp evaluate``'s)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "held_out.txt"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return predictor.evaluate(path)["lm_perplexity"]


def table(rows: list[dict], human: dict, perplexity: float, texts: int) -> str:
    """The Markdown table: the human rest of the lines, then each setting."""
    out = [f"{texts} held-out lines; LM perplexity of the held-out text {perplexity:.2f} "
           "(the export's score: no decoding setting reaches it)", "",
           "| continuation | repeated 3-grams | vs human | repeated 2-grams | repeated words "
           "| distinct-2 | words |", "|---|---|---|---|---|---|---|"]
    base = human["repeated_3grams"]

    def line(name: str, r: dict) -> str:
        vs = f"{r['repeated_3grams'] / base:.1f}x" if base else "-"
        return (f"| {name} | {100 * r['repeated_3grams']:.1f}% | {vs} | "
                f"{100 * r['repeated_2grams']:.1f}% | {100 * r['repeated_words']:.1f}% | "
                f"{r['distinct_2']:.3f} | {r['words']:.1f} |")

    out.append(line("human (the rest of the line)", human))
    out += [line(r["name"], r) for r in rows]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="a finished run: its export, its test lines")
    parser.add_argument("--model", help="an export (or run directory) to continue --lines with")
    parser.add_argument("--lines", type=Path, help="held-out text lines, one a line")
    parser.add_argument("--corpus", type=Path, help="a text file: split, trained, measured")
    parser.add_argument("--out", type=Path, help="--corpus: where the splits and the run go")
    parser.add_argument("--config", default="configs/generator.yaml")
    parser.add_argument("--threads", type=int, default=1,
                        help="--corpus: TensorFlow threads of the training run (0 = TF's own)")
    parser.add_argument("--texts", type=int, default=100)
    parser.add_argument("--prompt-words", type=int, default=3)
    parser.add_argument("--ngram-sizes", type=int, nargs="+", default=[0, 3])
    parser.add_argument("--penalties", type=float, nargs="+", default=[1.0, 1.2])
    parser.add_argument("--seeds", type=int, default=3, help="top-k sampling: seeds averaged")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)
    if sum(x is not None for x in (args.run, args.model, args.corpus)) != 1:
        parser.error("give one of --run RUN_DIR, --model EXPORT --lines FILE, "
                     "--corpus FILE --out DIR")
    if args.corpus:
        if args.out is None:
            parser.error("--corpus needs --out")
        files = split_corpus(args.corpus, args.out, seed=0, test_share=0.1,
                             validation_share=0.1)
        args.run = Path(train_run(args.config, [], files, args.out / "runs", "default-s0", 0,
                                  args.threads)["run"])
    if args.run:
        model, lines = str(args.run), run_lines(args.run)[1]
    else:
        if args.lines is None:
            parser.error("--model needs --lines")
        model, lines = args.model, args.lines.read_text(encoding="utf-8").splitlines()
    pairs = held_out(lines, args.texts, args.prompt_words)
    if not pairs:
        raise SystemExit(f"no held-out line has more than {args.prompt_words} words")
    import tfapp

    predictor = tfapp.load(model)
    grid = settings_grid(predictor.model.metadata["defaults"], args.ngram_sizes,
                         args.penalties, args.seeds)
    rows = run_grid(predictor, pairs, grid)
    perplexity = lm_perplexity(predictor, lines)
    human = measure([w for _, w in pairs])
    print(table(rows, human, perplexity, len(pairs)))
    if args.json:
        args.json.write_text(json.dumps({"human": human, "lm_perplexity": perplexity,
                                         "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
