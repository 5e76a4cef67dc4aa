"""One command for a GPU or TPU machine: what tfapp sees there and how fast it runs.

    python scripts/check_accelerator.py [--out accel-check] [--budget-s 460]
    python scripts/check_accelerator.py --dry-run --out /tmp/accel   # CPU, toy sizes, seconds

Writes ``OUT/accelerator.json`` and ``OUT/accelerator.md`` (one table), in parts, each
under its own time budget so the whole stays under 8 minutes; a part that fails or runs
out of time is a row with its error, and the others still run:

* **doctor**: ``python -m tfapp.doctor --json`` (kept whole in the JSON);
* **default run**: ``python -m tfapp.train`` with its defaults (the demo classifier on
  ``builtin:tiny``): wall time and final metrics (its ``status.json``);
* **train**: BERT-base (12 layers, hidden 768, seq 128, batch 32) fine-tuning ex/s, the
  ``tfapp`` row of ``scripts/bench_train.py`` (same worker, same timing), at the device's
  16-bit precision (bfloat16; float16 on GPUs before Ampere), XLA on and off, at
  ``steps_per_execution`` 1 and auto; MFU = ex/s x FLOPs per example / the device's peak
  (``PEAK_TFLOPS``; empty for a device not in it). FLOPs per example:
  ``bench_train.train_flops_per_example``, 6 x non-embedding parameters x seq plus the
  attention's 12 x layers x hidden x seq^2;
* **generate**: decoding tokens/s of a freshly trained tiny generator
  (``configs/generator_local.yaml``) by ``scripts/bench_generate.py``;
* **input**: the input pipeline's ex/s (``scripts/bench_input.py``, short texts) against
  the rate the fastest train row consumes.

``--dry-run`` runs every part at toy size on the CPU (a 2-layer BERT, a few steps; the
XLA-on train rows left out): what CI checks (tests/test_bench_scripts.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))

import bench_common as bc  # noqa: E402
import bench_train  # noqa: E402

# Peak dense 16-bit tensor FLOP/s per chip (TFLOP/s, without structured sparsity), from the
# vendors' spec sheets: NVIDIA H100 datasheet (SXM 989.4 bf16/fp16, PCIe 756), H200
# product brief (989, as H100 SXM), A100 datasheet (312), L4 datasheet (121), L40S (362),
# A10 (125), T4 (65 fp16, no bf16), V100 (125 fp16, no bf16); Google Cloud TPU docs: v4
# 275, v5e 197, v5p 459, v6e (Trillium) 918 bf16. Matched against the device name,
# lowercase, first match wins (so "h100 pcie" before "h100").
PEAK_TFLOPS: list[tuple[str, float]] = [
    ("h100 pcie", 756.0), ("h100", 989.4), ("h200", 989.0), ("gh200", 989.0),
    ("a100", 312.0), ("l40s", 362.0), ("l4", 121.0), ("a10", 125.0), ("t4", 65.0),
    ("v100", 125.0),
    ("v6e", 918.0), ("v5p", 459.0), ("v5e", 197.0), ("v5litepod", 197.0), ("v4", 275.0),
]
#: GPUs without bfloat16 tensor cores: their 16-bit rows run float16.
NO_BF16 = ("t4", "v100", "p100")


def peak_flops(device: str) -> float | None:
    """The device's peak dense 16-bit FLOP/s, or None when it is not in PEAK_TFLOPS."""
    name = device.lower()
    for key, tflops in sorted(PEAK_TFLOPS, key=lambda kv: -len(kv[0])):
        if key in name:
            return tflops * 1e12
    return None


def mfu(examples_per_s: float, flops_per_example: float, device: str) -> float | None:
    peak = peak_flops(device)
    return examples_per_s * flops_per_example / peak if peak else None


