"""Input at scale: time to the first training step, peak memory and input throughput of
tfapp against the pipelines a user would write instead, from 100k to millions of rows.

    python scripts/bench_data_scale.py [--rows 100k,1M,4M] [--more 20M]
        [--peers-python .venv-peers/bin/python] [--out runs/bench-scale] [--quick]

It writes synthetic CSVs (3 labels, texts of 60-200 characters, the shape of the issue
that asked for this) and, per size, runs each row in its own fresh process, one after the
other (one run, same machine state):

* **tfapp, raw CSV, first run**: ``python -m tfapp.train --config configs/classifier.yaml
  data.train_files=CSV trainer.max_steps=20`` with an empty cache: it prepares the CSV
  once (the time it took is read off the run's log and reported apart), then trains;
* **tfapp, raw CSV, again**: the same command; the prepared cache is found;
* **tfapp, prepared folder**: ``python -m tfapp.prepare`` once (its rows/s reported),
  then the same training with ``data.train_files=OUT/train``;
* **tfapp, snapshot replay**: the same training with ``data.snapshot=DIR``, run twice;
  the second run replays the stored token ids;
* **tf.data streaming**: the plain pipeline a TensorFlow user writes in 40 lines
  (``CsvDataset`` -> the same Hub preprocessor -> shuffle -> batch -> prefetch);
* **HF datasets** (in the peers' venv, ``--peers-python``): ``load_dataset("csv")`` (cold
  Arrow cache) with the fast tokenizer on the same vocab as a transform; and
  ``load_dataset`` + ``map(tokenize, batched=True)``, the pass that sits beside tfapp's
  prepare step.

Columns: seconds from the process start to the first training step (or first batch),
peak RSS of the process (``wait4``), and steady input examples/s: batches of 32 pulled
from the pipeline alone after a warm-up (tfapp: its training dataset, cold and replayed).
Training runs validate on 0.5% of the rows (``data.validation_split=0.005``): the
question here is the input, not evaluating 800k validation rows.

``--quick`` runs every row at 5k rows (minutes: a smoke test of the whole chain, not a
measurement). ``--more 20M`` adds larger sizes that run the first tfapp row only (the
question there: does it train without running out of memory).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
WORDS = ("the a movie film plot actor great bad boring wonderful story scene music ending "
         "character slow fast funny sad long short").split()
LABELS = ("positive", "negative", "neutral")
BATCH = 32


def parse_rows(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", text.strip())
    if not m:
        raise SystemExit(f"bad size {text!r}: give e.g. 100k, 1M, 4M")
    scale = {"": 1, "k": 1_000, "m": 1_000_000}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def write_csv(path: Path, rows: int) -> Path:
    """``rows`` synthetic reviews (NumPy, seeded): text of 10-32 words, one of 3 labels."""
    import numpy as np

    if path.exists():
        return path
    rng = np.random.default_rng(0)
    words = np.array(WORDS)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as fh:
        fh.write("text,label\n")
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            k = rng.integers(10, 33, n)
            w = words[rng.integers(0, len(words), (n, 33))]
            lab = np.array(LABELS)[rng.integers(0, 3, n)]
            fh.write("\n".join(" ".join(w[i, :k[i]]) + "," + lab[i] for i in range(n)) + "\n")
    tmp.rename(path)
    return path


def measure(cmd: list[str], *, env: dict | None = None, first: str = r"\bstep 1/\d+",
            timeout: float = 7200) -> dict:
    """Run ``cmd``; seconds until a line matching ``first``, total seconds, peak RSS (MB),
    exit code, and the lines it printed."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    first_at, lines = None, []
    deadline = started + timeout
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if first_at is None and re.search(first, line):
            first_at = time.monotonic() - started
        if time.monotonic() > deadline:
            proc.kill()
            break
    _, status, usage = os.wait4(proc.pid, 0)
    return {"first_s": first_at, "total_s": time.monotonic() - started,
            "rss_mb": usage.ru_maxrss / 1024, "rc": os.waitstatus_to_exitcode(status),
            "lines": lines}


def prepared_seconds(lines: list[str]) -> float | None:
    for line in lines:
        m = re.search(r"data: prepared (\d+) rows .* in ([\d.]+)s", line)
        if m:
            return float(m.group(2))
    return None


def tfapp_env(cache: Path) -> dict:
    return dict(os.environ, TFAPP_CACHE_DIR=str(cache), TF_CPP_MIN_LOG_LEVEL="2",
                WANDB_MODE="disabled")


