"""README stays true: its two set-up commands, CI running the same test line, its length
and order, the user commands it shows (run here on a tiny CSV), and docs/config.md, the
config reference generated from the dataclasses."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

from tfapp import cli
from tfapp.config import TASKS, config_reference

import pytest
import yaml
from conftest import REPO, run_python, run_tfapp, shared_run

README = REPO / "README.md"


def _bash_blocks(text: str | None = None) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README.read_text() if text is None else text,
                      flags=re.S)


def _section(title: str) -> str:
    """The README's ``## title`` section, up to the next ``## ``."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def _commands(block: str) -> list[list[str]]:
    """The ``tfapp ...`` command lines of a bash block, continuations joined, comments
    dropped, split as the shell splits them."""
    lines = re.sub(r"\\\n\s*", " ", block).splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.startswith("tfapp ")]


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
    # the README's TPU one-liner is the same --no-deps line
    assert no_deps.removeprefix("pip install --no-deps ") in " ".join(
        _section("Set up and run (fresh machine, Python 3.11)").split())


def test_readme_is_short_and_reaches_your_own_csv_early():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250
    assert lines.index("## Train on your own CSV") < 80
    # the venv is activated right after the two set-up commands, before any bare tfapp
    third = _bash_blocks()[2].strip()
    assert third == "source .venv/bin/activate"


def test_commands_at_a_glance_lists_every_command():
    table = _section("Commands at a glance")
    listed = set(re.findall(r"^\| `tfapp ([a-z-]+)", table, flags=re.M))
    assert listed == set(cli.COMMANDS) - {"completion"}  # completion: docs/cli.md


