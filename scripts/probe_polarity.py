"""Do a BERT module's word embeddings separate the demo data's positive from its negative
adjectives? The probe docs/hub.md uses to judge masked-LM adaptation on the demo reviews.

    python scripts/probe_polarity.py builtin:tiny hub/tiny-adapted [more handles ...]

Per module: the mean cosine of the input word embeddings of the positive and negative
sentiment words of ``scripts/make_demo_data.py`` (its one-word entries that are one
vocabulary entry of the module: the table's n) within a polarity (pairs of two different
words of the same polarity) and across (positive x negative), and the leave-one-out
nearest-centroid polarity accuracy of those words (0.5 is chance). An encoder that learned
polarity has within > across and an accuracy near 1. (docs/hub.md's table was measured
when the demo data had 14 + 14 adjectives.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_demo_data import NEGATIVE, POSITIVE  # noqa: E402


def word_embeddings(handle: str) -> tuple[np.ndarray, dict[str, int]]:
    """(word-embedding matrix, vocabulary -> row) of a tfapp module or builtin handle."""
    import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
    from tfapp.hub.handles import resolve_hub_handle

    import tensorflow as tf

    encoder, _ = resolve_hub_handle(handle)
    vocab_file = Path(encoder) / "assets" / "vocab.txt"
    vocab = {w: i for i, w in enumerate(vocab_file.read_text(encoding="utf-8").splitlines())}
    reader = tf.train.load_checkpoint(str(Path(encoder) / "variables" / "variables"))
    # The word embeddings are the one matrix with a row per vocabulary entry (position and
    # type embeddings and the layers' kernels have other first dimensions).
    shapes = reader.get_variable_to_shape_map()
    names = [n for n, s in shapes.items() if len(s) == 2 and s[0] == len(vocab)]
    if len(names) != 1:
        raise SystemExit(f"{handle}: cannot tell the word embeddings apart ({names})")
    return reader.get_tensor(names[0]), vocab


def polarity_words(vocab: dict[str, int]) -> tuple[list[str], list[str]]:
    """The POSITIVE and NEGATIVE entries that are one word and one entry of ``vocab``."""
    def known(words: list[str]) -> list[str]:
        return list(dict.fromkeys(w for w in words if " " not in w and w in vocab))
    positive, negative = known(POSITIVE), known(NEGATIVE)
    if len(positive) < 2 or len(negative) < 2:
        raise SystemExit("fewer than 2 positive or negative demo words are vocabulary "
                         "entries of this module")
    return positive, negative


def polarity_probe(emb: np.ndarray, vocab: dict[str, int]) -> tuple[float, float, float, int]:
    """(mean within-polarity cosine, mean across-polarity cosine, leave-one-out
    nearest-centroid accuracy, number of words) of the polarity words in ``vocab``."""
    positive, negative = polarity_words(vocab)
    x = emb[[vocab[w] for w in positive + negative]].astype(np.float64)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    pos = np.arange(len(x)) < len(positive)
    cos = x @ x.T
    same = pos[:, None] == pos[None, :]
    off_diag = ~np.eye(len(x), dtype=bool)
    within = cos[same & off_diag].mean()
    across = cos[~same].mean()
    correct = 0
    for i in range(len(x)):
        keep = np.arange(len(x)) != i
        c_pos = x[keep & pos].mean(0)
        c_neg = x[keep & ~pos].mean(0)
        correct += (x[i] @ c_pos / np.linalg.norm(c_pos) >
                    x[i] @ c_neg / np.linalg.norm(c_neg)) == pos[i]
    return float(within), float(across), correct / len(x), len(x)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("handles", nargs="+", help="builtin:tiny or module directories")
    args = p.parse_args(argv)
    print("| module | n | within-polarity cosine | across | within - across | "
          "leave-one-out polarity accuracy |")
    print("|---|---|---|---|---|---|")
    for handle in args.handles:
        within, across, acc, n = polarity_probe(*word_embeddings(handle))
        print(f"| {handle} | {n} | {within:.3f} | {across:.3f} | {within - across:+.3f} | "
              f"{acc:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
