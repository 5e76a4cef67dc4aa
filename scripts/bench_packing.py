"""Masked-LM pretraining on real text: one text per padded sequence against packed
sequences (``mlm.pack``), in real tokens per second.

    python scripts/bench_packing.py --corpus corpus.txt [--hub builtin:tiny]
        [--seq-length 128] [--batch-size 32] [--steps 30] [--rounds 2] [--json out.json]

``--corpus``: one text per line (e.g. ``scripts/bench_generator_quality.py --make-corpus
debian``). For each mode the corpus's sequences are built with tfapp's own encoders
(``bert_preprocess`` padded, ``packing.pack_texts``) to count real tokens (``input_mask``)
and computed tokens (sequences x seq_length); then ``python -m tfapp.pretrain`` runs
``--steps`` steps in each mode, rounds alternating, and its training seconds (status.json's
``train_seconds``, start-up and export excluded) give sequences/s. Real tokens/s = sequences/s
x real tokens per sequence. Both modes compute the same ``[batch, seq_length]`` per step, so
the ratio is the padding efficiency's, unless packing costs input time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def efficiency(corpus: Path, hub: str, seq_length: int) -> dict[str, dict[str, float]]:
    sys.path.insert(0, str(REPO))
    import tfapp  # noqa: F401  (tf-keras first)
    from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn, read_bert_vocab
    from tfapp.data.text.packing import PACK_TEXTS, pack_texts
    from tfapp.tasks.mlm.task import hub_module_dir

    import numpy as np
    import tensorflow as tf

    root, preprocessor, meta = hub_module_dir(hub)
    vocab, _ = read_bert_vocab(root / meta.get("vocab_file", "vocab.txt"))
    index = {t: i for i, t in enumerate(vocab)}
    pre = make_bert_preprocess_fn(hub_preprocessor=str(preprocessor), seq_length=seq_length)
    texts = [t for t in corpus.read_text(encoding="utf-8").splitlines() if t.strip()]
    out = {}
    for mode in ("padded", "packed"):
        real = rows = 0
        for i in range(0, len(texts), PACK_TEXTS):
            chunk = tf.constant(texts[i:i + PACK_TEXTS])
            f = pack_texts(pre.module.tokenize, chunk, seq_length, index["[CLS]"],
                           index["[SEP]"]) if mode == "packed" else pre(chunk)
            mask = np.asarray(f["input_mask"])
            real += int(mask.sum())
            rows += mask.shape[0]
        out[mode] = {"texts": len(texts), "sequences": rows,
                     "real_tokens_per_sequence": real / rows,
                     "padding_efficiency": real / (rows * seq_length)}
    return out


def run(mode: str, a: argparse.Namespace, work: Path, r: int) -> float:
    out = work / f"{mode}-{r}"
    cmd = [sys.executable, "-m", "tfapp.pretrain", "--corpus", str(a.corpus), "--hub", a.hub,
           "--out", str(out / "module"), "--steps", str(a.steps), "--log-every", str(a.steps),
           "--batch-size", str(a.batch_size), "--seq-length", str(a.seq_length),
           f"mlm.pack={'true' if mode == 'packed' else 'false'}",
           f"output_dir={out / 'runs'}", "tracking.tensorboard=false",
           # No module exported: status.json's train_seconds would count its writing.
           "trainer.export=false"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"{mode}: pretrain failed:\n{proc.stderr[-3000:]}")
    status = next((out / "runs").glob("*/status.json"))
    return float(json.loads(status.read_text())["train_seconds"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--hub", default="builtin:tiny")
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    eff = efficiency(a.corpus, a.hub, a.seq_length)
    seconds: dict[str, list[float]] = {"padded": [], "packed": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for mode in (("padded", "packed") if r % 2 == 0 else ("packed", "padded")):
                seconds[mode].append(run(mode, a, Path(tmp), r))
    rows = {}
    print(f"| mode | sequences ({eff['padded']['texts']} texts) | padding efficiency | "
          "sequences/s (best) | real tokens/s (best) |")
    print("|---|---|---|---|---|")
    for mode in ("padded", "packed"):
        e = eff[mode]
        per_s = a.steps * a.batch_size / min(seconds[mode])
        rows[mode] = {**e, "seconds": seconds[mode], "sequences_per_s": per_s,
                      "real_tokens_per_s": per_s * e["real_tokens_per_sequence"]}
        print(f"| {mode} | {e['sequences']} | {e['padding_efficiency']:.2f} | {per_s:.1f} | "
              f"{rows[mode]['real_tokens_per_s']:.0f} |")
    ratio = rows["packed"]["real_tokens_per_s"] / rows["padded"]["real_tokens_per_s"]
    print(f"packed / padded, real tokens per second: {ratio:.2f}x")
    if a.json:
        a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()},
                                      "rows": rows, "ratio": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
