"""The pieces of the benchmark scripts that run without the peers' venv.

The benchmarks themselves are scripts (no timed asserts here); these tests check what
their tables rest on: rows really alternate, the statistics are the median and range of
the timed repetitions (warm-up excluded), and the tf.function per-step decoding loop
(a row of scripts/bench_generate.py) emits the same greedy tokens as tfapp's compiled
decoder.
"""

import importlib.util
import sys
from pathlib import Path

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.models import seq2seq

import numpy as np
import pytest
import tensorflow as tf

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench_common as bc  # noqa: E402


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A worker answering each repetition with the moment it ran and its own counter.
WORKER = """
import sys, time
sys.path.insert(0, {scripts!r})
import bench_common as bc
count = iter(range(100))
def setup():
    def rep():
        n = next(count)
        return {{"seconds": {seconds} * (3 if n == 0 else 1), "units": 10.0,
                 "at": time.monotonic(), "n": n}}
    return {{"label": {label!r}}}, rep
bc.serve(setup)
"""


def worker_row(name: str, seconds: float) -> bc.Row:
    code = WORKER.format(scripts=str(SCRIPTS), seconds=seconds, label=name)
    return bc.Row(name, [sys.executable, "-c", code])


def test_rows_alternate_after_equal_warmup(tmp_path):
    rows = bc.alternate([worker_row("a", 0.5), worker_row("b", 0.25)], rounds=3, warmup=1,
                        log_dir=tmp_path, pause_s=0.0)
    a, b = rows
    assert [r["n"] for r in a.reps] == [1, 2, 3]  # repetition 0 was the warm-up
    assert [r["n"] for r in b.reps] == [1, 2, 3]
    assert a.info["label"] == "a" and len(a.warmup) == len(b.warmup) == 1
    times = [r["at"] for pair in zip(a.reps, b.reps, strict=True) for r in pair]
    assert times == sorted(times), "rows did not alternate a b a b a b"


def test_summary_is_median_and_range_without_warmup():
    row = bc.Row("x", [])
    row.warmup = [{"seconds": 5.0, "units": 10.0}]
    row.reps = [{"seconds": s, "units": 10.0} for s in (1.0, 2.0, 0.5)]
    s = bc.summary(row)
    assert (s["median"], s["low"], s["high"]) == (10.0, 5.0, 20.0)
    assert s["rep_s"] == 1.0 and s["compile_s"] == 4.0  # first warm-up less the median
    row.info = {"first_call_s": 2.0, "calls_per_rep": 4}
    assert bc.summary(row)["compile_s"] == 1.75  # first call less a median call (1.0 / 4)
    lines, sums = bc.table("t", [row, bc.Row("y", [], error="boom")], "ex/s", reference="x")
    assert sums[1] == {"name": "y", "error": "boom"} and "failed" in lines[-1]
    assert bc.ratio(sums, "x", "y") is None


@pytest.mark.xla_cpu  # make_compiled: make_decoder(jit_compile=True)
def test_per_step_loop_emits_the_compiled_decoders_greedy_tokens():
    bench = load_script("bench_generate")
    tf.keras.utils.set_random_seed(3)
    model = seq2seq.Seq2Seq(vocab_size=40, embedding_dim=8, units=16, fused_lstm=False)
    model.build_for(6, 5)
    rng = np.random.default_rng(0)
    enc = rng.integers(4, 40, size=(5, 6)).astype(np.int32)
    enc[1, 3:] = 0  # right-padded prompts, as prompt_encoder_ids makes them
    enc[4, 1:] = 0
    words = 12
    compiled = bench.make_compiled(model, words)(enc)
    stepwise = bench.make_stepwise(model, words)(enc)
    assert compiled.shape == (5, words)
    assert (compiled > bench.END_ID).all()  # [END] and the other special ids suppressed
    assert len(np.unique(compiled)) > 3  # not a constant sequence that any loop matches
    np.testing.assert_array_equal(stepwise, compiled)
    sampled = bench.make_stepwise(model, words, method="top_k")(enc)
    assert sampled.shape == (5, words) and (sampled > bench.END_ID).all()


