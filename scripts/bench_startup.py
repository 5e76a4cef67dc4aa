"""Time to a first prediction, and small scoring jobs, against Hugging Face's pipeline: each
job a whole process, from its start to its exit, the two sides taking turns in one run.

    python scripts/bench_startup.py --model RUN_DIR --hf HF_DIR --text docstrings \\
        --rows 2000,20000 --rounds 3 [--hf-batch-size 8] [--json out.json]
    python scripts/bench_startup.py --model RUN_DIR --tfapp-only --rows 40 --rounds 1

``RUN_DIR`` is a classifier run with an export; ``HF_DIR`` its ``tfapp export-hf``
checkpoint (the same weights, read by transformers + PyTorch in the peers venv,
``--peers-python``). The jobs:

* **one sentence**: ``python -m tfapp.predict --model RUN_DIR --json "TEXT"`` against a process
  that builds ``pipeline("text-classification", model=HF_DIR)`` and prints its answer for
  ``TEXT``; ``TEXT`` is a real one of ``--text`` (the one of median length);
* **N rows**, for each of ``--rows``: ``python -m tfapp.predict --model RUN_DIR --data
  in.csv --keep id --output out.csv`` against the pipeline over the same texts
  (``--hf-batch-size``, truncation to the run's sequence length), as
  ``scripts/bench_predict.py`` runs them.

Each process is started and waited for here: its wall time from start to exit, and its CPU
time (user + system) and peak RSS from ``os.wait4``. Every round runs each job on each side
once, the order reversed every round, so a busy minute of a shared machine falls on both;
the table gives medians (ranges in the JSON). CPU seconds say more than wall seconds when
other jobs share the machine (the load average before and after is printed). Every row's
label is compared between the two sides.

The script also prints the export's size against its weights' (the float32 bytes of the
model's variables, read from ``export/variables`` with ``tf.train.list_variables``) and the
bytes of training state in it (optimizer slots, counters: none in an export that holds
only what serving needs). ``--tfapp-only`` runs tfapp's side alone (no peers venv); the
JSON then keeps tfapp's answers (``tfapp_answers``: the sentence's prediction, each row's
label and probability) in place of the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench_predict import (
    HF_WORKER,
    REPO,
    examples_of,
    labels_of,
    make_input,
    measured,
    spread,
    tfapp_env,
)

HF_ONE = r"""
import sys, torch
from transformers import pipeline
model, text, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)
pipe = pipeline("text-classification", model=model, device=-1, truncation=True)
result = pipe(text)[0]
print(f"{result['label']}\t{result['score']!r}")
"""

# The export's variables by kind, in bytes (run by tfapp's interpreter).
SIZES = r"""
import json, sys
from pathlib import Path
import numpy as np
import tensorflow as tf
export = Path(sys.argv[1])
reader = tf.train.load_checkpoint(str(export / "variables" / "variables"))
dtypes = reader.get_variable_to_dtype_map()
out = {"weights": 0, "training_state": 0, "other": 0}
for name, shape in reader.get_variable_to_shape_map().items():
    if name == "_CHECKPOINTABLE_OBJECT_GRAPH":
        continue
    size = int(np.prod(shape)) * dtypes[name].size
    if any(w in name for w in ("optimizer", "/metrics/", "keras_api")):
        out["training_state"] += size
    elif name.startswith(("model_variables/", "model/")):
        out["weights"] += size
    else:
        out["other"] += size
out["export"] = sum(f.stat().st_size for f in export.rglob("*") if f.is_file())
print(json.dumps(out))
"""


def median_text(text: str) -> str:
    """The ``--text`` example of median length in words (the first 2,000 examples)."""
    texts = [t for t, _ in examples_of(text)[:2000]]
    return sorted(texts, key=lambda t: (len(t.split()), t))[len(texts) // 2]


def export_sizes(model: str) -> dict:
    run = Path(model)
    export = run / "export" if (run / "export" / "saved_model.pb").is_file() else run
    proc = subprocess.run([sys.executable, "-c", SIZES, str(export)], capture_output=True,
                          text=True, env=tfapp_env(), check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def sides(args: argparse.Namespace, job: str, work: Path, sentence: str) -> list[tuple]:
    """(side, argv, output file or None) of ``job`` ('1' or a row count) on each side."""
    if job == "1":
        tfapp = [sys.executable, "-m", "tfapp.predict", "--model", args.model, "--json",
                 sentence]
        hf = [args.peers_python, "-c", HF_ONE, args.hf, sentence, str(args.threads)]
        return [("tfapp", tfapp, None), ("hf", hf, None)][:1 if args.tfapp_only else 2]
    data = work / f"in-{args.text}-{job}.csv"
    make_input(data, int(job), args.text)
    out = [work / f"tfapp-{job}.csv", work / f"hf-{job}.txt"]
    tfapp = [sys.executable, "-m", "tfapp.predict", "--model", args.model, "--data", str(data),
             "--keep", "id", "--output", str(out[0]), "-q"]
    hf = [args.peers_python, "-c", HF_WORKER, str(data), args.hf, str(args.hf_batch_size),
          str(out[1]), str(args.threads)]
    return [("tfapp", tfapp, out[0]), ("hf", hf, out[1])][:1 if args.tfapp_only else 2]


def agreement(job: str, stdout: dict[str, str], outputs: dict[str, Path]) -> str:
    """How the two sides' labels (and the probability of each label) compare."""
    if job == "1":
        ours = json.loads(stdout["tfapp"].strip().splitlines()[-1])
        label, score = stdout["hf"].strip().splitlines()[-1].split("\t")
        diff = abs(ours["probabilities"][ours["label"]] - float(score))
        return f"same label: {ours['label'] == label}; probability within {diff:.1e}"
    ours = labels_of(outputs["tfapp"])
    theirs = [line.split("\t") for line in outputs["hf"].read_text().splitlines()]
    same = sum(a == b for (a, _), (b, _) in zip(ours, theirs, strict=True))
    diff = max(abs(p - float(q)) for (_, p), (_, q) in zip(ours, theirs, strict=True))
    return f"same label on {same:,} of {len(ours):,} rows; probability within {diff:.1e}"


