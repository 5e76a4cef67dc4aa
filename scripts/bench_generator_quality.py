"""Held-out quality of the generator beside interpolated Kneser-Ney n-gram models (NLTK).

    # two offline corpora: Debian package descriptions, Python's docstrings
    python scripts/bench_generator_quality.py --make-corpus debian debian.txt
    python scripts/bench_generator_quality.py --make-corpus pydoc pydoc.txt \\
        --stdlib /usr/lib/python3.11

    # KN beside finished runs (each run's own training lines, vocabulary and test split)
    python scripts/bench_generator_quality.py --run runs/generator [--run ...]

    # train tfapp on a corpus, 3 seeds per setting, then KN on the same lines
    python scripts/bench_generator_quality.py --corpus corpus.txt --out /tmp/q \\
        [--config configs/generator.yaml] [--seeds 3] [--threads 1] \\
        [--setting default] [--setting "drop3=model.dropout=0.3"] \\
        [--setting "small=model.units=64,model.embedding_dim=32"] [--json q.json]

``--corpus``: its lines are split once, seeded (``--split-seed``), into train / validation
/ test files (``--test-share``, ``--validation-share``) under ``--out``; every run reads
those three files (``data.train_files``, ``data.validation_files``, ``data.test_files``:
the seeds change the initialisation and the batch order, never the lines). Runs train
one after another (``python -m tfapp.train``, ``nice``; a run directory under ``--out``
that already holds ``bench_row.json`` is read, not trained again, so more seeds or
settings can be added later); a setting is a name, then
``=`` and comma-separated config overrides. Each row gives the test **LM perplexity**
(each held-out token scored once, docs/generator.md#held-out-perplexity) of every seed,
their mean and spread (max - min), the window perplexity and the seconds per run.

The reference: ``nltk.lm`` interpolated Kneser-Ney models of order 2 and 3 fitted on the
run's training lines (cleaned as tfapp cleans them: its split, ``data.drop_regex``,
punctuation, lowercase) with the run's vocabulary (other words map to ``<UNK>``), and
scored on the same test lines as tfapp: each line padded with ``n - 1`` ``<s>`` on the
left and one ``</s>`` on the right, so both count the words and one end token per line.
``--discounts`` (NLTK's default is 0.1; 0.75 is the textbook value) are all printed; the
"best KN" line is the lowest of them on the test split (a generous reference). NLTK's
stock ``KneserNey`` recounts continuation counts over every n-gram at each call (hours
for a trigram on a few thousand lines), so ``FastKneserNey`` indexes them once; the
probabilities are NLTK's own (tests/test_bench_scripts.py checks both against each other
and a hand-computed value).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from nltk.lm import Vocabulary
from nltk.lm.api import Smoothing
from nltk.lm.models import InterpolatedLanguageModel
from nltk.util import everygrams, ngrams

REPO = Path(__file__).resolve().parent.parent
BOS, EOS, UNK = "<s>", "</s>", "<UNK>"


# --------------------------------------------------------------------------- the reference


class FastKneserNey(Smoothing):
    """``nltk.lm.smoothing.KneserNey`` with its continuation counts indexed once.

    The same formulas: the highest order discounts raw counts, lower orders discount
    continuation counts (distinct words before ``context + word``), the unigram level is
    the continuation share; ``gamma = discount * types(context) / total``. NLTK's own
    class scans every higher-order n-gram on each call.
    """

    def __init__(self, vocabulary, counter, order: int, discount: float = 0.1, **kwargs):
        super().__init__(vocabulary, counter, **kwargs)
        self.discount, self._order = discount, order
        self._index: dict[int, tuple[dict, dict]] | None = None
        self._types: dict[tuple, int] = {}

    def _continuation(self, length: int) -> tuple[dict, dict]:
        """For contexts of ``length`` words: ``(context, word) -> distinct words before``
        and ``context -> distinct (word before, word) types``."""
        if self._index is None:
            self._index = {}
        if length not in self._index:
            words: dict[tuple, int] = defaultdict(int)
            totals: dict[tuple, int] = defaultdict(int)
            for prefix, counts in self.counts[length + 2].items():
                context = prefix[1:]
                for word, n in counts.items():
                    if n > 0:
                        words[context, word] += 1
                        totals[context] += 1
            self._index[length] = (words, totals)
        return self._index[length]

    def _continuation_counts(self, word: str, context: tuple = ()) -> tuple[int, int]:
        words, totals = self._continuation(len(context))
        return words.get((context, word), 0), totals.get(context, 0)

    def unigram_score(self, word: str) -> float:
        count, total = self._continuation_counts(word)
        return count / total

    def alpha_gamma(self, word: str, context: tuple) -> tuple[float, float]:
        prefix_counts = self.counts[context]
        count, total = ((prefix_counts[word], prefix_counts.N())
                        if len(context) + 1 == self._order
                        else self._continuation_counts(word, context))
        if context not in self._types:
            self._types[context] = sum(1 for n in prefix_counts.values() if n > 0)
        alpha = max(count - self.discount, 0.0) / total
        gamma = self.discount * self._types[context] / total
        return alpha, gamma


def padded(line: str, order: int) -> list[str]:
    """``order - 1`` ``<s>``, the line's words, one ``</s>`` (tfapp's [START] ... [END])."""
    return [BOS] * (order - 1) + line.split() + [EOS]


def kneser_ney(train: Iterable[str], vocabulary: Sequence[str], order: int,
               discount: float = 0.1, *, fast: bool = True) -> InterpolatedLanguageModel:
    """An interpolated Kneser-Ney model of ``order`` on cleaned ``train`` lines, its
    vocabulary tfapp's (``vocabulary``: the specials first, as ``vocab.txt``); ``fast``
    False uses NLTK's stock ``KneserNey``."""
    from nltk.lm.smoothing import KneserNey

    words = [w for w in vocabulary if w not in ("", "[UNK]", "[START]", "[END]")]
    vocab = Vocabulary([*words, BOS, EOS], unk_cutoff=1, unk_label=UNK)
    lm = InterpolatedLanguageModel(FastKneserNey if fast else KneserNey, order,
                                   params={"discount": discount, "order": order},
                                   vocabulary=vocab)
    lm.fit(everygrams(padded(line, order), max_len=order) for line in train)
    return lm


