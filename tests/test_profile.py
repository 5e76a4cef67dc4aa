"""Profiler captures (trainer.profile_steps, on demand from a second process) and their
summaries through the profile plugin's own converters."""

from __future__ import annotations

import subprocess
import sys
import time

from tfapp.tracking import profiler

import pytest
from conftest import REPO, free_ports, run_python, run_tfapp, subprocess_env


def _fit_under_profiler(logdir, dataset, steps: int) -> None:
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile("adam", "mse")
    model.fit(dataset, epochs=1, steps_per_epoch=3, verbose=0)  # trace outside the capture
    tf.profiler.experimental.start(str(logdir))
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
    tf.profiler.experimental.stop()


def _slow_sequential_pipeline():
    import tensorflow as tf

    # ~1 ms of work per element (a 16-row batch ~15 ms against a ~1 ms train step), in a
    # map without num_parallel_calls.
    def slow(x):
        m = tf.eye(192) + tf.reduce_mean(x)
        for _ in range(6):
            m = tf.linalg.matmul(m, m) / 192.0
        return x + tf.reduce_sum(m) * 0.0, tf.reduce_sum(x, keepdims=True)

    return tf.data.Dataset.from_tensor_slices(tf.random.normal([4096, 16])).map(slow) \
        .batch(16).repeat()


