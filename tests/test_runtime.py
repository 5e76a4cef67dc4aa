"""Strategy resolution: the pure selection logic, and real strategies in subprocesses."""

from __future__ import annotations

import json

from tfapp.config import ConfigError, load_config
from tfapp.runtime import (
    choose_precision,
    choose_strategy,
    cpu_flags,
    is_chief,
    precision_choice,
    setup,
)
from tfapp.tpu_vm import tpu_hint

import numpy as np
import pytest
from conftest import run_python, run_two_workers

TWO_WORKERS = json.dumps({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                          "task": {"type": "worker", "index": 0}})


@pytest.mark.parametrize("env,tpu,gpus,expected", [
    ({}, True, 0, "tpu"),                       # a resolver found a TPU: always TPU first
    ({}, True, 8, "tpu"),
    ({"TF_CONFIG": TWO_WORKERS}, False, 0, "multi_worker"),
    ({}, False, 4, "mirrored"),
    ({}, False, 1, "one_device"),
    ({}, False, 0, "cpu"),
])
def test_auto_picks_by_hardware(env, tpu, gpus, expected):
    kind, reason = choose_strategy("auto", env=env, tpu_found=tpu, num_gpus=gpus)
    assert kind == expected
    assert reason.startswith("auto:")


def test_explicit_strategy_is_kept_and_multi_worker_needs_tf_config():
    assert choose_strategy("mirrored", env={}, tpu_found=False, num_gpus=0)[0] == "mirrored"
    with pytest.raises(ConfigError, match="TF_CONFIG"):
        choose_strategy("multi_worker", env={}, tpu_found=False, num_gpus=0)


def test_tpu_hints_from_environment_and_devices(tmp_path):
    assert tpu_hint({}, dev_dir=str(tmp_path)) is None
    assert "COLAB_TPU_ADDR" in tpu_hint({"COLAB_TPU_ADDR": "10.0.0.2:8470"},
                                          dev_dir=str(tmp_path))
    assert "TPU_NAME" in tpu_hint({"TPU_NAME": "my-tpu"}, dev_dir=str(tmp_path))
    (tmp_path / "accel0").touch()  # what a TPU VM (Kaggle, GCE) exposes
    assert "accel" in tpu_hint({}, dev_dir=str(tmp_path))


def test_precision_by_device():
    assert choose_precision("auto", "TPU", None) == "mixed_bfloat16"
    assert choose_precision("auto", "GPU", (7, 5)) == "mixed_float16"
    assert choose_precision("auto", "GPU", (9, 0)) == "mixed_bfloat16"
    assert choose_precision("auto", "CPU", None, frozenset({"avx2", "fma"})) == "float32"
    assert choose_precision("mixed_bfloat16", "CPU", None) == "mixed_bfloat16"


def test_auto_picks_bfloat16_on_cpus_with_native_bfloat16_and_says_why():
    for flag in ("avx512_bf16", "amx_bf16"):
        policy, why = precision_choice("auto", "CPU", None, frozenset({"avx2", flag}))
        assert policy == "mixed_bfloat16" and flag in why and "runtime.precision=float32" in why
    policy, why = precision_choice("auto", "CPU", None, frozenset({"avx2", "avx512f"}))
    assert policy == "float32" and "no native bfloat16" in why
    # float32 stays one key away, whatever the CPU
    assert precision_choice("float32", "CPU", None, frozenset({"amx_bf16"})) == (
        "float32", "set by runtime.precision")


def test_auto_keeps_float32_on_this_cpu_when_told(monkeypatch):
    from tfapp import runtime

    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx2", "amx_bf16"}))
    monkeypatch.setenv("TFAPP_CPU_BFLOAT16", "1")
    assert precision_choice("auto", "CPU", None)[0] == "mixed_bfloat16"
    monkeypatch.setenv("TFAPP_CPU_BFLOAT16", "0")
    policy, why = precision_choice("auto", "CPU", None)
    assert policy == "float32" and "TFAPP_CPU_BFLOAT16=0" in why
    # an explicit precision, and other devices, are not its business
    assert precision_choice("mixed_bfloat16", "CPU", None)[0] == "mixed_bfloat16"
    assert precision_choice("auto", "TPU", None)[0] == "mixed_bfloat16"


def test_cpu_flags_read_the_kernels_list(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512_bf16 amx_tile\n\n"
                    "processor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(str(info)) == {"fpu", "sse2", "avx512_bf16", "amx_tile"}
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()


def test_chief_rules(monkeypatch):
    assert is_chief(None, None)
    assert is_chief("chief", 0)
    monkeypatch.setenv("TF_CONFIG", TWO_WORKERS)
    assert is_chief("worker", 0) and not is_chief("worker", 1)
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"chief": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker",
                                                                   "index": 0}}))
    assert not is_chief("worker", 0)


