"""Run docs/tpu.md's install recipes on this (CPU) machine and check they keep the TPU build.

    python scripts/check_tpu_install.py                      # all three recipes
    python scripts/check_tpu_install.py --recipe vm --suite vm
    python scripts/check_tpu_install.py --recipe kaggle --keep /tmp/tpu-check

For each recipe (the ```bash block after ``<!-- recipe: NAME -->`` in docs/tpu.md, run as
written: ``%pip``/``%cd``/``!`` notebook lines become shell lines, ``/content/`` and
``/kaggle/working/`` become folders of a fresh HOME, ``/kaggle/input/tfapp`` is this
checkout) in a fresh virtual environment with the real ``tensorflow-tpu==2.20.0`` wheel:

1. ``tensorflow`` is still the TPU build: ``tensorflow-tpu`` is the only distribution that
   ships the module, and the installed ``tensorflow/__init__.py`` matches the hash in
   ``tensorflow-tpu``'s RECORD (nothing laid another build over it);
2. libtpu exports every ``Tpu*`` function TensorFlow's ``libtensorflow_cc.so.2`` looks up
   (``nm -D``; a libtpu too new for TensorFlow 2.20 misses many);
3. ``python -m tfapp.doctor`` exits 0 and ``python -m tfapp.train`` on the embedded default
   completes and exports a model;
4. with ``--suite NAME``, the fast test suite passes there (``-m "not slow and not
   xla_cpu"``: the TPU build has no XLA backend for the CPU, so tests that compile with XLA
   on the CPU cannot run on it; tfapp itself decodes uncompiled there).

Kaggle's TPU image has TensorFlow 2.20's CPU build (``tensorflow-cpu``, and stock
``tensorflow`` through ``tensorflow_hub``) and libtpu 0.0.17 before the recipe runs
(Kaggle/docker-python ``tpu/``): the script installs those first and checks that the recipe
swapped in the TPU build and left the image's libtpu as it was. (Kaggle's Python is 3.12;
this runs the recipe on the Python it is started with.)
Needs the package index (PyPI) and about 3 GB of disk per recipe; pip's cache makes reruns
fast. What no CPU machine can check is the TPU itself.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "tpu.md"
RECIPES = ("vm", "colab", "kaggle")
# What Kaggle's TPU image has before a notebook runs (Kaggle/docker-python tpu/).
KAGGLE_IMAGE = ["tensorflow-cpu==2.20.0", "tensorflow-hub", "libtpu==0.0.17"]


def test_tools() -> list[str]:
    """The ``test`` extra of pyproject.toml: what the suite imports (pytest, hypothesis, ...),
    read from the one place that lists it rather than copied here."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return list(project["optional-dependencies"]["test"])


def recipe_blocks(text: str) -> dict[str, str]:
    """``<!-- recipe: NAME -->`` followed by a ```bash block -> {NAME: block}."""
    found = re.findall(r"<!-- recipe: (\w+) -->\s*```bash\n(.*?)```", text, flags=re.S)
    return dict(found)


def to_shell(block: str, home: Path, kaggle_input: Path | None = None) -> str:
    """A recipe block as a bash script: notebook magics become commands, notebook paths
    folders under ``home``, and every line must succeed."""
    lines = ["set -euo pipefail"]
    for line in block.splitlines():
        line = re.sub(r"^%pip\b", "python -m pip", line.strip())
        line = re.sub(r"^%cd\b", "cd", line)
        line = re.sub(r"^!", "", line)
        line = line.replace("/kaggle/input/tfapp", str(kaggle_input or REPO))
        line = line.replace("/kaggle/working/", f"{home}/").replace("/content/", f"{home}/")
        if line:
            lines.append(line)
    return "\n".join(lines) + "\n"