def perplexity(lm: InterpolatedLanguageModel, test: Iterable[str]) -> tuple[float, int]:
    """(NLTK's ``lm.perplexity`` of the order-``n`` n-grams of the padded test lines,
    tokens scored): every word and one ``</s>`` a line; inf if any has probability 0."""
    grams = [g for line in test for g in ngrams(padded(line, lm.order), lm.order)]
    return lm.perplexity(grams), len(grams)


def reference(train: Sequence[str], test: Sequence[str], vocabulary: Sequence[str],
              orders: Sequence[int] = (2, 3), discounts: Sequence[float] = (0.1, 0.75)
              ) -> list[dict]:
    """One row per order and discount: ``{"model", "order", "discount", "lm_perplexity",
    "tokens", "seconds"}``."""
    rows = []
    for order in orders:
        for discount in discounts:
            start = time.perf_counter()
            value, tokens = perplexity(kneser_ney(train, vocabulary, order, discount), test)
            rows.append({"model": f"KN {order}-gram, discount {discount:g}", "order": order,
                         "discount": discount, "lm_perplexity": value, "tokens": tokens,
                         "seconds": time.perf_counter() - start})
    return rows


# --------------------------------------------------------------------------- tfapp's side


def run_lines(run: Path) -> tuple[list[str], list[str], list[str]]:
    """(training lines, test lines, vocabulary) of a finished run, read as it read them:
    its params.yaml (files, split seed, cleaning) and vocab.txt."""
    from tfapp.config import load_config
    from tfapp.data.examples import generator
    from tfapp.data.text import words

    cfg = load_config(run / "params.yaml")
    vocabulary = words.load_vocabulary(run / "vocab.txt")
    data = generator.build_generator_data(cfg.data, seed=cfg.runtime.seed,
                                           vocab_path=run / "vocab.txt", keep_vocab=True)
    train, test = ([text for texts, _ in generator.iter_split_texts(split, cfg.data)
                    for text in texts] for split in (data.train, data.test))
    if not test:
        raise SystemExit(f"{run}: the run has no test split (set data.test_files or "
                         "data.test_split)")
    return train, test, vocabulary


def split_corpus(corpus: Path, out: Path, *, seed: int, test_share: float,
                 validation_share: float) -> dict[str, Path]:
    """The corpus's non-empty lines shuffled (seeded) into train/validation/test files."""
    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    random.Random(seed).shuffle(lines)
    n_test, n_val = round(len(lines) * test_share), round(len(lines) * validation_share)
    parts = {"test": lines[:n_test], "validation": lines[n_test:n_test + n_val],
             "train": lines[n_test + n_val:]}
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, part in parts.items():
        files[name] = out / f"{name}.txt"
        files[name].write_text("\n".join(part) + "\n", encoding="utf-8")
    return files