@pytest.mark.parametrize("devices", [2, 4])
def test_mirrored_over_logical_cpus(devices):
    proc = run_python(["tests/workers/runtime_probe.py", "runtime.strategy=mirrored",
                       f"runtime.cpu_devices={devices}", "data.batch_size=16"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["strategy"] == "MirroredStrategy"
    assert out["replicas"] == devices
    assert out["global_batch"] == 16 * devices
    assert out["precision"] == "float32"


def test_auto_on_this_machine_is_the_default_cpu_strategy():
    rt = setup(load_config(None, []).runtime)  # auto: nothing to split, so in this process
    assert (rt.kind, rt.num_replicas) == ("cpu", 1)
    assert "no TPU or GPU" in rt.reason


@pytest.mark.slow
def test_two_real_workers_finish_with_equal_weights(tmp_path):
    w0, w1 = (np.load(p) for p in run_two_workers("tests/workers/multi_worker_fit.py", [],
                                                  tmp_path, timeout=240))
    assert int(w0["replicas"]) == 2
    assert bool(w0["chief"]) and not bool(w1["chief"])
    weights = [k for k in w0.files if k.startswith("arr_")]
    for k in weights:
        np.testing.assert_array_equal(w0[k], w1[k])
    losses = w0["losses"]
    assert losses[-1] < losses[0], losses  # it trained


@pytest.mark.parametrize("device,hub,configured,expected", [
    ("CPU", False, None, False),   # XLA's CPU backend measured 2x slower
    ("GPU", False, None, True),
    ("GPU", True, None, False),    # Hub fine-tuning / LSTM under XLA recompile every step
    ("TPU", True, None, True),
    ("CPU", True, True, True),     # an explicit setting always wins
    ("GPU", False, False, False),
])
def test_jit_compile_defaults(device, hub, configured, expected):
    from tfapp.runtime import Runtime

    rt = Runtime(strategy=None, kind="cpu", reason="test", num_replicas=1,
                 precision="float32", device_kind=device)
    assert rt.default_jit_compile(configured, recompiles_under_xla=hub) is expected


def test_tpu_address_is_local_on_a_tpu_vm(tmp_path):
    from tfapp.runtime import tpu_address

    assert tpu_address("", {}, str(tmp_path)) is None                # resolver decides
    assert tpu_address("", {"TPU_ACCELERATOR_TYPE": "v6e-8"}, str(tmp_path)) == "local"
    (tmp_path / "accel0").touch()
    assert tpu_address("", {}, str(tmp_path)) == "local"
    assert tpu_address("my-pod", {}, str(tmp_path)) == "my-pod"      # runtime.tpu wins


def test_tf_config_is_parsed_in_one_place():
    import json

    from tfapp.config import ConfigError
    from tfapp.runtime import read_tf_config

    import pytest

    assert read_tf_config({}).cluster == {} and read_tf_config({}).num_workers == 0
    tf_config = read_tf_config({"TF_CONFIG": json.dumps({
        "cluster": {"chief": ["h0:1"], "worker": ["h1:1", "h2:1"], "ps": ["h3:1"]},
        "task": {"type": "worker", "index": "1"}})})
    assert (tf_config.task_type, tf_config.task_index, tf_config.num_workers) == ("worker", 1, 3)
    worker = {"worker": ["h0:1"]}
    for bad, says in [
            ("{not json", "TF_CONFIG is not valid JSON (Expecting property name"),
            ("[1, 2]", "TF_CONFIG is a JSON list, not an object with 'cluster' and 'task'"),
            ({"task": {"index": "x"}}, "TF_CONFIG 'cluster' must map each job"),
            ({"cluster": {"worker": "h0:1"}, "task": {"type": "worker", "index": 0}},
             "cluster job 'worker' must be a list of host:port strings, got \"h0:1\""),
            ({"cluster": worker}, "TF_CONFIG 'task' must say which of the cluster's tasks"),
            ({"cluster": worker, "task": {"type": "worker"}}, "got {\"type\": \"worker\"}"),
            ({"cluster": worker, "task": {"type": "worker", "index": "x"}},
             "task index \"x\" is not a number"),
            ({"cluster": worker, "task": {"type": "worker", "index": -1}},
             "task index -1 is out of range: job 'worker' lists 1 address(es), so 0 to 0"),
            ({"cluster": worker, "task": {"type": "ps", "index": 0}},
             "task type \"ps\" is not a job of the cluster (it has: worker)")]:
        raw = bad if isinstance(bad, str) else json.dumps(bad)
        with pytest.raises(ConfigError) as info:
            read_tf_config({"TF_CONFIG": raw})
        message = str(info.value)
        assert says in message and "docs/scale_out.md, 'Several workers'" in message, message
        assert "\n" not in message


@pytest.mark.xla_cpu
def test_the_xla_cpu_check_sees_what_a_test_compiles_and_leaves_out_host_xla_functions():
    """conftest's check (a test that compiles with XLA on the CPU carries the xla_cpu
    marker) names this test's compilation, and leaves out what tfapp compiles only where
    the host has XLA (named with runtime.HOST_XLA)."""
    from tfapp.runtime import HOST_XLA

    import conftest
    import tensorflow as tf

    def doubled_under_xla(x):
        return x * 2

    def host_xla_optional_doubled(x):
        return x * 2

    assert HOST_XLA in host_xla_optional_doubled.__name__
    assert conftest.xla_cpu_compilations() == []
    tf.function(host_xla_optional_doubled, jit_compile=True)(tf.constant(1))
    assert conftest.xla_cpu_compilations() == []
    tf.function(doubled_under_xla, jit_compile=True)(tf.constant(1))
    assert conftest.xla_cpu_compilations() == ["doubled_under_xla"]
