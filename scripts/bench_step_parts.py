"""Where a fine-tuning step's time goes as the batch gets shorter: the forward and
backward pass (which scale with the padded length) against the optimizer's update (which
does not), for a randomly initialised BERT of a given shape.

    python scripts/bench_step_parts.py [--shape minilm|bert-base] [--lengths 16,32,64,128]
        [--batch 32] [--reps 5] [--threads 2] [--precision float32|bfloat16]

For each length it times, in one process, ``reps`` calls (after one warm-up) of:

* ``gradients``: the loss and its gradients (``tf.GradientTape``), compiled as one
  ``tf.function``;
* ``update``: ``optimizer.apply_gradients`` alone, with those gradients (tfapp's AdamW,
  global clipnorm 1.0, as a run builds it);
* ``step``: both in one ``tf.function``, as ``fit`` runs a step.

It prints the median seconds of each and the share of the step the update takes: the
per-step cost that length buckets cannot remove (docs/data.md, "Length buckets").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = {"minilm": (6, 384, 12), "bert-base": (12, 768, 12), "toy": (2, 64, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="minilm", choices=sorted(SHAPES))
    p.add_argument("--lengths", default="16,32,64,128")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--vocab", type=int, default=30522)
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    import tfapp  # noqa: F401  (tf-keras before TensorFlow)
    from tfapp.config import ClassifierModelConfig, OptimizerConfig
    from tfapp.hub.export import export_encoder, float32_policy
    from tfapp.models.bert import BertConfig, BertEncoder
    from tfapp.models.classifier import build_classifier
    from tfapp.training.metrics import build_loss
    from tfapp.training.optimizers import build_optimizer

    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    layers, hidden, heads = SHAPES[args.shape]
    lengths = [int(n) for n in args.lengths.split(",")]
    cfg = BertConfig(vocab_size=args.vocab, hidden_size=hidden, num_layers=layers,
                     num_heads=heads, intermediate_size=4 * hidden,
                     max_position_embeddings=512)
    with tempfile.TemporaryDirectory() as work:
        module = Path(work) / "encoder"
        with float32_policy():
            export_encoder(BertEncoder(cfg, seed=0), module)
        tf.keras.mixed_precision.set_global_policy(
            "mixed_bfloat16" if args.precision == "bfloat16" else "float32")
        model = build_classifier(ClassifierModelConfig(kind="bert", pooling="pooled"),
                                 num_classes=8, multi_label=False, seq_length=max(lengths),
                                 hub_handle=str(module))
        optimizer = build_optimizer(OptimizerConfig(), peak=5e-5, total_steps=10_000)
        loss_fn = build_loss(8, False)
        variables = model.trainable_variables

        @tf.function(reduce_retracing=True)
        def gradients(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            return tape.gradient(loss, variables)

        @tf.function
        def update(grads):
            optimizer.apply_gradients(zip(grads, variables, strict=True))

        @tf.function(reduce_retracing=True)
        def step(x, y):
            update(gradients(x, y))

        def timed(fn, *a) -> float:
            fn(*a)  # warm-up (tracing)
            seconds = []
            for _ in range(args.reps):
                start = time.perf_counter()
                out = fn(*a)
                if out is not None:
                    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t,
                                          out[0])
                else:
                    variables[0].numpy()
                seconds.append(time.perf_counter() - start)
            return statistics.median(seconds)

        params = sum(int(np.prod(v.shape)) for v in variables)
        print(f"{args.shape} ({params / 1e6:.1f}M trainable parameters, vocabulary "
              f"{args.vocab}), batch {args.batch}, {args.precision}, {args.threads} threads; "
              f"median of {args.reps} calls, seconds")
        print("| length | gradients | update | step | update / step |")
        print("|---|---|---|---|---|")
        rng = np.random.default_rng(0)
        for n in lengths:
            x = {"input_word_ids": tf.constant(rng.integers(5, args.vocab, [args.batch, n]),
                                               tf.int32),
                 "input_mask": tf.ones([args.batch, n], tf.int32),
                 "input_type_ids": tf.zeros([args.batch, n], tf.int32)}
            y = tf.constant(rng.integers(0, 8, [args.batch]), tf.int32)
            g = gradients(x, y)
            t_grad, t_update, t_step = timed(gradients, x, y), timed(update, g), timed(step, x, y)
            print(f"| {n} | {t_grad:.3f} | {t_update:.3f} | {t_step:.3f} | "
                  f"{t_update / t_step:.0%} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
