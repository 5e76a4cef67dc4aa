"""Input-pipeline benchmark: examples/s of full BERT preprocessing, tfapp against the
fast-tokenizer DataLoader a PyTorch user runs.

    python scripts/bench_input.py --peers-python .venv-peers/bin/python
        [--examples 8192] [--seq-length 128] [--batch-size 32] [--corpus short|long|both]
        [--rounds 3] [--warmup 1] [--json input.json]

On one generated review corpus (the demo generator's templates; "short": 2-4 sentences
per example, "long": 22-34, IMDB-like) and one WordPiece vocab learned from it, every row
produces int32 ``input_word_ids``, ``input_mask``, ``input_type_ids`` ``[batch,
seq_length]`` plus labels for one shuffled epoch (drop_last):

* **fast tokenizer DataLoader** (the peer, in the peers' venv): the Rust
  ``tokenizers.BertWordPieceTokenizer`` (what ``BertTokenizerFast`` wraps) on the same
  vocab.txt, ``encode_batch`` once per batch in the ``collate_fn`` (padding to
  ``seq_length``, truncation) of a ``torch.utils.data.DataLoader`` with ``num_workers``
  = the cores and persistent workers, NumPy int32 out of the workers, consumed as torch
  tensors (``torch.from_numpy``) in Python; and the same with ``num_workers=0`` and the
  tokenizer's own Rust threads (``TOKENIZERS_PARALLELISM=true``). Ratios are against the
  faster of the two;
* **tfapp cold**: tfapp's training stream over the corpus written as a CSV and prepared
  (``tfapp.data.input.stream``: the pass's seeded order, shuffle blocks, batch, tensorflow-text
  tokenisation in a parallel map, prefetch), no snapshot or cache, one pass per
  repetition of one iterator over the endless stream, pulled by a compiled loop (as
  ``model.fit`` pulls; it keeps one iterator for the whole run);
* **tfapp replay**: the same pipeline replayed from its snapshot (written by passes in the
  row's set-up);
* **pure-Python loop** (reference): ``Dataset.__getitem__`` tokenising one text with a
  plain-Python WordPiece (BERT's original ``tokenization.py`` algorithm), default collate,
  one process.

Before timing, every row checks that its ids, mask and type ids equal tfapp's on the
first 64 texts (assert). Each row runs in its own process with the same warm-up, then
the rows alternate (``scripts/bench_common.py``). Printed: one table per corpus (median
examples/s, range, compile/trace time) and the ratios cold/peer and replay/peer.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))

import bench_common as bc  # noqa: E402

# Review lengths: SST-2-like sentences and IMDB-like reviews (IMDB's mean is about 230
# words). Tokenising costs per word of text; a replay costs per stored token.
CORPORA = {"short": (2, 4), "long": (22, 34)}
CHECKED = 64  # texts whose features every row compares with tfapp's
KEYS = ("input_word_ids", "input_mask", "input_type_ids")


# --------------------------------------------------------------------------- corpus
def make_corpus(n: int, seed: int, sentences: tuple[int, int] = (2, 4)
                ) -> tuple[list[str], np.ndarray]:
    spec = importlib.util.spec_from_file_location("make_demo_data",
                                                  SCRIPTS / "make_demo_data.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        parts = [demo.review(rng) for _ in range(rng.randint(*sentences))]
        texts.append(" ".join(t for t, _ in parts))
        labels.append(int(parts[-1][1]))
    return texts, np.array(labels, np.int32)


def corpus_file(work: Path, name: str, examples: int, seed: int) -> Path:
    """Where the orchestrator leaves a corpus for its workers: the generator costs more
    CPU than a tfapp row's epochs (4.5 s for 8,192 long texts), so it runs once, not once
    per process."""
    return work / f"texts-{name}-{examples}-{seed}.json"


# ------------------------------------------------------------- (a) per-item Python loop
class PyWordPiece:
    """BERT's reference tokenisation in plain Python (uncased)."""

    def __init__(self, vocab: list[str], max_chars_per_word: int = 100):
        self.vocab = {t: i for i, t in enumerate(vocab)}
        self.unk = self.vocab["[UNK]"]
        self.max_chars = max_chars_per_word

    @staticmethod
    def _is_punct(ch: str) -> bool:
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    def basic(self, text: str) -> list[str]:
        text = "".join(c for c in unicodedata.normalize("NFD", text.lower())
                       if unicodedata.category(c) != "Mn")
        words = []
        for chunk in text.split():
            cur = []
            for ch in chunk:
                if self._is_punct(ch):
                    if cur:
                        words.append("".join(cur))
                        cur = []
                    words.append(ch)
                else:
                    cur.append(ch)
            if cur:
                words.append("".join(cur))
        return words

    def wordpiece(self, word: str) -> list[int]:
        if len(word) > self.max_chars:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    break
                end -= 1
            if end == start:
                return [self.unk]
            start = end
        return ids

    def encode(self, text: str) -> list[int]:
        return [i for w in self.basic(text) for i in self.wordpiece(w)]