def device_name(doctor: dict) -> tuple[str, str]:
    """(kind, name) of the machine's accelerator from the doctor report: GPU and its name,
    TPU and its accelerator type, or CPU and the processor."""
    gpus = (doctor.get("devices") or {}).get("gpus") or []
    if gpus:
        return "GPU", str(gpus[0])
    tpu_type = os.environ.get("TPU_ACCELERATOR_TYPE", "")
    if (doctor.get("plan") or {}).get("device") == "TPU" or tpu_type:
        return "TPU", f"TPU {tpu_type or 'unknown type'}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return "CPU", cpu


# --------------------------------------------------------------------------- the parts
def _run(cmd: list[str], timeout: float, log: Path, env: dict | None = None
         ) -> subprocess.CompletedProcess:
    """``cmd`` with a time limit; its output kept in ``log``. TimeoutExpired propagates."""
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO),
                **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env=full_env)
    log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def _tail(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return " | ".join(lines[-3:])[:300] or f"exit code {proc.returncode}"


def part_doctor(a, work: Path, budget: float) -> dict:
    proc = _run([sys.executable, "-m", "tfapp.doctor", "--json"], budget, work / "doctor.log")
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"doctor printed no JSON: {_tail(proc)}") from None
    return {"report": report, "problems": len(report.get("problems") or [])}


def part_default_run(a, work: Path, budget: float) -> dict:
    out = work / "default-run"
    extra = (["trainer.epochs=1", "trainer.steps_per_epoch=2", "data.seq_length=16",
              "trainer.export=false"] if a.dry_run else [])
    start = time.perf_counter()
    proc = _run([sys.executable, "-m", "tfapp.train", f"output_dir={out}", "name=default",
                 *extra], budget, work / "default-run.log")
    wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(_tail(proc))
    status = json.loads((out / "default" / "status.json").read_text())
    header = json.loads((out / "default" / "run_header.json").read_text())
    return {"wall_s": wall, "metrics": status.get("metrics") or {},
            "jit_compile": header.get("jit_compile"),
            "jit_compile_reason": header.get("jit_compile_reason", ""),
            "encoder": header.get("encoder", ""), "precision": header.get("precision")}


def train_rows(a, device_kind: str, device: str) -> tuple[list[dict], str, dict]:
    """The train part's rows (name, precision, xla, spe) and the shape."""
    if a.dry_run:
        shape = {"layers": 2, "hidden": 32, "heads": 2, "seq": 16, "batch": 4, "vocab": 2000}
        precision = "float32"
    else:
        shape = {"layers": 12, "hidden": 768, "heads": 12, "seq": 128, "batch": 32,
                 "vocab": 30522}
        no_bf16 = device_kind == "GPU" and any(k in device.lower() for k in NO_BF16)
        precision = "float16" if no_bf16 else "bfloat16"
    sys.path.insert(0, str(REPO))
    from tfapp.runtime import default_steps_per_execution

    # What trainer.steps_per_execution: auto (null) picks on this device kind.
    spe_auto = default_steps_per_execution(device_kind)
    auto_note = f"{spe_auto} (auto on {device_kind}: runtime.default_steps_per_execution)"
    if a.dry_run:
        spe_auto = 2
        auto_note = f"{spe_auto} (dry run)"
    rows = []
    for xla in (["off"] if a.dry_run else ["on", "off"]):  # XLA on the CPU: not in CI's dry run
        for spe, label in ((1, "1"), (spe_auto, "auto")):
            rows.append({"name": f"{precision} xla {xla} spe {label}", "precision": precision,
                         "xla": xla, "steps_per_execution": spe,
                         "spe_note": "1" if label == "1" else auto_note})
    return rows, precision, shape


