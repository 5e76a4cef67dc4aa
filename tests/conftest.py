"""Shared test helpers: every test process uses tf-keras as tf.keras, quietly."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("WANDB_MODE", "disabled")
# precision auto keeps float32 on every CPU (tfapp.runtime.CPU_BF16_ENV): the suite's
# numeric comparisons (exports against transformers, replicas against one device) are
# float32's; bfloat16 is tested where it is asked for (test_mixed_precision), and the
# auto choice itself from given CPU flags (test_runtime).
os.environ.setdefault("TFAPP_CPU_BFLOAT16", "0")
# builtin:tiny (the tiny Hub BERT) is built once per test session into a private cache,
# never into the user's ~/.cache/tfapp.
os.environ.setdefault("TFAPP_CACHE_DIR", tempfile.mkdtemp(prefix="tfapp-test-cache-"))
# Every XLA compilation of this test process and of the subprocesses it starts (they
# inherit the variable) dumps its modules here: XLA's own public debug flag, read once
# when XLA first compiles. A test that compiles with XLA on the CPU must carry the xla_cpu
# marker (TensorFlow's TPU build cannot run it); see pytest_runtest_call below.
XLA_DUMP_DIR = Path(tempfile.mkdtemp(prefix="tfapp-test-xla-dump-"))
os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"),
                                                 f"--xla_dump_to={XLA_DUMP_DIR}"]))

import pytest

REPO = Path(__file__).resolve().parents[1]

# tests/beam needs apache-beam, which cannot share this venv (protobuf<7, pyarrow<26):
# scripts/check_beam.sh builds its own venv and runs it with TFAPP_BEAM_TESTS=1. Not
# collected otherwise -- never a skip that would look like a pass.
collect_ignore = [] if os.environ.get("TFAPP_BEAM_TESTS") == "1" else ["beam"]


def subprocess_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.update({"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})
    env.update(extra)
    return env


def run_python(args: list[str], *, timeout: int = 300, env: dict | None = None,
               cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` in a fresh interpreter (TensorFlow device setup is per process)."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env or subprocess_env(), cwd=cwd or REPO)


def run_tfapp(module: str, argv: list[str], *, env: dict[str, str | None] | None = None,
              cwd: Path | None = None, input: str | None = None,
              ) -> subprocess.CompletedProcess:
    """Run the entry point ``module.main(argv)`` in this process, as ``run_python(["-m",
    module, *argv])`` would in a fresh one, without its 10-20 s of start-up (TensorFlow,
    tensorflow-text and the export load once per test process): returns its exit code
    and what it printed on stdout and stderr, tfapp's log lines included.

    For tests where the process boundary is not the point; keep ``run_python`` for a
    fresh interpreter's behaviour (TensorFlow's C++ start-up lines, signals, device
    settings, ``python -I``). ``env`` sets variables for the call only (a None value
    unsets one); ``input`` is its stdin (as ``subprocess.run(input=...)``; else empty).
    Undone afterwards, so the tests after it in this process are unaffected: the
    environment, the working directory, ``sys.argv``, the logging handlers and levels
    the command set (tfapp's ``setup_logging`` binds a new handler to the captured
    stderr), absl's verbosity and Keras's global precision policy. An exception a
    subprocess would die of is its traceback on stderr and exit code 1.
    """
    import contextlib
    import importlib
    import io
    import logging
    import traceback

    out, err = io.StringIO(), io.StringIO()
    stdin = io.TextIOWrapper(io.BytesIO((input or "").encode()), encoding="utf-8")
    saved_environ, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    saved_stdin = sys.stdin
    root = logging.getLogger()
    saved_root = (root.handlers[:], root.level)
    # Every logger's handlers: a command (or TensorFlow on import) may add its own.
    saved_loggers = {name: (lg.handlers[:], lg.level, lg.propagate)
                     for name, lg in logging.Logger.manager.loggerDict.items()
                     if isinstance(lg, logging.Logger)}
    absl_logging = sys.modules.get("absl.logging")
    saved_absl = absl_logging.get_verbosity() if absl_logging else None
    keras = sys.modules.get("tf_keras")
    saved_policy = keras.mixed_precision.global_policy().name if keras else None
    # pytest's own log-capture handlers would make tfapp's logging.basicConfig a no-op
    # and keep its lines off stderr: the command starts with a bare root logger, as a
    # fresh process does.
    root.handlers = []
    try:
        for name, value in (env or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        os.chdir(cwd or REPO)
        sys.argv, sys.stdin = [module, *argv], stdin
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = importlib.import_module(module).main(list(argv))
            except SystemExit as stop:  # click, or a body's sys.exit
                code = stop.code
                if code is not None and not isinstance(code, int):  # sys.exit("message")
                    print(code, file=sys.stderr)
                    code = 1
            except Exception:  # noqa: BLE001 (what a dying subprocess would print)
                traceback.print_exc()
                code = 1
    finally:
        for handler in root.handlers:
            if handler not in saved_root[0]:
                handler.close()
        root.handlers, root.level = saved_root
        for name, lg in logging.Logger.manager.loggerDict.items():
            if not isinstance(lg, logging.Logger):
                continue
            if name in saved_loggers:
                lg.handlers, lg.level, lg.propagate = saved_loggers[name]
            else:  # a logger first made now keeps its set-up, less writers to the buffers
                lg.handlers = [h for h in lg.handlers
                               if getattr(h, "stream", None) not in (out, err)]
        if absl_logging is None:
            absl_logging = sys.modules.get("absl.logging")
            saved_absl = absl_logging.WARNING if absl_logging else None
        if absl_logging is not None:
            absl_logging.set_verbosity(saved_absl)
        keras = sys.modules.get("tf_keras")
        if keras is not None:
            keras.mixed_precision.set_global_policy(saved_policy or "float32")
        sys.argv, sys.stdin = saved_argv, saved_stdin
        os.chdir(saved_cwd)
        for name in set(os.environ) - set(saved_environ):
            del os.environ[name]
        os.environ.update({k: v for k, v in saved_environ.items() if os.environ.get(k) != v})
    return subprocess.CompletedProcess([module, *argv], code or 0, out.getvalue(),
                                       err.getvalue())


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_two_workers(script: str, args: list[str], out_dir: Path, timeout: int) -> list[Path]:
    """Run ``python SCRIPT OUT_i.npz ARGS`` as two MultiWorkerMirrored workers on 127.0.0.1.

    Each gets its own TF_CONFIG; both must exit 0 within ``timeout`` seconds (a worker that
    hangs or dies fails the test, it never hangs the suite). Returns the two .npz paths.
    """
    import json

    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    outs = [out_dir / f"w{i}.npz" for i in range(2)]
    procs = []
    for i in range(2):
        env = subprocess_env(TF_CONFIG=json.dumps({"cluster": cluster,
                                                   "task": {"type": "worker", "index": i}}))
        procs.append(subprocess.Popen([sys.executable, script, str(outs[i]), *args], cwd=REPO,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    for p in procs:
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{script}: multi-worker run did not finish in {timeout} s")
        assert p.returncode == 0, err[-3000:]
    return outs


def _once_per_session(tmp_path_factory, key: str, make) -> Path:
    """``make(folder)`` run once per test session, its folder shared: the first test
    process to ask runs it, under a file lock; the others (xdist workers) wait for that
    and get the same folder. ``make`` returns the path to hand out (kept in done.txt)."""
    import fcntl
    import hashlib

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's own
    name = f"{key.split(chr(0))[0].split('/')[-1].split('.')[0] or 'defaults'}-" \
           f"{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    out = root / f"shared-{name}"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = out / "done.txt"
        if not done.is_file():
            out.mkdir(parents=True, exist_ok=True)
            done.write_text(str(make(out)))
    return Path(done.read_text())


#: what only training needs, as checkpoint keys name it: optimizer slots and step counters,
#: Keras's compiled metrics, gradient accumulators. (A Hub module's root, a
#: tf.train.Checkpoint, holds a ``save_counter`` of its own saves, always 0 there.)
TRAINING_STATE = ("optimizer", "/metrics/", "iterations", "accum_", "micro_step",
                  "keras_api")


def saved_variables(saved_model_dir: Path) -> dict[str, int]:
    """Each variable of a SavedModel's ``variables/`` checkpoint, by key: its element
    count (the object graph's own entry left out)."""
    import numpy as np
    import tensorflow as tf

    return {name: int(np.prod(shape)) for name, shape in
            tf.train.list_variables(str(saved_model_dir / "variables" / "variables"))
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def training_state(saved_model_dir: Path) -> list[str]:
    """The keys of ``saved_variables`` that hold training state (``TRAINING_STATE``)."""
    return [k for k in saved_variables(saved_model_dir)
            if any(word in k for word in TRAINING_STATE)]


def shared_run(tmp_path_factory, config: str, *overrides: str) -> Path:
    """The run directory of ``tfapp.train --config CONFIG OVERRIDES`` (CONFIG "": no
    --config, the built-in defaults), trained once per test session (in-process) for the
    test files that only read a finished run (its reports, export, checkpoint). Read it,
    never write into it: another file's tests may be reading it at the same time (copy
    it first)."""
    def train_it(out: Path) -> Path:
        from tfapp.config import load_config
        from tfapp.tasks import get_task
        from tfapp.training.driver import train

        cfg = load_config(REPO / config if config else None,
                          [f"output_dir={out / 'runs'}", *overrides])
        return train(cfg, task=get_task(cfg.task)).run_dir

    return _once_per_session(tmp_path_factory, "\0".join((config, *overrides)), train_it)


def two_replica_results(tmp_path_factory) -> dict:
    """What tests/workers/two_replicas.py computed under MirroredStrategy over 2 logical
    CPUs (one fresh process per test session for every such check), by case."""
    import json

    def run_worker(out: Path) -> Path:
        # Every two-replica case of the session in one process (about 55 CPU-s): room for
        # a loaded machine before the limit reads as a hang.
        proc = run_python(["tests/workers/two_replicas.py", str(out / "results.json")],
                          timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return out / "results.json"

    path = _once_per_session(tmp_path_factory, "two_replicas", run_worker)
    results = json.loads(path.read_text())
    assert results["replicas"] == 2
    return results


# The tiny classifier run that test_export_hf and test_bad_inputs read: 4 steps of the tiny
# BERT on the demo reviews at a high learning rate (the head moves far from its start, so
# probabilities differ from text to text), its export and reports.
CLASSIFIER_RUN = ("configs/classifier_local.yaml", "trainer.epochs=1", "trainer.steps_per_epoch=4",
                  "optimizer.learning_rate=3e-3", "tracking.tensorboard=false")

# The deterministic CNN classifier run that test_best_model and test_resilience read (every
# op in it is deterministic under runtime.deterministic=true; the tiny Hub BERT's dropout is
# an unseeded random op). Its monitor, the highest validation loss, makes an early epoch the
# best one (the loss falls as it trains), so its export is not the last epoch's.
CNN_RUN = ("configs/classifier_local.yaml", "model.kind=cnn", "runtime.deterministic=true",
           "runtime.seed=7", "trainer.epochs=3", "trainer.steps_per_epoch=30",
           "optimizer.learning_rate=3e-3", "trainer.monitor=val_loss",
           "trainer.monitor_mode=max")

# The NER run that test_ner and test_export_hf read: 90 steps of the tiny BERT on the demo.
NER_RUN = ("configs/ner_local.yaml", "trainer.epochs=3", "trainer.steps_per_epoch=30",
           "optimizer.learning_rate=3e-3")


@pytest.fixture
def repo() -> Path:
    return REPO


def clean_lines(lines: list[str], drop_regex: str = "",
                strip_punctuation: bool = True) -> list[str]:
    """Drop lines matching ``drop_regex`` (on the raw text), standardize, drop empties:
    what the generator's input pipeline does to each corpus line, for a list."""
    from tfapp.data.text.words import drop_matcher, standardize

    import tensorflow as tf

    drop = drop_matcher(drop_regex)
    if not lines:
        return []
    texts = tf.constant(lines)
    if drop is not None:
        texts = tf.boolean_mask(texts, ~drop(texts))
    cleaned = standardize(texts, strip_punctuation).numpy()
    return [c.decode("utf-8") for c in cleaned if c]


def classification_batches(splits, split, preprocess, data_cfg, **kw):
    """One split's batches as the classifier reads them: ``read_batches`` of its
    ``classification_examples`` (``kw``: batch_size, training, seed, input_context...)."""
    from tfapp.data.examples.classification import classification_examples
    from tfapp.data.input.reader import read_batches

    return read_batches(classification_examples(splits, split, preprocess,
                                                data_cfg.seq_length), data_cfg, **kw)


def prepared_rows(paths, spec, tmp_path, mode: str = "fail") -> list[dict]:
    """The rows tfapp prepares from ``paths`` read as ``spec`` (a ``RowSpec``): each row's
    features as Python values (strings decoded, lists kept), in file order."""
    import uuid

    from tfapp.data.prepare.builder import prepare

    import tensorflow as tf

    out = tmp_path / f"prepared-{uuid.uuid4().hex[:8]}"
    manifest = prepare([str(p) for p in paths], str(out), spec, mode=mode)
    names = spec.features()
    lists = {"labels", "words", "tags"}
    features = {n: (tf.io.RaggedFeature(tf.string) if n in lists
                    else tf.io.FixedLenFeature([], tf.string)) for n in names}
    features["id"] = tf.io.FixedLenFeature([], tf.int64)
    rows = []
    for record in tf.data.TFRecordDataset(manifest.files()).as_numpy_iterator():
        parsed = tf.io.parse_single_example(record, features)
        rows.append((int(parsed["id"]), {
            n: ([v.decode() for v in parsed[n].numpy()] if n in lists
                else parsed[n].numpy().decode()) for n in names}))
    # Shards hold their rows permuted; ids (source << 40 | line) give the file order back.
    return [row for _, row in sorted(rows, key=lambda r: r[0])]


# --------------------------------------------------- XLA on the CPU needs the xla_cpu marker

# One file per module the CPU backend compiled (XLA names it after the tf.function).
_CPU_COMPILED = "*.cpu_after_optimizations.txt"


def xla_cpu_compilations() -> list[str]:
    """The tf.functions compiled with XLA for the CPU since this test's setup began, by
    name, leaving out what tfapp compiles only where the host has XLA (``runtime.HOST_XLA``:
    the TPU build runs those uncompiled, so a test that reaches them passes there)."""
    modules = {p.name.split(".")[1] for p in XLA_DUMP_DIR.glob(_CPU_COMPILED)}
    if not modules:
        return []
    import re

    from tfapp.runtime import HOST_XLA

    # "a_inference_<function>_<n>__XlaMustCompile_true_..." -> "<function>"
    names = {re.sub(r"^a_inference_(.*?)_\d+__XlaMustCompile.*", r"\1", m) for m in modules}
    return sorted(n for n in names if HOST_XLA not in n)


def _clear_xla_dumps() -> None:
    for path in XLA_DUMP_DIR.iterdir():
        path.unlink(missing_ok=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    # Count from here: the test's fixtures (a module fixture's compilations count for the
    # first test that sets it up) and its body, in this process and its subprocesses.
    _clear_xla_dumps()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    if item.get_closest_marker("xla_cpu") is None:
        compiled = xla_cpu_compilations()
        if compiled:
            pytest.fail(f"{item.nodeid} compiled with XLA on the CPU ({', '.join(compiled[:3])}"
                        f"{' ...' if len(compiled) > 3 else ''}), which TensorFlow's TPU build "
                        "cannot: mark it @pytest.mark.xla_cpu (or give the XLA case "
                        "marks=pytest.mark.xla_cpu), or compile only where "
                        "tfapp.runtime.host_xla_available()", pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    # A run trained in this process with runtime.deterministic=true leaves TensorFlow's
    # process-wide op determinism on: the next tests in this worker would run under it (an
    # unseeded random op raises there while no global seed is set). Turn it off after the
    # test that turned it on.
    result = yield
    compat = sys.modules.get("tfapp.compat")
    if compat is not None and compat.op_determinism_enabled():
        compat.disable_op_determinism()
    return result


def pytest_unconfigure(config):
    import shutil

    shutil.rmtree(XLA_DUMP_DIR, ignore_errors=True)


# ------------------------------------------------------- longest test files first (xdist)

# Estimated seconds of one test on CI's 2 cores: a `slow` one is a real end-to-end run
# (one or more `python -m tfapp.X` processes, 30-130 s measured), the others mostly 0-10 s.
_SLOW_S, _OTHER_S = 60, 2


@pytest.hookimpl(trylast=True)  # after `-m` has deselected what does not run
def pytest_collection_modifyitems(config, items):
    """Order test files by their estimated time, longest first. xdist's loadfile hands a
    file to whichever process is free, in this order (with --no-loadscope-reorder; its own
    order is by test count, which put the files of two or three slow tests -- kill points,
    exact resume, NER, resume_config -- last): long files first and short ones at the end
    keep both processes busy until the end instead of one running a 4-minute file alone."""
    cost: dict[Path, int] = {}
    for item in items:  # dicts keep the files in their collection order for equal costs
        slow = item.get_closest_marker("slow") is not None
        cost[item.path] = cost.get(item.path, 0) + (_SLOW_S if slow else _OTHER_S)
    rank = {path: i for i, path in enumerate(sorted(cost, key=lambda p: -cost[p]))}
    items.sort(key=lambda item: rank[item.path])  # stable: a file's tests keep their order


# ------------------------------------------------------------ skips are counted (CI=1)

# Every test that may skip in CI, with why CI cannot run it: "NODEID | reason" lines.
SKIP_ALLOWLIST = REPO / ".ci" / "skips.txt"
# This process's skipped tests (id -> reason) and passed ones; in xdist's controller, those
# its workers report: the whole session's.
_SEEN: dict = {"skipped": {}, "passed": set(), "verdict": []}


def allowed_skips(path: Path = SKIP_ALLOWLIST) -> dict[str, str]:
    """The allowlist's test ids -> their reasons (comments and blank lines left out)."""
    allowed = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            nodeid, sep, reason = (part.strip() for part in line.partition("|"))
            assert sep and reason, f"{path}: every entry says why ({line!r})"
            allowed[nodeid] = reason
    return allowed


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _SEEN["skipped"][report.nodeid] = str(report.longrepr[-1]) if isinstance(
            report.longrepr, tuple) else str(report.longrepr)
    elif report.when == "call" and report.passed:
        _SEEN["passed"].add(report.nodeid)


def skip_verdict(skipped: dict[str, str], passed: set[str],
                 allowed: dict[str, str]) -> list[str]:
    """What differs from the allowlist: a skip it does not hold, or an entry whose test ran
    and passed (the entry is stale). Tests that did not run (-m, -k, a file) are not
    judged, so any subset of the suite gives the same verdict on its own tests."""
    lines = [f"skipped, not in {SKIP_ALLOWLIST.name}: {nodeid} ({reason})"
             for nodeid, reason in sorted(skipped.items()) if nodeid not in allowed]
    lines += [f"in {SKIP_ALLOWLIST.name} but ran and passed (remove the entry): {nodeid}"
              for nodeid in sorted(passed & set(allowed))]
    return lines


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not os.environ.get("CI") or hasattr(config, "workerinput"):
        return  # CI judges skips (a developer's machine may lack chromium); xdist's workers
        # report to the controller, which judges the whole session
    _SEEN["verdict"] = skip_verdict(_SEEN["skipped"], _SEEN["passed"], allowed_skips())
    if _SEEN["verdict"] and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _SEEN["verdict"]:
        terminalreporter.section("skips against .ci/skips.txt", red=True)
        for line in _SEEN["verdict"]:
            terminalreporter.line(line, red=True)
