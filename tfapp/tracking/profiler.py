"""Profiler captures: on demand from another process, and summaries read from the capture.

A capture is a session folder ``LOGDIR/plugins/profile/<time>/<host>.xplane.pb`` -- what
``trainer.profile_steps`` (Keras's TensorBoard callback) and ``capture`` (the profiler
client) write, and what TensorBoard's Profile tab reads. ``summarize`` runs the Profile
tab's own converters (``xprof.convert.raw_to_tool_data.xspace_to_tool_data``: overview_page,
input_pipeline_analyzer, framework_op_stats) over it, so the numbers are the ones the UI
shows, not estimates.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from tfapp.config import ConfigError
from tfapp.run_layout import RunLayout

#: How to take a capture, for every message that finds none (docs/observability.md).
HOW_TO_CAPTURE = ("train with trainer.profile_steps=START,STOP (e.g. 3,7: the steps strictly "
                  "between are recorded) or capture a running job with `python -m "
                  "tfapp.profile capture --address HOST:PORT --logdir RUN_DIR/logs`")

# xprof's own thresholds (input_pipeline_analysis: "HIGHLY" >= 20 %, "MODERATELY" >= 5 %).
HIGHLY_INPUT_BOUND = 20.0
MODERATELY_INPUT_BOUND = 5.0


def input_verdict(input_percent: float) -> str:
    """"high", "moderate" or "no": how input-bound steps that waited ``input_percent`` % of
    their time on input are, by xprof's thresholds."""
    if input_percent >= HIGHLY_INPUT_BOUND:
        return "high"
    return "moderate" if input_percent >= MODERATELY_INPUT_BOUND else "no"


def verdict(summary: dict[str, Any]) -> str:
    """The one verdict line of a summary (the profile command, the share report and the
    end of a profiled run all print this one): tfapp's measure by xprof's thresholds."""
    if "input_percent" not in summary:
        return f"input-bound: unknown ({summary.get('warning') or 'no steps measured'})"
    word = {"high": "HIGHLY input-bound", "moderate": "MODERATELY input-bound",
            "no": "not input-bound"}[summary["input_bound"]]
    return f"waiting on input: {summary['input_percent']:.1f}% of step time -> {word}"


def find_sessions(path: str | Path) -> list[Path]:
    """Capture session folders under ``path`` (a run directory or a logdir), oldest first."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"'{path}' does not exist; give a run directory (output_dir/name) "
                          "or its logs/ folder")
    sessions = {p.parent for p in path.rglob("*.xplane.pb")
                if p.parent.parent.name == "profile" and p.parent.parent.parent.name == "plugins"}
    # Session names are capture times (YYYY_MM_DD_HH_MM_SS), so names sort by time.
    return sorted(sessions, key=lambda p: (p.name, p.stat().st_mtime))


def capture(address: str, logdir: str | Path, duration_ms: int, attempts: int = 3) -> Path:
    """Capture ``duration_ms`` of the job whose profiler server listens at ``address``
    (``host:port``, i.e. ``trainer.profiler_port``) into ``logdir``; returns the session."""
    host, _, port = address.removeprefix("grpc://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--address {address}: expected HOST:PORT, e.g. localhost:6009")
    try:  # a clear message now rather than three silent tracing attempts
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as err:
        raise ConfigError(f"--address {address}: nothing listens there ({err.strerror or err}); "
                          "start the job with trainer.profiler_port=PORT "
                          "trainer.profiler_listen_all=true (its log prints the address)") from None
    import tensorflow as tf

    logdir = Path(logdir)
    before = set(find_sessions(logdir)) if logdir.exists() else set()
    service = address if address.startswith("grpc://") else f"grpc://{address}"
    try:
        tf.profiler.experimental.client.trace(service, str(logdir), duration_ms,
                                              num_tracing_attempts=attempts)
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
            RuntimeError) as err:  # the client raises RuntimeError('UNAVAILABLE: ...')
        msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"--address {address}: no trace captured ({msg}); is a job running "
                          "there with trainer.profiler_port set to that port, and is it "
                          "training (not starting up) during the capture?") from None
    new = [s for s in find_sessions(logdir) if s not in before]
    if not new:
        raise ConfigError(f"--address {address}: the profiler returned no trace into {logdir}")
    return new[-1]


def _unusable(session: Path, why: str) -> ConfigError:
    return ConfigError(f"no usable profiler capture in {session} ({why}); take a new one: "
                       f"{HOW_TO_CAPTURE}")


def _tables(paths: list[str], tool: str) -> list[dict]:
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data(paths, tool, {})
    if not data:
        raise _unusable(Path(paths[0]).parent,
                        f"the profile plugin cannot read {', '.join(Path(p).name for p in paths)}"
                        f" ({tool}): truncated or corrupt, or from another TensorFlow version")
    return json.loads(data)


def _rows(table: dict) -> list[dict]:
    """A gviz DataTable's rows as dicts keyed by column id."""
    ids = [c.get("id") for c in table.get("cols", [])]
    return [dict(zip(ids, [c.get("v") if c else None for c in row["c"]], strict=False))
            for row in table.get("rows", [])]