def test_config_reference_is_current():
    proc = run_python(["scripts/gen_config_reference.py", "--check"], timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_config_reference_has_every_key_of_every_task_once_per_variant():
    """docs/config.md: one table per group, each key once (a row per task-specific variant),
    with its type, default and whole meaning; no key of any task left out."""
    text = (REPO / "docs" / "config.md").read_text()
    rows = re.findall(r"^\| `([\w.]+)` \| .*\|$", text, flags=re.M)
    for task in TASKS:
        for key, _, default, meaning in config_reference(task):
            cells = [line for line in text.splitlines() if line.startswith(f"| `{key}` |")]
            assert cells, (task, key)
            if key != "task":  # the key that picks the task: the default task's row
                escaped = (default.replace("|", "\\|"), meaning.replace("|", "\\|"))
                assert any(f"`{escaped[0]}`" in c and escaped[1] in c for c in cells), (task, key)
    headings = re.findall(r"^## `(\w+)`$", text, flags=re.M)
    assert len(headings) == len(set(headings))  # a group's table is not repeated per task
    assert len(rows) < sum(len(config_reference(t)) for t in TASKS) / 2


# ------------------------------------------------------------ the README's own-CSV recipe

#: what makes the README's recipe a CI-sized run: sizes only (and a test split, so that
#: every file the README lists is written)
TINY = ["trainer.epochs=1", "trainer.steps_per_epoch=2", "data.batch_size=4",
        "data.seq_length=32", "data.test_split=0.2"]
REVIEWS = [("Arrived quickly, and the sound is crisp and clear.", "positive"),
           ("Stopped charging after two weeks.", "negative"),
           ("A lovely hotel with friendly staff.", "positive"),
           ("The film was dull and far too long.", "negative")]


def _csv_header() -> list[str]:
    block = re.search(r"```csv\n(.*?)```", _section("Train on your own CSV"), flags=re.S)
    return next(csv.reader(block.group(1).splitlines()))


def _write_reviews(path: Path, n: int, *, with_id: bool = False) -> Path:
    text_col, label_col = _csv_header()
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow((["id"] if with_id else []) + [text_col, label_col])
        for i in range(n):
            text, label = REVIEWS[i % len(REVIEWS)]
            writer.writerow(([f"r{i}"] if with_id else []) + [f"{text} ({i})", label])
    return path


def _train_command() -> list[str]:
    (command,) = [c for c in _commands(_section("Train on your own CSV")) if c[1] == "train"]
    return command


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder laid out as the README's commands expect: reviews.csv and test.csv there,
    runs/reviews the README recipe's finished run (trained once per test session,
    conftest.shared_run), incoming/*.csv to score."""
    work = tmp_path_factory.mktemp("readme")
    data = _write_reviews(work / "reviews.csv", 40)
    _write_reviews(work / "test.csv", 8)
    (work / "incoming").mkdir()
    _write_reviews(work / "incoming" / "a.csv", 5, with_id=True)
    _write_reviews(work / "incoming" / "b.csv", 3, with_id=True)
    args = [f"data.train_files={data}" if a.startswith("data.train_files=") else a
            for a in _train_command()[2:]]
    run_dir = shared_run(tmp_path_factory, "", *args, *TINY)
    (work / "runs").mkdir()
    (work / "runs" / run_dir.name).symlink_to(run_dir)
    return work


def test_own_csv_command_names_the_csv_columns_and_an_encoder():
    """The recipe's command sets the four keys a newcomer needs, for the file the README
    shows; the encoder is one the docs explain (builtin:, hf:)."""
    text_col, label_col = _csv_header()
    args = dict(a.split("=", 1) for a in _train_command()[2:])
    assert args["data.text_column"] == text_col and args["data.label_column"] == label_col
    assert args["data.train_files"].endswith(".csv")
    assert args["model.hub_handle"] == "builtin:tiny"
    assert "model.hub_handle=hf:" in " ".join(_section("Train on your own CSV").split())


def test_own_csv_print_config_resolves_to_the_run_it_trains(workdir):
    """``--print-config`` on the README's command (what the README says to check first)
    resolves to the config the run saved."""
    run = workdir / "runs" / "reviews"
    saved = yaml.safe_load((run / "params.yaml").read_text())
    argv = [*_train_command()[1:], *TINY, f"output_dir={saved['output_dir']}",
            "--print-config"]
    proc = run_tfapp("tfapp.cli", argv, cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    printed = yaml.safe_load(proc.stdout)
    printed["data"]["train_files"] = saved["data"]["train_files"]  # the README's relative path
    assert printed == saved


def test_own_csv_run_writes_what_the_readme_lists(workdir):
    run = workdir / "runs" / "reviews"
    listed = re.search(r"\*\*What comes out,\*\* in `runs/reviews/`:(.*?)\n\* ",
                       _section("Train on your own CSV"), flags=re.S).group(1)
    names = re.findall(r"`([\w.]+/?)`", listed)
    assert {"export/", "validation_report.json", "test_report.json", "params.yaml"} <= set(names)
    missing = [name for name in names if not (run / name).exists()]
    assert missing == []
    assert (run / "export" / "README.md").is_file()  # "with a model card"
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


def test_readme_predict_and_scoring_commands_run(workdir):
    """The README's predict and evaluate commands, as written, on the recipe's run."""
    labels = {label for _, label in REVIEWS}
    (use,) = _commands(_section("Train on your own CSV").split("Then use it:")[1])
    proc = run_tfapp("tfapp.cli", use[1:], cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    label, probability, text = proc.stdout.strip().split("\t")
    assert label in labels and 0.5 <= float(probability) <= 1 and text == use[-1]

    predict, evaluate = _commands(_section("Score a big file"))
    assert predict[1] == "predict" and evaluate[1] == "evaluate"
    proc = run_tfapp("tfapp.cli", predict[1:], cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import pyarrow.parquet as pq

    scored = pq.read_table(workdir / predict[predict.index("--output") + 1]).to_pylist()
    assert [row["id"] for row in scored] == [f"r{i}" for i in [0, 1, 2, 3, 4, 0, 1, 2]]
    assert {row["label"] for row in scored} <= labels

    proc = run_tfapp("tfapp.cli", evaluate[1:], cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "accuracy" in proc.stdout
    rows = pq.read_table(workdir / evaluate[evaluate.index("--output") + 1]).to_pylist()
    assert len(rows) == 8


def test_readme_python_api_block_runs(workdir, monkeypatch):
    block = re.search(r"```python\n(.*?)```", _section("Score a big file"), flags=re.S).group(1)
    monkeypatch.chdir(workdir)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 (the README's own code)
    (row,) = scope["clf"].predict(["the screen cracked on day one"])
    assert row["label"] in {label for _, label in REVIEWS}
    assert "accuracy" in scope["clf"].evaluate("test.csv")


def test_readme_configuration_commands_run(capsys):
    """The layering example's --print-config --sources line, as written."""
    (line,) = [c for c in _commands(_section("Configuration")) if "--sources" in c]
    assert cli.main(line[1:]) == 0
    out = capsys.readouterr().out
    assert "# configs/classifier.yaml" in out and "# default" in out
