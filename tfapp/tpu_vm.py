"""TPU detection and the environment TensorFlow's TPU build needs, before it is imported.

Imported by ``tfapp/__init__.py``: nothing here imports TensorFlow.

What TensorFlow 2.20's TPU build (``tensorflow-tpu``, the newest) needs on a TPU VM,
established from its wheel, the libtpu wheel and Google's own recipes (docs/tpu.md has
the details and sources):

* TPU v5e, v5p and v6e run TensorFlow only through PJRT (Cloud TPU's ``-pjrt``
  runtimes). ``TF_PLUGGABLE_DEVICE_LIBRARY_PATH`` makes ``import tensorflow`` load libtpu
  as a PJRT "next pluggable device" (``tensorflow/__init__.py``; libtpu exports
  ``TFNPD_InitPlugin`` and ``GetPjrtApi``), and ``NEXT_PLUGGABLE_DEVICE_USE_C_API=true``
  is read by libtpu itself (the string is in ``libtpu.so``, in no file of TensorFlow).
  keras-io's TPU example for tensorflow-tpu and Google's TensorFlow TPU CI
  (ml-auto-solutions) set exactly these two on a single-host TPU VM; nothing in
  TensorFlow sets them.
* ``PJRT_DEVICE`` is PyTorch/XLA's variable: neither TensorFlow 2.20 nor libtpu reads it.
* With libtpu installed and no TPU in sight, TensorFlow's TPU platform still opens libtpu at
  import unless ``TPU_LOAD_LIBRARY=0``, and libtpu then asks the GCE metadata server about
  the TPU, 30 tries per variable: ``import tensorflow`` took 503 s on a CPU machine
  (8 s with the variable). Google's CI sets ``TPU_LOAD_LIBRARY=0`` for pod slices,
  whose TPU is reached over gRPC.

So, before TensorFlow is imported and only where the user set none of them, tfapp sets

* on a TPU VM with the libtpu wheel: ``NEXT_PLUGGABLE_DEVICE_USE_C_API=true`` and
  ``TF_PLUGGABLE_DEVICE_LIBRARY_PATH=<site-packages>/libtpu/libtpu.so``, unless the user
  set ``TPU_LOAD_LIBRARY=0`` (the pod recipe) or a plugin path of their own;
* with libtpu installed and no sign of a TPU: ``TPU_LOAD_LIBRARY=0``.

``APPLIED`` records what tfapp set, for ``python -m tfapp.doctor``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping, Sequence

# Environment variables that say a TPU is attached: Colab (COLAB_TPU_ADDR), a named
# TPU node (TPU_NAME), and TPU VMs (TPU_ACCELERATOR_TYPE / TPU_WORKER_ID where the image
# sets them; Kaggle's TPU image sets ISTPUVM=1, Kaggle/docker-python tpu/Dockerfile).
TPU_ENV_VARS = ("TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID",
                "ISTPUVM")
# Hints that the TPU chips are on this host (a TPU VM), not behind a gRPC address.
TPU_VM_ENV_VARS = ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "ISTPUVM")
# What doctor shows: what TensorFlow 2.20's TPU start-up and libtpu read, PJRT_DEVICE
# (older recipes set it; nothing here reads it), and TF-Hub's in-place loading from gs://.
START_VARIABLES = ("NEXT_PLUGGABLE_DEVICE_USE_C_API", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH",
                   "TPU_LOAD_LIBRARY", "TPU_LIBRARY_PATH", "PJRT_DEVICE",
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
        if env.get("TPU_LOAD_LIBRARY") == "0" or env.get("TF_PLUGGABLE_DEVICE_LIBRARY_PATH"):
            return {}
        wanted = {"NEXT_PLUGGABLE_DEVICE_USE_C_API": "true",
                  "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": libtpu}
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
