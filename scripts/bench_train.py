"""Fine-tuning throughput, compile time and MFU: tfapp against its peers, side by side.

Setup (once). The peers live ONLY in a separate benchmark venv, never in tfapp's deps::

    python3 -m venv /work/benchenv
    /work/benchenv/bin/pip install torch==2.13.0        # the CPU wheel on this disk
    /work/benchenv/bin/pip install transformers keras-hub "keras>=3" tensorflow==2.21.0

Run (from the repo root, with tfapp's own venv)::

    .venv/bin/python scripts/bench_train.py [--bench-python /work/benchenv/bin/python]
        [--steps 32] [--warmup-steps 2] [--threads 2] [--only tfapp,hf,keras_hub]
        [--precisions float32,bfloat16] [--json results.json]

The bench interpreter comes from ``--bench-python``, else ``$BENCH_PYTHON``, else
``/work/benchenv/bin/python``. Every system runs in its own subprocess: tfapp's with this
interpreter (tf-keras, ``TF_USE_LEGACY_KERAS=1``), the peers with the bench one (Keras
3 on its TensorFlow backend for keras-hub). Same shape for all (default: BERT with 4
layers, hidden 256, 4 heads, FFN 1024, vocab 30522, seq 128, batch 32, dropout 0.1,
AdamW), same generated data (random ids, random lengths from seq/2 to seq, random
binary labels), same thread count.

Measured per system and precision (float32; bfloat16 = tfapp/keras-hub
``mixed_bfloat16``, PyTorch ``torch.autocast("cpu", dtype=torch.bfloat16)``):

* tfapp: ``tfapp.models.classifier.build_classifier`` on a TF-Hub module tfapp exports
  (``tfapp.hub.export``), compiled as the driver compiles it (tfapp's AdamW + warm-up
  schedule, loss and metrics), ``jit_compile`` off/on x ``steps_per_execution`` 1/32.
  Under float32 the encoder is the Hub layer; under mixed_bfloat16 the classifier
  reads the module into the native encoder (a restored Hub graph stays float32).
  With jit_compile on in float32, the Hub layer recompiles the XLA step at every step
  (docs/hub.md), so that row runs one step only, and "tfapp native" rows show the same
  model through the native encoder (``build_classifier(..., encoder=...)``).
* hf: transformers ``BertForSequenceClassification``, a plain PyTorch loop.
* keras_hub: ``keras_hub.models.BertTextClassifier`` (no preprocessor), ``fit`` with
  ``jit_compile`` from ``--peer-jit`` (default off).

Throughput is examples/s over ``--steps`` steps (rounded up to a multiple of
steps_per_execution) after warm-up; "compile" is the first
execution's time less what the same steps take when warm (tracing, XLA compilation,
allocator warm-up). MFU = model FLOP/s over this machine's float32 matmul peak (a
large TensorFlow GEMM, measured before and after the runs, best taken), counting 6 x
non-embedding parameters x tokens plus 12 x layers x hidden x seq_length per token.
The machine may be shared: read the ratios (same run, same load) rather than the
absolute figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BENCH_PYTHON = "/work/benchenv/bin/python"
RESULT_PREFIX = "BENCH_RESULT "


# --------------------------------------------------------------------------- shape, FLOPs
def shape_from(args: argparse.Namespace) -> dict:
    return {"layers": args.layers, "hidden": args.hidden, "heads": args.heads,
            "intermediate": 4 * args.hidden, "vocab": args.vocab, "seq": args.seq,
            "batch": args.batch, "num_classes": 2, "max_positions": 512}


def non_embedding_params(s: dict) -> int:
    """Encoder layers + pooler + the classification head (what runs per token)."""
    h, i = s["hidden"], s["intermediate"]
    per_layer = 4 * (h * h + h) + 2 * 2 * h + (h * i + i) + (i * h + h)
    return s["layers"] * per_layer + (h * h + h) + (h * s["num_classes"] + s["num_classes"])


def train_flops_per_example(s: dict) -> float:
    """6 x non-embedding params x tokens + attention: 12 x layers x hidden x seq per token."""
    tokens = s["seq"]
    return (6 * non_embedding_params(s) * tokens
            + 12 * s["layers"] * s["hidden"] * s["seq"] * tokens)


def make_data(path: Path, s: dict, n: int, seed: int = 0) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    seq = s["seq"]
    lengths = rng.integers(seq // 2, seq + 1, size=n)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1000, s["vocab"], size=(n, seq)).astype(np.int32)
    ids[:, 0] = 101  # [CLS]
    ids = ids * mask
    types = np.zeros((n, seq), np.int32)
    labels = rng.integers(0, 2, size=n).astype(np.int32)
    np.savez(path, ids=ids, mask=mask, types=types, labels=labels)


def emit(result: dict) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def rounded_steps(steps: int, spe: int) -> int:
    return max(spe, -(-steps // spe) * spe)


# --------------------------------------------------------------------------- workers
def worker_peak(a: argparse.Namespace) -> None:
    """float32 (and bfloat16) GEMM peak in TensorFlow, GFLOP/s, with ``threads`` threads."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    n = a.gemm_size
    out = {"system": "peak", "threads": a.threads, "n": n}
    for dtype in ("float32", "bfloat16"):
        x = tf.random.normal((n, n), dtype=tf.float32)
        x = tf.cast(x, dtype)
        y = tf.cast(tf.random.normal((n, n)), dtype)
        matmul = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y)[:1, :1],
                                                                tf.float32)))
        matmul(x, y).numpy()
        best = float("inf")
        for _ in range(a.gemm_repeats):
            t = time.perf_counter()
            matmul(x, y).numpy()
            best = min(best, time.perf_counter() - t)
        out[f"{dtype}_gflops"] = 2 * n ** 3 / best / 1e9
    emit(out)


