"""Decoding tokens/s: tfapp's compiled decoder against the loops a TF or PyTorch user writes.

    python scripts/bench_generate.py --model RUN_DIR --peers-python .venv-peers/bin/python
        [--words 30] [--calls 16] [--rounds 3] [--warmup 1] [--json generate.json]

On one trained generator (``RUN_DIR``: params.yaml, vocab.txt, checkpoints/best; train one
with ``python -m tfapp.train --config configs/generator.yaml``), at batch 1 and batch 64:

* **tfapp compiled**: ``tfapp.models.decoding.make_decoder``, one XLA-compiled
  ``tf.while_loop`` carrying the LSTM state;
* **tf.function per-step loop**: what a careful TensorFlow user writes: the encoder and
  one decoding step (``model.decode_step`` + argmax, or top-k sampling) each a
  ``tf.function``, called from a Python loop once per token, state carried as tensors;
* **PyTorch loop** (peers' venv): the same network in ``torch.nn`` (Embedding, LSTM over
  the packed prompt, LSTMCell, the same attention, Linear layers) with tfapp's trained
  weights copied in, ``torch.inference_mode``, a Python loop per token; greedy as
  installed and with ``OMP_WAIT_POLICY=PASSIVE`` (ratios use the faster), top-k passive.

Greedy rows must emit the same tokens for the whole sequence (assert, against tfapp's);
sampled rows (top-k) the same count of tokens. Every row writes exactly ``--words``
tokens per prompt ([END] is suppressed, so none stops early). A repetition is ``--calls``
decoding calls (batch 1: one prompt per call; batch 64: 64 prompts per call). Each row
runs in its own process with the same warm-up (its first call traces/compiles), then the
rows alternate (``scripts/bench_common.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))

import bench_common as bc  # noqa: E402

PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3  # tfapp.data.text.words' special ids
SUPPRESS = (PAD_ID, UNK_ID, START_ID, END_ID)  # [END] too: every row writes --words tokens
PROMPTS = ["the baker", "the old fisherman", "in the morning", "the little girl"]
TOP_K, TEMPERATURE = 5, 0.8


# --------------------------------------------------------------------------- TensorFlow
def load_model(run_dir: Path):
    sys.path.insert(0, str(REPO))
    import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
    from tfapp.config import load_config
    from tfapp.data.text import words
    from tfapp.models import seq2seq
    from tfapp.run_layout import RunLayout

    cfg = load_config(run_dir / "params.yaml")
    vocab = words.load_vocabulary(run_dir / "vocab.txt")
    model = seq2seq.build_seq2seq(cfg.model, len(vocab), fused_lstm=False)  # XLA-friendly
    model.build_for(cfg.data.context_words, cfg.data.target_words)
    best = RunLayout(run_dir).best_checkpoint
    if best is None:
        raise SystemExit(f"bench_generate: error: {run_dir} has no best checkpoint "
                         "(checkpoints/best.json); train first with python -m tfapp.train "
                         "--config configs/generator.yaml")
    model.load_weights(str(best)).expect_partial()
    return cfg, vocab, model


def make_stepwise(model, words: int, method: str = "greedy", suppress_ids=SUPPRESS):
    """The per-step loop a careful TensorFlow user writes: ``encode`` and one decoding step
    are ``tf.function``s (traced once per batch shape), Python loops over the tokens.
    Returns ``fn(encoder_ids [B, N]) -> tokens [B, words]`` (NumPy)."""
    from tfapp.models.decoding import sample_tokens

    import tensorflow as tf

    suppress = tf.constant([-1e9 if i in suppress_ids else 0.0
                            for i in range(model.vocab_size)], tf.float32)
    encode = tf.function(lambda ids: model.encode(ids, training=False))

    @tf.function
    def step(i, prev, h, c, memory, keys, mask):
        logits, (h, c) = model.decode_step(prev, [h, c], memory, keys, mask)
        logits = tf.cast(logits, tf.float32) + suppress
        if method == "greedy":
            token = tf.argmax(logits, -1, output_type=tf.int32)
        else:
            # the same sampling maths as the compiled loop: the rows differ in the loop
            token = sample_tokens(logits, tf.constant(TEMPERATURE), tf.constant(TOP_K),
                                  tf.constant(1.0), tf.stack([0, i]))
        return token, h, c

    def run(encoder_ids: np.ndarray) -> np.ndarray:
        memory, keys, mask, (h, c) = encode(tf.constant(encoder_ids))
        token = tf.fill([encoder_ids.shape[0]], START_ID)
        out = []
        for i in range(words):
            token, h, c = step(tf.constant(i), token, h, c, memory, keys, mask)
            out.append(token)
        return tf.stack(out, axis=1).numpy()

    return run


def make_compiled(model, words: int, method: str = "greedy"):
    """tfapp's decoder, ``fn(encoder_ids) -> tokens [B, words]`` (NumPy)."""
    from tfapp.models import decoding

    import tensorflow as tf

    fn = decoding.make_decoder(model, method=method, max_length=words, jit_compile=True,
                               suppress_ids=SUPPRESS, end_id=END_ID, start_id=START_ID)
    top_k = TOP_K if method == "top_k" else 0
    temperature = TEMPERATURE if method == "top_k" else 1.0

    def run(encoder_ids: np.ndarray) -> np.ndarray:
        return fn(tf.constant(encoder_ids), words, temperature, top_k, 1.0, 0.0, 0, 0,
                  1.0)[0].numpy()

    return run