def train_cmd(data: str, out: Path, name: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tfapp.train", "--config", "configs/classifier.yaml",
            f"data.train_files={data}", "data.validation_split=0.005", "trainer.max_steps=20",
            "trainer.log_every_steps=1", "tracking.tensorboard=false", "trainer.export=false",
            f"output_dir={out}", f"name={name}", *extra]


# The steady input rate of a pipeline alone, in a fresh process (one script per row).
TFAPP_RATE = """
import sys, time, dataclasses
sys.path.insert(0, {repo!r})
import tfapp
from tfapp.config import load_config
from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn
from tfapp.data.examples.classification import classification_examples, load_classification_splits
from tfapp.data.input.reader import read_batches
from tfapp.hub.handles import resolve_hub_handle
cfg = load_config({config!r}, [f"data.train_files={{sys.argv[1]}}", "data.validation_split=0",
                               *sys.argv[2:]])
_, pre = resolve_hub_handle(cfg.model.hub_handle)
pre = make_bert_preprocess_fn(hub_preprocessor=pre, seq_length=cfg.data.seq_length)
splits = load_classification_splits(cfg.data, 0)
ds = read_batches(classification_examples(splits, splits.train, pre, cfg.data.seq_length),
                  cfg.data, batch_size={batch}, training=True, seed=0)
it = iter(ds)
t = time.monotonic(); next(it); print("first batch", time.monotonic() - t, flush=True)
for _ in range({warm}): next(it)
t = time.monotonic()
for _ in range({n}): next(it)
print("rate", {n} * {batch} / (time.monotonic() - t), flush=True)
"""

PLAIN = """
import sys, time
import tfapp
import tensorflow as tf, tensorflow_hub as hub, tensorflow_text  # the tokenizer's ops
from tfapp.hub.handles import resolve_hub_handle
t0 = time.monotonic()
_, pre = resolve_hub_handle("builtin:tiny")
module = hub.load(pre)
ds = tf.data.experimental.CsvDataset(sys.argv[1], [tf.string, tf.string], header=True)
ds = ds.shuffle(10000, seed=0).batch({batch}, drop_remainder=True)
table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
    tf.constant({labels!r}), tf.range(3)), -1)
def encode(text, label):
    pieces = module.tokenize(text)
    return module.bert_pack_inputs([pieces], seq_length=64), table.lookup(label)
ds = ds.map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
it = iter(ds)
next(it); print("first batch", time.monotonic() - t0, flush=True)
for _ in range({warm}): next(it)
t = time.monotonic()
for _ in range({n}): next(it)
print("rate", {n} * {batch} / (time.monotonic() - t), flush=True)
"""

HF = """
import sys, time, os
t0 = time.monotonic()
import datasets, tokenizers
tok = tokenizers.BertWordPieceTokenizer(sys.argv[2], lowercase=True)
tok.enable_truncation(64)
tok.enable_padding(length=64, pad_id=0, pad_token="[PAD]")
ds = datasets.load_dataset("csv", data_files=sys.argv[1], split="train",
                           cache_dir=sys.argv[3])
def encode(batch):
    out = tok.encode_batch(batch["text"])
    return {{"input_ids": [e.ids for e in out], "attention_mask": [e.attention_mask
                                                                for e in out]}}
if sys.argv[4] == "map":   # the full pass: load + tokenise every row
    ds = ds.map(encode, batched=True, batch_size=1000, remove_columns=["text"])
    print("pass", time.monotonic() - t0, len(ds), flush=True)
    sys.exit(0)
ds = ds.shuffle(seed=0)
ds.set_transform(encode)
n, i = {n}, 0
loader = (ds[j:j + {batch}] for j in range(0, len(ds), {batch}))
next(loader); print("first batch", time.monotonic() - t0, flush=True)
for _ in range({warm}): next(loader)
t = time.monotonic()
for _ in range(n): next(loader)
print("rate", n * {batch} / (time.monotonic() - t), flush=True)
"""


def rate_of(result: dict) -> tuple[float | None, float | None]:
    first = rate = None
    for line in result["lines"]:
        if line.startswith("first batch "):
            first = float(line.split()[2])
        if line.startswith("rate "):
            rate = float(line.split()[1])
    return first, rate


