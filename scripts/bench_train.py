"""Fine-tuning examples/s: tfapp against Hugging Face + PyTorch and keras-hub, at real shapes.

    python scripts/bench_train.py --peers-python .venv-peers/bin/python
        [--shapes toy,minilm,bert-base] [--precisions float32,bfloat16] [--steps 10]
        [--rounds 3] [--warmup 1] [--threads 2] [--json train.json]
        [--steps-per-execution 1,auto,4,16]

Shapes (``name`` or ``name:batch`` to change the batch of that shape; default batch 32,
seq 128, vocab 30522, FFN 4 x hidden, dropout 0.1, AdamW, 2 labels):

* ``toy``: 4 layers, hidden 256, 4 heads (the shape of the earlier notes);
* ``minilm``: MiniLM-L6 (6 layers, hidden 384, 12 heads);
* ``bert-base``: 12 layers, hidden 768, 12 heads.

Rows of one table (one shape, one precision), each in its own process with the same
generated data (random ids, random lengths from seq/2 to seq, random labels), the same
thread count, the same warm-up (``--warmup`` repetitions) and ``--rounds`` timed
repetitions of ``--steps`` steps, alternating (``scripts/bench_common.py``):

* **tfapp**: ``build_classifier`` on a TF-Hub module tfapp exported (``tfapp.hub.export``),
  compiled as the driver compiles it (tfapp's AdamW with warm-up, loss, metrics),
  ``model.fit``. float32 runs the Hub layer; ``mixed_bfloat16`` reads the module into the
  native encoder (what ``build_classifier`` picks). tfapp turns oneDNN on by default.
* **HF + PyTorch** (peers' venv): transformers ``BertForSequenceClassification`` (SDPA
  attention), a plain PyTorch loop; bfloat16 = ``torch.autocast("cpu", torch.bfloat16)``.
  Once as installed, once with ``OMP_WAIT_POLICY=PASSIVE`` (on a shared machine PyTorch's
  spinning OpenMP threads lose their partner's core; ratios use the faster HF row).
* **keras-hub** (peers' venv, Keras 3 on TensorFlow): ``BertTextClassifier``, ``fit``,
  TensorFlow's own oneDNN default (on only on CPUs with AVX512-VNNI/BF16 or AMX), and
  **keras-hub oneDNN on** (``TF_ENABLE_ONEDNN_OPTS=1``, as tfapp runs).

fit rows are timed to the end of their last step (a callback), not to fit's return:
deleting fit's tf.data iterator sometimes blocks until tf.data's autotune thread wakes
(docs/performance.md). The table gives median examples/s and range over the rounds,
compile time (first repetition less the median), GFLOP/s (6 x non-embedding parameters
x tokens + 12 x layers x hidden x seq per token, per example) and the ratio to the faster
HF row. ``--rows`` picks rows (tfapp, hf, hf-passive, keras_hub, keras_hub-onednn).
``--steps-per-execution`` gives the tfapp row once per value (``auto``: what
``trainer.steps_per_execution`` null picks on this device, ``runtime.default_steps_per_execution``),
in the same alternation; ``--steps`` should be a multiple of each value.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))

import bench_common as bc  # noqa: E402

SHAPES = {"toy": (4, 256, 4), "minilm": (6, 384, 12), "bert-base": (12, 768, 12)}


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


# --------------------------------------------------------------------------- workers
def _tf_data(a: argparse.Namespace, s: dict, keys: tuple[str, str, str]):
    import numpy as np
    import tensorflow as tf

    d = np.load(a.data)
    features = {keys[0]: d["ids"], keys[1]: d["mask"], keys[2]: d["types"]}
    ds = tf.data.Dataset.from_tensor_slices((features, d["labels"]))
    return ds.repeat().batch(s["batch"], drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def ExecutionEnds():  # noqa: N802  (a Keras class, built after Keras is imported)
    """Callback recording when each step's results reach Python (``on_train_batch_end``
    makes Keras wait for the step). Works for tf-keras and Keras 3 alike."""
    import importlib

    keras = importlib.import_module("tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS")
                                    else "keras")

    class _Ends(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times: list[float] = []

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter())

    return _Ends()


def fit_rep(model, ds, steps: int, batch: int):
    """A repetition: ``steps`` steps of ``fit``, timed to the end of the last step."""
    def rep() -> dict:
        ends = ExecutionEnds()
        start = time.perf_counter()
        history = model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[ends])
        return {"seconds": ends.times[-1] - start, "units": steps * batch,
                "loss": float(history.history["loss"][-1])}
    return rep


def _spe(value: str) -> int:
    """--spe: a number, or auto (tfapp's default on this machine's device kind: CPU)."""
    if value != "auto":
        return int(value)
    from tfapp.runtime import default_steps_per_execution

    return default_steps_per_execution("CPU")


def worker_tfapp(a: argparse.Namespace, s: dict):
    sys.path.insert(0, str(REPO))
    import tfapp  # noqa: F401  (tf-keras before TensorFlow)
    from tfapp.config import ClassifierModelConfig, OptimizerConfig
    from tfapp.hub.export import export_encoder, float32_policy
    from tfapp.models.bert import BertConfig, BertEncoder
    from tfapp.models.classifier import build_classifier
    from tfapp.training.metrics import build_loss, build_metrics
    from tfapp.training.optimizers import build_optimizer

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    cfg = BertConfig(vocab_size=s["vocab"], hidden_size=s["hidden"], num_layers=s["layers"],
                     num_heads=s["heads"], intermediate_size=s["intermediate"],
                     max_position_embeddings=s["max_positions"])
    module = Path(a.workdir) / f"tfapp_hub_encoder_{s['layers']}x{s['hidden']}"
    if not module.exists():
        with float32_policy():
            export_encoder(BertEncoder(cfg, seed=0), module)
    tf.keras.mixed_precision.set_global_policy(
        {"bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}.get(a.precision, "float32"))
    model = build_classifier(ClassifierModelConfig(kind="bert", pooling="pooled"), num_classes=2,
                             multi_label=False, seq_length=s["seq"], hub_handle=str(module))
    optimizer = build_optimizer(OptimizerConfig(), peak=5e-5, total_steps=10_000)
    # --jit-compile: the accelerator check's rows
    # (scripts/check_accelerator.py); left out, Keras's defaults as before.
    xla = {} if not a.jit_compile else {"jit_compile": a.jit_compile == "on"}
    model.compile(optimizer=optimizer, loss=build_loss(2, False),
                  metrics=build_metrics(2, False), steps_per_execution=_spe(a.spe), **xla)
    ds = _tf_data(a, s, ("input_word_ids", "input_mask", "input_type_ids"))
    ds = ds.map(lambda x, y: (x, tf.cast(y, tf.float32)[:, None]))
    info = {"encoder": type(model.get_layer("bert_encoder")).__name__,
            "versions": f"tensorflow {tf.__version__}"}
    return info, fit_rep(model, ds, a.steps, s["batch"])


def worker_keras_hub(a: argparse.Namespace, s: dict):
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
                  metrics=["sparse_categorical_accuracy"], jit_compile=False)
    ds = _tf_data(a, s, ("token_ids", "padding_mask", "segment_ids"))
    info = {"versions": f"keras {keras.__version__}, keras-hub {keras_hub.__version__}, "
                        f"tensorflow {tf.__version__}"}
    return info, fit_rep(model, ds, a.steps, s["batch"])


def worker_hf(a: argparse.Namespace, s: dict):
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
    position = 0

    def autocast():
        if a.precision == "bfloat16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

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
        return out.loss.detach().item()  # waits for the step, as fit's callback does

    def rep() -> dict:
        start = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        return {"seconds": time.perf_counter() - start, "units": a.steps * b, "loss": loss}

    info = {"versions": f"torch {torch.__version__}, transformers {transformers.__version__}",
            "attn": getattr(model.config, "_attn_implementation", "?")}
    return info, rep


WORKERS = {"tfapp": worker_tfapp, "keras_hub": worker_keras_hub, "hf": worker_hf}


def profile_worker(a: argparse.Namespace) -> None:
    """Set up, one warm repetition, then one repetition under the framework's profiler;
    the op table (self time) goes to ``--profile-dir``."""
    _, rep = WORKERS[a.worker](a, shape_from(a))
    rep()
    out = Path(a.profile_dir)
    name = f"{a.worker}-{a.layers}x{a.hidden}-b{a.batch}-{a.precision}"
    if a.worker == "hf":
        import torch

        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            r = rep()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    else:
        import tensorflow as tf

        sys.path.insert(0, str(REPO))
        from tfapp.tracking.profiler import find_sessions, format_summary, summarize

        logdir = out / name
        tf.profiler.experimental.start(str(logdir))
        r = rep()
        tf.profiler.experimental.stop()
        table = format_summary(summarize(find_sessions(logdir)[-1], top=25))
    text = f"{name}: {r['units'] / r['seconds']:.1f} ex/s while profiled\n{table}\n"
    (out / f"{name}.txt").write_text(text)
    print(text, flush=True)
HF = "HF transformers + PyTorch"
HF_PASSIVE = "HF + PyTorch, OMP_WAIT_POLICY=PASSIVE"


ROWS = {  # --rows key -> (row name, worker, interpreter, extra environment)
    "tfapp": ("tfapp", "tfapp", "tfapp", {"TF_USE_LEGACY_KERAS": "1"}),
    "hf": (HF, "hf", "peers", {}),
    # PyTorch's OpenMP threads spin while they wait; on a machine shared with other jobs a
    # spinning thread takes the core its partner needs (measured here: 2-5 s instead of
    # 0.7-1 s per toy step at batch 8). Passive waiting is the peer at its best there.
    "hf-passive": (HF_PASSIVE, "hf", "peers", {"OMP_WAIT_POLICY": "PASSIVE"}),
    "keras_hub": ("keras-hub (TF default oneDNN)", "keras_hub", "peers",
                  {"TF_ENABLE_ONEDNN_OPTS": None}),
    "keras_hub-onednn": ("keras-hub oneDNN on", "keras_hub", "peers",
                         {"TF_ENABLE_ONEDNN_OPTS": "1"}),
}


def rows_for(a: argparse.Namespace, s: dict, precision: str, base: list[str]) -> list[bc.Row]:
    """The rows named in ``--rows``, each with its interpreter and environment."""
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": str(a.threads),
           "PYTHONHASHSEED": "0"}
    peer_env = {**env, "KERAS_BACKEND": "tensorflow", "HF_HUB_OFFLINE": "1",
                "TF_USE_LEGACY_KERAS": None}  # keras-hub needs Keras 3
    argv = [*base, "--precision", precision, "--batch", str(s["batch"])]
    rows = []
    spes = [v.strip() for v in a.steps_per_execution.split(",") if v.strip()]
    for key in filter(None, a.rows.split(",")):
        name, system, where, extra = ROWS[key]
        if where == "peers" and not a.peers_python:
            continue
        python = a.peers_python if where == "peers" else sys.executable
        row_env = {**(peer_env if where == "peers" else env), **extra}
        for spe in spes if system == "tfapp" else ["1"]:
            shown = f"{name} spe={spe}" if spes != ["1"] and system == "tfapp" else name
            rows.append(bc.Row(shown, [python, __file__, "--worker", system, *argv,
                                       "--spe", spe], row_env))
    return rows


def parse_shapes(text: str, batch: int) -> list[tuple[str, int]]:
    out = []
    for item in filter(None, text.split(",")):
        name, _, b = item.partition(":")
        if name not in SHAPES:
            raise SystemExit(f"bench_train: error: unknown shape {name!r}; "
                             f"choose from {', '.join(SHAPES)}")
        out.append((name, int(b) if b else batch))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peers-python", default=os.environ.get("BENCH_PEERS_PYTHON", ""),
                   help="interpreter of the peers' venv (scripts/bench_all.py builds it); "
                        "empty: the tfapp rows only")
    p.add_argument("--rows", default="tfapp,hf,hf-passive,keras_hub,keras_hub-onednn",
                   help="comma list of tfapp, hf, hf-passive, keras_hub, keras_hub-onednn")
    p.add_argument("--shapes", default="toy,minilm,bert-base",
                   help="comma list of toy, minilm, bert-base; name:batch sets its batch")
    p.add_argument("--precisions", default="float32,bfloat16")
    p.add_argument("--steps", type=int, default=10, help="timed steps per repetition")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed repetitions per row")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--examples", type=int, default=1024, help="generated examples")
    p.add_argument("--work-dir", default="")
    p.add_argument("--json", default="", help="also write all results to this file")
    p.add_argument("--steps-per-execution", default="1",
                   help="comma list of the tfapp row's steps_per_execution (numbers, auto): "
                        "one tfapp row per value")
    p.add_argument("--profile-dir", default="",
                   help="instead of timing: profile one repetition of each --rows row "
                        "(TensorFlow profiler op table / torch.profiler table) into this dir")
    # internal: one row's worker
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    p.add_argument("--data", default="", help=argparse.SUPPRESS)
    p.add_argument("--workdir", default="", help=argparse.SUPPRESS)
    p.add_argument("--precision", default="float32", help=argparse.SUPPRESS)
    p.add_argument("--spe", default="1", help=argparse.SUPPRESS)
    p.add_argument("--layers", type=int, default=4, help=argparse.SUPPRESS)
    p.add_argument("--hidden", type=int, default=256, help=argparse.SUPPRESS)
    p.add_argument("--heads", type=int, default=4, help=argparse.SUPPRESS)
    p.add_argument("--jit-compile", default="", choices=["", "on", "off"],
                   help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.worker and a.profile_dir:
        profile_worker(a)
        return 0
    if a.worker:
        bc.serve(lambda: WORKERS[a.worker](a, shape_from(a)))
        return 0

    work = Path(a.work_dir or tempfile.mkdtemp(prefix="tfapp-bench-train-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"{a.warmup} warm-up + {a.rounds} timed repetitions of {a.steps} steps per row, "
          f"rows alternating; {a.threads} threads", flush=True)
    out, tables = [], []
    for shape_name, batch in parse_shapes(a.shapes, a.batch):
        layers, hidden, heads = SHAPES[shape_name]
        a.layers, a.hidden, a.heads = layers, hidden, heads
        s = {**shape_from(a), "batch": batch}
        data = work / f"data-{shape_name}.npz"
        make_data(data, s, max(a.examples, 4 * batch))
        base = ["--layers", str(layers), "--hidden", str(hidden), "--heads", str(heads),
                "--seq", str(a.seq), "--vocab", str(a.vocab), "--steps", str(a.steps),
                "--threads", str(a.threads), "--data", str(data), "--workdir", str(work)]
        flops = train_flops_per_example(s)
        for precision in filter(None, a.precisions.split(",")):
            title = (f"training, {shape_name} ({layers} layers, hidden {hidden}, seq {a.seq}, "
                     f"batch {batch}), {precision}, examples/s")
            print(f"\n[{title}]", flush=True)
            if a.profile_dir:  # one row after the other, each alone in its process
                Path(a.profile_dir).mkdir(parents=True, exist_ok=True)
                for row in rows_for(a, s, precision, base):
                    env = {**os.environ, **row.env}
                    subprocess.run([*row.cmd, "--profile-dir", a.profile_dir], check=False,
                                   env={k: v for k, v in env.items() if v is not None})
                continue
            rows = bc.alternate(rows_for(a, s, precision, base), rounds=a.rounds,
                                warmup=a.warmup,
                                log_dir=work / f"logs-{shape_name}-{precision}")
            # Ratios against the faster HF row: the peer at its best on this machine.
            hf = [x for x in map(bc.summary, rows) if x["name"] in (HF, HF_PASSIVE)]
            peer = max((x for x in hf if "median" in x), key=lambda x: x["median"],
                       default={"name": None})["name"]
            lines, sums = bc.table(title, rows, "ex/s", peer,
                                   extra=lambda r, f=flops: f"{r['median'] * f / 1e9:6.1f} GFLOP/s")
            out += ["", *lines]
            tables.append({"shape": shape_name, "batch": batch, "precision": precision,
                           "flops_per_example": flops, "rows": sums, "peer": peer,
                           "tfapp/HF": bc.ratio(sums, "tfapp", peer or "")})
    print("\n".join(out))
    print("\nratio of medians tfapp / the faster HF + PyTorch row (target: >= 1.1x in "
          "float32 at every shape)")
    for t in tables:
        value = t["tfapp/HF"]
        print(f"  {t['shape']:<10} batch {t['batch']:<3} {t['precision']:<9} "
              + (f"{value:.2f}x" if value else "n/a"))
    bc.write_json(a.json, {"benchmark": "train", "args": vars(a), "tables": tables})
    return 0 if all("median" in r for t in tables for r in t["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
