"""One command: build the peers' venv, run every benchmark, print the tables and the ratios.

    python scripts/bench_all.py [--out runs/bench] [--quick] [--only input,generate,train]
        [--train-shapes toy,minilm,bert-base] [--model RUN_DIR]

1. The peers (torch CPU, transformers, tokenizers, keras 3 + keras-hub on TensorFlow) are
   installed from PyPI into ``.venv-peers`` in the repo (ignored by git), pinned in
   ``scripts/bench_peers.txt``; never tfapp dependencies. It is rebuilt when that file
   changes (its hash is kept in the venv).
2. ``bench_generate`` needs a trained generator: without ``--model`` one is trained first
   (``configs/generator.yaml``, 2 epochs, into ``OUT/generator``; about 1.5 minutes on 2
   idle cores).
3. ``bench_input.py``, ``bench_generate.py`` and ``bench_train.py`` run one after another
   (each prints its tables; every row alternates with the others of its table, same
   warm-up, median and range); their JSON goes to ``OUT``. Then a summary of the ratios
   against the issue's targets.

``--quick`` runs every row at tiny sizes (a smoke test of the whole chain, minutes, not
a measurement). Run this script with tfapp's interpreter (``.venv/bin/python``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
REQUIREMENTS = SCRIPTS / "bench_peers.txt"
PEERS = REPO / ".venv-peers"
IMPORTS = "import torch, transformers, tokenizers, keras, keras_hub, tensorflow, datasets"


def peers_python() -> Path:
    """The peers' venv, built (or rebuilt after bench_peers.txt changed) from PyPI."""
    python = PEERS / "bin" / "python"
    stamp = PEERS / "bench_peers.sha256"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    print(f"building the peers' venv {PEERS} from {REQUIREMENTS.name} (a few minutes)",
          flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(PEERS)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)],
                   check=True)
    subprocess.run([str(python), "-c", IMPORTS], check=True)
    stamp.write_text(digest + "\n")  # last: an interrupted install is redone next time
    return python


def run(cmd: list[str]) -> int:
    print("\n$ " + " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], cwd=REPO).returncode


def summary(out: Path) -> list[str]:
    lines = ["", "summary: ratios of medians (target)"]

    def load(name: str) -> dict | None:
        path = out / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def fmt(value: float | None, target: float) -> str:
        if value is None:
            return "n/a"
        return f"{value:.2f}x ({'met' if value >= target else 'MISSED'}, >= {target}x)"

    if data := load("input"):
        for name, c in data["corpora"].items():
            lines.append(f"  input {name:5s}  tfapp cold / faster fast-tokenizer row "
                         f"{fmt(c['cold/peer'], 1.0)};  replay / it "
                         f"{fmt(c['replay/peer'], 2.0)}")
    if data := load("generate"):
        for batch, b in data["batches"].items():
            if batch == "1":
                lines.append(f"  decode batch 1   compiled / tf.function per-step "
                             f"{fmt(b['compiled/per-step'], 5.0)}")
            lines.append(f"  decode batch {batch:<3} compiled / PyTorch loop "
                         f"{fmt(b['compiled/torch'], 1.0)}")
    for path in sorted(out.glob("train*.json")):  # bench_train runs, e.g. one per shape
        for t in json.loads(path.read_text())["tables"]:
            target = 1.1 if t["precision"] == "float32" else 0.0
            value = t["tfapp/HF"]
            text = fmt(value, target) if target else (f"{value:.2f}x" if value else "n/a")
            lines.append(f"  train {t['shape']:<9} batch {t['batch']:<3} {t['precision']:<9}"
                         f" tfapp / HF + PyTorch {text}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/bench", help="JSON results and work files")
    p.add_argument("--only", default="input,generate,train")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    p.add_argument("--model", default="", help="a trained generator run directory")
    p.add_argument("--train-shapes", default="toy,minilm,bert-base",
                   help="bench_train --shapes (name or name:batch)")
    p.add_argument("--train-steps", type=int, default=10,
                   help="timed steps per repetition (x 3 rounds)")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    out = (REPO / a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    only = set(a.only.split(","))
    started = time.time()
    peers = peers_python()
    py = sys.executable
    rounds = ["--rounds", str(a.rounds), "--peers-python", str(peers)]
    codes = []
    if "input" in only:
        size = ["--examples", "1024"] if a.quick else []
        codes.append(run([py, SCRIPTS / "bench_input.py", *rounds, *size,
                          "--work-dir", out / "input", "--json", out / "input.json"]))
    if "generate" in only:
        model = Path(a.model) if a.model else out / "generator"
        if not a.model and not (model / "checkpoints" / "best.json").exists():
            codes.append(run([py, "-m", "tfapp.train", "--config", "configs/generator.yaml",
                              f"output_dir={out}", "name=generator",
                              f"trainer.epochs={1 if a.quick else 2}"]))
        size = ["--calls", "2"] if a.quick else []
        codes.append(run([py, SCRIPTS / "bench_generate.py", "--model", model, *rounds, *size,
                          "--work-dir", out / "generate", "--json", out / "generate.json"]))
    if "train" in only:
        size = (["--shapes", "toy:2", "--steps", "1", "--examples", "64"] if a.quick
                else ["--shapes", a.train_shapes, "--steps", str(a.train_steps)])
        codes.append(run([py, SCRIPTS / "bench_train.py", *rounds, *size,
                          "--work-dir", out / "train", "--json", out / "train.json"]))
    print("\n".join(summary(out)))
    print(f"\n(total {time.time() - started:.0f} s; results in {out})")
    return max(codes, default=0)


if __name__ == "__main__":
    sys.exit(main())