class ReviewDataset:
    """What a PyTorch ``Dataset`` over the corpus looks like: tokenise in ``__getitem__``."""

    def __init__(self, texts, labels, tokenizer: PyWordPiece, seq_length: int):
        self.texts, self.labels, self.tok, self.seq_length = texts, labels, tokenizer, seq_length

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int):
        ids = [2] + self.tok.encode(self.texts[i])[:self.seq_length - 2] + [3]
        pad = self.seq_length - len(ids)
        return ({"input_word_ids": np.array(ids + [0] * pad, np.int32),
                 "input_mask": np.array([1] * len(ids) + [0] * pad, np.int32),
                 "input_type_ids": np.zeros(self.seq_length, np.int32)},
                self.labels[i])


def python_loader(dataset: ReviewDataset, batch_size: int, seed: int):
    """A DataLoader(shuffle=True, drop_last=True) with the default collate, in one process."""
    order = np.random.default_rng(seed).permutation(len(dataset))
    for start in range(0, len(order) - batch_size + 1, batch_size):
        items = [dataset[i] for i in order[start:start + batch_size]]
        yield ({k: np.stack([x[k] for x, _ in items]) for k in items[0][0]},
               np.array([y for _, y in items], np.int32))


# --------------------------------------------------------------------------- rows
def check_features(features: dict, sample: Path, who: str) -> None:
    """The row's features on the first CHECKED texts equal tfapp's (saved by tfapp cold)."""
    want = np.load(sample)
    for key in KEYS:
        got = np.asarray(features[key])
        assert got.dtype == np.int32, f"{who}: {key} is {got.dtype}, not int32"
        assert (got == want[key]).all(), f"{who}: {key} differs from tfapp's"


def worker_tfapp(a: argparse.Namespace, texts: list[str], labels: np.ndarray, replay: bool):
    sys.path.insert(0, str(REPO))
    import csv

    import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
    from tfapp.config import ClassifierDataConfig
    from tfapp.data.examples.classification import (
        classification_examples,
        load_classification_splits,
    )
    from tfapp.data.input.reader import read_batches
    from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn

    import tensorflow as tf

    work = Path(a.work_dir)
    preprocess = make_bert_preprocess_fn(vocab_file=str(work / "vocab.txt"),
                                         seq_length=a.seq_length)
    sample = work / f"sample-{a.corpus}.npz"
    features = {k: v.numpy() for k, v in preprocess(tf.constant(texts[:CHECKED])).items()}
    if not replay:
        np.savez(sample, **features)
    check_features(features, sample, "tfapp")
    data = work / f"corpus-{a.corpus}-{a.examples}.csv"
    if not data.exists():  # what a user hands tfapp: a file (prepared once, then streamed)
        tmp = data.with_suffix(f".tmp{os.getpid()}")
        with tmp.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["text", "label"])
            writer.writerows(zip(texts, labels.tolist(), strict=True))
        tmp.rename(data)
    os.environ.setdefault("TFAPP_CACHE_DIR", str(work / "cache"))
    cfg = dataclasses.replace(ClassifierDataConfig(), train_files=str(data), validation_split=0.0,
                              seq_length=a.seq_length, batch_size=a.batch_size,
                              shuffle_buffer=10000)
    if replay:
        cfg = dataclasses.replace(cfg, snapshot=str(work / f"snapshot-{a.corpus}"))
    start = time.perf_counter()
    splits = load_classification_splits(cfg, a.seed)
    examples = classification_examples(splits, splits.train, preprocess, cfg.seq_length)
    dataset = read_batches(examples, cfg, batch_size=a.batch_size, training=True, seed=a.seed)
    build_s = time.perf_counter() - start  # preparing the file (first row), building
    n_batches = len(texts) // a.batch_size

    @tf.function
    def pull(iterator: tf.data.Iterator, n: tf.Tensor) -> tf.Tensor:
        # model.fit's train function pulls batches like this, inside TensorFlow.
        total = tf.constant(0, tf.int64)
        for _ in tf.range(n):
            total += tf.shape(next(iterator)[1], out_type=tf.int64)[0]
        return total

    # fit keeps one iterator over the endless stream: a repetition is its next pass.
    iterator = iter(dataset)

    def epoch() -> float:
        return float(pull(iterator, tf.constant(n_batches)))

    info = {"build_s": build_s}
    if replay:  # the first pass stores the token ids (untimed: the warm-up's own pass)
        epoch()
        epoch()  # its unused tail is read when the next pass starts: the store completes
        iterator = iter(read_batches(
            examples, cfg, batch_size=a.batch_size, training=True,
            seed=a.seed))  # a new run's stream: it finds the store complete, and replays
    return info, lambda: bc.timed(epoch)


