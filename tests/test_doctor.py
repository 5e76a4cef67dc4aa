"""python -m tfapp.doctor: the report on this machine, a faked TPU VM, and install problems."""

from __future__ import annotations

import json

from tfapp import doctor, tpu_vm

from conftest import run_python, run_tfapp, subprocess_env

GOOD = {"tensorflow": "2.21.0", "tf-keras": "2.21.0", "tensorflow-text": "2.21.1",
        "tensorflow-hub": "0.16.1"}


def test_doctor_on_this_machine_reports_and_exits_0():
    proc = run_tfapp("tfapp.doctor", [])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "TensorFlow 2.2" in out and "tf.keras is tf-keras" in out
    assert "runtime.strategy=auto -> cpu (auto: no TPU or GPU found)" in out
    from tfapp.runtime import precision_choice

    policy, why = precision_choice("auto", "CPU", None)  # bfloat16 where the CPU has it
    assert f"precision auto -> {policy}; jit_compile auto -> no" in out
    assert f"precision: {why}" in out
    from tfapp.runtime import AUTO_STEPS_PER_EXECUTION

    assert f"steps_per_execution auto -> {AUTO_STEPS_PER_EXECUTION['CPU']} " in out
    assert "oneDNN CPU kernels: on" in out
    assert "no problems found" in out


def test_doctor_json_on_a_faked_tpu_vm_names_the_stock_build(tmp_path):
    env = subprocess_env(TPU_ACCELERATOR_TYPE="v5litepod-8", WANDB_API_KEY="secret-key-123",
                         TFAPP_CACHE_DIR=str(tmp_path / "cache"))
    for key in tpu_vm.APPLIED:  # what tfapp set for this process is not the user's choice
        env.pop(key, None)
    tpu_build = "tensorflow-tpu" in doctor.tensorflow_distributions()
    # A fresh process: tfapp applies a TPU VM's settings when it is imported (tpu_vm).
    proc = run_python(["-m", "tfapp.doctor", "--json"], env=env, timeout=120)
    if tpu_build:  # scripts/check_tpu_install.py runs the suite on the TPU build
        assert proc.returncode == 0, proc.stdout + proc.stderr
        report = json.loads(proc.stdout)
        assert report["tensorflow"]["build"] == "tpu" and report["problems"] == []
        assert report["tpu"]["set_by_tfapp"]["NEXT_PLUGGABLE_DEVICE_USE_C_API"] == "true"
        return
    assert proc.returncode == doctor.EXIT_PROBLEM, proc.stderr
    assert "secret-key-123" not in proc.stdout
    report = json.loads(proc.stdout)
    assert report["plan"]["strategy"] == "tpu"
    assert report["plan"]["precision"] == "mixed_bfloat16" and report["plan"]["jit_compile"]
    assert report["plan"]["steps_per_execution"] == 50  # the TPU guide's value
    assert report["tpu"]["hint"] == "TPU_ACCELERATOR_TYPE is set"
    assert report["wandb"]["api_key_set"] is True
    assert report["tensorflow"]["build"] in ("cuda", "cpu")
    problems = [p["problem"] for p in report["problems"]]
    assert len(problems) == 1 and "stock build" in problems[0]
    assert "docs/tpu.md" in report["problems"][0]["fix"]


def test_package_problems_each_with_a_fix():
    ok = doctor.package_problems(GOOD, ["tensorflow"], "2.21.0", None)
    assert ok == []
    both = doctor.package_problems(GOOD, ["tensorflow", "tensorflow-tpu"], "2.20.0",
                                   "TPU_ACCELERATOR_TYPE is set")
    assert "several distributions" in both[0][0]
    assert both[0][1].startswith("pip uninstall -y tensorflow tensorflow-tpu")
    old = doctor.package_problems({**GOOD, "tf-keras": "2.19.0"}, ["tensorflow"], "2.19.0",
                                  None)
    assert "outside the supported 2.20 and 2.21" in old[0][0]
    mismatch = doctor.package_problems({**GOOD, "tensorflow-text": "2.20.1"}, ["tensorflow-tpu"],
                                       "2.20.0", "/dev/accel* present (TPU VM)")
    assert mismatch == [("tf-keras 2.21.0 does not match TensorFlow 2.20.0",
                         "pip install --no-deps 'tf-keras~=2.20.0'")]
    tpu_build = {**GOOD, "tf-keras": "2.20.1", "tensorflow-text": "2.20.1"}
    assert doctor.package_problems({**tpu_build, "libtpu": "0.0.20"}, ["tensorflow-tpu"],
                                   "2.20.0", None) == []
    too_new = doctor.package_problems({**tpu_build, "libtpu": "0.0.52"}, ["tensorflow-tpu"],
                                      "2.20.0", None)
    assert too_new == [("libtpu 0.0.52 is too new for TensorFlow 2.20's TPU build (it no "
                        "longer exports the TPU functions TensorFlow calls)",
                        "pip install 'libtpu==0.0.20' (what tfapp's [tpu] extra pins)")]
    missing = doctor.package_problems({}, [], None, None)
    assert missing[0][0] == "TensorFlow is not installed (or does not import)"