def run(cmd: list[str] | str, *, env: dict, cwd: Path, log: Path, timeout: int,
        shell: bool = False) -> float:
    """Run, appending output to ``log``; raise with the log's tail on failure."""
    start = time.monotonic()
    with open(log, "a") as fh:
        fh.write(f"\n$ {cmd if shell else ' '.join(map(str, cmd))}\n")
        fh.flush()
        proc = subprocess.run(cmd, shell=shell, executable="/bin/bash" if shell else None,
                              env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                              timeout=timeout)
    if proc.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-25:])
        raise RuntimeError(f"exit {proc.returncode}: {cmd}\n{tail}")
    return time.monotonic() - start


def check_tensorflow_is_tpu_build(python: Path, env: dict) -> str:
    code = r"""
import base64, hashlib, importlib.metadata as md, json, pathlib
providers = sorted(md.packages_distributions().get("tensorflow", []))
dist = md.distribution("tensorflow-tpu")
init = next(f for f in dist.files if str(f) == "tensorflow/__init__.py")
algo, digest = init.hash.mode, init.hash.value
data = pathlib.Path(init.locate()).read_bytes()
actual = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
print(json.dumps({"providers": providers, "version": dist.version,
                  "init_matches_record": actual == digest,
                  "libtpu": md.version("libtpu")}))
"""
    out = subprocess.run([str(python), "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"tensorflow-tpu is not installed:\n{out.stderr[-1500:]}")
    facts = json.loads(out.stdout)
    if [p.lower().replace("_", "-") for p in facts["providers"]] != ["tensorflow-tpu"]:
        raise RuntimeError(f"the tensorflow module comes from {facts['providers']}, "
                           "not only tensorflow-tpu")
    if not facts["init_matches_record"]:
        raise RuntimeError("tensorflow/__init__.py differs from tensorflow-tpu's RECORD: "
                           "another build was laid over it")
    return f"tensorflow-tpu {facts['version']}, libtpu {facts['libtpu']}"


def check_libtpu_exports(venv: Path) -> str:
    site = next(venv.glob("lib/python*/site-packages"))
    tf_lib = site / "tensorflow" / "libtensorflow_cc.so.2"
    libtpu = site / "libtpu" / "libtpu.so"
    needed = set(re.findall(rb"(?<=\x00)(Tpu[A-Za-z]+_[A-Za-z_]+)(?=\x00)", tf_lib.read_bytes()))
    nm = subprocess.run(["nm", "-D", "--defined-only", str(libtpu)], capture_output=True,
                        text=True, check=True).stdout
    exported = {line.split()[-1].split("@")[0].encode() for line in nm.splitlines() if line}
    missing = sorted(needed - exported)
    if not needed or missing:
        raise RuntimeError(f"libtpu lacks {len(missing)} of the {len(needed)} TPU functions "
                           f"TensorFlow looks up, e.g. {[m.decode() for m in missing[:3]]}")
    return f"libtpu exports all {len(needed)} Tpu* functions TensorFlow looks up"


def file_digest(path: Path) -> str:
    return base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()


def check_recipe(name: str, block: str, root: Path, suite: bool) -> list[str]:
    home = root / name / "home"
    home.mkdir(parents=True)
    log = root / name / "log.txt"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH", "TFAPP_", "TF_", "TPU_"))}
    env.update(HOME=str(home), PIP_DISABLE_PIP_VERSION_CHECK="1", WANDB_MODE="disabled",
               TFAPP_CACHE_DIR=str(home / "tfapp-cache"))
    if name == "vm":
        (home / "tfapp").symlink_to(REPO)
        venv = home / "tfapp-env"
    else:
        # The notebook's own Python: a venv first on PATH, as the kernel's interpreter.
        venv = home / "notebook-python"
        run([sys.executable, "-m", "venv", str(venv)], env=env, cwd=home, log=log,
            timeout=300)
        env["PATH"] = f"{venv}/bin:{env['PATH']}"
        if name == "colab":
            (home / "tfapp").symlink_to(REPO)
    results = []
    before = None
    if name == "kaggle":
        t = run([str(venv / "bin" / "pip"), "install", "-q", *KAGGLE_IMAGE], env=env,
                cwd=home, log=log, timeout=1800)
        site = next(venv.glob("lib/python*/site-packages"))
        before = file_digest(site / "libtpu" / "libtpu.so")
        results.append(f"image: {' '.join(KAGGLE_IMAGE)} preinstalled ({t:.0f} s)")
    kaggle_input = None
    if name == "kaggle":
        # The checkout as a user uploads it as a dataset: its files, no venvs or caches.
        kaggle_input = root / name / "input" / "tfapp"
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.split()
        for rel in files:
            if (REPO / rel).is_file():
                (kaggle_input / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / rel, kaggle_input / rel)
    script = home / "recipe.sh"
    script.write_text(to_shell(block, home, kaggle_input))
    t = run(["bash", str(script)], env=env, cwd=home, log=log, timeout=3600)
    results.append(f"recipe ran ({t:.0f} s)")
    python = venv / "bin" / "python"
    results.append(check_tensorflow_is_tpu_build(python, env))
    if before is not None:
        site = next(venv.glob("lib/python*/site-packages"))
        if file_digest(site / "libtpu" / "libtpu.so") != before:
            raise RuntimeError("the recipe replaced the image's libtpu")
        results.append("the image's libtpu is untouched")
    results.append(check_libtpu_exports(venv))
    work = root / name / "work"
    work.mkdir()
    t = run([str(python), "-m", "tfapp.doctor"], env=env, cwd=work, log=log, timeout=300)
    results.append(f"tfapp.doctor: no problems ({t:.0f} s)")
    t = run([str(python), "-m", "tfapp.train"], env=env, cwd=work, log=log, timeout=1800)
    if not (work / "runs" / "classifier" / "export" / "saved_model.pb").exists():
        raise RuntimeError("python -m tfapp.train finished without an export")
    results.append(f"python -m tfapp.train (embedded default) completed ({t:.0f} s)")
    if suite:
        run([str(venv / "bin" / "pip"), "install", "-q", *test_tools()], env=env, cwd=home,
            log=log, timeout=600)
        # xla_cpu tests compile with XLA on the CPU, which the TPU build has no backend for.
        # -rs: each skipped test and its reason, so a skip is named, not just counted.
        t = run([str(python), "-m", "pytest", "-q", "-rs", "-m", "not slow and not xla_cpu", "-p",
                 "no:cacheprovider", "--maxprocesses", "2"], env=env, cwd=REPO, log=log,
                timeout=3600)
        lines = log.read_text().splitlines()
        summary = [ln for ln in lines if " passed" in ln][-1]
        results.append(f"fast test suite: {summary.strip()} ({t:.0f} s)")
        results += [f"  {ln.strip()}" for ln in lines if ln.startswith("SKIPPED ")]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", action="append", choices=RECIPES,
                        help="recipe(s) to check (default: all three)")
    parser.add_argument("--suite", action="append", choices=RECIPES, default=None,
                        help="also run the fast test suite in this recipe's environment "
                             "(default: vm)")
    parser.add_argument("--keep", metavar="DIR",
                        help="build in DIR and keep it (default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    recipes = args.recipe or list(RECIPES)
    suites = set(args.suite if args.suite is not None else ["vm"])
    blocks = recipe_blocks(DOC.read_text())
    missing = [r for r in recipes if r not in blocks]
    if missing:
        print(f"check_tpu_install: docs/tpu.md has no recipe block for {missing}",
              file=sys.stderr)
        return 2
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tpu-install-"))
    root.mkdir(parents=True, exist_ok=True)
    failed = 0
    try:
        for name in recipes:
            print(f"== {name}: docs/tpu.md recipe '{name}' (log: {root / name / 'log.txt'})",
                  flush=True)
            try:
                for line in check_recipe(name, blocks[name], root, name in suites):
                    print(f"  ok  {line}", flush=True)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                failed += 1
                print(f"  FAILED  {err}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{len(recipes) - failed} of {len(recipes)} recipes passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