def test_accelerator_check_peaks_and_table_rows():
    check = load_script("check_accelerator")
    assert check.peak_flops("NVIDIA H100 80GB HBM3") == pytest.approx(989.4e12)
    assert check.peak_flops("NVIDIA H100 PCIe") == pytest.approx(756e12)  # not the SXM's
    assert check.peak_flops("TPU v6e-8") == pytest.approx(918e12)
    assert check.peak_flops("AMD EPYC 7B13") is None and check.mfu(100.0, 1e9, "cpu") is None
    assert check.mfu(100.0, 312e9, "NVIDIA A100-SXM4-40GB") == pytest.approx(0.1)
    results = {"device": {"kind": "GPU", "name": "NVIDIA L4", "peak_tflops": 121.0},
               "dry_run": False, "total_s": 9.0, "parts": {
                   "train": {"seconds": 5.0, "budget_s": 200.0, "flops_formula": "6NS", "rows": [
                       {"name": "bfloat16 xla on spe 1", "median": 50.0, "mfu": 0.25,
                        "tflops": 30.0, "spe_note": "1", "compile_s": 3.0},
                       {"name": "bfloat16 xla off spe 1", "error": "boom"}]},
                   "generate": {"seconds": 70.0, "budget_s": 70.0, "error": "ran past"}}}
    rows = check.table_rows(results)
    assert [(r["part"], r["item"]) for r in rows] == [
        ("device", "NVIDIA L4"), ("train", "bfloat16 xla on spe 1"),
        ("train", "bfloat16 xla off spe 1"), ("generate", "failed")]
    assert rows[1]["value"] == 50.0 and rows[1]["note"] == "MFU 25.0%"
    text = check.markdown(results)
    assert "| train | bfloat16 xla on spe 1 | 50 | ex/s | MFU 25.0%" in text
    assert "failed: boom" in text and "ran past" in text


@pytest.mark.slow
def test_accelerator_check_dry_run_writes_json_and_markdown(tmp_path):
    """The CPU dry run at toy size: doctor and the train rows (the default run, generator
    and input parts take minutes on CI's shared cores; the table test above covers their
    rows)."""
    import json

    # --budget-s far above the parts' needs: a busy machine must not turn a slow part into
    # a failed row (the budgets only stop a hang here; the table test covers their rows).
    _main("check_accelerator", "--dry-run", "--out", str(tmp_path), "--parts", "doctor,train",
          "--budget-s", "2000")
    results = json.loads((tmp_path / "accelerator.json").read_text())
    assert results["device"]["kind"] == "CPU" and results["device"]["name"]
    assert "plan" in results["parts"]["doctor"]["report"]
    train = results["parts"]["train"]["rows"]
    assert [r["name"] for r in train] == ["float32 xla off spe 1", "float32 xla off spe auto"]
    assert all(r["median"] > 0 and r["mfu"] is None for r in train)
    assert [r["steps_per_execution"] for r in train] == [1, 2]
    assert results["parts"]["train"]["flops_per_example"] > 0
    text = (tmp_path / "accelerator.md").read_text()
    assert f"# tfapp accelerator check: {results['device']['name']}" in text
    assert "| train | float32 xla off spe 1 |" in text and "| doctor | problems |" in text


def test_predict_bench_checks_row_count_and_id_order_of_csv_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    bench = load_script("bench_predict")
    ok, swapped = ["r0", "r1", "r2"], ["r0", "r2", "r1"]
    for name, ids in (("ok", ok), ("swapped", swapped)):
        (tmp_path / f"{name}.csv").write_text(
            "id,label\n" + "".join(f"{i},pos\n" for i in ids))
        pq.write_table(pa.table({"id": ids, "label": ["pos"] * 3}),
                       tmp_path / f"{name}.parquet")
    for suffix in ("csv", "parquet"):
        assert bench.output_ids(tmp_path / f"ok.{suffix}") == (3, True)
        assert bench.output_ids(tmp_path / f"swapped.{suffix}") == (3, False)
    bench.make_input(tmp_path / "in.csv", 5)
    rows = (tmp_path / "in.csv").read_text().splitlines()
    assert rows[0] == "id,text,label" and len(rows) == 6 and rows[5].startswith("r4,")


def test_startup_table_gives_tfapp_over_the_pipeline():
    bench = load_script("bench_startup")

    def side(seconds, cpu, rss):
        return {"seconds": {"median": seconds}, "cpu_s": {"median": cpu},
                "peak_rss_mib": {"median": rss}}

    text = bench.table({"jobs": {"1": {"tfapp": side(4.0, 3.5, 800), "hf": side(3.2, 3.0, 400)},
                                 "2000": {"tfapp": side(30.0, 50, 900),
                                          "hf": side(45.0, 80, 600)},
                                 "20": {"tfapp": side(5.0, 4, 700)}}})
    lines = text.splitlines()
    assert lines[0].startswith("| job | tfapp wall s | HF wall s | wall tfapp / HF |")
    assert lines[2] == "| 1 sentence | 4.0 | 3.2 | 1.25x | 3.5 | 3.0 | 800 | 400 | 2.00x | - |"
    assert lines[3] == ("| 2,000 rows | 30.0 | 45.0 | 0.67x | 50.0 | 80.0 | 900 | 600 | 1.50x "
                        "| 1.50x |")
    assert lines[4] == "| 20 rows | 5.0 | - | - | 4.0 | - | 700 | - | - | - |"