def worker_fast(a: argparse.Namespace, texts: list[str], labels: np.ndarray):
    import tokenizers
    import torch

    # With worker processes they are the parallelism: tokenizers' own threads would
    # oversubscribe the cores (and it turns them off in forked workers anyway). Without,
    # the Rust threads encode each batch in parallel.
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if a.loader_workers == 0 else "false"
    # The Rust WordPiece that transformers' BertTokenizerFast wraps. (transformers 5's
    # BertTokenizerFast takes vocab=, and silently ignores vocab_file=: 5 tokens, all [UNK].)
    tok = tokenizers.BertWordPieceTokenizer(str(Path(a.work_dir) / "vocab.txt"),
                                            lowercase=True)
    tok.enable_truncation(a.seq_length)
    tok.enable_padding(length=a.seq_length, pad_id=0, pad_token="[PAD]")

    def encode(batch: list[str]) -> dict:
        encodings = tok.encode_batch(batch)
        return {key: np.array([getattr(e, field) for e in encodings], dtype=np.int32)
                for key, field in zip(KEYS, ("ids", "attention_mask", "type_ids"),
                                      strict=True)}

    check_features(encode(texts[:CHECKED]), Path(a.work_dir) / f"sample-{a.corpus}.npz",
                   "fast tokenizer")

    class Reviews(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(texts)

        def __getitem__(self, i: int):
            return texts[i], labels[i]

    def collate(items):
        # NumPy out of the workers, torch.from_numpy (no copy) in the loop: torch tensors
        # made in a worker travel through shared-memory files, 3x slower here (2.7-3.2k
        # against 9.5-9.8k short texts/s, 2 workers).
        return encode([t for t, _ in items]), np.array([y for _, y in items], np.int32)

    loader = torch.utils.data.DataLoader(
        Reviews(), batch_size=a.batch_size, shuffle=True, drop_last=True,
        num_workers=a.loader_workers, persistent_workers=a.loader_workers > 0,
        collate_fn=collate, generator=torch.Generator().manual_seed(a.seed))

    def epoch() -> float:
        n = 0
        for features, _y in loader:
            batch = {k: torch.from_numpy(v) for k, v in features.items()}
            n += len(batch["input_word_ids"])
        return n

    info = {"versions": f"torch {torch.__version__}, tokenizers {tokenizers.__version__}, "
                        f"workers {a.loader_workers}"}
    return info, lambda: bc.timed(epoch)


def worker_python(a: argparse.Namespace, texts: list[str], labels: np.ndarray):
    vocab = (Path(a.work_dir) / "vocab.txt").read_text(encoding="utf-8").splitlines()
    dataset = ReviewDataset(texts, labels, PyWordPiece(vocab), a.seq_length)
    sample = [dataset[i][0] for i in range(CHECKED)]
    check_features({k: np.stack([x[k] for x in sample]) for k in KEYS},
                   Path(a.work_dir) / f"sample-{a.corpus}.npz", "pure Python")
    epochs = iter(range(1_000_000))

    def epoch() -> float:
        return sum(len(y) for _, y in python_loader(dataset, a.batch_size,
                                                    a.seed + next(epochs)))

    return {}, lambda: bc.timed(epoch)


PEER = "fast tokenizer DataLoader"
PEER_THREADS = "fast tokenizer, 0 workers, Rust threads"
ROWS = {  # row name -> (worker, which interpreter, DataLoader workers: None = --loader-workers)
    "tfapp cold": ("cold", "tfapp", None),
    "tfapp replay": ("replay", "tfapp", None),
    PEER: ("fast", "peers", None),
    PEER_THREADS: ("fast", "peers", 0),
    "pure-Python loop (ref.)": ("python", "tfapp", None),
}


def run_worker(a: argparse.Namespace) -> None:
    corpus = json.loads(corpus_file(Path(a.work_dir), a.corpus, a.examples, a.seed)
                        .read_text(encoding="utf-8"))
    texts, labels = corpus["texts"], np.array(corpus["labels"], np.int32)
    if a.worker == "fast":
        bc.serve(lambda: worker_fast(a, texts, labels))
    elif a.worker == "python":
        bc.serve(lambda: worker_python(a, texts, labels))
    else:
        bc.serve(lambda: worker_tfapp(a, texts, labels, replay=a.worker == "replay"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=8192)
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--vocab-size", type=int, default=4000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus", choices=[*CORPORA, "both"], default="both")
    p.add_argument("--rounds", type=int, default=3, help="timed repetitions per row")
    p.add_argument("--warmup", type=int, default=1, help="untimed repetitions per row")
    p.add_argument("--loader-workers", type=int, default=os.cpu_count() or 1,
                   help="the peer DataLoader's num_workers (default: the cores)")
    p.add_argument("--peers-python", default=os.environ.get("BENCH_PEERS_PYTHON", ""),
                   help="interpreter of the peers' venv (scripts/bench_all.py builds it); "
                        "empty: the tfapp rows only")
    p.add_argument("--work-dir", default="", help="vocab, snapshots and logs (default: a "
                                                 "new temporary folder)")
    p.add_argument("--json", default="")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        run_worker(a)
        return 0

    sys.path.insert(0, str(REPO))
    from tfapp.atomic import write_text
    from tfapp.data.text.vocab import build_wordpiece_vocab

    work = Path(a.work_dir or tempfile.mkdtemp(prefix="tfapp-bench-input-"))
    work.mkdir(parents=True, exist_ok=True)
    names = list(CORPORA) if a.corpus == "both" else [a.corpus]
    corpora = {name: make_corpus(a.examples, a.seed, CORPORA[name]) for name in names}
    for name, (texts, labels) in corpora.items():
        write_text(corpus_file(work, name, a.examples, a.seed),
                   json.dumps({"texts": texts, "labels": labels.tolist()}))
    first = corpora[names[0]][0][:5000]  # make_corpus(5000) is make_corpus(n)'s first 5000
    write_text(work / "vocab.txt", "\n".join(build_wordpiece_vocab(first, a.vocab_size)) + "\n")
    print(f"{a.examples} examples per corpus, seq_length {a.seq_length}, batch {a.batch_size}, "
          f"{os.cpu_count()} cores; {a.warmup} warm-up + {a.rounds} timed epochs per row, "
          "rows alternating", flush=True)
    out, summaries = [], {}
    for name in names:
        common = ["--examples", str(a.examples), "--seq-length", str(a.seq_length),
                  "--batch-size", str(a.batch_size), "--seed", str(a.seed), "--corpus", name,
                  "--work-dir", str(work), "--loader-workers", str(a.loader_workers)]
        rows = []
        for row, (worker, where, loader_workers) in ROWS.items():
            if where == "peers" and not a.peers_python:
                continue
            python = a.peers_python if where == "peers" else sys.executable
            env = {} if where == "peers" else {"TF_CPP_MIN_LOG_LEVEL": "2"}
            own = [] if loader_workers is None else ["--loader-workers", str(loader_workers)]
            rows.append(bc.Row(row, [python, __file__, "--worker", worker, *common, *own],
                               env))
        texts = corpora[name][0]
        words = sum(len(t.split()) for t in texts) / len(texts)
        print(f"\n[{name}] {words:.0f} words per example on average", flush=True)
        bc.alternate(rows, rounds=a.rounds, warmup=a.warmup, log_dir=work / f"logs-{name}")
        # Ratios against the faster fast-tokenizer row: the peer at its best here.
        peers = [x for x in map(bc.summary, rows) if x["name"] in (PEER, PEER_THREADS)]
        peer = max((x for x in peers if "median" in x), key=lambda x: x["median"],
                   default={"name": None})["name"]
        lines, sums = bc.table(f"input pipeline, {name} texts ({words:.0f} words), ex/s",
                               rows, "ex/s", peer)
        out += ["", *lines]
        summaries[name] = {"words": words, "rows": sums, "peer": peer,
                           "cold/peer": bc.ratio(sums, "tfapp cold", peer or ""),
                           "replay/peer": bc.ratio(sums, "tfapp replay", peer or "")}
    print("\n".join(out))
    print("\nratios of medians against the faster fast-tokenizer row (targets: cold >= 1.0x, "
          "replay >= 2x)")
    for name, s in summaries.items():
        print(f"  {name:6s} cold/peer {s['cold/peer'] or float('nan'):5.2f}x   "
              f"replay/peer {s['replay/peer'] or float('nan'):5.2f}x")
    bc.write_json(a.json, {"benchmark": "input", "args": vars(a), "corpora": summaries})
    return 0 if all("median" in r for s in summaries.values() for r in s["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