def export_weights(model, cfg, path: Path) -> None:
    """The trained weights under plain names, for the PyTorch copy."""
    if cfg.model.bidirectional:
        raise SystemExit("bench_generate: the PyTorch row covers unidirectional encoders; "
                         "train with model.bidirectional: false")
    att = model.attention
    w = {"embedding": model.embedding.embeddings,
         "enc_kernel": model.encoder.cell.kernel,
         "enc_recurrent": model.encoder.cell.recurrent_kernel,
         "enc_bias": model.encoder.cell.bias,
         "dec_kernel": model.decoder.cell.kernel,
         "dec_recurrent": model.decoder.cell.recurrent_kernel,
         "dec_bias": model.decoder.cell.bias,
         "att_memory": att.memory_dense.kernel,
         "combine_kernel": model.combine.kernel, "combine_bias": model.combine.bias,
         "proj_bias": model.projection.bias}
    if cfg.model.attention == "bahdanau":
        w.update(att_query=att.query_dense.kernel, att_score=att.score_dense.kernel)
    w = {k: v.numpy() for k, v in w.items()}
    # Tied embeddings (model.tie_embeddings, the default): the logits are the combined
    # hidden state times the embedding matrix, transposed: a Linear layer of that kernel.
    w["proj_kernel"] = (w["embedding"].T if model.tie_embeddings
                        else model.projection.kernel.numpy())
    np.savez(path, attention=np.array(cfg.model.attention), **w)


# --------------------------------------------------------------------------- PyTorch
def make_torch(weights: Path, words: int, method: str = "greedy"):
    """The same network in torch.nn with tfapp's weights, and its per-token loop."""
    import torch
    from torch import nn

    w = np.load(weights)
    attention = str(w["attention"])
    vocab, dim = w["embedding"].shape
    units = w["enc_recurrent"].shape[0]

    def param(x: np.ndarray) -> nn.Parameter:
        return nn.Parameter(torch.from_numpy(np.ascontiguousarray(x)), requires_grad=False)

    def linear(kernel: str, bias: str | None = None) -> nn.Linear:
        k = w[kernel]  # Keras kernels are [in, out]; torch weights [out, in]
        layer = nn.Linear(k.shape[0], k.shape[1], bias=bias is not None)
        layer.weight = param(k.T)
        if bias:
            layer.bias = param(w[bias])
        return layer

    def lstm(layer, prefix: str):
        # Keras LSTMCell gates are i, f, c, o in [in, 4u] kernels; torch's i, f, g, o.
        suffix = "_l0" if isinstance(layer, nn.LSTM) else ""
        setattr(layer, "weight_ih" + suffix, param(w[prefix + "_kernel"].T))
        setattr(layer, "weight_hh" + suffix, param(w[prefix + "_recurrent"].T))
        setattr(layer, "bias_ih" + suffix, param(w[prefix + "_bias"]))
        setattr(layer, "bias_hh" + suffix, param(np.zeros_like(w[prefix + "_bias"])))
        return layer

    class TorchSeq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, dim)
            self.embedding.weight = param(w["embedding"])
            self.encoder = lstm(nn.LSTM(dim, units, batch_first=True), "enc")
            self.decoder = lstm(nn.LSTMCell(dim, units), "dec")
            self.memory = linear("att_memory")
            if attention == "bahdanau":
                self.query, self.score = linear("att_query"), linear("att_score")
            self.combine = linear("combine_kernel", "combine_bias")
            self.projection = linear("proj_kernel", "proj_bias")

        def encode(self, ids: torch.Tensor):
            mask = ids != PAD_ID  # prompts are right-padded
            packed = nn.utils.rnn.pack_padded_sequence(
                self.embedding(ids), mask.sum(1), batch_first=True, enforce_sorted=False)
            out, (h, c) = self.encoder(packed)
            memory, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                         total_length=ids.shape[1])
            return memory, self.memory(memory), mask, (h[0], c[0])

        def step(self, prev, state, memory, keys, mask):
            h, c = self.decoder(self.embedding(prev), state)
            if attention == "bahdanau":
                scores = self.score(torch.tanh(self.query(h)[:, None] + keys))[..., 0]
            else:
                scores = torch.bmm(keys, h[:, :, None])[..., 0]
            weights = torch.softmax(scores.masked_fill(~mask, -1e9), -1)
            context = torch.bmm(weights[:, None], memory)[:, 0]
            hidden = torch.tanh(self.combine(torch.cat([h, context], -1)))
            return self.projection(hidden), (h, c)

    model = TorchSeq2Seq().eval()
    suppress = torch.zeros(vocab)
    suppress[list(SUPPRESS)] = -1e9
    generator = torch.Generator().manual_seed(0)

    @torch.inference_mode()
    def run(encoder_ids: np.ndarray) -> np.ndarray:
        memory, keys, mask, state = model.encode(torch.from_numpy(encoder_ids).long())
        token = torch.full((encoder_ids.shape[0],), START_ID, dtype=torch.long)
        out = []
        for _ in range(words):
            logits, state = model.step(token, state, memory, keys, mask)
            logits = logits + suppress
            if method == "greedy":
                token = logits.argmax(-1)
            else:
                top, idx = torch.topk(logits / TEMPERATURE, TOP_K, -1)
                pick = torch.multinomial(torch.softmax(top, -1), 1, generator=generator)
                token = idx.gather(1, pick)[:, 0]
            out.append(token)
        return torch.stack(out, 1).numpy().astype(np.int32)

    return run, f"torch {torch.__version__}"