# ------------------------------------------------------------------ smoke runs, toy size
# A run of configs/generator.yaml (tied embeddings, its default) at toy size: 2 steps, 2 % of
# the demo corpus to validate on, no export (the benchmark reads checkpoints/best).
GENERATOR_RUN = ("configs/generator.yaml", "trainer.epochs=1", "trainer.steps_per_epoch=2",
                 "model.units=16", "model.embedding_dim=8", "data.vocab_size=200",
                 "data.validation_split=0.02", "trainer.export=false",
                 "tracking.tensorboard=false")


def _main(name: str, *args: str) -> None:
    """The script's ``main`` in this process: its rows still run in their own processes,
    and the orchestrator's own start-up (TensorFlow, tfapp: 3-4 s of CPU) is not paid again."""
    assert load_script(name).main(list(args)) == 0


def test_bench_generate_exports_tied_embeddings_as_the_torch_projection(tmp_path_factory,
                                                                         tmp_path):
    """The PyTorch row's weights: with tied embeddings the projection is the embedding
    matrix, transposed (the model has no projection kernel)."""
    from conftest import shared_run

    run = shared_run(tmp_path_factory, *GENERATOR_RUN)
    bench = load_script("bench_generate")
    cfg, _, model = bench.load_model(run)
    assert model.tie_embeddings
    bench.export_weights(model, cfg, tmp_path / "weights.npz")
    w = np.load(tmp_path / "weights.npz")
    hidden = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
    np.testing.assert_allclose(hidden @ w["proj_kernel"] + w["proj_bias"],
                               model.projection(tf.constant(hidden)).numpy(), atol=1e-5)


@pytest.mark.slow
@pytest.mark.xla_cpu  # its tfapp compiled rows: make_decoder(jit_compile=True)
def test_bench_generate_runs_on_a_run_of_the_default_generator_config(tmp_path_factory,
                                                                      tmp_path):
    import json

    from conftest import shared_run

    run = shared_run(tmp_path_factory, *GENERATOR_RUN)
    _main("bench_generate", "--model", str(run), "--words", "3", "--calls", "1",
          "--rounds", "1", "--warmup", "0", "--batches", "1", "--work-dir",
          str(tmp_path / "work"), "--json", str(tmp_path / "generate.json"))
    rows = json.loads((tmp_path / "generate.json").read_text())["batches"]["1"]["rows"]
    assert [r["name"] for r in rows] == [
        "tfapp compiled, greedy", "tf.function per-step, greedy", "tfapp compiled, top-k",
        "tf.function per-step, top-k"]
    assert all(r["median"] > 0 for r in rows), rows  # every row decoded (greedy ones agreed)


@pytest.mark.slow
def test_bench_packing_runs_at_toy_size(tmp_path):
    """Both modes pretrain (2 steps each) on the demo corpus's first lines; packed
    sequences are fuller than one padded text each (counted, not timed)."""
    import json

    corpus = tmp_path / "corpus.txt"
    lines = (REPO / "tfapp/demo/generator_corpus.txt").read_text().splitlines()
    corpus.write_text("\n".join(line for line in lines if not line.startswith("#"))[:20000])
    _main("bench_packing", "--corpus", str(corpus), "--seq-length", "32", "--batch-size",
          "4", "--steps", "2", "--rounds", "1", "--json", str(tmp_path / "packing.json"))
    rows = json.loads((tmp_path / "packing.json").read_text())["rows"]
    padded, packed = rows["padded"], rows["packed"]
    assert padded["texts"] == packed["texts"] == padded["sequences"]  # one text a sequence
    assert padded["padding_efficiency"] < packed["padding_efficiency"] <= 1
    assert packed["real_tokens_per_sequence"] > padded["real_tokens_per_sequence"]
    assert padded["sequences_per_s"] > 0 and packed["sequences_per_s"] > 0