def _tf_data(a: argparse.Namespace, s: dict, keys: tuple[str, str, str]):
    import numpy as np
    import tensorflow as tf

    d = np.load(a.data)
    features = {keys[0]: d["ids"], keys[1]: d["mask"], keys[2]: d["types"]}
    ds = tf.data.Dataset.from_tensor_slices((features, d["labels"]))
    return ds.repeat().batch(s["batch"], drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def _time_fit(model, ds, spe: int, steps: int, warmup_steps: int, batch: int) -> dict:
    """First execution (compile), warm-up, then ``steps`` timed steps, via ``fit``."""
    t = time.perf_counter()
    model.fit(ds, epochs=1, steps_per_epoch=spe, verbose=0)
    first = time.perf_counter() - t
    # With steps_per_execution > 1 the first execution already ran spe warm steps.
    warm = warmup_steps if spe == 1 else 0
    if warm:
        model.fit(ds, epochs=1, steps_per_epoch=warm, verbose=0)
    steps = rounded_steps(steps, spe)
    ends = ExecutionEnds()
    t = time.perf_counter()
    history = model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[ends])
    # Timed to the end of the last step, not the return of fit: fit's teardown deletes
    # its tf.data iterator, and that deletion now and then blocks until tf.data's
    # autotune thread next wakes (its sleeps double from 10 ms, so fit returned exactly
    # 10.24 or 20.47 s after it started in several runs whatever the step time was).
    # It is a per-fit cost, not a per-step one; "teardown_s" reports it.
    elapsed = ends.times[-1] - t
    per_step = elapsed / steps
    return {"examples_per_s": steps * batch / elapsed, "step_s": per_step,
            "teardown_s": time.perf_counter() - ends.times[-1],
            "median_step_s": median_step(t, ends.times, spe),
            "compile_s": max(0.0, first - spe * per_step), "first_execution_s": first,
            "timed_steps": steps, "loss": float(history.history["loss"][-1])}


def median_step(start: float, ends: list[float], spe: int) -> float:
    """Median seconds per step over executions (each of ``spe`` steps). On this shared VM
    whole seconds are sometimes lost to other tenants; the median shrugs them off, the
    mean does not, so the report shows both."""
    import statistics

    marks = [start, *ends]
    return statistics.median(b - a for a, b in zip(marks, marks[1:], strict=False)) / spe


def ExecutionEnds():  # noqa: N802  (a tf.keras class, built after TensorFlow is imported)
    """Callback recording when each execution's results reach Python (the numpy logs of
    ``on_train_batch_end`` make Keras wait for the step)."""
    import tensorflow as tf

    class _Ends(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times: list[float] = []

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter())

    return _Ends()


