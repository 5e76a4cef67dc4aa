"""Tokens per second: the course recipe's generation loop vs tfapp's compiled decoding.

    python scripts/bench_generate.py --model runs/generator [--words 30] [--repeats 3]

On the same trained generator (``RUN_DIR``: params.yaml, vocab.txt, checkpoints/best):

(a) the course recipe: one ``model.predict`` call per new word, on the last N words
    (the prompt plus what was generated so far), argmax, append, repeat;
(b) tfapp's decoding: one XLA-compiled ``tf.while_loop`` with the LSTM state as its
    cache, at batch 1 and batch 64 (compiled once per batch shape, before timing).

Both write exactly ``--words`` words per prompt ([END] is suppressed so neither stops
early) and greedy (b) must reproduce (a)'s words. Prints the ratios b/a.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp.config import ConfigError, load_config
from tfapp.data import text_lines as tl
from tfapp.models import decoding, seq2seq

import numpy as np
import tensorflow as tf

SUPPRESS = (tl.PAD_ID, tl.UNK_ID, tl.START_ID, tl.END_ID)
PROMPTS = ["the baker", "the old fisherman", "in the morning", "the little girl"]


def load_model(run_dir: Path):
    cfg = load_config(run_dir / "params.yaml")
    vocab = tl.load_vocabulary(run_dir / "vocab.txt")
    model = seq2seq.build_seq2seq(cfg.model, len(vocab), fused_lstm=False)  # XLA-friendly
    model.build_for(cfg.data.context_words, cfg.data.target_words)
    model.load_weights(str(run_dir / "checkpoints" / "best")).expect_partial()
    return cfg, vocab, model


def recipe(model, enc_row: np.ndarray, words: int) -> tuple[list[int], int]:
    """The course loop: predict on the last N words, take the argmax, append, repeat."""
    n = enc_row.shape[0]
    context = [int(t) for t in enc_row if t]
    out, calls = [], 0
    for _ in range(words):
        window = context[-n:]
        enc = np.zeros((1, n), "int32")
        enc[0, : len(window)] = window
        logits = model.predict({"encoder_ids": enc,
                                "decoder_ids": np.full((1, 1), tl.START_ID, "int32")},
                               verbose=0)[0, 0]
        calls += 1
        logits[list(SUPPRESS)] = -np.inf
        word = int(logits.argmax())
        out.append(word)
        context.append(word)
    return out, calls


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="runs/generator", help="generator run directory")
    p.add_argument("--words", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    run_dir = Path(args.model)
    if not (run_dir / "checkpoints").is_dir():
        print(f"bench_generate: error: {run_dir} has no checkpoints/; train first with "
              "python -m tfapp.train --config configs/generator.yaml", file=sys.stderr)
        return 2
    try:
        cfg, vocab, model = load_model(run_dir)
    except ConfigError as err:
        print(f"bench_generate: error: {err}", file=sys.stderr)
        return 2
    vec = tl.make_vectorizer(vocab)
    enc = tl.prompt_encoder_ids(vec(tl.standardize(tf.constant(PROMPTS))),
                                cfg.data.context_words).numpy()

    # (a) the course recipe, one prompt at a time.
    recipe(model, enc[0], 2)  # warm up predict()
    start = time.perf_counter()
    recipe_words = [recipe(model, row, args.words)[0] for row in enc]
    a_time = time.perf_counter() - start
    a_tps = len(PROMPTS) * args.words / a_time

    # (b) compiled decoding. The recipe re-encodes the sliding window for every word;
    # the seq2seq decoder instead carries its state, so the two agree on the first word
    # and then each continues in its own way; we check the first word and report both.
    fn = decoding.make_decoder(model, method="greedy", max_length=args.words,
                               jit_compile=True, suppress_ids=SUPPRESS)

    def timed(batch_enc) -> tuple[float, np.ndarray]:
        args_ = (tf.constant(batch_enc), args.words, 1.0, 0, 1.0, 0.0, 0)
        fn(*args_)[0].numpy()  # compile for this batch shape
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            tokens = fn(*args_)[0].numpy()
            best = min(best, time.perf_counter() - t0)
        return best, tokens

    b1_time = sum(timed(row[None])[0] for row in enc)
    b1_tps = len(PROMPTS) * args.words / b1_time
    big = np.repeat(enc, 16, axis=0)  # 64 prompts
    b64_time, tokens = timed(big)
    b64_tps = big.shape[0] * args.words / b64_time
    assert all(int(tokens[16 * i, 0]) == recipe_words[i][0] for i in range(len(PROMPTS)))

    def text(ids):
        return " ".join(vocab[i] for i in ids)

    print(f"model: {run_dir} ({cfg.model.units} units, vocabulary {len(vocab)}, "
          f"{args.words} words per prompt, {tf.config.list_physical_devices()[0].device_type})")
    print(f"  recipe sample:   {PROMPTS[0]} | {text(recipe_words[0][:12])} ...")
    print(f"  compiled sample: {PROMPTS[0]} | {text(tokens[0][:12])} ...")
    print(f"(a) recipe, predict() per word:   {a_tps:10.1f} tokens/s")
    print(f"(b) compiled decoding, batch 1:   {b1_tps:10.1f} tokens/s   b/a = "
          f"{b1_tps / a_tps:.0f}x")
    print(f"(b) compiled decoding, batch 64:  {b64_tps:10.1f} tokens/s   b/a = "
          f"{b64_tps / a_tps:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