def test_tensorflow_build_and_cache_checks(tmp_path):
    assert doctor.tensorflow_build(["tensorflow-tpu"], {"is_cuda_build": False}) == "tpu"
    assert doctor.tensorflow_build(["tensorflow"], {"is_cuda_build": True}) == "cuda"
    assert doctor.tensorflow_build(["tensorflow-cpu"], {}) == "cpu"
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert doctor.writable(str(tmp_path / "new" / "dir")) is True
    assert doctor.writable("gs://bucket/cache") is None
    import os
    if os.geteuid() != 0:  # root writes anywhere
        assert doctor.writable(str(locked / "cache")) is False


def test_environment_problems_name_each_broken_cache_and_tf_config(tmp_path):
    """HOME or a cache variable that is a file, under a file (what a read-only place does
    to root as well), or TF_CONFIG malformed: each a problem with its fix."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    ok = {"TFAPP_CACHE_DIR": str(tmp_path / "cache")}
    assert doctor.environment_problems(ok) == []
    cases = [
        ({"TFAPP_CACHE_DIR": str(a_file)},
         f"the tfapp cache {a_file} (TFAPP_CACHE_DIR) is unusable: {a_file} is a file, not a "
         "folder", "set TFAPP_CACHE_DIR to a writable folder"),
        ({"TFAPP_CACHE_DIR": str(a_file / "cache")},
         f"the tfapp cache {a_file / 'cache'} (TFAPP_CACHE_DIR) is unusable: {a_file} is a file",
         "set TFAPP_CACHE_DIR to a writable folder"),
        ({"HOME": str(a_file)},
         f"the tfapp cache {a_file}/.cache/tfapp (from HOME={a_file}) is unusable",
         "set TFAPP_CACHE_DIR to a writable folder (or HOME to your home folder)"),
        ({**ok, "TFHUB_CACHE_DIR": str(a_file / "hub")},
         f"the TF-Hub cache {a_file / 'hub'} (TFHUB_CACHE_DIR) is unusable",
         "set TFHUB_CACHE_DIR to a writable folder"),
        ({**ok, "TF_CONFIG": "not json"}, "TF_CONFIG is not valid JSON",
         "set TF_CONFIG to JSON like"),
        ({**ok, "TF_CONFIG": '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", '
                             '"index": 1}}'}, "TF_CONFIG task index 1 is out of range",
         "or unset it to train on this machine alone"),
    ]
    for env, problem, fix in cases:
        found = doctor.environment_problems(env)
        assert len(found) == 1 and problem in found[0][0] and fix in found[0][1], (env, found)


def test_an_unwritable_cache_folder_is_a_problem():
    """chmod 0555: a folder its user cannot write. The check runs in a forked child that,
    under root (who writes there all the same), first becomes the user nobody: the same
    check and verdict for any user running the suite."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    # In /tmp, reachable by nobody (pytest's own temp folders are its user's alone).
    base = Path(tempfile.mkdtemp(prefix="tfapp-test-doctor-"))
    base.chmod(0o755)
    locked = base / "locked"
    locked.mkdir(mode=0o555)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            found = doctor.environment_problems({"TFAPP_CACHE_DIR": str(locked / "cache")})
            os.write(write, json.dumps(found).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        found = json.loads(fh.read() or "null")
    os.waitpid(child, 0)
    shutil.rmtree(base)
    assert found and f"{locked} cannot be written" in found[0][0], found


def test_doctor_with_a_broken_environment_lists_the_problems_without_a_traceback(tmp_path):
    (tmp_path / "a_file").write_text("x")
    proc = run_tfapp("tfapp.doctor", [], env={"TFAPP_CACHE_DIR": str(tmp_path / "a_file"),
                                              "TF_CONFIG": "[1]"})
    assert proc.returncode == doctor.EXIT_PROBLEM, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert "2 problem(s) that stop a run:" in proc.stdout
    assert "is a file, not a folder" in proc.stdout and "TF_CONFIG is a JSON list" in proc.stdout
    assert "(TF_CONFIG left out: it is malformed)" in proc.stdout


def test_a_missing_tensorflow_is_one_line_naming_the_extra(capsys):
    from tfapp import cli

    def body():
        raise ModuleNotFoundError("No module named 'tf_keras'", name="tf_keras")

    assert cli.run_main(body) == cli.EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert err.startswith("tfapp: error: 'tf_keras' is not installed") and "[cpu]" in err
    assert "docs/tpu.md" in err and "\n" not in err

    def other():
        raise ModuleNotFoundError("No module named 'nope'", name="nope")

    try:  # not TensorFlow's: a real bug, left as a traceback
        cli.run_main(other)
    except ModuleNotFoundError as exc:
        assert exc.name == "nope"
    else:
        raise AssertionError("an unrelated missing module was swallowed")
