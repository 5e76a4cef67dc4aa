"""TPU detection and the environment TensorFlow's TPU build needs, before it is imported.

Imported by ``tfapp/__init__.py``: nothing here imports TensorFlow.

What TensorFlow 2.20's TPU build (``tensorflow-tpu``, the newest) reads, established from
its wheel (``strings`` of ``libtensorflow_cc.so.2``; ``tensorflow/__init__.py``) and the
sources cited in docs/tpu.md:

* its TPU platform opens ``libtpu.so`` itself at import: the path in ``TPU_LIBRARY_PATH``,
  else ``libtpu.so`` on the loader path / ``libtpu/libtpu.so`` (the ``libtpu`` wheel),
  unless ``TPU_LOAD_LIBRARY=0``; one process per TPU host (``/tmp/libtpu_lockfile``,
  ``ALLOW_MULTIPLE_LIBTPU_LOAD``);
* ``TF_PLUGGABLE_DEVICE_LIBRARY_PATH`` makes ``import tensorflow`` load a PJRT plugin as
  a pluggable device. Setting it to libtpu would load the library a second time;
  ``NEXT_PLUGGABLE_DEVICE_USE_C_API`` and ``PJRT_DEVICE`` (PyTorch/XLA's variable) appear
  nowhere in the 2.20 wheel, so TensorFlow 2.20 does not read them.

So tfapp sets, only where the user has not:

* on a TPU VM, ``TPU_LIBRARY_PATH`` to the installed libtpu wheel's library (where the
  platform's own search may miss a virtualenv's site-packages);
* with libtpu installed on a machine with no sign of a TPU, ``TPU_LOAD_LIBRARY=0``:
  otherwise libtpu asks the GCE metadata server about the TPU, 30 tries per variable,
  and ``import tensorflow`` took minutes on a CPU machine before going on (measured
  here; with the variable it took 8 s).

``APPLIED`` records what tfapp set, for ``python -m tfapp.doctor``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping, Sequence

# Environment variables that say a TPU is attached: Colab (COLAB_TPU_ADDR), a named
# TPU node (TPU_NAME), and TPU VMs incl. Kaggle (TPU_ACCELERATOR_TYPE / TPU_WORKER_ID
# are set by the TPU VM image).
TPU_ENV_VARS = ("TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID")
# Hints that the TPU chips are on this host (a TPU VM), not behind a gRPC address.
TPU_VM_ENV_VARS = ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID")
# What doctor shows of the environment TensorFlow's TPU start-up reads.
PJRT_VARIABLES = ("TPU_LIBRARY_PATH", "TPU_LOAD_LIBRARY", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH",
                  "NEXT_PLUGGABLE_DEVICE_USE_C_API", "PJRT_DEVICE",
                  "TFHUB_MODEL_LOAD_FORMAT")

APPLIED: dict[str, str] = {}


def _tpu_device_files(dev_dir: str) -> str | None:
    """TPU chips as the kernel shows them: /dev/accel* (v2-v4), /dev/vfio/<n> (v5e and
    newer, through VFIO)."""
    try:
        if any(name.startswith("accel") for name in os.listdir(dev_dir)):
            return f"{dev_dir}/accel*"
        if any(name.isdigit() for name in os.listdir(os.path.join(dev_dir, "vfio"))):
            return f"{dev_dir}/vfio/<n>"
    except OSError:
        pass
    return None


def tpu_hint(env: Mapping[str, str], dev_dir: str = "/dev") -> str | None:
    """Why a TPU may be attached (an env var or /dev/accel*), or None."""
    for var in TPU_ENV_VARS:
        if env.get(var):
            return f"{var} is set"
    found = _tpu_device_files(dev_dir)
    return f"{found} present (TPU VM)" if found else None


def on_tpu_vm(env: Mapping[str, str], dev_dir: str = "/dev") -> bool:
    """Whether the TPU chips are local (a TPU VM, Kaggle/Colab TPU VM runtimes)."""
    return any(env.get(var) for var in TPU_VM_ENV_VARS) or bool(_tpu_device_files(dev_dir))


def libtpu_library_path(search_path: Sequence[str] | None = None) -> str | None:
    """``libtpu/libtpu.so`` of the installed ``libtpu`` wheel, found without importing it."""
    for entry in sys.path if search_path is None else search_path:
        candidate = os.path.join(entry or ".", "libtpu", "libtpu.so")
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


def tpu_environment(env: Mapping[str, str], *, dev_dir: str = "/dev",
                    libtpu: str | None = None) -> dict[str, str]:
    """The variables to add to ``env`` before TensorFlow is imported (pure: no side
    effects), given the libtpu library found (None: no libtpu wheel). Never one the user
    set; nothing without libtpu, or for a TPU node reached over gRPC (``TPU_NAME``)."""
    if not libtpu:
        return {}
    if on_tpu_vm(env, dev_dir):
        wanted = {"TPU_LIBRARY_PATH": libtpu}
    elif tpu_hint(env, dev_dir) is None:
        wanted = {"TPU_LOAD_LIBRARY": "0"}
    else:
        wanted = {}
    return {key: value for key, value in wanted.items() if key not in env}


def apply(env: MutableMapping[str, str] | None = None, *, dev_dir: str = "/dev") -> dict:
    """Set ``tpu_environment`` in ``env`` (``os.environ``); record it in ``APPLIED``."""
    env = os.environ if env is None else env
    if "tensorflow" in sys.modules:
        return {}  # too late: TensorFlow has read its environment already
    added = tpu_environment(env, dev_dir=dev_dir, libtpu=libtpu_library_path())
    env.update(added)
    APPLIED.update(added)
    return added