def summarize(session: str | Path, top: int = 10) -> dict[str, Any]:
    """Step time, input-wait share with a verdict and advice, and the top ops of a capture."""
    session = Path(session)
    paths = sorted(str(p) for p in session.glob("*.xplane.pb"))
    if not paths:
        raise _unusable(session, "no *.xplane.pb file")
    # An empty file (a capture killed as it started) converts to an empty summary that
    # reads like a run of "0 steps"; it is no capture at all.
    if all(Path(p).stat().st_size == 0 for p in paths):
        raise _unusable(session, f"{', '.join(Path(p).name for p in paths)} is empty")
    pipeline = _tables(paths, "input_pipeline_analyzer")
    steps_table, input_ops_table = pipeline[1], pipeline[2]
    props = steps_table.get("p", {})
    steps = [r for r in _rows(steps_table) if r.get("stepTimeMs")]
    out: dict[str, Any] = {"session": str(session), "hosts": [Path(p).name.split(".")[0]
                                                              for p in paths],
                           "hardware": props.get("hardware_type", ""),
                           "steps": len(steps), "xprof_conclusion":
                               props.get("input_conclusion", "")}
    messages = [r.get("message") for r in _rows(pipeline[-1]) if r.get("message")]
    out["step_source"] = "xprof"
    if not steps:
        # xprof groups no steps for some models (seen: any LSTM/while-loop model on CPU) even
        # though Keras marked them; measure from the same capture's trace instead.
        steps = steps_from_trace(paths)
        out["steps"] = len(steps)
        out["step_source"] = "keras step markers in the trace (xprof grouped no steps)"
    if not steps:
        out["warning"] = (messages[0] if messages else "no step markers in the capture")
        out["input_bound"] = "unknown"
        out["advice"] = ["capture more steps: trainer.profile_steps=START,STOP records the "
                         "STOP-START-1 steps strictly inside the range; an on-demand "
                         "capture needs --duration-ms longer than a few steps"]
    else:
        total = sum(r["stepTimeMs"] for r in steps)
        waiting = sum(r.get("infeedTimeMs") or 0.0 for r in steps)
        times = sorted(r["stepTimeMs"] for r in steps)
        out["step_time_ms"] = {"mean": total / len(steps), "min": times[0], "max": times[-1],
                               "median": times[len(times) // 2]}
        out["input_percent"] = 100.0 * waiting / total
        out["input_bound"] = input_verdict(out["input_percent"])
        out["advice"] = advice(out["input_percent"], input_ops_table.get("p", {}),
                                _run_data_config(session))
    op_table = _tables(paths, "framework_op_stats")[0]
    out["top_ops"] = _top_ops(op_table, top)
    if not steps and not out["top_ops"]:  # nothing recorded: no step, no op
        raise _unusable(session, "it recorded no training step and no op")
    out["top_op_types"] = _top_op_types(op_table, top)
    return out


def steps_from_trace(paths: list[str]) -> list[dict]:
    """``steps_from_events`` of the capture files ``paths`` (their trace viewer events)."""
    return steps_from_events(_tables(paths, "trace_viewer").get("traceEvents", []))


def steps_from_events(events: list[dict]) -> list[dict]:
    """Per Keras step marker ("train" events with a step_num, from the trace viewer's
    converter): its duration and the time ``IteratorGetNext`` spent inside it (the wait for
    the next batch, what xprof reports as input time), in milliseconds."""
    spans = [e for e in events if e.get("ph") == "X" and "step_num" in e.get("args", {})
             and str(e.get("name", "")).split(" ")[0] == "train"]
    gets = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X"
            and e.get("name") == "IteratorGetNextOp::DoCompute"]
    rows = []
    for e in spans:  # trace times are microseconds
        start, end = e["ts"], e["ts"] + e["dur"]
        wait = sum(max(0.0, min(end, g1) - max(start, g0)) for g0, g1 in gets)
        rows.append({"stepTimeMs": e["dur"] / 1e3, "infeedTimeMs": wait / 1e3})
    return rows


def _run_data_config(session: Path) -> dict | None:
    """The ``data`` group of the run that holds ``session`` (its params.yaml), if any."""
    import yaml

    for parent in session.parents:
        params = RunLayout(parent).params
        if params.is_file():
            return (yaml.safe_load(params.read_text()) or {}).get("data") or {}
    return None


def advice(input_percent: float, times: dict, data: dict | None) -> list[str]:
    """What to change, from xprof's split of the input time (file reads vs preprocessing)
    and, for a tfapp run, what its data config already does (``data`` from params.yaml;
    None for other captures: then every remedy is listed)."""
    if input_percent < MODERATELY_INPUT_BOUND:
        return ["not input-bound: the pipeline keeps up; speed up the model itself (top ops "
                "below; runtime.precision=mixed_bfloat16, a larger data.batch_size)"]
    us = {k: float(v) for k, v in times.items() if k.endswith("_us")}
    read = us.get("demanded_file_read_us", 0.0) + us.get("advanced_file_read_us", 0.0)
    data = data if data is not None else {}
    tfapp_run = bool(data)
    remedies = []
    if read > us.get("preprocessing_us", 0.0):
        remedies.append(f"reading files takes {read / 1e3:.1f} ms vs preprocessing "
                      f"{us.get('preprocessing_us', 0.0) / 1e3:.1f} ms: read ahead "
                      "(interleave + prefetch), or keep the data local / in data.cache")
    if not tfapp_run:  # tfapp's own pipelines always map in parallel
        remedies.append("map with num_parallel_calls=tf.data.AUTOTUNE (parallel map), "
                      "deterministic=False where order does not matter")
    if not data.get("prefetch", False):
        remedies.append("prefetch(tf.data.AUTOTUNE) at the end of the pipeline "
                      "(data.prefetch=true) so input overlaps the train step")
    if not data.get("cache"):
        remedies.append("cache the preprocessed data (data.cache=memory when it fits in RAM, "
                      "else a file prefix) so later epochs skip the work")
    if not data.get("snapshot"):
        remedies.append("snapshot it (data.snapshot=DIR): preprocessed once, reused by later "
                      "runs and tuner trials")
    if not (data.get("service") or {}).get("address"):
        remedies.append("if the host CPUs are saturated, move preprocessing to other machines "
                      "with the tf.data service (data.service.address)")
    else:
        remedies.append("the tf.data service is on: add service workers")
    return remedies


def _top_ops(table: dict, top: int) -> list[dict]:
    """The ops with the most self time: device ops when the capture has any, else the host's
    (a CPU-only run executes its TensorFlow ops on the host)."""
    # IDLE is no op; Dataset rows are the input pipeline, reported as input wait above.
    rows = [r for r in _rows(table) if r.get("type") not in ("IDLE", "Dataset")]
    device = [r for r in rows if r.get("host_or_device") == "Device"]
    rows = device or rows
    total = sum(r.get("total_self_time") or 0.0 for r in rows) or 1.0
    rows.sort(key=lambda r: r.get("total_self_time") or 0.0, reverse=True)
    return [{"where": r.get("host_or_device"), "type": r.get("type"),
             "name": r.get("operation"), "occurrences": int(r.get("occurrences") or 0),
             "self_time_us": float(r.get("total_self_time") or 0.0),
             "self_percent": 100.0 * (r.get("total_self_time") or 0.0) / total}
            for r in rows[:top]]


def _top_op_types(table: dict, top: int) -> list[dict]:
    """Self time summed per op type (MatMul, Softmax, ...), the same rows as ``_top_ops``."""
    ops = _top_ops(table, 10 ** 9)
    by_type: dict[str, dict] = {}
    for op in ops:
        t = by_type.setdefault(op["type"], {"type": op["type"], "self_time_us": 0.0,
                                            "self_percent": 0.0})
        t["self_time_us"] += op["self_time_us"]
        t["self_percent"] += op["self_percent"]
    return sorted(by_type.values(), key=lambda t: t["self_time_us"], reverse=True)[:top]


def format_summary(s: dict[str, Any]) -> str:
    lines = [f"profile: {s['session']} (host {', '.join(s['hosts'])}, {s['hardware']})"]
    if "step_time_ms" in s:
        st = s["step_time_ms"]
        lines.append(f"steps measured: {s['steps']}; step time: mean {st['mean']:.1f} ms, "
                     f"median {st['median']:.1f} ms (min {st['min']:.1f}, max {st['max']:.1f})")
        if s.get("step_source", "xprof") != "xprof":
            lines.append(f"  (from {s['step_source']})")
    else:
        lines.append(f"steps measured: 0 ({s.get('warning', '')})")
    lines.append(verdict(s))
    # xprof's own conclusion is a second verdict: shown only where it measured the steps
    # this one is computed from (with the trace fallback it says "no step", --json has it).
    if s.get("xprof_conclusion") and s.get("step_source", "xprof") == "xprof" \
            and "step_time_ms" in s:
        lines.append(f"xprof: {s['xprof_conclusion']}")
    lines.append("advice:")
    lines += [f"  - {a}" for a in s["advice"]]
    if s["top_ops"]:
        lines.append(f"top ops by self time ({s['top_ops'][0]['where'].lower()}):")
        for i, op in enumerate(s["top_ops"], 1):
            lines.append(f"  {i:2d}. {op['self_percent']:5.1f}%  {op['self_time_us'] / 1e3:8.2f} ms"
                         f"  x{op['occurrences']:<5d} {op['type']:<28} {op['name']}")
    if s.get("top_op_types"):
        lines.append("by op type: " + ", ".join(
            f"{t['type']} {t['self_percent']:.1f}%" for t in s["top_op_types"][:6]))
    return "\n".join(lines)