def table(results: dict) -> str:
    """The Markdown table of the medians (a ratio is tfapp's over the pipeline's)."""
    head = ("| job | tfapp wall s | HF wall s | wall tfapp / HF | tfapp CPU s | HF CPU s "
            "| tfapp peak RSS MiB | HF peak RSS MiB | RSS tfapp / HF | rate tfapp / HF |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def cell(side: dict | None, key: str, fmt: str) -> str:
        return fmt.format(side[key]["median"]) if side else "-"

    def ratio(t: dict, h: dict | None, key: str) -> str:
        return f"{t[key]['median'] / h[key]['median']:.2f}x" if h else "-"

    for job, row in results["jobs"].items():
        t, h = row["tfapp"], row.get("hf")
        rate = (f"{h['seconds']['median'] / t['seconds']['median']:.2f}x"
                if h and job != "1" else "-")
        name = "1 sentence" if job == "1" else f"{int(job):,} rows"
        cells = [name, cell(t, "seconds", "{:.1f}"), cell(h, "seconds", "{:.1f}"),
                 ratio(t, h, "seconds"), cell(t, "cpu_s", "{:.1f}"), cell(h, "cpu_s", "{:.1f}"),
                 cell(t, "peak_rss_mib", "{:,.0f}"), cell(h, "peak_rss_mib", "{:,.0f}"),
                 ratio(t, h, "peak_rss_mib"), rate]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a classifier run directory (or its export/)")
    p.add_argument("--hf", default="", help="the run's export-hf folder")
    p.add_argument("--tfapp-only", action="store_true", help="no pipeline side (no peers venv)")
    p.add_argument("--rows", default="2000,20000", help="row counts of the scoring jobs")
    p.add_argument("--text", choices=("reviews", "docstrings"), default="docstrings",
                   help="the texts (scripts/bench_predict.py says what each is)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hf-batch-size", type=int, default=8,
                   help="the pipeline's batch size (8 was its best on docstrings)")
    p.add_argument("--peers-python", default=str(REPO / ".venv-peers" / "bin" / "python"))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--work", default="/tmp/bench_startup")
    p.add_argument("--json", default="")
    args = p.parse_args()
    if not args.tfapp_only and not args.hf:
        p.error("give --hf HF_DIR (the run's export-hf checkpoint), or --tfapp-only")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    sentence = median_text(args.text)
    jobs = ["1"] + [r for r in args.rows.split(",") if r]
    sizes = export_sizes(args.model)
    results = {"text": args.text, "sentence": sentence, "cpus": os.cpu_count(),
               "rounds": args.rounds, "export_bytes": sizes, "jobs": {},
               "load_average_before": os.getloadavg()}
    print(f"export: {sizes['export'] / 1e6:.1f} MB; weights {sizes['weights'] / 1e6:.1f} MB "
          f"(export / weights {sizes['export'] / sizes['weights']:.3f}x); training state "
          f"{sizes['training_state'] / 1e6:.1f} MB", flush=True)
    print(f"one sentence ({len(sentence.split())} words): {sentence!r}", flush=True)
    runs: dict[str, dict[str, list[dict]]] = {job: {} for job in jobs}
    for r in range(max(1, args.rounds)):
        for job in jobs:
            order = sides(args, job, work, sentence)
            for side, argv, out in (order if r % 2 == 0 else order[::-1]):
                if out is not None and out.exists():
                    out.unlink()
                row = measured(argv, tfapp_env() if side == "tfapp" else None)
                runs[job].setdefault(side, []).append(row)
                print(f"round {r + 1}: {job} {side}: {row['seconds']:.1f} s, CPU "
                      f"{row['cpu_s']:.1f} s, peak RSS {row['peak_rss_mib']:,.0f} MiB",
                      flush=True)
    for job in jobs:
        outs = {side: out for side, _, out in sides(args, job, work, sentence)}
        results["jobs"][job] = {side: {key: spread([r[key] for r in rows])
                                       for key in ("seconds", "cpu_s", "peak_rss_mib")}
                                for side, rows in runs[job].items()}
        if not args.tfapp_only:
            stdout = {side: rows[-1]["stdout"] for side, rows in runs[job].items()}
            results["jobs"][job]["agreement"] = agreement(job, stdout, outs)
            print(f"{job}: {results['jobs'][job]['agreement']}")
        else:  # tfapp's own answers, for a reader (or a test) to check
            results["jobs"][job]["tfapp_answers"] = (
                [json.loads(runs[job]["tfapp"][-1]["stdout"].strip().splitlines()[-1])]
                if job == "1" else labels_of(outs["tfapp"]))
    results["load_average_after"] = os.getloadavg()
    print(f"load average before {results['load_average_before'][0]:.1f}, after "
          f"{results['load_average_after'][0]:.1f} ({os.cpu_count()} CPUs)")
    print(table({"jobs": {j: {k: v for k, v in row.items() if k in ("tfapp", "hf")}
                          for j, row in results["jobs"].items()}}))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