def worker_tfapp(a: argparse.Namespace, s: dict) -> None:
    sys.path.insert(0, str(REPO))
    import tfapp  # noqa: F401  (tf-keras before TensorFlow)
    from tfapp.config import ModelConfig, OptimizerConfig
    from tfapp.hub.export import export_encoder, float32_policy
    from tfapp.models.bert import BertConfig, BertEncoder
    from tfapp.models.classifier import build_classifier
    from tfapp.models.hub_encoder import native_encoder_from_hub
    from tfapp.training.metrics import build_loss, build_metrics
    from tfapp.training.optimizers import build_optimizer

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    cfg = BertConfig(vocab_size=s["vocab"], hidden_size=s["hidden"], num_layers=s["layers"],
                     num_heads=s["heads"], intermediate_size=s["intermediate"],
                     max_position_embeddings=s["max_positions"])
    module = Path(a.workdir) / "tfapp_hub_encoder"
    if not module.exists():
        with float32_policy():
            export_encoder(BertEncoder(cfg, seed=0), module)
    tf.keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if a.precision == "bfloat16" else "float32")
    # encoder=auto is what tfapp does (Hub layer in float32, native under mixed precision);
    # native reads the module into tfapp's BertEncoder in float32 too (XLA compiles once).
    encoder = native_encoder_from_hub(str(module)) if a.encoder == "native" else None
    model = build_classifier(ModelConfig(kind="bert", pooling="pooled"), num_classes=2,
                             multi_label=False, seq_length=s["seq"], hub_handle=str(module),
                             encoder=encoder)
    encoder_name = type(model.get_layer("bert_encoder")).__name__
    optimizer = build_optimizer(OptimizerConfig(), peak=5e-5, total_steps=10_000)
    model.compile(optimizer=optimizer, loss=build_loss(2, False),
                  metrics=build_metrics(2, False), jit_compile=bool(a.jit),
                  steps_per_execution=a.spe)
    ds = _tf_data(a, s, ("input_word_ids", "input_mask", "input_type_ids"))
    ds = ds.map(lambda x, y: (x, tf.cast(y, tf.float32)[:, None]))
    out = _time_fit(model, ds, a.spe, a.steps, a.warmup_steps, s["batch"])
    emit({"system": "tfapp", "precision": a.precision, "jit": bool(a.jit), "spe": a.spe,
          "encoder": encoder_name, **out})


