"""Fine-tuning examples/s on real text with its real lengths: tfapp with fixed padding and
with length buckets, against Hugging Face's Trainer with dynamic padding, with and without
grouping by length.

    python scripts/bench_lengths.py --peers-python .venv-peers/bin/python
        [--shapes minilm,bert-base] [--precisions float32,bfloat16] [--steps 8]
        [--rounds 2] [--threads 2] [--rows-of-text 4096] [--json lengths.json]

The text: the docstrings of Python's own standard library (every module, class and
function of the interpreter that runs this, no network; ``apt-cache dumpavail`` was
tried, but without the Translation files it holds only one-line descriptions), each
labelled by its top-level package (the 8 with the most), in file order (so labels come
in runs, as real files do). A WordPiece vocabulary of up to 30,522 pieces is learnt from
all the docstrings (``tokenizers``, in the peers' venv), and both sides read it (tfapp:
tensorflow-text's FastBertTokenizer; HF: BertTokenizerFast).

Rows, each in its own warm process, the same ``--steps`` optimizer steps of ``--batch`` (32) at
``seq_length`` 128 per repetition, timed from the end of the first step to the end of the
last (``steady``: the first waits for a new iterator's input to fill), rows alternating
(``scripts/bench_common.py``). The default 50 steps are one whole length window (and one
megabatch of HF's grouping): fewer steps time the first part of a window, whose random
order of buckets holds more or fewer long batches than the whole (MiniLM float32 on one
machine: 1.87x buckets/fixed over its first 12 steps, 2.67x over 24).

* **tfapp fixed**: ``data.length_buckets=0``, every batch padded to 128;
* **tfapp buckets**: ``data.length_buckets=8`` (the default);
* **HF Trainer**: ``DataCollatorWithPadding`` (each batch padded to its longest);
* **HF Trainer grouped**: the same with ``train_sampling_strategy="group_by_length"``
  (``group_by_length`` before transformers 5).

Both sides build a randomly initialised BERT of the shape (no download): MiniLM-L6
(6 layers, hidden 384, 12 heads) or BERT-base (12, 768, 12). tfapp runs its real input
pipeline (prepared shards, the training stream, tokenising in tf.data) and ``fit``; HF
tokenises ahead with ``datasets.map`` and trains with ``Trainer.train``. Each row also
reports its padding efficiency: real tokens / computed tokens over the batches it trained.
"""

from __future__ import annotations

import argparse
import ast
import csv
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter, deque
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))

import bench_common as bc  # noqa: E402

SHAPES = {"minilm": (6, 384, 12), "bert-base": (12, 768, 12), "toy": (2, 64, 2)}
SEQ, BATCH, LABELS, VOCAB = 128, 32, 8, 30522


# --------------------------------------------------------------------------- the text
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _documented(tree: ast.Module):
    """The module, classes and functions of ``tree`` in ``ast.walk``'s (breadth-first)
    order, walking statements only: a def is always a statement, so the expressions (most
    of a tree's nodes) need no visit."""
    queue = deque([tree])
    while queue:
        node = queue.popleft()
        if isinstance(node, _DOCUMENTED):
            yield node
        queue.extend(child for child in ast.iter_child_nodes(node)
                     if isinstance(child, ast.stmt | ast.excepthandler | ast.match_case))