@pytest.mark.slow
def test_bench_lengths_runs_its_tfapp_rows_at_toy_size(tmp_path):
    """The toy shape, 2 steps of 4 docstrings per row (1024 of them: the first hundreds
    are all of one label), fixed padding and length buckets
    (the HF rows need the peers' venv). A given vocab.txt stands in for the WordPiece
    vocabulary it would learn with the peers' tokenizers."""
    import json

    work = tmp_path / "work"
    work.mkdir()
    words = sorted({w for line in (REPO / "tfapp/demo/reviews_train.csv").read_text().lower()
                    .split() for w in [line.strip(".,\"'")] if w.isalpha()})
    (work / "vocab.txt").write_text("\n".join(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words[:2000]]) + "\n")
    _main("bench_lengths", "--shapes", "toy", "--precisions", "float32", "--rows",
            "tfapp-fixed,tfapp-buckets", "--steps", "2", "--batch", "4", "--rounds", "1",
            "--warmup", "0", "--threads", "1", "--rows-of-text", "1024", "--work-dir",
            str(work), "--json", str(tmp_path / "lengths.json"))
    (table,) = json.loads((tmp_path / "lengths.json").read_text())["tables"]
    assert (table["shape"], table["precision"]) == ("toy", "float32")
    assert [r["name"] for r in table["rows"]] == ["tfapp fixed padding", "tfapp length buckets"]
    for row in table["rows"]:
        assert row["median"] > 0 and 0 < row["padding_efficiency"] <= 1, row


def test_bench_stream_runs_at_toy_size(tmp_path):
    """Two shard files of 300 rows, in order and merged with a 64-row shuffle block: a row
    per (files, block), each with a rate (the rows are tfapp's training stream)."""
    import json

    _main("bench_stream", "--files", "1,2", "--rows", "300", "--blocks", "64", "--rounds",
          "1", "--batch", "16", "--json", str(tmp_path / "stream.json"))
    rows = json.loads((tmp_path / "stream.json").read_text())
    assert [r["row"] for r in rows] == [
        "1 file(s), in order (block 0)", "1 file(s), merged in runs of 1, block 64",
        "2 file(s), in order (block 0)", "2 file(s), merged in runs of 1, block 64"]
    for row in rows:
        assert 0 < row["min"] <= row["median"] <= row["max"], row


def test_probe_polarity_runs_on_the_builtin_module(capsys):
    """The probe's numbers on embeddings that hold the polarity (two clusters: within
    near 1, across near 0, every word placed), then its table row for builtin:tiny."""
    probe = load_script("probe_polarity")
    vocab = {w: i for i, w in enumerate(dict.fromkeys(probe.POSITIVE + probe.NEGATIVE))}
    positive, negative = probe.polarity_words(vocab)
    assert "great" in positive and "terrible" in negative and "spot on" not in positive
    emb = np.random.default_rng(0).normal(scale=0.05, size=(len(vocab), 8))
    emb[[vocab[w] for w in positive], 0] += 1
    emb[[vocab[w] for w in negative], 1] += 1
    within, across, accuracy, n = probe.polarity_probe(emb, vocab)
    assert within > 0.9 and abs(across) < 0.1 and accuracy == 1.0, (within, across, accuracy)
    assert n == len(positive) + len(negative)
    assert probe.main(["builtin:tiny"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if "builtin:tiny" in line]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 6 and int(cells[1]) > 20 and 0 <= float(cells[5]) <= 1, row


def _script_entries(path: Path = REPO / ".ci" / "scripts.txt") -> dict[str, str]:
    entries = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, what = line.partition(": ")
            entries[name] = what.strip()
    return entries


def test_every_script_is_run_by_a_test_or_says_why_not():
    """.ci/scripts.txt names each file in scripts/ once: with the test that runs it (a test
    function that names the script, or a test file that does) or with "not run:" and why."""
    import ast

    entries = _script_entries()
    assert sorted(entries) == sorted(p.name for p in SCRIPTS.iterdir() if p.is_file())
    for name, what in entries.items():
        stem = Path(name).stem
        if what.startswith("not run:"):
            assert len(what.removeprefix("not run:").split()) >= 5, (name, "give the reason")
            continue
        file, _, test = what.partition("::")
        source = (REPO / file).read_text(encoding="utf-8")
        if test:
            (node,) = [n for n in ast.parse(source).body
                       if isinstance(n, ast.FunctionDef) and n.name == test] or [None]
            assert node is not None, (name, f"no {test} in {file}")
            source = ast.get_source_segment(source, node)
        assert stem in source, (name, f"{what} does not name {stem}")