def _cached_prefetched_capture(logdir) -> None:
    """A compute-heavy model (three 1024-wide layers) fed from a cache with prefetch."""
    import tensorflow as tf

    x = tf.random.normal([256, 256])
    ds = tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, 1, keepdims=True))) \
        .batch(256).cache().repeat().prefetch(4)
    model = tf.keras.Sequential([tf.keras.layers.Dense(1024, activation="relu"),
                                 tf.keras.layers.Dense(1024, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile("adam", "mse")
    model.fit(ds, epochs=1, steps_per_epoch=3, verbose=0)
    tf.profiler.experimental.start(str(logdir))
    model.fit(ds, epochs=1, steps_per_epoch=10, verbose=0)
    tf.profiler.experimental.stop()


@pytest.mark.long  # two timed captures: how busy the machine is moves their input shares
def test_summary_puts_a_slow_sequential_pipeline_far_above_a_cached_prefetched_one(tmp_path):
    """Both captures in one test on one machine: how busy it is moves both input shares, so
    the test asserts their gap, not where each falls against a threshold (input_verdict's
    thresholds are checked on fixed numbers below; CI leaves this one out: its verdict rests
    on timings)."""
    # 24 steps: xprof leaves out the capture's 2 edge steps that the fallback counts, and
    # with 12 steps one slow edge step moved the two shares up to 12.6 points apart (a
    # full-suite run); with 24 they were 2-4 points apart in 4 runs.
    _fit_under_profiler(tmp_path / "slow", _slow_sequential_pipeline(), steps=24)
    _cached_prefetched_capture(tmp_path / "fast")
    (session,) = profiler.find_sessions(tmp_path / "slow")
    slow = profiler.summarize(session)
    fast = profiler.summarize(profiler.find_sessions(tmp_path / "fast")[-1])

    assert slow["steps"] >= 8 and fast["steps"] >= 6
    assert slow["step_time_ms"]["mean"] > 0 and fast["step_time_ms"]["mean"] > 0
    # Measured at load average ~8 on 2 cores (3 runs): slow 75-97 %, cached 0.1-0.2 %.
    assert slow["input_percent"] - fast["input_percent"] >= 50, (slow, fast)
    assert slow["input_bound"] == "high"  # follows from the gap: >= 50 % waiting
    advice = " ".join(slow["advice"])
    # Not a tfapp run (no params.yaml): every remedy, starting with the parallel map.
    assert "parallel map" in advice and "data.cache" in advice and "data.snapshot" in advice
    assert "tf.data service" in advice
    # MatMul, _FusedMatMul, or _MklMatMul/_MklFusedMatMul with oneDNN (on by default on x86)
    assert any("MatMul" in op["type"] for op in slow["top_op_types"]), slow["top_op_types"]
    assert "MatMul" in fast["top_ops"][0]["type"], fast["top_ops"][0]
    # The fallback used when xprof groups no steps measures the same capture alike.
    rows = profiler.steps_from_trace([str(p) for p in session.glob("*.xplane.pb")])
    share = 100 * sum(r["infeedTimeMs"] for r in rows) / sum(r["stepTimeMs"] for r in rows)
    assert abs(share - slow["input_percent"]) < 10, (share, slow["input_percent"])


def test_input_verdict_and_its_advice_on_fixed_numbers():
    verdicts = [profiler.input_verdict(p) for p in (0.0, 4.99, 5.0, 19.99, 20.0, 100.0)]
    assert verdicts == ["no", "no", "moderate", "moderate", "high", "high"]
    assert profiler.advice(4.99, {}, None) == [
        "not input-bound: the pipeline keeps up; speed up the model itself (top ops "
        "below; runtime.precision=mixed_bfloat16, a larger data.batch_size)"]
    # A tfapp run that already caches and prefetches is not told to (files read slower
    # than they are preprocessed: read ahead first).
    advice = profiler.advice(30.0, {"demanded_file_read_us": 9000.0, "preprocessing_us": 10.0},
                              {"prefetch": True, "cache": "memory"})
    assert advice[0].startswith("reading files takes 9.0 ms vs preprocessing 0.0 ms")
    assert not any("parallel map" in a or "data.prefetch" in a or "data.cache=" in a
                   for a in advice)
    summary = {"session": "S", "hosts": ["h"], "hardware": "CPU", "steps": 3,
               "step_time_ms": {"mean": 2.0, "median": 2.0, "min": 1.0, "max": 3.0},
               "input_percent": 3.0, "input_bound": profiler.input_verdict(3.0),
               "advice": profiler.advice(3.0, {}, None), "top_ops": []}
    text = profiler.format_summary(summary)
    assert "waiting on input: 3.0% of step time -> not input-bound" in text
    assert "  - not input-bound: the pipeline keeps up" in text


def test_one_verdict_per_capture_when_xprof_grouped_no_steps():
    """The trace fallback measured the steps; xprof's own "no step" conclusion is a second,
    contradicting verdict and stays out of the text (the report prints the same text)."""
    summary = {"session": "S", "hosts": ["h"], "hardware": "CPU", "steps": 8,
               "step_source": "keras step markers in the trace (xprof grouped no steps)",
               "xprof_conclusion": "No step marker observed and hence the step time is "
                                   "unknown. This may happen if (1) training steps are not "
                                   "instrumented (e.g., if you are not using Keras)",
               "step_time_ms": {"mean": 2.0, "median": 2.0, "min": 1.0, "max": 3.0},
               "input_percent": 25.0, "input_bound": profiler.input_verdict(25.0),
               "advice": [], "top_ops": []}
    text = profiler.format_summary(summary)
    assert "No step marker" not in text
    assert [line for line in text.splitlines() if "input-bound" in line or "step marker"
            in line.lower() and "from" not in line] == [
        "waiting on input: 25.0% of step time -> HIGHLY input-bound"]
    assert profiler.verdict(summary) in text
    assert profiler.verdict({"warning": "no step markers"}) == (
        "input-bound: unknown (no step markers)")


def test_keras_step_marker_fallback_measures_the_wait_inside_each_step():
    """The fallback's arithmetic on a fixed trace: IteratorGetNext time that overlaps a
    step counts toward that step only (microseconds in, milliseconds out)."""
    events = [
        {"ph": "X", "name": "train 1", "ts": 0, "dur": 10000, "args": {"step_num": "1"}},
        {"ph": "X", "name": "train 2", "ts": 10000, "dur": 20000, "args": {"step_num": "2"}},
        {"ph": "X", "name": "train_function", "ts": 0, "dur": 30000, "args": {}},  # no step
        {"ph": "X", "name": "IteratorGetNextOp::DoCompute", "ts": 1000, "dur": 2000},
        # straddles the two steps: 1 ms in step 1, 4 ms in step 2
        {"ph": "X", "name": "IteratorGetNextOp::DoCompute", "ts": 9000, "dur": 5000},
        {"ph": "X", "name": "IteratorGetNextOp::DoCompute", "ts": 40000, "dur": 5000},  # after
        {"ph": "i", "name": "IteratorGetNextOp::DoCompute", "ts": 12000},  # not a span
    ]
    assert profiler.steps_from_events(events) == [
        {"stepTimeMs": 10.0, "infeedTimeMs": 3.0}, {"stepTimeMs": 20.0, "infeedTimeMs": 4.0}]


def test_summary_of_an_lstm_model_falls_back_to_keras_step_markers(tmp_path):
    """xprof groups no steps for a model with an LSTM (a while loop) on CPU; the summary
    then measures the steps Keras marked in the trace."""
    import tensorflow as tf

    x = tf.random.uniform([512, 8], maxval=50, dtype=tf.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, tf.random.uniform([512, 1]))).batch(32) \
        .repeat()
    model = tf.keras.Sequential([tf.keras.layers.Embedding(50, 16), tf.keras.layers.LSTM(32),
                                 tf.keras.layers.Dense(1)])
    model.compile("adam", "mse")
    model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)
    tf.profiler.experimental.start(str(tmp_path))
    model.fit(ds, epochs=1, steps_per_epoch=8, verbose=0)
    tf.profiler.experimental.stop()
    s = profiler.summarize(profiler.find_sessions(tmp_path)[-1])

    assert "No step" in s["xprof_conclusion"]  # the plugin found none ...
    assert s["steps"] == 8 and s["step_source"].startswith("keras step markers")  # ... we do
    # The verdict itself depends on timing (a busy machine delays the 5 ms steps' input),
    # so only its form is checked here; the input-bound tests above check its meaning.
    assert s["step_time_ms"]["mean"] > 0 and 0 <= s["input_percent"] <= 100
    assert s["input_bound"] in ("no", "moderate", "high")


def test_cli_errors_are_one_line(tmp_path):
    (tmp_path / "run").mkdir()
    out = run_tfapp("tfapp.profile", ["summary", str(tmp_path / "run")])
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"tfapp: error: no profiler capture under '{tmp_path / 'run'}'; train with "
        "trainer.profile_steps=START,STOP (e.g. 3,7: the steps strictly between are recorded) "
        "or capture a running job with `python -m tfapp.profile capture --address HOST:PORT "
        "--logdir RUN_DIR/logs`"]
    port = free_ports(1)[0]
    out = run_tfapp("tfapp.profile", ["capture", "--address", f"localhost:{port}",
                                      "--logdir", str(tmp_path / "logs")])
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"tfapp: error: --address localhost:{port}: nothing listens there")
    assert "trainer.profiler_port" in line
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_profile_steps_and_capture_from_a_second_process(tmp_path):
    """One training process: trainer.profile_steps captures steps 2..6 through the
    TensorBoard callback; later `tfapp.profile capture` records it from another process
    through trainer.profiler_port. Both land where TensorBoard's profile plugin reads them
    (RUN/logs/plugins/profile/SESSION/HOST.xplane.pb) and both summarise."""
    port = free_ports(1)[0]
    run = tmp_path / "run"
    train = subprocess.Popen(
        [sys.executable, "-m", "tfapp.train", "--config", "configs/classifier_local.yaml",
         f"output_dir={tmp_path}", "name=run", "trainer.profile_steps=2,6",
         f"trainer.profiler_port={port}", "trainer.profiler_listen_all=true",
         "trainer.epochs=100", "trainer.steps_per_epoch=10",
         "trainer.export=false"],
        cwd=REPO, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        deadline = time.time() + 240
        history = run / "history.csv"
        # After the first epoch the train step is traced and steady.
        while not (history.is_file() and len(history.read_text().splitlines()) >= 2):
            assert train.poll() is None, train.stderr.read()[-3000:]
            assert time.time() < deadline, "training did not finish an epoch in time"
            time.sleep(0.5)
        captured = run_python(["-m", "tfapp.profile", "capture", "--address",
                               f"localhost:{port}", "--duration-ms", "5000",
                               "--logdir", str(run / "logs"), "--summary"], timeout=180)
        assert captured.returncode == 0, captured.stderr[-3000:]
    finally:
        train.kill()
        train.wait(timeout=60)
    # The job says what it exposes: TensorFlow's server binds every interface.
    assert f"listening on all interfaces ([::]:{port}) with no authentication" in \
        train.stderr.read()

    sessions = profiler.find_sessions(run)
    assert len(sessions) == 2, sessions
    assert all(s.parent == run / "logs" / "plugins" / "profile" for s in sessions)
    assert str(sessions[-1]) in captured.stdout
    by_steps, on_demand = (profiler.summarize(s) for s in sessions)
    assert by_steps["steps"] == 3  # the steps strictly inside 2..6 (start/stop cut the ends)
    assert by_steps["step_time_ms"]["mean"] > 1.0
    # How many steps the 5 s on-demand capture holds depends on how busy the machine is
    # (it may fall into an epoch end's validation): it is judged by the ops it recorded,
    # which training and validation both run.
    for s in (by_steps, on_demand):
        assert s["input_bound"] in ("high", "moderate", "no")
        assert any("MatMul" in op["type"] for op in s["top_op_types"]), s["top_op_types"]

    # --summary printed the new capture's summary (the CLI's `summary RUN` reads the newest).
    assert f"profile: {sessions[-1]}" in captured.stdout
    assert "waiting on input:" in captured.stdout and "top ops by self time" in captured.stdout
