"""Print, per family in tests/fixtures/hf/, whether tfapp's converted preprocessor gives the
HF tokenizer's ids and the max |tfapp - PyTorch| of the encoder's outputs (no torch needed).

    PYTHONPATH=. python scripts/compare_hf_fixtures.py [family ...]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.hub.convert import convert_hf_bert

import numpy as np
import tensorflow as tf
import tensorflow_hub as hub

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hf"


def compare(family: str, tmp: Path) -> None:
    src = ROOT / family
    want = np.load(src / "expected.npz")
    meta = json.loads((src / "texts.json").read_text(encoding="utf-8"))
    length = meta["seq_length"]
    out = convert_hf_bert(src, tmp / family, seq_length=length)
    pre, enc = hub.load(str(out / "preprocessor")), hub.load(str(out / "encoder"))
    for key in ("texts", "pairs"):
        texts = meta[key]
        segments = ([pre.tokenize(tf.constant(texts))] if key == "texts" else
                    [pre.tokenize(tf.constant([a for a, _ in texts])),
                     pre.tokenize(tf.constant([b for _, b in texts]))])
        x = pre.bert_pack_inputs(segments, seq_length=tf.constant(length))
        same = bool((x["input_word_ids"].numpy() == want[f"{key}_input_ids"]).all())
        got = enc(x, training=False)
        diff = np.abs(got["sequence_output"].numpy() - want[f"{key}_last_hidden_state"])
        real = want[f"{key}_attention_mask"].astype(bool)
        line = (f"{family:18s} {key:5s} ids equal: {same}  max|diff| real tokens "
                f"{diff[real].max():.2e}, all positions {diff.max():.2e}")
        if f"{key}_pooled" in want:
            pooled = np.abs(got["pooled_output"].numpy() - want[f"{key}_pooled"]).max()
            line += f", pooled {pooled:.2e}"
        print(line)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        for name in sys.argv[1:] or sorted(p.name for p in ROOT.iterdir()):
            compare(name, Path(tmp))
