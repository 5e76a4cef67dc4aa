"""Batch scoring of a CSV: ``tfapp predict --data --output`` against Hugging Face's
``pipeline`` over the same model and texts, in one run; and tfapp's peak memory as the
input grows.

    python scripts/bench_predict.py --model RUN_DIR --hf HF_DIR --rows 5000 --rounds 3 \
        [--hf-batch-sizes 8,32,64] [--rss-rows 10000,1000000 --evaluate] [--json out.json]

``RUN_DIR`` is a classifier run with an export; ``HF_DIR`` its ``tfapp export-hf``
checkpoint (the same weights, read by transformers + PyTorch in the peers venv,
``--peers-python``). The input (``--text``), repeated to ``--rows`` rows with an id column and
written once under ``--work``:

* ``reviews``: the demo's labelled reviews, short and all of about one length (median 12
  word pieces, max 22), so sorting by length saves nothing: the two runtimes compared;
* ``docstrings``: the docstrings of Python's standard library in file order, labelled by
  package (``scripts/bench_lengths.py``'s text): real lengths with a long tail (median 26
  MiniLM word pieces, p90 at the 128 cut), where padding is most of the cost.

Each side runs in a process of its own, started and waited for here (``os.wait4`` gives
that process's peak RSS), timed from its start to its end, load included:

* ``tfapp``: ``python -m tfapp.predict --model RUN --data in.csv --keep id --output
  out.csv`` (its defaults: 256 rows a call, prefetch);
* ``hf bN``: ``pipeline("text-classification", model=HF_DIR, batch_size=N)`` over a
  generator of the CSV's texts (truncation to the run's seq_length), each label and its
  probability written to a file; one row per batch size.

The sides take turns: every ``--rounds`` round runs each once, the order reversed each
round, so a busy minute of a shared machine falls on both; the table gives each side's
median and range. Then every row's label is compared (tfapp's label against the
pipeline's argmax), and its probability (the largest difference is printed).

``--rss-rows`` runs tfapp predict at each size into each of ``--rss-formats`` (and
``tfapp evaluate`` with ``--evaluate``), checks that the output has one row per input row
with the ids in order, and prints the peak RSS of the largest size over the smallest (flat
memory: within 1.3x). Set TFAPP_CPU_BFLOAT16=0 for float32 on
both sides.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HF_WORKER = r"""
import csv, sys, time, torch
from transformers import pipeline
path, model, batch, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(int(sys.argv[5]))
pipe = pipeline("text-classification", model=model, device=-1, truncation=True)
def texts():
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            yield row["text"]
with open(out, "w") as fh:
    for result in pipe(texts(), batch_size=batch):
        fh.write(f"{result['label']}\t{result['score']!r}\n")
"""


def examples_of(text: str) -> list[tuple[str, str]]:
    """(text, label) of ``--text``: the demo's reviews, or the standard library's
    docstrings (``bench_lengths.stdlib_docstrings``, duplicates dropped)."""
    if text == "docstrings":
        sys.path.insert(0, str(REPO / "scripts"))
        from bench_lengths import stdlib_docstrings

        return list(dict.fromkeys(stdlib_docstrings()))
    demo = REPO / "tfapp" / "demo"
    examples = []
    for split in ("train", "validation", "test"):
        with (demo / f"reviews_{split}.csv").open(newline="") as fh:
            examples += [(r["text"], r["label"]) for r in csv.DictReader(fh)]
    return examples


def make_input(path: Path, rows: int, text: str = "reviews") -> None:
    """``--text``'s examples repeated to ``rows`` rows, with an id column."""
    if path.exists():
        return
    examples = examples_of(text)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", "label"])
        for i in range(rows):
            writer.writerow([f"r{i}", *examples[i % len(examples)]])
    tmp.rename(path)


