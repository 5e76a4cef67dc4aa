"""Batch scoring of a CSV: ``tfapp predict --data --output`` against Hugging Face's
``pipeline`` over the same model and texts, in one run.

    python scripts/bench_predict.py --model RUN_DIR --hf HF_DIR --rows 100000 \
        [--hf-batch-sizes 8,32,64] [--rss-rows 10000,1000000] [--json out.json]

``RUN_DIR`` is a classifier run with an export; ``HF_DIR`` its ``tfapp export-hf``
checkpoint (the same weights, read by transformers + PyTorch in the peers venv,
``--peers-python``). The input is the demo's reviews (real-length text) repeated to
``--rows`` rows with an id column, written once under ``--work``.

Each side runs in a process of its own, started and waited for here (``os.wait4`` gives
that process's peak RSS), timed from its start to its end, load included:

* ``tfapp``: ``python -m tfapp.predict --model RUN --data in.csv --keep id --output
  out.csv`` (its defaults: 256 rows a call, prefetch);
* ``hf bN``: ``pipeline("text-classification", model=HF_DIR, batch_size=N)`` over a
  generator of the CSV's texts (truncation to the run's seq_length), labels written to a
  file; one row per batch size.

Then the labels of every row are compared (tfapp's label against the pipeline's argmax)
and, for ``--rss-rows``, tfapp's peak RSS at each size (flat memory: the largest within
1.3x of the smallest). Set TFAPP_CPU_BFLOAT16=0 for float32 on both sides.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
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
        fh.write(result["label"] + "\n")
"""


def make_input(path: Path, rows: int) -> None:
    """The demo's reviews repeated to ``rows`` rows, with an id column."""
    if path.exists():
        return
    demo = REPO / "tfapp" / "demo"
    texts = []
    for split in ("train", "validation", "test"):
        with (demo / f"reviews_{split}.csv").open(newline="") as fh:
            texts += [r["text"] for r in csv.DictReader(fh)]
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text"])
        for i in range(rows):
            writer.writerow([f"r{i}", texts[i % len(texts)]])
    tmp.rename(path)


def measured(argv: list[str], env: dict | None = None) -> dict:
    """Run ``argv``; its wall time and peak RSS (MiB), from ``os.wait4``."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=REPO)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[:4]} failed: {stderr.decode()[-2000:]}")
    return {"seconds": seconds, "peak_rss_mib": usage.ru_maxrss / 1024}


def tfapp_predict(model: str, data: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_USE_LEGACY_KERAS": "1"}
    if out.exists():
        out.unlink()
    return measured([sys.executable, "-m", "tfapp.predict", "--model", model, "--data",
                     str(data), "--keep", "id", "--output", str(out), "-q"], env)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--hf", required=True)
    p.add_argument("--rows", type=int, default=100000)
    p.add_argument("--hf-batch-sizes", default="8,32,64")
    p.add_argument("--rss-rows", default="", help="e.g. 10000,1000000 (tfapp only)")
    p.add_argument("--peers-python", default=str(REPO.parent / "main" / ".venv-peers" / "bin"
                                                 / "python"))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--work", default="/tmp/bench_predict")
    p.add_argument("--json", default="")
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"in-{args.rows}.csv"
    make_input(data, args.rows)
    results = {"rows": args.rows, "cpus": os.cpu_count(), "runs": {}}

    row = tfapp_predict(args.model, data, work / "tfapp.csv")
    row["rows_per_s"] = args.rows / row["seconds"]
    results["runs"]["tfapp"] = row
    print(f"tfapp predict: {row['rows_per_s']:,.0f} rows/s, peak RSS "
          f"{row['peak_rss_mib']:,.0f} MiB ({row['seconds']:.1f} s)", flush=True)
    with (work / "tfapp.csv").open(newline="") as fh:
        ours = [r["label"] for r in csv.DictReader(fh)]
    for size in [int(b) for b in args.hf_batch_sizes.split(",") if b]:
        out = work / f"hf-{size}.txt"
        row = measured([args.peers_python, "-c", HF_WORKER, str(data), args.hf, str(size),
                        str(out), str(args.threads)])
        row["rows_per_s"] = args.rows / row["seconds"]
        theirs = out.read_text().split()
        row["same_labels"] = sum(a == b for a, b in zip(ours, theirs, strict=True))
        results["runs"][f"hf b{size}"] = row
        print(f"hf pipeline batch {size}: {row['rows_per_s']:,.0f} rows/s, peak RSS "
              f"{row['peak_rss_mib']:,.0f} MiB ({row['seconds']:.1f} s); same label on "
              f"{row['same_labels']:,} of {len(ours):,} rows", flush=True)
    best = max((r for k, r in results["runs"].items() if k.startswith("hf")),
               key=lambda r: r["rows_per_s"], default=None)
    if best:
        results["speedup_vs_best_hf"] = results["runs"]["tfapp"]["rows_per_s"] / best[
            "rows_per_s"]
        print(f"tfapp / best HF pipeline: {results['speedup_vs_best_hf']:.2f}x")
    rss = {}
    for n in [int(r) for r in args.rss_rows.split(",") if r]:
        path = work / f"in-{n}.csv"
        make_input(path, n)
        rss[n] = tfapp_predict(args.model, path, work / f"tfapp-{n}.csv")
        print(f"tfapp predict, {n:,} rows: peak RSS {rss[n]['peak_rss_mib']:,.0f} MiB "
              f"({n / rss[n]['seconds']:,.0f} rows/s)", flush=True)
    if rss:
        results["rss_by_rows"] = {str(k): v for k, v in rss.items()}
        low, high = rss[min(rss)]["peak_rss_mib"], rss[max(rss)]["peak_rss_mib"]
        print(f"peak RSS {max(rss):,} rows / {min(rss):,} rows: {high / low:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