def part_train(a, work: Path, budget: float, device_kind: str, device: str) -> dict:
    rows, precision, shape = train_rows(a, device_kind, device)
    result = work / "train.json"
    proc = _run([sys.executable, __file__, "--part", "train", "--out", str(work),
                 "--rows-json", json.dumps({"rows": rows, "shape": shape}),
                 "--steps", str(a.steps)], budget, work / "train.log")
    if not result.is_file():
        raise RuntimeError(_tail(proc))
    payload = json.loads(result.read_text())
    s = {**bench_train.shape_from(argparse.Namespace(**shape, intermediate=0)),
         "batch": shape["batch"]}
    flops = bench_train.train_flops_per_example(s)
    for row in payload["rows"]:
        if "median" in row:
            row["mfu"] = mfu(row["median"], flops, device)
            row["tflops"] = row["median"] * flops / 1e12
    return {**payload, "flops_per_example": flops, "precision": precision,
            "flops_formula": "6 x non-embedding params x seq + 12 x layers x hidden x seq^2",
            "peak_tflops": (peak_flops(device) or 0) / 1e12 or None}


def train_worker_part(a) -> int:
    """The train part in its own process (so its time limit can stop it): the rows of
    bench_train's tfapp worker, alternating."""
    spec = json.loads(a.rows_json)
    shape = spec["shape"]
    work = Path(a.out)
    s = {**bench_train.shape_from(argparse.Namespace(**shape, intermediate=0)),
         "batch": shape["batch"]}
    data = work / "train-data.npz"
    bench_train.make_data(data, s, max(256, 4 * shape["batch"]))
    base = [sys.executable, str(SCRIPTS / "bench_train.py"), "--worker", "tfapp",
            "--layers", str(shape["layers"]), "--hidden", str(shape["hidden"]),
            "--heads", str(shape["heads"]), "--seq", str(shape["seq"]),
            "--vocab", str(shape["vocab"]), "--batch", str(shape["batch"]),
            "--threads", str(os.cpu_count() or 1), "--data", str(data),
            "--workdir", str(work)]
    bench_rows = []
    for r in spec["rows"]:
        steps = max(a.steps, r["steps_per_execution"]) // r["steps_per_execution"] * \
            r["steps_per_execution"]  # whole executions
        bench_rows.append(bc.Row(r["name"], [
            *base, "--precision", r["precision"], "--jit-compile", r["xla"],
            "--spe", str(r["steps_per_execution"]), "--steps", str(steps)],
            {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}))
    bc.alternate(bench_rows, rounds=a.rounds, warmup=1, log_dir=work / "train-logs",
                 pause_s=0.2)
    sums = [bc.summary(r) for r in bench_rows]
    for spec_row, summ in zip(spec["rows"], sums, strict=True):
        summ.update({k: spec_row[k] for k in ("precision", "xla", "steps_per_execution",
                                              "spe_note")})
    bc.write_json(str(work / "train.json"), {"rows": sums, "shape": shape})
    return 0


def part_generate(a, work: Path, budget: float) -> dict:
    start = time.perf_counter()
    out = work / "generator-run"
    extra = ["trainer.epochs=1", "trainer.steps_per_epoch=2"] if a.dry_run else []
    proc = _run([sys.executable, "-m", "tfapp.train", "--config",
                 "configs/generator_local.yaml", f"output_dir={out}", "name=gen", *extra],
                budget, work / "generator-train.log")
    if proc.returncode:
        raise RuntimeError(f"training the generator: {_tail(proc)}")
    left = budget - (time.perf_counter() - start)
    result = work / "generate.json"
    sizes = (["--words", "4", "--calls", "2", "--batches", "1"] if a.dry_run
             else ["--words", "30", "--calls", "8", "--batches", "1,64"])
    proc = _run([sys.executable, str(SCRIPTS / "bench_generate.py"), "--model",
                 str(out / "gen"), "--rounds", str(a.rounds), "--warmup", "1",
                 "--work-dir", str(work / "generate"), "--json", str(result), *sizes],
                max(left, 1.0), work / "generate.log", env={"TF_USE_LEGACY_KERAS": "1"})
    if not result.is_file():
        raise RuntimeError(_tail(proc))
    batches = json.loads(result.read_text())["batches"]
    return {"batches": {b: [{k: r.get(k) for k in ("name", "median", "low", "high", "error")}
                            for r in v["rows"]] for b, v in batches.items()}}