# --------------------------------------------------------------------------- rows
# PyTorch's OpenMP threads spin while they wait; on a machine shared with other jobs that
# costs the loop most of its speed (measured here, batch 1: 160-220 tokens/s as installed,
# 5.3-7.1k with passive waiting), so the PyTorch rows run both ways.
PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE"}
TORCH, TORCH_PASSIVE = "PyTorch loop, greedy", "PyTorch loop, greedy, OMP passive"
ROWS = {  # name -> (worker, method, interpreter, extra environment)
    "tfapp compiled, greedy": ("compiled", "greedy", "tfapp", {}),
    "tf.function per-step, greedy": ("stepwise", "greedy", "tfapp", {}),
    TORCH: ("torch", "greedy", "peers", {}),
    TORCH_PASSIVE: ("torch", "greedy", "peers", PASSIVE),
    "tfapp compiled, top-k": ("compiled", "top_k", "tfapp", {}),
    "tf.function per-step, top-k": ("stepwise", "top_k", "tfapp", {}),
    "PyTorch loop, top-k, OMP passive": ("torch", "top_k", "peers", PASSIVE),
}


def worker(a: argparse.Namespace):
    work = Path(a.work_dir)
    prompts = np.load(work / "prompts.npy")
    info = {}
    if a.worker == "torch":
        decode, info["versions"] = make_torch(work / "weights.npz", a.words, a.method)
    else:
        _, _, model = load_model(Path(a.model))
        make = make_compiled if a.worker == "compiled" else make_stepwise
        decode = make(model, a.words, a.method)
    batches = [prompts[[k % len(prompts)]] if a.batch == 1 else prompts[:a.batch]
               for k in range(a.calls)]
    # What each row emits on this repetition's prompts, checked before any timing.
    checked = batches if a.batch == 1 else batches[:1]
    start = time.perf_counter()
    first = decode(checked[0])  # traces / compiles: reported as the row's compile time
    info.update(first_call_s=time.perf_counter() - start, calls_per_rep=a.calls)
    tokens = np.concatenate([first, *(decode(b) for b in checked[1:])])
    assert tokens.shape == (len(checked) * a.batch, a.words), tokens.shape
    assert (tokens > END_ID).all(), f"{a.worker}: fewer than {a.words} tokens in a row"
    reference = work / f"greedy-b{a.batch}.npy"
    if a.method == "greedy":
        if a.worker == "compiled":
            np.save(reference, tokens)
        want = np.load(reference)
        same = (tokens == want).all(axis=1)
        assert same.all(), (f"{a.worker}: greedy tokens differ from tfapp compiled's in "
                            f"{(~same).sum()} of {len(same)} prompts")

    def rep() -> float:
        for b in batches:
            decode(b)
        return a.calls * a.batch * a.words

    return info, lambda: bc.timed(rep)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="runs/generator", help="generator run directory")
    p.add_argument("--words", type=int, default=30)
    p.add_argument("--calls", type=int, default=16, help="decoding calls per repetition")
    p.add_argument("--batches", default="1,64")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--peers-python", default=os.environ.get("BENCH_PEERS_PYTHON", ""),
                   help="interpreter of the peers' venv; empty: the TensorFlow rows only")
    p.add_argument("--work-dir", default="")
    p.add_argument("--json", default="")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    p.add_argument("--method", default="greedy", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        bc.serve(lambda: worker(a))
        return 0

    run_dir = Path(a.model)
    if not (run_dir / "checkpoints").is_dir():
        print(f"bench_generate: error: {run_dir} has no checkpoints/; train first with "
              "python -m tfapp.train --config configs/generator.yaml", file=sys.stderr)
        return 2
    cfg, vocab, model = load_model(run_dir)  # imports tfapp first (tf-keras)
    from tfapp.data.text import words

    import tensorflow as tf

    work = Path(a.work_dir or tempfile.mkdtemp(prefix="tfapp-bench-generate-"))
    work.mkdir(parents=True, exist_ok=True)
    export_weights(model, cfg, work / "weights.npz")
    table = words.vocabulary_table(vocab)
    enc = words.prompt_encoder_ids(words.word_ids(table, words.standardize(tf.constant(PROMPTS))),
                                cfg.data.context_words).numpy()
    np.save(work / "prompts.npy", np.repeat(enc, 16, axis=0))  # 64 prompts
    print(f"model: {run_dir} ({cfg.model.units} units, {cfg.model.attention} attention, "
          f"vocabulary {len(vocab)}); {a.words} tokens per prompt, {a.calls} calls per "
          f"repetition, {a.warmup} warm-up + {a.rounds} timed repetitions per row, "
          "rows alternating", flush=True)
    out, summaries = [], {}
    for batch in [int(b) for b in a.batches.split(",") if b]:
        rows = []
        for name, (kind, method, where, extra) in ROWS.items():
            if where == "peers" and not a.peers_python:
                continue
            python = a.peers_python if where == "peers" else sys.executable
            rows.append(bc.Row(name, [python, __file__, "--worker", kind, "--method", method,
                                      "--batch", str(batch), "--model", str(run_dir),
                                      "--words", str(a.words), "--calls", str(a.calls),
                                      "--work-dir", str(work)],
                               {"TF_CPP_MIN_LOG_LEVEL": "2", **extra}))
        print(f"\n[batch {batch}]", flush=True)
        bc.alternate(rows, rounds=a.rounds, warmup=a.warmup, log_dir=work / f"logs-b{batch}")
        lines, sums = bc.table(f"decoding, batch {batch}, tokens/s", rows, "tokens/s",
                               "tfapp compiled, greedy")
        out += ["", *lines]
        torch_rows = [x for x in sums if x["name"] in (TORCH, TORCH_PASSIVE) and "median" in x]
        fastest = max(torch_rows, key=lambda x: x["median"], default={"name": ""})["name"]
        summaries[batch] = {
            "rows": sums, "torch": fastest,
            "compiled/per-step": bc.ratio(sums, "tfapp compiled, greedy",
                                          "tf.function per-step, greedy"),
            # against the faster PyTorch row: the peer at its best on this machine
            "compiled/torch": bc.ratio(sums, "tfapp compiled, greedy", fastest),
            "compiled/torch top-k": bc.ratio(sums, "tfapp compiled, top-k",
                                             "PyTorch loop, top-k, OMP passive")}
    print("\n".join(out))
    print("\nratios of medians, greedy (targets at batch 1: compiled >= 5x the per-step "
          "loop; compiled ahead of PyTorch at batch 1 and 64)")
    for batch, s in summaries.items():
        cells = "   ".join(f"{k} {v:.2f}x" for k, v in s.items()
                           if k not in ("rows", "torch") and v)
        print(f"  batch {batch:<3} {cells}")
    bc.write_json(a.json, {"benchmark": "generate", "args": vars(a),
                           "batches": {str(k): v for k, v in summaries.items()}})
    return 0 if all("median" in r for s in summaries.values() for r in s["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
