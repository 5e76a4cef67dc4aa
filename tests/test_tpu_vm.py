"""tfapp.tpu_vm: what is set before TensorFlow loads on a TPU VM, and that the user wins."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tfapp import tpu_vm

from conftest import run_python, subprocess_env


def _libtpu(tmp_path: Path) -> Path:
    lib = tmp_path / "site-packages" / "libtpu" / "libtpu.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF")
    return lib


def test_libtpu_is_found_on_the_search_path(tmp_path):
    assert tpu_vm.libtpu_library_path([str(tmp_path)]) is None
    lib = _libtpu(tmp_path)
    assert tpu_vm.libtpu_library_path([str(tmp_path), str(lib.parents[1])]) == str(lib)


PJRT = {"NEXT_PLUGGABLE_DEVICE_USE_C_API": "true",
        "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/x/libtpu.so"}


def test_tpu_vm_with_libtpu_gets_the_pjrt_plugin(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "accel0").touch()
    assert tpu_vm.on_tpu_vm({}, str(dev))
    assert tpu_vm.tpu_environment({}, dev_dir=str(dev), libtpu="/x/libtpu.so") == PJRT
    for env in ({"TPU_ACCELERATOR_TYPE": "v5litepod-8"}, {"ISTPUVM": "1"}):  # ISTPUVM: Kaggle
        assert tpu_vm.tpu_environment(env, dev_dir=str(tmp_path), libtpu="/x/libtpu.so") == PJRT


def test_v5e_and_newer_show_their_chips_through_vfio(tmp_path):
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "vfio").touch()   # the VFIO control node alone is no TPU
    assert tpu_vm.tpu_hint({}, str(tmp_path)) is None
    (tmp_path / "vfio" / "0").touch()
    assert tpu_vm.tpu_hint({}, str(tmp_path)) == f"{tmp_path}/vfio/<n> present (TPU VM)"
    assert tpu_vm.on_tpu_vm({}, str(tmp_path))


def test_libtpu_without_any_tpu_is_not_loaded(tmp_path):
    # The TPU build on a CPU machine: skip libtpu's minutes of metadata-server retries.
    assert tpu_vm.tpu_environment({}, dev_dir=str(tmp_path), libtpu="/x/libtpu.so") == {
        "TPU_LOAD_LIBRARY": "0"}
    assert tpu_vm.tpu_environment({"TPU_LOAD_LIBRARY": "1"}, dev_dir=str(tmp_path),
                                  libtpu="/x/libtpu.so") == {}


def test_nothing_is_set_for_a_remote_tpu_or_without_libtpu(tmp_path):
    # A TPU node behind a gRPC address (TPU_NAME, Colab's old COLAB_TPU_ADDR) is not local.
    for env in ({"TPU_NAME": "my-node"}, {"COLAB_TPU_ADDR": "10.0.0.2:8470"}):
        assert tpu_vm.tpu_environment(env, dev_dir=str(tmp_path), libtpu="/x/libtpu.so") == {}
    for env in ({}, {"TPU_WORKER_ID": "0"}):
        assert tpu_vm.tpu_environment(env, dev_dir=str(tmp_path), libtpu=None) == {}


def test_the_users_own_values_win(tmp_path):
    vm = {"TPU_ACCELERATOR_TYPE": "v6e-8"}
    for own in ({"TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/opt/my/libtpu.so"},
                {"TPU_LOAD_LIBRARY": "0"}):              # Google's pod-slice recipe
        env = {**vm, **own}
        assert tpu_vm.tpu_environment(env, dev_dir=str(tmp_path), libtpu="/x/libtpu.so") == {}
        before = dict(env)
        assert tpu_vm.apply(env, dev_dir=str(tmp_path)) == {}
        assert env == before
    env = {**vm, "NEXT_PLUGGABLE_DEVICE_USE_C_API": "false"}
    assert tpu_vm.tpu_environment(env, dev_dir=str(tmp_path), libtpu="/x/libtpu.so") == {
        "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/x/libtpu.so"}


def test_import_tfapp_sets_the_environment_before_tensorflow(tmp_path):
    # A faked TPU VM: TPU_ACCELERATOR_TYPE and a libtpu wheel on the path. tfapp is imported
    # first (as every entry point does); TensorFlow must not be loaded by then.
    lib = _libtpu(tmp_path)
    code = textwrap.dedent("""
        import json, os, sys
        import tfapp
        from tfapp import tpu_vm
        print(json.dumps({"tf_loaded": "tensorflow" in sys.modules,
                          "env": os.environ.get("TF_PLUGGABLE_DEVICE_LIBRARY_PATH"),
                          "applied": tpu_vm.APPLIED}))
    """)
    base = subprocess_env(TPU_ACCELERATOR_TYPE="v5litepod-8")
    base["PYTHONPATH"] += f":{lib.parents[1]}"
    for key in ("TF_PLUGGABLE_DEVICE_LIBRARY_PATH", "NEXT_PLUGGABLE_DEVICE_USE_C_API",
                "TPU_LOAD_LIBRARY"):
        base.pop(key, None)
    out = json.loads(run_python(["-c", code], env=base, timeout=60).stdout)
    assert out == {"tf_loaded": False, "env": str(lib),
                   "applied": {"NEXT_PLUGGABLE_DEVICE_USE_C_API": "true",
                               "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": str(lib)}}
    base["TF_PLUGGABLE_DEVICE_LIBRARY_PATH"] = "/opt/mine/libtpu.so"
    out = json.loads(run_python(["-c", code], env=base, timeout=60).stdout)
    assert out == {"tf_loaded": False, "env": "/opt/mine/libtpu.so", "applied": {}}
    del base["TPU_ACCELERATOR_TYPE"], base["TF_PLUGGABLE_DEVICE_LIBRARY_PATH"]
    base.pop("TPU_LOAD_LIBRARY", None)
    out = json.loads(run_python(["-c", code], env=base, timeout=60).stdout)
    assert out["applied"] == {"TPU_LOAD_LIBRARY": "0"} and out["env"] is None