def worker_keras_hub(a: argparse.Namespace, s: dict) -> None:
    import keras
    import keras_hub
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if a.precision == "bfloat16" else "float32")
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=s["vocab"], num_layers=s["layers"], num_heads=s["heads"],
        hidden_dim=s["hidden"], intermediate_dim=s["intermediate"],
        max_sequence_length=s["max_positions"], dropout=0.1)
    model = keras_hub.models.BertTextClassifier(backbone=backbone, num_classes=2,
                                                preprocessor=None, dropout=0.1)
    model.compile(optimizer=keras.optimizers.AdamW(5e-5, weight_decay=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["sparse_categorical_accuracy"], jit_compile=bool(a.jit),
                  steps_per_execution=a.spe)
    ds = _tf_data(a, s, ("token_ids", "padding_mask", "segment_ids"))
    out = _time_fit(model, ds, a.spe, a.steps, a.warmup_steps, s["batch"])
    emit({"system": "keras_hub", "precision": a.precision, "jit": bool(a.jit), "spe": a.spe,
          "versions": f"keras {keras.__version__}, keras-hub {keras_hub.__version__}, "
                      f"tensorflow {tf.__version__}", **out})


def worker_hf(a: argparse.Namespace, s: dict) -> None:
    import contextlib

    import numpy as np
    import torch
    import transformers

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"], intermediate_size=s["intermediate"],
        max_position_embeddings=s["max_positions"], num_labels=2,
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    model = transformers.BertForSequenceClassification(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    d = np.load(a.data)
    n, b = len(d["labels"]), s["batch"]
    tensors = {k: torch.from_numpy(d[k].astype(np.int64)) for k in ("ids", "mask", "types")}
    labels = torch.from_numpy(d["labels"].astype(np.int64))

    def autocast():
        if a.precision == "bfloat16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    position = 0

    def step() -> float:
        nonlocal position
        if position + b > n:
            position = 0
        sl = slice(position, position + b)
        position += b
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            out = model(input_ids=tensors["ids"][sl], attention_mask=tensors["mask"][sl],
                        token_type_ids=tensors["types"][sl], labels=labels[sl])
        out.loss.backward()
        optimizer.step()
        return float(out.loss)

    t = time.perf_counter()
    step()
    first = time.perf_counter() - t
    for _ in range(a.warmup_steps):
        step()
    t = time.perf_counter()
    ends = []
    for _ in range(a.steps):
        loss = step()
        ends.append(time.perf_counter())
    elapsed = time.perf_counter() - t
    per_step = elapsed / a.steps
    emit({"system": "hf", "precision": a.precision, "jit": False, "spe": 1,
          "versions": f"torch {torch.__version__}, transformers {transformers.__version__}",
          "attn": getattr(model.config, "_attn_implementation", "?"),
          "examples_per_s": a.steps * b / elapsed, "step_s": per_step,
          "median_step_s": median_step(t, ends, 1),
          "compile_s": max(0.0, first - per_step), "first_execution_s": first,
          "timed_steps": a.steps, "loss": loss})


WORKERS = {"tfapp": worker_tfapp, "keras_hub": worker_keras_hub, "hf": worker_hf}


# --------------------------------------------------------------------------- orchestration
def run_worker(python: str, system: str, argv: list[str], env: dict, timeout: float
               ) -> dict | None:
    cmd = [python, str(Path(__file__).resolve()), "--worker", system, *argv]
    label = " ".join([system, *argv[argv.index("--precision"):]]) if "--precision" in argv \
        else system
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  {label}: timed out after {timeout:.0f} s", flush=True)
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
            result["wall_s"] = time.perf_counter() - t
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    print(f"  {label}: failed (exit {proc.returncode}): {' | '.join(tail)}", flush=True)
    return {"error": " | ".join(tail)}


def env_for(system: str, threads: int, onednn: int | None = None) -> dict:
    """Environment of one row. ``onednn`` (tfapp rows and the GEMM peak) sets
    ``TF_ENABLE_ONEDNN_OPTS``; peers keep TensorFlow's own default, as their users would."""
    env = dict(os.environ)
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": str(threads),
                "PYTHONHASHSEED": "0"})
    if onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = str(onednn)
    if system == "tfapp":
        env["TF_USE_LEGACY_KERAS"] = "1"
    else:
        env.pop("TF_USE_LEGACY_KERAS", None)  # keras-hub needs Keras 3
        env["KERAS_BACKEND"] = "tensorflow"
        env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def name_of(r: dict) -> str:
    if r["system"] == "tfapp":
        native = " native" if r.get("encoder_arg") == "native" else ""
        dnn = " onednn=off" if r.get("onednn") == 0 else ""
        return f"tfapp{native} jit={'on' if r['jit'] else 'off'} spe={r['spe']}{dnn}"
    if r["system"] == "keras_hub":
        return f"keras-hub jit={'on' if r['jit'] else 'off'} spe={r['spe']}"
    return "HF transformers + PyTorch"