def train_run(config: str, overrides: list[str], files: dict[str, Path], out: Path,
              name: str, seed: int, threads: int) -> dict:
    """One ``python -m tfapp.train`` (niced, ``threads`` TensorFlow threads): its test
    report, best epoch and seconds (kept in ``RUN/bench_row.json``: a run that has one is
    not trained again)."""
    done = out / name / "bench_row.json"
    if done.is_file():
        return json.loads(done.read_text())
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1"}
    if threads:
        env.update(TF_NUM_INTRAOP_THREADS=str(threads), TF_NUM_INTEROP_THREADS=str(threads))
    args = ["nice", "-n", "15", sys.executable, "-m", "tfapp.train", "--config", config,
            f"data.train_files={files['train']}", f"data.validation_files={files['validation']}",
            f"data.test_files={files['test']}", f"runtime.seed={seed}", f"output_dir={out}",
            f"name={name}", *overrides]
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{name}: training failed\n{proc.stderr[-3000:]}")
    run = out / name
    report = json.loads((run / "test_report.json").read_text())
    best = json.loads((run / "checkpoints" / "best.json").read_text())
    row = {"run": str(run), "seed": seed, "seconds": seconds, "best_epoch": best["epoch"],
           "overrides": overrides,
           **{k: report[k] for k in ("lm_perplexity", "perplexity", "lm_tokens")}}
    done.write_text(json.dumps(row, indent=1))
    return row


def make_corpus(kind: str, path: Path, lines: int = 5200, seed: int = 0,
                stdlib: str = "") -> int:
    """Write ``lines`` shuffled (seeded) lines of an offline corpus to ``path``; returns
    how many there were to choose from.

    * ``debian``: the distinct short descriptions of the packages ``apt-cache dumpavail``
      lists (3 words or more), e.g. "HTTP basic access authentication for Flask";
    * ``pydoc``: the sentences (5-40 words) of the docstrings of this Python's standard
      library (``stdlib``, else this interpreter's; ``ast``; ``test`` folders,
      site-packages and paragraphs with code left out).
    """
    import ast
    import re
    import sysconfig

    if kind == "debian":
        dump = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True,
                              check=True).stdout
        found = {line.removeprefix("Description:").strip() for line in dump.splitlines()
                 if line.startswith("Description:")}
        found = {d for d in found if len(d.split()) >= 3}
    elif kind == "pydoc":
        found = set()
        for file in sorted(Path(stdlib or sysconfig.get_paths()["stdlib"]).rglob("*.py")):
            if {"test", "site-packages", "dist-packages"} & set(file.parts):
                continue
            try:
                tree = ast.parse(file.read_text(errors="ignore"))
            except (SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                  | ast.AsyncFunctionDef):
                    continue
                for para in re.split(r"\n\s*\n", ast.get_docstring(node) or ""):
                    if re.search(r">>>|^\s{4,}", para, re.M):
                        continue
                    for sentence in re.split(r"(?<=[.!?])\s+", " ".join(para.split())):
                        if 5 <= len(sentence.split()) <= 40:
                            found.add(sentence)
    else:
        raise SystemExit(f"--make-corpus: debian or pydoc, not {kind!r}")
    chosen = sorted(found)
    random.Random(seed).shuffle(chosen)
    path.write_text("\n".join(chosen[:lines]) + "\n", encoding="utf-8")
    return len(found)


def summary(rows: list[dict]) -> dict:
    """Mean, spread (max - min) and spread share of the runs' LM perplexities."""
    values = [r["lm_perplexity"] for r in rows]
    mean = statistics.fmean(values)
    return {"mean": mean, "spread": max(values) - min(values),
            "spread_share": (max(values) - min(values)) / mean,
            "window_mean": statistics.fmean(r["perplexity"] for r in rows),
            "seconds_mean": statistics.fmean(r["seconds"] for r in rows)}