def stdlib_docstrings() -> list[tuple[str, str]]:
    """(docstring, top-level package) of every module, class and function of the Python
    standard library this interpreter runs on, in file order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = []
    for folder, subfolders, files in os.walk(root):  # the skipped folders not entered
        subfolders[:] = [d for d in subfolders if d != "tests" and not (
            folder == str(root) and d in ("test", "idlelib", "site-packages", "lib2to3"))]
        paths += [Path(folder) / f for f in files if f.endswith(".py")]
    rows = []
    for path in sorted(paths):
        parts = path.relative_to(root).parts
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in _documented(tree):
            doc = ast.get_docstring(node)
            if doc and len(doc.split()) >= 3:
                package = parts[0].removesuffix(".py") if len(parts) > 1 else "modules"
                rows.append((" ".join(doc.split()), package))
    return rows


def write_data(work: Path, rows_of_text: int) -> tuple[Path, Path]:
    """data.csv (text,label: the first ``rows_of_text`` docstrings of the 8 packages with
    the most, duplicates dropped, in file order) and corpus.txt (every docstring)."""
    rows = stdlib_docstrings()
    top = {s for s, _ in Counter(s for _, s in rows).most_common(LABELS)}
    seen, kept = set(), []
    for text, section in rows:
        if section in top and text not in seen:
            seen.add(text)
            kept.append((text, section))
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(t for t, _ in rows) + "\n", encoding="utf-8")
    data = work / "data.csv"
    with data.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["text", "label"])
        w.writerows(kept[:rows_of_text])
    return data, corpus


VOCAB_SCRIPT = """
import sys
from tokenizers import BertWordPieceTokenizer
tok = BertWordPieceTokenizer(lowercase=True)
tok.train([sys.argv[1]], vocab_size=int(sys.argv[3]), min_frequency=2)
tok.save_model(sys.argv[2])
"""


def steady(ends: list[float], start: float, steps: int, batch: int) -> dict:
    """A repetition's timing: from the end of its first step to the end of its last (the
    steps of a long run), and from the call (``with_start_s``). The first step also waits
    for the input to fill: a new iterator per repetition refills tfapp's shuffle block
    and first length window (thousands of examples tokenised) and HF's first batch: a cost
    a run pays once, not per step."""
    return {"seconds": ends[-1] - ends[0], "units": (steps - 1) * batch,
            "with_start_s": ends[-1] - start}


# --------------------------------------------------------------------------- workers
def _threads(n: int) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(n)


def worker_tfapp(a: argparse.Namespace):
    sys.path.insert(0, str(REPO))
    import tfapp  # noqa: F401  (tf-keras before TensorFlow)
    from tfapp.config import ClassifierDataConfig, ClassifierModelConfig, OptimizerConfig
    from tfapp.data.examples.classification import (
        classification_examples,
        load_classification_splits,
    )
    from tfapp.data.input.lengths import grouping_for
    from tfapp.data.input.reader import read_batches
    from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn
    from tfapp.hub.export import export_encoder, float32_policy
    from tfapp.models.bert import BertConfig, BertEncoder
    from tfapp.models.classifier import build_classifier
    from tfapp.training.metrics import build_loss, build_metrics
    from tfapp.training.optimizers import build_optimizer

    import tensorflow as tf
    from bench_train import ExecutionEnds

    _threads(a.threads)
    work = Path(a.workdir)
    layers, hidden, heads = SHAPES[a.shape]
    d = ClassifierDataConfig(train_files=a.data, validation_split=0.0, seq_length=SEQ,
                             batch_size=a.batch, length_buckets=a.buckets)
    splits = load_classification_splits(d, 0)
    preprocess = make_bert_preprocess_fn(vocab_file=str(work / "vocab.txt"), seq_length=SEQ)
    examples = classification_examples(splits, splits.train, preprocess, SEQ)
    grouping, why = grouping_for(a.buckets, examples.lengths, 0, device_kind="CPU",
                                 input_pipelines=1)
    ds = read_batches(examples, d, batch_size=a.batch, training=True, seed=0,
                      grouping=grouping)
    real = computed = 0
    for features, _ in ds.take(a.steps):
        mask = features["input_mask"].numpy()
        real, computed = real + int(mask.sum()), computed + mask.size
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_layers=layers, num_heads=heads,
                     intermediate_size=4 * hidden, max_position_embeddings=512)
    module = work / f"tfapp_hub_encoder_{layers}x{hidden}"
    if not module.exists():
        with float32_policy():
            export_encoder(BertEncoder(cfg, seed=0), module)
    tf.keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if a.precision == "bfloat16" else "float32")
    model = build_classifier(ClassifierModelConfig(kind="bert", pooling="pooled"),
                             num_classes=splits.num_classes, multi_label=False,
                             seq_length=SEQ, hub_handle=str(module))
    model.compile(optimizer=build_optimizer(OptimizerConfig(), peak=5e-5, total_steps=10_000),
                  loss=build_loss(splits.num_classes, False),
                  metrics=build_metrics(splits.num_classes, False))

    def rep() -> dict:
        ends = ExecutionEnds()
        start = time.perf_counter()
        history = model.fit(ds, epochs=1, steps_per_epoch=a.steps, verbose=0, callbacks=[ends])
        return {**steady(ends.times, start, a.steps, a.batch),
                "loss": float(history.history["loss"][-1])}

    return {"padding_efficiency": real / computed, "grouping": why,
            "versions": f"tensorflow {tf.__version__}"}, rep


def worker_hf(a: argparse.Namespace):
    import numpy as np
    import torch
    import transformers
    from datasets import Dataset

    torch.set_num_threads(a.threads)
    transformers.set_seed(0)
    work = Path(a.workdir)
    layers, hidden, heads = SHAPES[a.shape]
    with open(a.data, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    names = sorted({r["label"] for r in rows})
    tokenizer = transformers.BertTokenizerFast(str(work / "vocab.txt"), do_lower_case=True)
    data = Dataset.from_dict({"text": [r["text"] for r in rows],
                              "label": [names.index(r["label"]) for r in rows]})
    data = data.map(lambda b: tokenizer(b["text"], truncation=True, max_length=SEQ),
                    batched=True, remove_columns=["text"])
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=4 * hidden, max_position_embeddings=512,
        num_labels=len(names))
    model = transformers.BertForSequenceClassification(config)
    args = transformers.TrainingArguments(
        output_dir=str(work / f"hf-{os.getpid()}"), per_device_train_batch_size=a.batch,
        max_steps=a.steps, learning_rate=5e-5, weight_decay=0.01, warmup_steps=0,
        logging_strategy="no", save_strategy="no", report_to=[], use_cpu=True,
        bf16=a.precision == "bfloat16", disable_tqdm=True, seed=0,
        dataloader_num_workers=0,
        **({"train_sampling_strategy": "group_by_length"} if a.grouped else {}))
    ends: list[float] = []

    class Ends(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data, callbacks=[Ends()],
        data_collator=transformers.DataCollatorWithPadding(tokenizer))
    real = computed = 0
    for k, batch in enumerate(trainer.get_train_dataloader()):
        if k == a.steps:
            break
        mask = np.asarray(batch["attention_mask"])
        real, computed = real + int(mask.sum()), computed + mask.size

    def rep() -> dict:
        ends.clear()
        start = time.perf_counter()
        out = trainer.train()
        return {**steady(ends, start, a.steps, a.batch), "loss": float(out.training_loss)}

    return {"padding_efficiency": real / computed,
            "versions": f"torch {torch.__version__}, transformers {transformers.__version__}"
            }, rep


ROWS = {  # key -> (row name, worker, interpreter, extra argv)
    "tfapp-fixed": ("tfapp fixed padding", "tfapp", "tfapp", ["--buckets", "0"]),
    "tfapp-buckets": ("tfapp length buckets", "tfapp", "tfapp", ["--buckets", "8"]),
    "hf": ("HF Trainer dynamic padding", "hf", "peers", []),
    "hf-grouped": ("HF Trainer grouped by length", "hf", "peers", ["--grouped"]),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peers-python", default=os.environ.get("BENCH_PEERS_PYTHON", ""),
                   help="interpreter of the peers' venv (scripts/bench_all.py builds it)")
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--shapes", default="minilm,bert-base")
    p.add_argument("--precisions", default="float32,bfloat16")
    p.add_argument("--steps", type=int, default=50,
                   help="steps per repetition (all but the first timed; 50: one length window)")
    p.add_argument("--batch", type=int, default=BATCH,
                   help="examples per step on both sides (8 makes a BERT-base round fit in "
                        "minutes on 2 cores; 50 steps stay one length window)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rows-of-text", type=int, default=4096)
    p.add_argument("--work-dir", default="")
    p.add_argument("--json", default="")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    p.add_argument("--data", default="", help=argparse.SUPPRESS)
    p.add_argument("--workdir", default="", help=argparse.SUPPRESS)
    p.add_argument("--shape", default="minilm", help=argparse.SUPPRESS)
    p.add_argument("--precision", default="float32", help=argparse.SUPPRESS)
    p.add_argument("--buckets", type=int, default=8, help=argparse.SUPPRESS)
    p.add_argument("--grouped", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        bc.serve(lambda: {"tfapp": worker_tfapp, "hf": worker_hf}[a.worker](a))
        return 0
    if not a.peers_python:
        print("bench_lengths: no --peers-python; the HF rows are left out", file=sys.stderr)
    work = Path(a.work_dir or tempfile.mkdtemp(prefix="tfapp-bench-lengths-"))
    work.mkdir(parents=True, exist_ok=True)
    data, corpus = write_data(work, a.rows_of_text)
    if not (work / "vocab.txt").exists():
        learner = a.peers_python or sys.executable
        subprocess.run([learner, "-c", VOCAB_SCRIPT, str(corpus), str(work), str(VOCAB)],
                       check=True)
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": str(a.threads),
           "PYTHONHASHSEED": "0", "TF_USE_LEGACY_KERAS": "1", "TFAPP_CPU_BFLOAT16": None,
           "HF_HUB_OFFLINE": "1"}
    print(f"{a.warmup} warm-up + {a.rounds} timed repetitions of {a.steps} steps per row, "
          f"rows alternating; {a.threads} threads; text: {data}", flush=True)
    out, tables = [], []
    for shape in filter(None, a.shapes.split(",")):
        for precision in filter(None, a.precisions.split(",")):
            rows = []
            for key in filter(None, a.rows.split(",")):
                name, worker, where, extra = ROWS[key]
                if where == "peers" and not a.peers_python:
                    continue
                python = a.peers_python if where == "peers" else sys.executable
                rows.append(bc.Row(name, [python, __file__, "--worker", worker, "--data",
                                          str(data), "--workdir", str(work), "--shape", shape,
                                          "--precision", precision, "--steps", str(a.steps),
                                          "--threads", str(a.threads), "--batch", str(a.batch),
                                          *extra], env))
            title = (f"training on Python docstrings, {shape} (seq {SEQ}, batch {a.batch}), "
                     f"{precision}, examples/s")
            print(f"\n[{title}]", flush=True)
            rows = bc.alternate(rows, rounds=a.rounds, warmup=a.warmup,
                                log_dir=work / f"logs-{shape}-{precision}")
            for row in rows:  # the rate counted from the call, first step's wait included
                if row.reps:
                    row.info["from_call"] = statistics.median(
                        a.steps * a.batch / r["with_start_s"] for r in row.reps)
            lines, sums = bc.table(title, rows, "ex/s", "tfapp fixed padding", extra=lambda r: (
                f"padding efficiency {r.get('padding_efficiency', 0):.2f}, from the call "
                f"{r.get('from_call', 0):.1f} ex/s"))
            out += ["", *lines]
            print("\n".join(lines), flush=True)  # each table as it is done
            tables.append({"shape": shape, "precision": precision, "rows": sums,
                           "buckets/fixed": bc.ratio(sums, "tfapp length buckets",
                                                     "tfapp fixed padding"),
                           "buckets/HF grouped": bc.ratio(sums, "tfapp length buckets",
                                                          "HF Trainer grouped by length"),
                           "buckets/HF": bc.ratio(sums, "tfapp length buckets",
                                                  "HF Trainer dynamic padding")})
            bc.write_json(a.json, {"benchmark": "lengths", "args": vars(a), "tables": tables})
    print("\n".join(out))
    print("\nratios of medians (targets: buckets/fixed >= 2x, buckets/HF grouped >= 1.3x)")
    for t in tables:
        shown = "  ".join(f"{k} " + (f"{t[k]:.2f}x" if t[k] else "n/a")
                          for k in ("buckets/fixed", "buckets/HF grouped", "buckets/HF"))
        print(f"  {t['shape']:<10} {t['precision']:<9} {shown}")
    bc.write_json(a.json, {"benchmark": "lengths", "args": vars(a), "tables": tables})
    return 0 if all("median" in r for t in tables for r in t["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
