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


def test_config_reference_is_current():
    proc = run_python(["scripts/gen_config_reference.py", "--check"], timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
