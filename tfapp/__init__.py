"""tfapp: TF-Hub BERT classifiers and seq2seq generators on tf.data, tf.distribute and XLA.

Importing tfapp selects the Keras 2 API (the ``tf-keras`` package) as ``tf.keras``.
TensorFlow reads ``TF_USE_LEGACY_KERAS`` once, when it is first imported, so this
must run before anything imports TensorFlow; every entry point imports tfapp first.
"""

import os
import platform

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# TensorFlow turns its oneDNN CPU kernels on by default only on CPUs with AVX512-VNNI/BF16
# or AMX; tfapp turns them on on every x86, AVX2-only CPUs included. On this project's
# 2-core AMD EPYC (AVX512-BF16/VNNI, no AMX; TensorFlow's default is already on there)
# they made the float32 BERT training step ~1.04x faster than Eigen alone, 1.14-1.25x
# with FeedForwardDense's oneDNN-shaped weight gradient, and the 2048^2 GEMM 1.35x
# (docs/performance.md). Results may differ from Eigen's in the last bits.
# TF_ENABLE_ONEDNN_OPTS=0 turns them off.
if platform.machine().lower() in ("x86_64", "amd64"):
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
# TensorFlow's C++ INFO/WARNING lines drown the run header on every start; errors stay.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Commands (python -m tfapp...) open with tfapp's own lines: TensorFlow's C++ start-up
# notices are filtered out of stderr (tfapp/console.py says why and how).
from tfapp import console  # noqa: E402

if console.wanted():
    console.quiet_stderr()

# On a TPU VM, point TensorFlow's TPU build at the libtpu wheel (tfapp/tpu_vm.py says
# exactly what and why); the user's own values win.
from tfapp import tpu_vm  # noqa: E402

tpu_vm.apply()

__version__ = "0.1.0"

# The Python API (tfapp/api.py): tfapp.train(...), tfapp.load(...), tfapp.load_config(...),
# loaded on first use so that `import tfapp` (every command's first line) stays light.
# tfapp.train is the train command's module, made callable (tfapp/train.py says why).


def __getattr__(name: str):
    import importlib

    if name == "train":
        return importlib.import_module("tfapp.train")
    if name in ("load", "load_config"):
        return getattr(importlib.import_module("tfapp.api"), name)
    raise AttributeError(f"module 'tfapp' has no attribute '{name}'")
