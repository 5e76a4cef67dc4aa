"""Does masked-LM adaptation help the classifier? Fine-tune from a random-init module and
from an adapted one, same config and seeds, and print the validation accuracies.

    python scripts/compare_adaptation.py --adapted hub/tiny-reviews \
        [--config configs/classifier.yaml] [--seeds 42 1 7] [key=value ...]

Each run is ``python -m tfapp.train --config CONFIG model.hub_handle=H runtime.seed=S``
(plus the overrides) in a subprocess, so every run starts from a fresh process; the run
directories go under ``--output-dir``. The table shows the validation accuracy after the
last epoch (what ``python -m tfapp.train`` reports) and the best epoch's, per seed, with
their means. Build the adapted module first, e.g. from the training texts only (never
the validation texts)::

    python -m tfapp.pretrain --corpus tfapp/demo/reviews_train.csv --hub builtin:tiny \
        --out hub/tiny-reviews --steps 2000 --seq-length 64 optimizer.learning_rate=1e-3
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _val_accuracy(run_dir: Path) -> tuple[float, float, int]:
    """(last epoch's, best epoch's val_accuracy, epochs run) from the run's history.csv."""
    with open(run_dir / "history.csv", newline="") as f:
        values = [float(row["val_accuracy"]) for row in csv.DictReader(f)]
    if not values:
        raise SystemExit(f"{run_dir}/history.csv holds no epoch")
    return values[-1], max(values), len(values)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--adapted", required=True, metavar="HUB_DIR",
                   help="the adapted module (python -m tfapp.pretrain --out)")
    p.add_argument("--baseline", default="builtin:tiny", metavar="HANDLE",
                   help="the module it was adapted from (default builtin:tiny), e.g. "
                        "hub/minilm")
    p.add_argument("--config", default="configs/classifier.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 7])
    p.add_argument("--output-dir", default="runs/compare_adaptation")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="passed to every python -m tfapp.train run")
    args = p.parse_args(argv)

    rows: dict[str, list[tuple[float, float, int]]] = {}
    # builtin:tiny is random init; any other baseline (e.g. hub/minilm) is pretrained.
    base = "random init" if args.baseline == "builtin:tiny" else "baseline"
    for label, handle in ((base, args.baseline), ("adapted", args.adapted)):
        for seed in args.seeds:
            name = f"{'adapted' if label == 'adapted' else 'baseline'}_s{seed}"
            cmd = [sys.executable, "-m", "tfapp.train", "--config", args.config,
                   f"model.hub_handle={handle}", f"runtime.seed={seed}", f"name={name}",
                   f"output_dir={args.output_dir}", *args.overrides]
            started = time.time()
            done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
            if done.returncode:
                tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
                raise SystemExit(f"{' '.join(cmd)} failed: {tail[0]}")
            result = _val_accuracy(Path(args.output_dir) / name)
            rows.setdefault(label, []).append(result)
            print(f"{label:12} seed {seed:>4}: val_accuracy {result[0]:.3f} (best "
                  f"{result[1]:.3f}, {result[2]} epochs, {time.time() - started:.0f}s)",
                  flush=True)

    seeds = ", ".join(str(s) for s in args.seeds)
    print(f"\n| encoder | val accuracy, last epoch (seeds {seeds}) | mean | best epoch | mean |")
    print("|---|---|---|---|---|")
    for label, results in rows.items():
        last = [r[0] for r in results]
        best = [r[1] for r in results]
        print(f"| {label} | {', '.join(f'{v:.3f}' for v in last)} | "
              f"{statistics.mean(last):.3f} | {', '.join(f'{v:.3f}' for v in best)} | "
              f"{statistics.mean(best):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
