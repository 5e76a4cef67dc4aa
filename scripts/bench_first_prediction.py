"""Where a one-sentence ``tfapp predict`` spends its CPU and memory, phase by phase.

    python scripts/bench_first_prediction.py --model RUN_DIR [--rounds 3] [--sentence TEXT]
    python scripts/bench_first_prediction.py --model OLD_RUN --tfapp OLD_CHECKOUT \\
        --model RUN_DIR --tfapp . --rounds 3

Each round starts a fresh process per side that imports tfapp's predict command, imports
TensorFlow, loads the export (its TensorFlow Text ops, then the SavedModel) and predicts
one sentence, as ``tfapp predict --model RUN_DIR TEXT`` does; after each phase it notes
the CPU seconds the phase took and how much it raised the process's peak RSS (``VmHWM`` of
``/proc/self/status``). The table gives the medians over the rounds.

A side is a ``--model`` and the ``--tfapp`` checkout it is imported from (PYTHONPATH; this
one by default): give the pair once per side, and the sides take turns, the order reversed
every round. A checkout without ``compat.import_tensorflow_for_serving`` or
``serving.first_calls`` imports TensorFlow plainly and calls the export with Grappler's
rewrites on. ``TEXT`` defaults to bench_startup.py's sentence (the docstring of median
length).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench_predict import REPO
from bench_startup import median_text

PHASES = ("tfapp imports", "import tensorflow", "load the export", "first prediction")

CHILD = r"""
import contextlib, json, sys, time

marks = []
def mark(last=[0.0, 0]):
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    rss, cpu = int(status["VmHWM"].split()[0]) / 1024, time.process_time()
    marks.append({"cpu_s": cpu - last[0], "rss_mib": rss - last[1]})
    last[0], last[1] = cpu, rss

import tfapp.predict
from tfapp.serving import PREDICT
from tfapp.tasks import load_export
mark()
try:
    from tfapp.compat import import_tensorflow_for_serving
except ImportError:
    import tensorflow
else:
    import_tensorflow_for_serving()
mark()
model = load_export(sys.argv[1], PREDICT)
mark()
try:
    from tfapp.serving import first_calls
except ImportError:
    first_calls = lambda texts: contextlib.nullcontext()
with first_calls(1):
    line, = model.predict_lines([sys.argv[2]], None, as_json=True)
mark()
print(json.dumps({"marks": marks, "prediction": json.loads(line)}))
"""


def phases(model: str, checkout: Path, sentence: str) -> dict:
    """One fresh process's marks (CPU s and peak RSS added, per phase) and prediction."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "TF_USE_LEGACY_KERAS": "1",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-c", CHILD, model, sentence], env=env,
                          capture_output=True, text=True, cwd=checkout)
    if proc.returncode != 0:
        raise SystemExit(f"{checkout}: {model} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(sides: list[str], runs: dict[str, list[dict]]) -> str:
    """Rows: the phases and their total; per side the median CPU s and peak RSS added."""
    head = "| phase | " + " | ".join(f"{s}: CPU s | {s}: peak RSS + MiB" for s in sides) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(sides))]

    def median(side: str, key: str, phase: int | None) -> float:
        return statistics.median(sum(m[key] for m in r["marks"]) if phase is None
                                 else r["marks"][phase][key] for r in runs[side])

    for i, name in [*enumerate(PHASES), (None, "**total**")]:
        cells = [f"{median(s, 'cpu_s', i):.2f} | {median(s, 'rss_mib', i):,.0f}" for s in sides]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", required=True,
                   help="a classifier run directory (or its export/), once per side")
    p.add_argument("--tfapp", action="append", default=[],
                   help="the tfapp checkout each --model is imported from (default: this one)")
    p.add_argument("--sentence", default="")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default="")
    args = p.parse_args()
    checkouts = [Path(c).resolve() for c in args.tfapp] or [REPO]
    if len(checkouts) != len(args.model):
        p.error("give --tfapp once per --model, or not at all for one --model")
    sentence = args.sentence or median_text("docstrings")
    sides = [f"{c.name} {Path(m).name}" for c, m in zip(checkouts, args.model, strict=True)]
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    order = list(zip(sides, args.model, checkouts, strict=True))
    for r in range(max(1, args.rounds)):
        for side, model, checkout in (order if r % 2 == 0 else order[::-1]):
            runs[side].append(phases(model, checkout, sentence))
            marks = runs[side][-1]["marks"]
            print(f"round {r + 1}: {side}: " + ", ".join(
                f"{name} {m['cpu_s']:.2f} s +{m['rss_mib']:,.0f} MiB"
                for name, m in zip(PHASES, marks, strict=True)), flush=True)
    print(f"one sentence: {sentence!r}")
    for side in sides:
        print(f"{side}: {json.dumps(runs[side][-1]['prediction'])}")
    print(table(sides, runs))
    if args.json:
        Path(args.json).write_text(json.dumps({"sentence": sentence, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
