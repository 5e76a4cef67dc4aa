"""The quiet first screen (tfapp/console.py): TensorFlow's C++ start-up notices are kept
off a command's stderr, and nothing else is lost -- a C++ abort's fatal line included."""

from __future__ import annotations

import re
import subprocess
import sys

from tfapp import console
from tfapp.doctor import tensorflow_build, tensorflow_distributions

from conftest import REPO, run_python, subprocess_env

# A C++ LOG(FATAL) (the Abort op; eager mode skips a no-output op, a graph runs it).
ABORT = """
import sys
from tfapp import console
{quiet}import tensorflow as tf
print("tfapp: our own line", file=sys.stderr, flush=True)

@tf.function
def abort():
    with tf.control_dependencies([tf.raw_ops.Abort(error_msg="forced abort for the test")]):
        return tf.constant(1)

abort()
"""


def test_tensorflow_notices_are_dropped_and_a_fatal_abort_still_shows():
    noise = re.compile(console.NOISE)
    loud = run_python(["-c", ABORT.format(quiet="")], timeout=120)
    quiet = run_python(["-c", ABORT.format(quiet="console.quiet_stderr()\n")], timeout=120)
    assert quiet.returncode == loud.returncode == -6, quiet.stderr  # SIGABRT
    # What the filter is for: stock TensorFlow prints notices whatever TF_CPP_MIN_LOG_LEVEL
    # says (2.21 oneDNN/CUDA notices, 2.20 the "failed call to cuInit" error line). The TPU
    # build (tensorflow-tpu 2.20.0) prints none: only our line and the fatal line.
    if tensorflow_build(tensorflow_distributions(), None) != "tpu":
        assert [line for line in loud.stderr.splitlines() if noise.search(line)], loud.stderr
    lines = quiet.stderr.splitlines()
    assert not [line for line in lines if noise.search(line)], quiet.stderr
    assert "oneDNN custom operations" not in quiet.stderr and "cuInit" not in quiet.stderr
    assert lines[0] == "tfapp: our own line", lines[:3]  # the first screen is ours
    fatal = [line for line in lines if "forced abort for the test" in line]
    # The C++ FATAL line got out (absl's "F0000 ..." or TF 2.20's "<date>: F ...").
    assert fatal and (fatal[0].startswith("F") or ": F " in fatal[0]), quiet.stderr
    # Both builds: what the loud run printed besides the notices, our line then the fatal
    # line, the quiet run printed as it was (times and thread ids aside).
    kept = [line for line in loud.stderr.splitlines() if not noise.search(line)]

    def masked(found):
        return [re.sub(r"\d+", "0", line) for line in found[:2]]

    assert masked(kept) == masked(lines), (loud.stderr, quiet.stderr)


def test_the_filter_passes_everything_but_the_notices():
    noise = ["I0000 00:00:1795461727.464388    6756 port.cc:153] oneDNN custom operations",
             "W0000 00:00:1795461727.464772    6756 cudart_stub.cc:31] Could not find cuda",
             "WARNING: All log messages before absl::InitializeLog() is called are written",
             "E0000 00:00:1795461732.160157   32130 cuda_platform.cc:52] failed call to cuInit",
             "2026-11-23 20:57:41.084871: I tensorflow/core/util/port.cc:153] oneDNN custom",
             "2026-11-23 20:57:41.084871: E external/local_xla/xla/stream_executor/cuda/"
             "cuda_platform.cc:51] failed call to cuInit: INTERNAL: CUDA error"]
    kept = ["Epoch 1/2", "E0000 00:00:1795461732.160157   32130 op_kernel.cc:1] a real error",
            "Traceback (most recent call last):", "tfapp: error: data.batch_size must be >= 1",
            "19:03:42 INFO runtime: strategy=cpu", "\u00e9t\u00e9 \u2028 W", "I am a sentence",
            "2026-11-23 20:57:41.106937: F tensorflow/core/kernels/control_flow_ops.cc:737] "
            "Abort_op intentional failure", "2026 was a year"]
    text = "\n".join(noise[:2] + kept[:3] + noise[2:] + kept[3:]) + "\n8/8 [====] no newline"
    # What a process whose stderr quiet_stderr routed writes there (read until the filter
    # process, which holds the pipe, ends after it).
    code = ("import os, sys\nfrom tfapp import console\nassert console.quiet_stderr()\n"
            "os.write(2, sys.stdin.buffer.read())\n")
    out = subprocess.run([sys.executable, "-c", code], input=text.encode(),
                         capture_output=True, timeout=60, env=subprocess_env(), cwd=REPO)
    assert out.returncode == 0 and out.stdout == b"", out
    assert out.stderr.decode() == "\n".join(kept) + "\n8/8 [====] no newline"


def test_only_module_commands_get_the_filter(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["-m", "--config", "x.yaml"])
    monkeypatch.delenv("TFAPP_TF_LOGS", raising=False)
    assert console.wanted()
    monkeypatch.setattr(sys, "argv", ["-m", "-v"])
    assert not console.wanted()
    monkeypatch.setattr(sys, "argv", ["-m"])
    monkeypatch.setenv("TFAPP_TF_LOGS", "1")
    assert not console.wanted()
    monkeypatch.setattr(sys, "argv", [str(REPO / "pytest")])
    monkeypatch.delenv("TFAPP_TF_LOGS")
    assert not console.wanted()
    assert subprocess_env()  # (conftest helpers import cleanly alongside)
