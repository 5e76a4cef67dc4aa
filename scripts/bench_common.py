"""Equal timing for the benchmark scripts: every row in its own warm process, rows alternating.

A row is a worker process (tfapp's interpreter or the peers' venv) that sets itself up
once, then answers ``rep`` commands on stdin with one timed repetition each. The
orchestrator (``alternate``) starts the rows one after another (so no set-up competes
with another row's), gives every row the same untimed warm-up repetitions, then asks for
the timed repetitions in rounds, A B C A B C ..., so a change in the machine's load
(it is shared) lands on every row alike. Tables show the median rate and its range over
the rounds; the first warm-up repetition less the median one is the row's
compile/trace time, its own column (or, when the worker's set-up already made the first
call, e.g. to check outputs, that call less one median call: ``first_call_s`` and
``calls_per_rep`` in its ready message).

Worker side::

    def setup():          # build the model, check outputs ... (not timed here)
        ...
        return {"versions": ...}, rep     # rep() -> {"seconds": s, "units": n, ...}
    serve(setup)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MARK = "BENCH_ROW "  # worker answers start with this; anything else on stdout is noise


# --------------------------------------------------------------------------- worker side
def _send(message: dict) -> None:
    print(MARK + json.dumps(message), flush=True)


def serve(setup: Callable[[], tuple[dict, Callable[[], dict]]]) -> None:
    """Run ``setup`` once, say ``ready``, then one ``rep()`` per ``rep`` line on stdin."""
    start = time.perf_counter()
    info, rep = setup()
    _send({"ready": True, "setup_s": time.perf_counter() - start, **info})
    for line in sys.stdin:
        if line.strip() != "rep":
            break
        _send(rep())


def timed(fn: Callable[[], float]) -> dict:
    """One repetition: ``fn()`` returns how many units (examples, tokens) it produced."""
    start = time.perf_counter()
    units = fn()
    return {"seconds": time.perf_counter() - start, "units": float(units)}


# --------------------------------------------------------------------------- orchestrator
@dataclass
class Row:
    """One row of a table: its name and the command that starts its worker."""

    name: str
    cmd: list[str]
    env: dict[str, str | None] = field(default_factory=dict)  # over os.environ; None unsets
    info: dict = field(default_factory=dict)            # from the worker's ready message
    reps: list[dict] = field(default_factory=list)      # timed repetitions
    warmup: list[dict] = field(default_factory=list)
    error: str = ""


class _Worker:
    def __init__(self, row: Row, log: Path):
        self.row, self.log = row, log
        self.err = log.open("w")
        env = {**os.environ, **row.env}
        self.proc = subprocess.Popen(row.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True,
                                     env={k: v for k, v in env.items() if v is not None})

    def read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        self.proc.wait()
        tail = self.log.read_text(errors="replace").strip().splitlines()[-4:]
        raise RuntimeError(f"{self.row.name}: worker exited {self.proc.returncode}: "
                           + " | ".join(tail))

    def rep(self) -> dict:
        self.proc.stdin.write("rep\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.err.close()


def alternate(rows: list[Row], *, rounds: int, warmup: int = 1, log_dir: Path,
              pause_s: float = 1.0) -> list[Row]:
    """Warm every row up (``warmup`` untimed repetitions each), then ``rounds`` rounds of
    one timed repetition per row in a fixed order. A row whose worker fails keeps its
    error and drops out; the others go on. ``pause_s`` between repetitions lets the
    previous row's spinning thread pools (OpenMP, oneDNN) go to sleep first."""
    log_dir.mkdir(parents=True, exist_ok=True)
    workers: list[_Worker] = []
    try:
        for i, row in enumerate(rows):
            print(f"  start {row.name}", flush=True)
            w = _Worker(row, log_dir / f"row{i}.log")
            workers.append(w)
            try:
                row.info = w.read()
                row.warmup = [w.rep() for _ in range(warmup)]
            except (RuntimeError, OSError) as err:
                row.error = str(err)
                print(f"  {row.error}", flush=True)
                w.close()
        live = [w for w in workers if not w.row.error]
        for r in range(rounds):
            for w in live:
                if w.row.error:
                    continue
                time.sleep(pause_s)
                try:
                    w.row.reps.append(w.rep())
                except (RuntimeError, OSError) as err:
                    w.row.error = str(err)
                    print(f"  {w.row.error}", flush=True)
            print(f"  round {r + 1}/{rounds} done", flush=True)
    finally:
        for w in workers:
            w.close()
    return rows


# --------------------------------------------------------------------------- statistics
def rates(row: Row) -> list[float]:
    return [r["units"] / r["seconds"] for r in row.reps]


def summary(row: Row) -> dict:
    """Median rate and range over the timed repetitions, median seconds per repetition,
    and compile/trace seconds (first warm-up repetition less the median timed one)."""
    if row.error or not row.reps:
        return {"name": row.name, "error": row.error or "no repetitions"}
    values = rates(row)
    seconds = statistics.median(r["seconds"] for r in row.reps)
    first = row.warmup[0]["seconds"] if row.warmup else float("nan")
    compile_s = first - seconds
    if "first_call_s" in row.info:  # the worker's set-up made the first (tracing) call
        compile_s = row.info["first_call_s"] - seconds / row.info["calls_per_rep"]
    return {"name": row.name, "median": statistics.median(values), "low": min(values),
            "high": max(values), "rounds": len(values), "rep_s": seconds,
            "compile_s": max(0.0, compile_s), "setup_s": row.info.get("setup_s"),
            **{k: v for k, v in row.info.items() if k not in ("ready", "setup_s")}}


def table(title: str, rows: list[Row], unit: str, reference: str | None = None,
          extra: Callable[[dict], str] | None = None) -> tuple[list[str], list[dict]]:
    """Lines of a table (median, range, compile, ratio of medians to ``reference``) and
    the summaries behind it."""
    sums = [summary(r) for r in rows]
    ref = next((s for s in sums if s["name"] == reference and "median" in s), None)
    width = max(len(s["name"]) for s in sums) + 2
    head = (f"{'row':<{width}}{unit:>12} {'range':>21} {'rep s':>8} {'compile s':>10}"
            f"{'  vs ' + reference if ref else ''}")
    lines = [title, head, "-" * len(head)]
    for s in sums:
        if "median" not in s:
            lines.append(f"{s['name']:<{width}}{'failed':>12}  {s['error'][:100]}")
            continue
        ratio = f"{s['median'] / ref['median']:9.2f}x" if ref else ""
        lines.append(f"{s['name']:<{width}}{s['median']:12.1f} "
                     f"{s['low']:10.1f}-{s['high']:<10.1f} {s['rep_s']:8.3f} "
                     f"{s['compile_s']:10.2f}{ratio}"
                     + (f"   {extra(s)}" if extra else ""))
    return lines, sums


def ratio(sums: list[dict], a: str, b: str) -> float | None:
    """Median rate of row ``a`` over row ``b`` (None when either failed)."""
    by = {s["name"]: s for s in sums}
    if "median" not in by.get(a, {}) or "median" not in by.get(b, {}):
        return None
    return by[a]["median"] / by[b]["median"]


def write_json(path: str, payload: dict) -> None:
    """Whole or nothing (tfapp.atomic): a killed run leaves no half-written results."""
    if path:
        from tfapp.atomic import write_text

        write_text(path, json.dumps(payload, indent=1) + "\n")