def fmt(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="100k,1M,4M", help="sizes (default 100k,1M,4M)")
    parser.add_argument("--more", default="", help="larger sizes: the first tfapp row only")
    parser.add_argument("--peers-python", default="",
                        help="python of a venv with datasets + tokenizers (the HF rows)")
    parser.add_argument("--out", default="runs/bench-scale")
    parser.add_argument("--quick", action="store_true", help="5k rows: a smoke test")
    args = parser.parse_args(argv)
    out = (REPO / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    sizes = [5_000] if args.quick else [parse_rows(s) for s in args.rows.split(",") if s]
    more = [] if args.quick else [parse_rows(s) for s in args.more.split(",") if s]
    warm, pulled = (5, 20) if args.quick else (20, 200)
    vocab = None
    results: dict = {}
    for rows in sizes + more:
        csv = write_csv(out / f"reviews-{rows}.csv", rows)
        size_mb = csv.stat().st_size / 2 ** 20
        print(f"\n== {rows:,} rows ({size_mb:,.0f} MB)", flush=True)
        row: dict = {"csv_mb": size_mb}
        # The builtin BERT is built once into this cache (not timed); prepared data starts
        # from nothing at every size.
        cache = out / "cache"
        shutil.rmtree(cache / "prepared", ignore_errors=True)
        env = tfapp_env(cache)
        if not any(cache.glob("hub/tiny-bert-*/vocab.txt")):
            subprocess.run([sys.executable, "-m", "tfapp.hub", "resolve", "builtin:tiny"],
                           cwd=REPO, env=env, check=True, capture_output=True)
        first = measure(train_cmd(str(csv), out / "runs", f"raw-{rows}"), env=env)
        row["raw_first"] = {**{k: v for k, v in first.items() if k != "lines"},
                            "prepare_s": prepared_seconds(first["lines"])}
        if first["rc"]:
            print("\n".join(first["lines"][-20:]))
        print(f"tfapp raw, first run: step 1 at {fmt(first['first_s'], '.1f')} s (prepare "
              f"{fmt(row['raw_first']['prepare_s'], '.1f')} s), peak {first['rss_mb']:.0f} MB, "
              f"rc {first['rc']}", flush=True)
        if vocab is None:  # the builtin module's vocab, for the peers' tokenizer
            vocab = next(cache.glob("hub/tiny-bert-*/vocab.txt"), None)
            vocab = shutil.copy(vocab, out / "vocab.txt") if vocab else None
        if rows in more:
            results[rows] = row
            shutil.rmtree(cache / "prepared", ignore_errors=True)
            continue
        again = measure(train_cmd(str(csv), out / "runs", f"raw2-{rows}"), env=env)
        row["raw_again"] = {k: v for k, v in again.items() if k != "lines"}
        print(f"tfapp raw, again:     step 1 at {fmt(again['first_s'], '.1f')} s, peak "
              f"{again['rss_mb']:.0f} MB", flush=True)
        folder = out / f"prepared-{rows}"
        shutil.rmtree(folder, ignore_errors=True)
        prep = measure([sys.executable, "-m", "tfapp.prepare", "--config",
                        "configs/classifier.yaml", f"data.train_files={csv}", "--out",
                        str(folder), "--split", "train"], env=env, first=r"^train: ")
        row["prepare"] = {k: v for k, v in prep.items() if k != "lines"}
        row["prepare"]["rows_per_s"] = rows / prep["total_s"]
        print(f"tfapp prepare:        {prep['total_s']:.1f} s ({rows / prep['total_s']:,.0f} "
              f"rows/s incl. start-up), peak {prep['rss_mb']:.0f} MB", flush=True)
        folder_run = measure(train_cmd(str(folder / "train"), out / "runs", f"prep-{rows}"),
                             env=env)
        row["prepared"] = {k: v for k, v in folder_run.items() if k != "lines"}
        print(f"tfapp prepared:       step 1 at {fmt(folder_run['first_s'], '.1f')} s, "
              f"peak {folder_run['rss_mb']:.0f} MB", flush=True)
        snap = f"data.snapshot={out / f'snapshot-{rows}'}"
        measure(train_cmd(str(csv), out / "runs", f"snap-{rows}", snap), env=env)
        replay = measure(train_cmd(str(csv), out / "runs", f"snap2-{rows}", snap), env=env)
        row["replay"] = {k: v for k, v in replay.items() if k != "lines"}
        print(f"tfapp snapshot replay: step 1 at {fmt(replay['first_s'], '.1f')} s, peak "
              f"{replay['rss_mb']:.0f} MB", flush=True)
        script = out / "tfapp_rate.py"
        script.write_text(TFAPP_RATE.format(repo=str(REPO), config="configs/classifier.yaml",
                                            batch=BATCH, warm=warm, n=pulled))
        for name, extra in (("cold", []), ("replayed", [snap])):
            result = measure([sys.executable, str(script), str(csv), *extra], env=env,
                             first="^first batch")
            row[f"input_{name}"] = dict(zip(("first_s", "rate"), rate_of(result),
                                            strict=True), rss_mb=result["rss_mb"])
            print(f"tfapp input {name}: {fmt(row[f'input_{name}']['rate'], ',.0f')} ex/s",
                  flush=True)
        plain = out / "plain.py"
        plain.write_text(PLAIN.format(batch=BATCH, warm=warm, n=pulled, labels=list(LABELS)))
        result = measure([sys.executable, str(plain), str(csv)], env=env, first="^first batch")
        first_s, rate = rate_of(result)
        row["plain"] = {"first_s": first_s, "rate": rate, "rss_mb": result["rss_mb"]}
        print(f"tf.data streaming:    first batch at {fmt(first_s, '.1f')} s, peak "
              f"{result['rss_mb']:.0f} MB, {fmt(rate, ',.0f')} ex/s", flush=True)
        if args.peers_python and vocab:
            hf = out / "hf.py"
            hf.write_text(textwrap.dedent(HF.format(batch=BATCH, warm=warm, n=pulled)))
            for mode in ("transform", "map"):
                hf_cache = tempfile.mkdtemp(prefix="hf-cache-", dir=out)
                result = measure([args.peers_python, str(hf), str(csv), str(vocab), hf_cache,
                                  mode], first="^(first batch|pass)")
                shutil.rmtree(hf_cache, ignore_errors=True)
                if mode == "map":
                    row["hf_map"] = {"seconds": result["first_s"], "rss_mb": result["rss_mb"],
                                     "rows_per_s": rows / result["first_s"]
                                     if result["first_s"] else None}
                    print(f"HF load + tokenise:   {fmt(result['first_s'], '.1f')} s "
                          f"({fmt(row['hf_map']['rows_per_s'], ',.0f')} rows/s), peak "
                          f"{result['rss_mb']:.0f} MB", flush=True)
                else:
                    first_s, rate = rate_of(result)
                    row["hf"] = {"first_s": first_s, "rate": rate, "rss_mb": result["rss_mb"]}
                    print(f"HF datasets:          first batch at {fmt(first_s, '.1f')} s, "
                          f"peak {result['rss_mb']:.0f} MB, {fmt(rate, ',.0f')} ex/s",
                          flush=True)
        shutil.rmtree(cache / "prepared", ignore_errors=True)
        results[rows] = row
        (out / "scale.json").write_text(json.dumps(results, indent=1))
    (out / "scale.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0


def table(results: dict) -> str:
    """The markdown table of docs/data.md."""
    lines = ["| rows (CSV) | tfapp raw, first run: step 1 / peak RSS (prepare) | tfapp again "
             "| tfapp prepared | snapshot replay | tfapp input ex/s cold / replayed | "
             "tf.data streaming: 1st batch / RSS / ex/s | HF datasets: 1st batch / RSS / ex/s "
             "| prepare rows/s | HF load + tokenise rows/s |",
             "|" + "---|" * 10]
    def cell(r: dict, key: str) -> str:
        v = r.get(key)
        return f"{fmt(v.get('first_s'), '.1f')} s / {v['rss_mb'] / 1024:.2f} GB" if v else "-"

    for rows, r in results.items():
        first = r["raw_first"]
        plain, hf = r.get("plain"), r.get("hf")
        lines.append(
            f"| {int(rows):,} ({r['csv_mb']:,.0f} MB) | {cell(r, 'raw_first')} "
            f"({fmt(first.get('prepare_s'), '.1f')} s) | {cell(r, 'raw_again')} | "
            f"{cell(r, 'prepared')} | {cell(r, 'replay')} | "
            f"{fmt((r.get('input_cold') or {}).get('rate'), ',.0f')} / "
            f"{fmt((r.get('input_replayed') or {}).get('rate'), ',.0f')} | "
            + (f"{fmt(plain['first_s'], '.1f')} s / {plain['rss_mb'] / 1024:.2f} GB / "
               f"{fmt(plain['rate'], ',.0f')}" if plain else "-") + " | "
            + (f"{fmt(hf['first_s'], '.1f')} s / {hf['rss_mb'] / 1024:.2f} GB / "
               f"{fmt(hf['rate'], ',.0f')}" if hf else "-") + " | "
            + f"{fmt((r.get('prepare') or {}).get('rows_per_s'), ',.0f')} | "
            + f"{fmt((r.get('hf_map') or {}).get('rows_per_s'), ',.0f')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