def part_input(a, work: Path, budget: float) -> dict:
    result = work / "input.json"
    sizes = ["--examples", "256", "--seq-length", "16", "--batch-size", "4"] if a.dry_run \
        else ["--examples", "8192", "--seq-length", "128", "--batch-size", "32"]
    proc = _run([sys.executable, str(SCRIPTS / "bench_input.py"), "--corpus", "short",
                 "--rounds", str(a.rounds), "--warmup", "1", "--work-dir",
                 str(work / "input"), "--json", str(result), *sizes], budget,
                work / "input.log", env={"TF_USE_LEGACY_KERAS": "1"})
    if not result.is_file():
        raise RuntimeError(_tail(proc))
    rows = json.loads(result.read_text())["corpora"]["short"]["rows"]
    return {"rows": [{k: r.get(k) for k in ("name", "median", "low", "high", "error")}
                     for r in rows]}


# --------------------------------------------------------------------------- the table
def table_rows(results: dict) -> list[dict]:
    """The Markdown table's rows: part, item, value, unit, note (an error is a note)."""
    out = []

    def add(part, item, value=None, unit="", note=""):
        out.append({"part": part, "item": item, "value": value, "unit": unit, "note": note})

    dev = results["device"]
    add("device", dev["name"], None, "", f"{dev['kind']}; peak "
        + (f"{dev['peak_tflops']:.0f} TFLOP/s 16-bit" if dev["peak_tflops"] else
           "unknown (MFU left empty)"))
    for part, r in results["parts"].items():
        head = f"{r['seconds']:.0f} s of {r['budget_s']:.0f} s budget"
        if "error" in r:
            add(part, "failed", None, "", f"{r['error']} ({head})")
            continue
        if part == "doctor":
            plan = r["report"].get("plan") or {}
            add(part, "problems", r["problems"], "", f"strategy {plan.get('strategy')}, "
                f"precision {plan.get('precision')}, BERT encoder "
                f"{plan.get('bert_encoder', '?')}, jit_compile auto "
                f"{plan.get('jit_compile')} ({head})")
        elif part == "default_run":
            add(part, "wall time", r["wall_s"], "s",
                f"{r['precision']}, jit_compile {r['jit_compile']} "
                f"({r['jit_compile_reason']}); encoder {r['encoder']}")
            for k, v in sorted(r["metrics"].items()):
                add(part, k, v, "", "final metric")
        elif part == "train":
            for row in r["rows"]:
                if "median" not in row:
                    add(part, row["name"], None, "ex/s", f"failed: {row['error'][:200]}")
                    continue
                m = row.get("mfu")
                add(part, row["name"], row["median"], "ex/s",
                    f"MFU {m:.1%}" if m is not None else "MFU -")
                out[-1].update(mfu=m, tflops=row["tflops"], spe_note=row["spe_note"],
                               compile_s=row["compile_s"])
        elif part == "generate":
            for batch, rows in r["batches"].items():
                for row in rows:
                    add(part, f"batch {batch}: {row['name']}", row.get("median"),
                        "tokens/s", row.get("error") or "")
        elif part == "input":
            for row in r["rows"]:
                add(part, row["name"], row.get("median"), "ex/s", row.get("error") or "")
            if r.get("consumed_ex_s"):
                best = max((x.get("median") or 0 for x in r["rows"]), default=0)
                add(part, "input / step consumption", best / r["consumed_ex_s"], "x",
                    f"best input row against {r['consumed_ex_s']:.1f} ex/s of the fastest "
                    "train row (>= 1 keeps the accelerator fed)")
    return out


