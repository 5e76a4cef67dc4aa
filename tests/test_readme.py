"""README stays true: its two set-up commands, CI running the same test line, the config
reference matching the dataclasses."""

from __future__ import annotations

import re

from conftest import REPO, run_python


def _bash_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_readme_opens_with_run_and_test_commands():
    first, second = _bash_blocks()[:2]
    assert first.strip().endswith("python -m tfapp.train")
    assert "pytest" in second and "ruff check" in second


def test_ci_runs_the_readme_test_command():
    test_command = _bash_blocks()[1].strip()
    assert test_command in (REPO / ".ci" / "run").read_text()


def test_ci_installs_the_tpu_build_as_the_vm_recipe_says():
    """CI's TPU lane runs docs/tpu.md's Cloud TPU VM recipe: the [tpu] extra, then the
    same --no-deps line (keep the two in sync)."""
    doc = (REPO / "docs" / "tpu.md").read_text()
    recipe = re.search(r"<!-- recipe: vm -->\s*```bash\n(.*?)```", doc, flags=re.S).group(1)
    no_deps = next(line for line in recipe.splitlines() if "--no-deps" in line)
    ci = (REPO / ".ci" / "run").read_text()
    assert 'pip install -e ".[tpu]"' in recipe and '.venv-tpu/bin/pip install -q -e ".[tpu,' in ci
    assert no_deps.replace("pip install ", ".venv-tpu/bin/pip install -q ") in ci


def test_config_reference_is_current():
    proc = run_python(["scripts/gen_config_reference.py", "--check"], timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