def measured(argv: list[str], env: dict | None = None) -> dict:
    """Run ``argv``; its wall time, CPU time (user + system) and peak RSS (MiB), from
    ``os.wait4`` (its stderr is dropped)."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=null, cwd=REPO)
        stdout = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[:4]} failed (exit {os.waitstatus_to_exitcode(status)})")
    return {"seconds": seconds, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": usage.ru_maxrss / 1024, "stdout": stdout.decode()}


def tfapp_env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "TF_USE_LEGACY_KERAS": "1"}


def tfapp_predict(model: str, data: Path, out: Path) -> dict:
    if out.exists():
        out.unlink()
    return measured([sys.executable, "-m", "tfapp.predict", "--model", model, "--data",
                         str(data), "--keep", "id", "--output", str(out), "-q"], tfapp_env())


def tfapp_evaluate(model: str, data: Path) -> dict:
    row = measured([sys.executable, "-m", "tfapp.evaluate", "--model", model, "--data",
                        str(data), "--json", "-q"], tfapp_env())
    row["report"] = json.loads(row.pop("stdout"))
    return row


def output_ids(out: Path) -> tuple[int, bool]:
    """Rows in a predict output, and whether their ids are r0, r1, ... in order."""
    if out.suffix == ".parquet":
        import pyarrow.parquet as pq
        ids = pq.read_table(out, columns=["id"]).column("id").to_pylist()
        return len(ids), all(v == f"r{i}" for i, v in enumerate(ids))
    n, ordered = 0, True
    with out.open(newline="") as fh:
        for i, r in enumerate(csv.DictReader(fh)):
            n, ordered = i + 1, ordered and r["id"] == f"r{i}"
    return n, ordered


def labels_of(out: Path) -> list[tuple[str, float]]:
    """Each row's predicted label and its probability, from tfapp's CSV output."""
    with out.open(newline="") as fh:
        return [(r["label"], float(r[f"probabilities.{r['label']}"]))
                for r in csv.DictReader(fh)]


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": values}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--hf", default="", help="the run's export-hf folder ('' skips HF)")
    p.add_argument("--rows", type=int, default=100000)
    p.add_argument("--text", choices=("reviews", "docstrings"), default="reviews",
                   help="the input's texts (module docstring)")
    p.add_argument("--rounds", type=int, default=2,
                   help="each side runs once a round; the order reverses every round")
    p.add_argument("--hf-batch-sizes", default="8,32,64")
    p.add_argument("--rss-rows", default="", help="e.g. 10000,1000000 (tfapp only)")
    p.add_argument("--rss-formats", default="csv,parquet",
                   help="predict outputs written at each --rss-rows size")
    p.add_argument("--evaluate", action="store_true",
                   help="also tfapp evaluate's peak RSS at each --rss-rows size")
    p.add_argument("--peers-python", default=str(REPO.parent / "main" / ".venv-peers" / "bin"
                                                 / "python"))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--work", default="/tmp/bench_predict")
    p.add_argument("--json", default="")
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"in-{args.text}-{args.rows}.csv"
    make_input(data, args.rows, args.text)
    results = {"rows": args.rows, "text": args.text, "cpus": os.cpu_count(),
               "rounds": args.rounds, "runs": {}}

    sides: list[tuple[str, list[str], Path, dict | None]] = [
        ("tfapp", [sys.executable, "-m", "tfapp.predict", "--model", args.model, "--data",
                   str(data), "--keep", "id", "--output", str(work / "tfapp.csv"), "-q"],
         work / "tfapp.csv", tfapp_env())]
    if args.hf:
        for size in [int(b) for b in args.hf_batch_sizes.split(",") if b]:
            out = work / f"hf-{size}.txt"
            sides.append((f"hf b{size}", [args.peers_python, "-c", HF_WORKER, str(data),
                                          args.hf, str(size), str(out), str(args.threads)],
                          out, None))
    times: dict[str, list[float]] = {name: [] for name, *_ in sides}
    for r in range(max(1, args.rounds)):
        for name, argv, out, env in (sides if r % 2 == 0 else sides[::-1]):
            if out.exists():
                out.unlink()
            row = measured(argv, env)
            times[name].append(args.rows / row["seconds"])
            print(f"round {r + 1}: {name}: {times[name][-1]:,.0f} rows/s "
                  f"({row['seconds']:.1f} s, peak RSS {row['peak_rss_mib']:,.0f} MiB)",
                  flush=True)
    ours = labels_of(work / "tfapp.csv")
    for name, _, out, _ in sides:
        row = {"rows_per_s": spread(times[name])}
        if name != "tfapp":
            theirs = [line.split("\t") for line in out.read_text().splitlines()]
            row["same_labels"] = sum(a == b for (a, _), (b, _) in zip(ours, theirs,
                                                                     strict=True))
            row["max_probability_diff"] = max(abs(p - float(q)) for (_, p), (_, q)
                                              in zip(ours, theirs, strict=True))
            print(f"{name}: same label as tfapp on {row['same_labels']:,} of {len(ours):,} "
                  f"rows; its probability differs by at most {row['max_probability_diff']:.1e}")
        results["runs"][name] = row
    for name, row in results["runs"].items():
        s = row["rows_per_s"]
        print(f"{name:>8}: {s['median']:,.0f} rows/s (median of {len(s['runs'])}; "
              f"{s['min']:,.0f}-{s['max']:,.0f})")
    best = max((k for k in results["runs"] if k.startswith("hf")),
               key=lambda k: results["runs"][k]["rows_per_s"]["median"], default=None)
    if best:
        results["speedup_vs_best_hf"] = (results["runs"]["tfapp"]["rows_per_s"]["median"]
                                         / results["runs"][best]["rows_per_s"]["median"])
        print(f"tfapp / best HF pipeline ({best}): {results['speedup_vs_best_hf']:.2f}x")

    sizes = [int(r) for r in args.rss_rows.split(",") if r]
    formats = [f for f in args.rss_formats.split(",") if f]
    rss: dict[str, dict[int, dict]] = {}
    for n in sizes:
        path = work / f"in-{args.text}-{n}.csv"
        make_input(path, n, args.text)
        for fmt in formats:
            out = work / f"tfapp-{n}.{fmt}"
            row = tfapp_predict(args.model, path, out)
            row.pop("stdout")
            row["rows_out"], row["ids_in_order"] = output_ids(out)
            rss.setdefault(f"predict {fmt}", {})[n] = row
            print(f"tfapp predict -> {fmt}, {n:,} rows: peak RSS {row['peak_rss_mib']:,.0f} MiB,"
                  f" {n / row['seconds']:,.0f} rows/s; {row['rows_out']:,} rows out, ids in "
                  f"order: {row['ids_in_order']}", flush=True)
            out.unlink()
        if args.evaluate:
            row = tfapp_evaluate(args.model, path)
            rss.setdefault("evaluate", {})[n] = row
            rep = row["report"]
            print(f"tfapp evaluate, {n:,} rows: peak RSS {row['peak_rss_mib']:,.0f} MiB, "
                  f"{n / row['seconds']:,.0f} rows/s; accuracy {rep.get('accuracy')}",
                  flush=True)
    if rss:
        results["rss_by_rows"] = {k: {str(n): v for n, v in d.items()} for k, d in rss.items()}
        for what, by in rss.items():
            low, high = by[min(by)]["peak_rss_mib"], by[max(by)]["peak_rss_mib"]
            print(f"{what}: peak RSS {max(by):,} rows / {min(by):,} rows: {high / low:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