def markdown(results: dict) -> str:
    dev = results["device"]
    lines = [f"# tfapp accelerator check: {dev['name']}", "",
             f"{'dry run (CPU, toy sizes); ' if results['dry_run'] else ''}"
             f"{results['total_s']:.0f} s in all. MFU = ex/s x FLOPs per example "
             f"({results['parts'].get('train', {}).get('flops_formula', '-')}) / peak.", "",
             "| part | item | value | unit | note |", "|---|---|---|---|---|"]
    for row in table_rows(results):
        v = row["value"]
        value = "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)
        note = row["note"]
        if "spe_note" in row:
            note += f"; steps_per_execution {row['spe_note']}; compile {row['compile_s']:.1f} s"
        lines.append(f"| {row['part']} | {row['item']} | {value} | {row['unit']} | "
                     f"{note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


BUDGETS = {"doctor": 40, "default_run": 100, "train": 200, "generate": 70, "input": 50}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="accel-check", help="folder for accelerator.json/.md")
    p.add_argument("--dry-run", action="store_true",
                   help="toy sizes on the CPU, XLA-on train rows left out (CI)")
    p.add_argument("--parts", default=",".join(BUDGETS),
                   help=f"comma list of {', '.join(BUDGETS)}")
    p.add_argument("--budget-s", type=float, default=460.0,
                   help="all parts together; each gets its share (doctor 40, default run "
                        "100, train 200, generate 70, input 50 of 460)")
    p.add_argument("--steps", type=int, default=0, help="timed train steps per repetition "
                   "(default 64; 4 in a dry run)")
    p.add_argument("--rounds", type=int, default=0, help="timed repetitions (2; 1 dry)")
    p.add_argument("--part", default="", help=argparse.SUPPRESS)
    p.add_argument("--rows-json", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.steps = a.steps or (4 if a.dry_run else 64)
    a.rounds = a.rounds or (1 if a.dry_run else 2)
    if a.part == "train":
        return train_worker_part(a)

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="work-", dir=out))
    scale = a.budget_s / sum(BUDGETS.values())
    started = time.perf_counter()
    results: dict = {"dry_run": a.dry_run, "parts": {}, "work_dir": str(work)}
    doctor: dict = {}
    device_kind, device = "CPU", "unknown"
    for part in filter(None, a.parts.split(",")):
        budget = BUDGETS[part] * scale
        print(f"[{part}] budget {budget:.0f} s", flush=True)
        t0 = time.perf_counter()
        try:
            if part == "doctor":
                r = part_doctor(a, work, budget)
                doctor = r["report"]
            elif part == "default_run":
                r = part_default_run(a, work, budget)
            elif part == "train":
                device_kind, device = device_name(doctor)
                r = part_train(a, work, budget, device_kind, device)
            elif part == "generate":
                r = part_generate(a, work, budget)
            else:
                train = results["parts"].get("train", {}).get("rows", [])
                r = {**part_input(a, work, budget), "consumed_ex_s": max(
                    (x["median"] for x in train if "median" in x), default=None)}
        except subprocess.TimeoutExpired:
            r = {"error": f"ran past its budget of {budget:.0f} s"}
        except Exception as err:  # noqa: BLE001  (a part's failure is a row; the rest runs)
            r = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
        r.update(seconds=time.perf_counter() - t0, budget_s=budget)
        results["parts"][part] = r
        print(f"  {'failed: ' + r['error'] if 'error' in r else 'done'} "
              f"({r['seconds']:.0f} s)", flush=True)
    device_kind, device = device_name(doctor)
    results["device"] = {"kind": device_kind, "name": device,
                         "peak_tflops": (peak_flops(device) or 0) / 1e12 or None}
    results["total_s"] = time.perf_counter() - started
    results["table"] = table_rows(results)
    bc.write_json(str(out / "accelerator.json"), results)
    text = markdown(results)
    (out / "accelerator.md").write_text(text)
    print(text)
    return 0 if all("error" not in r for r in results["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