def report(results: list[dict], peak: dict | None, s: dict) -> list[str]:
    flops = train_flops_per_example(s)
    f32_peak = peak.get("float32_gflops") if peak else None
    bf16_peak = peak.get("bfloat16_gflops") if peak else None
    lines = [f"shape: {s['layers']} layers, hidden {s['hidden']}, {s['heads']} heads, "
             f"seq {s['seq']}, batch {s['batch']}, vocab {s['vocab']}; "
             f"{non_embedding_params(s) / 1e6:.2f} M non-embedding params, "
             f"{flops / 1e9:.2f} GFLOP per training example"]
    if f32_peak:
        lines.append(f"matmul peak (TF GEMM {peak['n']}^2, {peak['threads']} threads, best "
                     f"of {peak.get('measured_gflops')}): float32 {f32_peak:.1f} GFLOP/s, "
                     f"bfloat16 {bf16_peak:.1f} GFLOP/s")
    header = (f"{'system':<39} {'precision':<9} {'ex/s':>7} {'step ms':>8} "
              f"{'p50 ms':>7} {'compile s':>9} {'MFU':>6}  notes")
    lines += ["", header, "-" * len(header)]
    ok = [r for r in results if "examples_per_s" in r]
    for r in results:
        if "examples_per_s" not in r:
            lines.append(f"{r.get('name', '?'):<39} {r.get('precision', ''):<9} "
                         f"{'failed':>7}  {r.get('error', '')[:80]}")
            continue
        mfu = r["examples_per_s"] * flops / (f32_peak * 1e9) if f32_peak else float("nan")
        r["mfu"] = mfu
        notes = []
        if r["system"] == "tfapp":
            notes.append(f"encoder={r['encoder']}")
        if r["precision"] == "bfloat16" and bf16_peak:
            notes.append(f"{r['examples_per_s'] * flops / (bf16_peak * 1e9):.1%} of bf16 peak")
        lines.append(f"{name_of(r):<39} {r['precision']:<9} {r['examples_per_s']:7.1f} "
                     f"{r['step_s'] * 1e3:8.0f} {r.get('median_step_s', 0) * 1e3:7.0f} "
                     f"{r['compile_s']:9.1f} {mfu:6.1%}  "
                     f"{', '.join(notes)}")
    lines += ["", "ratios tfapp / peer at equal precision (examples/s):"]
    for precision in sorted({r["precision"] for r in ok}):
        tf_rows = [r for r in ok if r["system"] == "tfapp" and r["precision"] == precision]
        peers = [r for r in ok if r["system"] != "tfapp" and r["precision"] == precision]
        for peer in peers:
            cells = "  ".join(f"{name_of(r).removeprefix('tfapp ')}: "
                              f"{r['examples_per_s'] / peer['examples_per_s']:.2f}x"
                              for r in tf_rows)
            lines.append(f"  {precision:<8} vs {name_of(peer):<26} {cells}")
            if all("median_step_s" in r for r in [*tf_rows, peer]):
                cells = "  ".join(f"{name_of(r).removeprefix('tfapp ')}: "
                                  f"{peer['median_step_s'] / r['median_step_s']:.2f}x"
                                  for r in tf_rows)
                lines.append(f"  {'':<8}    {'(median step times)':<26} {cells}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench-python", default=os.environ.get("BENCH_PYTHON",
                                                           DEFAULT_BENCH_PYTHON),
                   help="interpreter of the benchmark venv with torch, transformers, keras-hub")
    p.add_argument("--tfapp-python", default=sys.executable,
                   help="interpreter with tfapp installed (default: this one)")
    p.add_argument("--only", default="tfapp,hf,keras_hub",
                   help="comma list of systems: tfapp, hf, keras_hub")
    p.add_argument("--precisions", default="float32,bfloat16")
    p.add_argument("--jit", default="0,1", help="jit_compile values for tfapp")
    p.add_argument("--peer-jit", default="0", help="jit_compile values for keras-hub")
    p.add_argument("--spe", default="1,32", help="steps_per_execution values for tfapp")
    p.add_argument("--encoders", default="auto",
                   help="tfapp encoder rows without XLA: auto (what the classifier picks), "
                        "native (the module read into tfapp's BertEncoder), or both")
    p.add_argument("--onednn", default="1",
                   help="TF_ENABLE_ONEDNN_OPTS values for tfapp rows (tfapp turns oneDNN on "
                        "by default on x86; '0,1' measures both side by side)")
    p.add_argument("--steps", type=int, default=16, help="timed steps (rounded up to spe)")
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--examples", type=int, default=1024, help="generated examples")
    p.add_argument("--gemm-size", type=int, default=2048)
    p.add_argument("--gemm-repeats", type=int, default=5)
    p.add_argument("--timeout", type=float, default=1800, help="seconds per subprocess")
    p.add_argument("--json", default="", help="also write all results to this file")
    # internal: one measurement in this process
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    p.add_argument("--data", default="", help=argparse.SUPPRESS)
    p.add_argument("--workdir", default="", help=argparse.SUPPRESS)
    p.add_argument("--precision", default="float32", help=argparse.SUPPRESS)
    p.add_argument("--encoder", default="auto", help=argparse.SUPPRESS)
    p.add_argument("--jit-one", dest="jit_one", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--spe-one", dest="spe_one", type=int, default=1, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    s = shape_from(a)

    if a.worker:
        a.jit, a.spe = a.jit_one, a.spe_one
        if a.worker == "peak":
            worker_peak(a)
        else:
            WORKERS[a.worker](a, s)
        return 0

    systems = [x for x in a.only.split(",") if x]
    unknown = set(systems) - set(WORKERS)
    if unknown:
        p.error(f"--only: unknown systems {sorted(unknown)}; choose from {sorted(WORKERS)}")
    if set(systems) - {"tfapp"} and not Path(a.bench_python).exists():
        p.error(f"--bench-python {a.bench_python} does not exist; create the benchmark venv "
                "(see the top of this script) or pass --only tfapp")
    precisions = [x for x in a.precisions.split(",") if x]
    jits = [int(x) for x in a.jit.split(",") if x]
    peer_jits = [int(x) for x in a.peer_jit.split(",") if x]
    spes = [int(x) for x in a.spe.split(",") if x]
    onednns = [int(x) for x in a.onednn.split(",") if x]
    common = ["--steps", str(a.steps), "--warmup-steps", str(a.warmup_steps),
              "--threads", str(a.threads), "--layers", str(a.layers), "--hidden", str(a.hidden),
              "--heads", str(a.heads), "--seq", str(a.seq), "--batch", str(a.batch),
              "--vocab", str(a.vocab)]
    started = time.time()
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        data = Path(tmp) / "data.npz"
        make_data(data, s, a.examples)
        base = [*common, "--data", str(data), "--workdir", tmp]
        peak_args = [*base, "--gemm-size", str(a.gemm_size), "--gemm-repeats",
                     str(a.gemm_repeats)]
        print(f"matmul peak ({a.tfapp_python})", flush=True)
        # With oneDNN on and off: the machine's peak is the faster of the two GEMMs.
        peaks = [run_worker(a.tfapp_python, "peak", peak_args,
                            env_for("tfapp", a.threads, dnn), a.timeout) for dnn in (1, 0)]
        plan = []
        for precision in precisions:
            if "tfapp" in systems:
                for j in jits:
                    for spe in spes:
                        if j and precision == "float32":
                            # The Hub layer recompiles the XLA step at every step
                            # (docs/hub.md): one execution shows the cost; the native
                            # encoder rows show what XLA does for the same model.
                            if spe == spes[0]:
                                plan.append(("tfapp", precision, j, spe, "auto",
                                             ["--steps", "1", "--warmup-steps", "0"]))
                            plan.append(("tfapp", precision, j, spe, "native", []))
                        else:
                            plan += [("tfapp", precision, j, spe, enc, [])
                                     for enc in a.encoders.split(",") if enc]
            if "hf" in systems:
                plan.append(("hf", precision, 0, 1, "", []))
            if "keras_hub" in systems:
                plan += [("keras_hub", precision, j, 1, "", []) for j in peer_jits]
        # Each tfapp row once per --onednn value, next to each other.
        plan = [(*row, dnn) for row in plan
                for dnn in (onednns if row[0] == "tfapp" else [None])]
        for system, precision, jit, spe, encoder, extra, dnn in plan:
            python = a.tfapp_python if system == "tfapp" else a.bench_python
            dnn_note = "" if dnn is None else f" onednn={dnn}"
            print(f"{system} {precision} jit={jit} spe={spe} {encoder}{dnn_note}", flush=True)
            r = run_worker(python, system, [*base, "--precision", precision,
                                            "--jit-one", str(jit), "--spe-one", str(spe),
                                            "--encoder", encoder or "auto", *extra],
                           env_for(system, a.threads, dnn), a.timeout)
            r.update({"system": system, "precision": precision, "jit": bool(jit), "spe": spe,
                      "encoder_arg": encoder, "onednn": dnn})
            r.setdefault("name", f"{system} jit={jit} spe={spe}")
            results.append(r)
        # Again at the end: on a shared machine the best of both is nearer the real peak.
        print("matmul peak, again", flush=True)
        peaks += [run_worker(a.tfapp_python, "peak", peak_args,
                             env_for("tfapp", a.threads, dnn), a.timeout) for dnn in (1, 0)]
        peaks = [x for x in peaks if x and "error" not in x]
        peak = max(peaks, key=lambda x: x["float32_gflops"]) if peaks else None
        if peak:
            peak["measured_gflops"] = [round(x["float32_gflops"], 1) for x in peaks]
    lines = report(results, peak, s)
    print("\n" + "\n".join(lines))
    print(f"\n(total {time.time() - started:.0f} s; threads={a.threads}; the machine may be "
          "shared with other jobs: compare ratios from one run)")
    if a.json:
        Path(a.json).write_text(json.dumps({"shape": s, "peak": peak, "results": results,
                                            "flops_per_example": train_flops_per_example(s)},
                                           indent=1) + "\n")
    return 0 if all("examples_per_s" in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