def table(settings: dict[str, list[dict]], kn: list[dict]) -> str:
    """The Markdown table: tfapp settings (per seed, mean, spread), then the KN rows."""
    best = min(kn, key=lambda r: r["lm_perplexity"]) if kn else None
    out = ["| model | test LM perplexity (per seed) | mean | spread (max-min) | "
           "vs best KN | window ppl | best epoch | s/run |", "|---|---|---|---|---|---|---|---|"]
    for name, rows in settings.items():
        s = summary(rows)
        vs = f"{100 * (s['mean'] / best['lm_perplexity'] - 1):+.1f}%" if best else "-"
        seeds = ", ".join(f"{r['lm_perplexity']:.1f}" for r in rows)
        out.append(f"| tfapp {name} | {seeds} | {s['mean']:.1f} | {s['spread']:.1f} "
                   f"({100 * s['spread_share']:.1f}%) | {vs} | {s['window_mean']:.1f} | "
                   f"{', '.join(str(r['best_epoch']) for r in rows)} | {s['seconds_mean']:.0f} |")
    for r in kn:
        mark = " (best KN)" if r is best else ""
        out.append(f"| {r['model']}{mark} | {r['lm_perplexity']:.1f} | | | | | | "
                   f"{r['seconds']:.0f} |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", default=[], type=Path,
                        help="a finished run directory (repeatable)")
    parser.add_argument("--corpus", type=Path, help="a text file: split, trained, scored")
    parser.add_argument("--out", type=Path, help="--corpus: where the splits and runs go")
    parser.add_argument("--config", default="configs/generator.yaml")
    parser.add_argument("--setting", action="append", default=[],
                        help='"name" or "name=key=value,key=value" (repeatable)')
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1,
                        help="TensorFlow intra/inter-op threads of each run (0 = TF's own)")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--test-share", type=float, default=0.1)
    parser.add_argument("--validation-share", type=float, default=0.1)
    parser.add_argument("--orders", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--discounts", type=float, nargs="+", default=[0.1, 0.75])
    parser.add_argument("--json", type=Path, help="write the rows here too")
    parser.add_argument("--make-corpus", nargs=2, metavar=("debian|pydoc", "FILE"),
                        help="write --lines lines of an offline corpus to FILE and stop")
    parser.add_argument("--lines", type=int, default=5200,
                        help="--make-corpus: how many (the first of one seeded shuffle, so "
                             "a smaller corpus is part of a larger one)")
    parser.add_argument("--stdlib", default="",
                        help="--make-corpus pydoc: the standard library folder to read "
                             "(default: this interpreter's)")
    args = parser.parse_args(argv)
    if args.make_corpus:
        kind, path = args.make_corpus
        found = make_corpus(kind, Path(path), lines=args.lines, stdlib=args.stdlib)
        print(f"{path}: {min(args.lines, found)} of {found} {kind} lines")
        return 0
    if bool(args.run) == bool(args.corpus):
        parser.error("give --run RUN_DIR (repeatable) or --corpus FILE --out DIR")

    settings: dict[str, list[dict]] = {}
    if args.corpus:
        if args.out is None:
            parser.error("--corpus needs --out")
        files = split_corpus(args.corpus, args.out, seed=args.split_seed,
                             test_share=args.test_share,
                             validation_share=args.validation_share)
        for spec in args.setting or ["default"]:
            name, _, given = spec.partition("=")
            overrides = [o for o in given.split(",") if o]
            for seed in range(args.seeds):
                row = train_run(args.config, overrides, files, args.out / "runs",
                                f"{name}-s{seed}", seed, args.threads)
                settings.setdefault(name, []).append(row)
                print(f"{name} seed {seed}: LM perplexity {row['lm_perplexity']:.2f} "
                      f"(window {row['perplexity']:.2f}, best epoch {row['best_epoch']}, "
                      f"{row['seconds']:.0f} s)", flush=True)
        runs = [Path(next(iter(settings.values()))[0]["run"])]
    else:
        runs = args.run
        for run in runs:
            report = json.loads((run / "test_report.json").read_text())
            settings[str(run)] = [{"run": str(run), "seed": "-", "seconds": math.nan,
                                   "best_epoch": "-", **report}]
    # The KN reference on the first run's lines (a --corpus's runs all read the same).
    train, test, vocabulary = run_lines(runs[0])
    kn = reference(train, test, vocabulary, args.orders, args.discounts)
    print(f"{len(train)} training lines, {len(test)} test lines, vocabulary "
          f"{len(vocabulary)}, {kn[0]['tokens']} test tokens")
    for name, rows in settings.items():
        if any(r.get("lm_tokens") != kn[0]["tokens"] for r in rows):
            print(f"warning: {name} scored {rows[0].get('lm_tokens')} test tokens, the KN "
                  f"models {kn[0]['tokens']}: not the same test lines", file=sys.stderr)
    print(table(settings, kn))
    if args.json:
        args.json.write_text(json.dumps({"settings": settings, "kn": kn}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
