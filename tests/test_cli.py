"""The command line (tfapp/cli.py): one click suite behind ``tfapp`` and ``python -m
tfapp.X``, the same flags everywhere, layered configs that say where each value came from,
whole help texts, shell completion, and a console script as quiet as ``python -m``."""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from pathlib import Path

import tfapp
from tfapp import cli, console
from tfapp.config import TASKS, config_reference

import click
import pytest
import yaml
from conftest import REPO, run_python, run_tfapp, subprocess_env

#: every command a user runs -> the module ``python -m`` runs it as
MODULES = {"train": "tfapp.train", "lr-find": "tfapp.lr_find", "tune": "tfapp.tune",
           "prepare": "tfapp.prepare", "predict": "tfapp.predict",
           "evaluate": "tfapp.evaluate", "generate": "tfapp.generate",
           "pretrain": "tfapp.pretrain", "hub": "tfapp.hub.__main__", "share": "tfapp.share",
           "profile": "tfapp.profile", "data-service": "tfapp.data_service",
           "doctor": "tfapp.doctor", "export-hf": "tfapp.export_hf",
           "beam-predict": "tfapp.beam_predict"}


def _leaf_commands() -> list[tuple[str, click.Command]]:
    """(command path, click command) of every command a user runs, groups opened."""
    import importlib

    found = []
    for name, module in MODULES.items():
        cmd = importlib.import_module(module).command
        if isinstance(cmd, click.Group):
            found += [(f"{name} {sub}", c) for sub, c in cmd.commands.items()]
        else:
            found.append((name, cmd))
    return found + [("completion", cli.completion)]


def test_help_lists_every_command_and_version_prints_it():
    proc = run_python(["-m", "tfapp.cli", "--help"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    listed = re.findall(r"^  (\S+)  ", proc.stdout.split("Commands:")[1], flags=re.M)
    assert sorted(listed) == sorted([*MODULES, "completion"])
    assert {name: entry.module for name, entry in cli.COMMANDS.items()
            if name != "completion"} == MODULES
    proc = run_python(["-m", "tfapp.cli", "--version"], timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == f"tfapp {tfapp.__version__}"


def test_every_command_takes_verbose_and_quiet():
    for path, cmd in _leaf_commands():
        flags = {opt for param in cmd.params for opt in getattr(param, "opts", [])}
        assert {"-v", "--verbose", "-q", "--quiet"} <= flags, path


def test_quiet_and_verbose_set_the_log_level(capsys):
    import logging

    root = logging.getLogger()
    before = root.level
    try:
        for flag, level in (("-q", logging.WARNING), ("-v", logging.DEBUG),
                            ("--quiet", logging.WARNING)):
            assert cli.main(["train", "--print-config", flag]) == 0
            assert root.level == level, flag
    finally:
        root.setLevel(before)
    capsys.readouterr()


def test_run_tfapp_captures_a_commands_output_and_undoes_its_logging_setup(tmp_path,
                                                                          monkeypatch):
    """conftest's in-process runner: what a command prints and logs (through tfapp's
    ``setup_logging``) comes back as a subprocess's would, and that logging set-up (a
    handler bound to the captured stderr, the DEBUG level of ``-v``) does not outlive
    the call into the tests after it."""
    import logging

    (tmp_path / "logging_command.py").write_text(
        "import logging, sys\n"
        "from tfapp.cli import setup_logging\n"
        "def main(argv):\n"
        "    setup_logging(verbose=True)\n"
        "    logging.getLogger('tfapp.x').debug('a debug line')\n"
        "    logging.getLogger('tfapp.x').error('an error line %s', argv[0])\n"
        "    print('printed', argv[0])\n"
        "    print('tfapp: error: the last line', file=sys.stderr)\n"
        "    return 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    proc = run_tfapp("logging_command", ["x1"])
    assert proc.returncode == 2 and proc.stdout == "printed x1\n"
    lines = proc.stderr.splitlines()
    assert "DEBUG a debug line" in lines[0] and "ERROR an error line x1" in lines[1]
    assert lines[2:] == ["tfapp: error: the last line"]
    assert root.handlers == handlers and root.level == level
    proc = run_tfapp("tfapp.train", ["--print-config", "name=printed"])  # a real one
    assert proc.returncode == 0 and yaml.safe_load(proc.stdout)["name"] == "printed"
    assert root.handlers == handlers and root.level == level


def test_lr_find_and_lr_underscore_find_are_the_same_command(capsys):
    assert cli.main(["lr-find", "--print-config", "trainer.epochs=2"]) == 0
    dashed = capsys.readouterr().out
    assert cli.main(["lr_find", "--print-config", "trainer.epochs=2"]) == 0
    assert capsys.readouterr().out == dashed and "epochs: 2" in dashed
    assert cli.main(["data_service", "--help"]) == 0
    assert "--listen-all" in capsys.readouterr().out


def test_python_m_runs_every_command_and_help_loads_no_tensorflow():
    """Every command module's ``__main__`` block, run as ``python -m`` runs it (runpy), with
    --help, in one fresh process: whole help, and TensorFlow never imported. (The other
    tests call ``main(argv)`` in-process, conftest's run_tfapp, so this is where
    ``python -m tfapp.predict`` and the rest are run.)"""
    code = textwrap.dedent(f"""
        import contextlib, io, runpy, sys, warnings
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: "found in sys.modules"
        for module in {sorted(set(MODULES.values()))!r}:
            sys.argv, out = [module, "--help"], io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    runpy.run_module(module, run_name="__main__", alter_sys=True)
                    code = "no exit"
                except SystemExit as stop:
                    code = stop.code
            prog = "python -m " + module.removesuffix(".__main__")
            assert code == 0 and out.getvalue().startswith("Usage: " + prog), (module, code)
        print("tensorflow" in sys.modules)
    """)
    proc = run_python(["-c", code], timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"
    # and a module run as a script (python -m) dispatches to the same command
    proc = run_python(["-m", "tfapp.lr_find", "--print-config", "name=x"], timeout=120)
    assert proc.returncode == 0 and yaml.safe_load(proc.stdout)["name"] == "x", proc.stderr


def test_batch_size_help_says_what_the_code_does():
    """predict's and generate's --batch-size: rows read (and sorted by length) together,
    the model called on tfapp.scoring.CALL of them at a time; the default is scoring.BATCH.
    (The constants are read from the source: importing tfapp.scoring loads TensorFlow.)"""
    import ast

    tree = ast.parse((REPO / "tfapp" / "scoring.py").read_text())
    constants = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name) and t.id in ("BATCH", "CALL")}
    for name in ("predict", "generate"):
        option = next(p for p in cli.SUITE.get_command(None, name).params
                      if p.name == "batch_size")
        assert option.default == constants["BATCH"], name
        assert f"{constants['CALL']} at a time" in option.help, (name, option.help)
        assert "per model call" not in option.help


def test_every_help_is_plain_text_without_restructuredtext(capsys):
    """Helps are module docstrings written for the docs: the terminal gets them without
    ``literal`` quotes, `*` bullets or `::` (a docstring that has them shows they are
    dropped, not absent)."""
    import tfapp.export_hf

    assert "``config.json``" in tfapp.export_hf.__doc__ and "\n* ``" in tfapp.export_hf.__doc__
    paths = [name.split() for name, _ in _leaf_commands()]
    paths += [[name] for name, module in MODULES.items() if module == "tfapp.hub.__main__"]
    paths += [[], ["profile"]]
    for path in paths:
        assert cli.main([*path, "--help"]) == 0, path
        text = capsys.readouterr().out
        assert text.startswith("Usage: tfapp"), path
        assert "``" not in text, path
        assert not re.search(r"^\s*\* ", text, re.MULTILINE), path
        assert not re.search(r"\w::$", text, re.MULTILINE), path
    assert cli.main(["export-hf", "--help"]) == 0
    text = capsys.readouterr().out
    assert "  - config.json: BertForSequenceClassification (classifier)" in text


def _help_paths() -> list[list[str]]:
    """``tfapp`` itself, every command of ``cli.COMMANDS`` and every subcommand of a group."""
    paths: list[list[str]] = [[]]
    for name in cli.COMMANDS:
        paths.append([name])
        cmd = cli.SUITE.get_command(None, name)
        if isinstance(cmd, click.Group):
            paths += [[name, sub] for sub in cmd.commands]
    return paths


def _render_help(path: list[str]) -> str:
    from click.testing import CliRunner

    result = CliRunner().invoke(cli.SUITE, [*path, "--help"], prog_name=cli.PROG)
    assert result.exit_code == 0, (path, result.output)
    return result.output


def _tfapp_code_names() -> set[str]:
    """Names of tfapp's own functions and classes that a reader could not mistake for
    English (an underscore, or a capital inside): ``hf_form``, ``ExportFormat``."""
    import ast

    names = set()
    for source in (REPO / "tfapp").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                    "_" in node.name.strip("_") or re.search(r"[a-z][A-Z]", node.name)):
                names.add(node.name)
    return names


def help_defects(text: str, code_names: set[str]) -> list[str]:
    """What a terminal reader of ``--help`` should not see: a backslash line continuation
    in a docstring that Python joined into one line (a run of spaces mid-line, then a
    flag), raw single backticks, the config reference appended (one ``key = default``
    line per config key), tfapp's module paths and code names (except the ``python -m
    tfapp.X`` a user types), or a help longer than a screenful or two."""
    defects = []
    for line in text.splitlines():
        if re.search(r"\S {3,}--[a-z]", line):
            defects.append(f"joined continuation: {line.strip()!r}")
        if "`" in line:
            defects.append(f"backtick: {line.strip()!r}")
        if re.match(r"^ +[a-z_]+\.[a-z_.]+ = ", line):
            defects.append(f"config reference: {line.strip()!r}")
    for module in re.findall(r"(?<!-m )\btfapp[./][\w/.]*\w", text):
        defects.append(f"module path: {module}")
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    keys = {part for task in TASKS for key, *_ in config_reference(task)
            for part in key.split(".")}
    defects += [f"code name: {name}" for name in sorted((words & code_names) - keys)]
    if len(text.splitlines()) > 90:
        defects.append(f"{len(text.splitlines())} lines")
    return defects


def test_help_defects_are_found():
    """The checker finds each defect it looks for, and passes clean text."""
    names = {"hf_form", "ExportFormat"}
    bad = ("Usage: tfapp x\n"
           "      tfapp generate --model runs/g --data p.csv --keep id         --output g.pq\n"
           "  `build-bert` learns a vocab\n"
           "    trainer.epochs = 6  [int]\n"
           "  the format's hf_form (tfapp.serving.ExportFormat, in tfapp/tasks/x.py)\n")
    assert help_defects(bad, names) == [
        "joined continuation: 'tfapp generate --model runs/g --data p.csv --keep id"
        "         --output g.pq'",
        "backtick: '`build-bert` learns a vocab'",
        "config reference: 'trainer.epochs = 6  [int]'",
        "module path: tfapp.serving.ExportFormat", "module path: tfapp/tasks/x.py",
        "code name: ExportFormat", "code name: hf_form"]
    assert help_defects("x\n" * 91, names) == ["91 lines"]
    clean = ("  --model RUN_DIR                 Generator run directory.\n"
             "      python -m tfapp.generate --model runs/generator \\\n"
             "          --top-k 5     # five\n  data.train_files=my.csv sets a key\n")
    assert help_defects(clean, names) == []


def test_every_help_reads_clean():
    """Every command's --help (the suite's, each command's, each subcommand's) as a
    terminal shows it: no defect ``help_defects`` looks for."""
    names = _tfapp_code_names()
    found = {" ".join(path) or "tfapp": help_defects(_render_help(path), names)
             for path in _help_paths()}
    assert len(found) > len(cli.COMMANDS)  # the groups' subcommands are in
    assert {path: d for path, d in found.items() if d} == {}


def test_config_commands_point_to_the_config_reference():
    """train, lr-find, tune and prepare end their help with where the config keys are
    (``--print-config``, docs/config.md), not with the keys themselves."""
    for name in ("train", "lr-find", "tune", "prepare"):
        text = " ".join(_render_help([name]).split())
        assert "--print-config" in text and "docs/config.md" in text, name
        assert "KEY=VALUE" in text, name
    assert (REPO / "docs" / "config.md").is_file()


def test_plain_drops_restructuredtext_markup_only():
    doc = ("Reads ``data.format`` (see :func:`tfapp.data.sources.read_examples`) as::\n\n"
           "    tfapp train x=1\n\n* ``a``: one\n  * b [::]:port\n")
    assert cli.plain(doc) == ("Reads data.format (see tfapp.data.sources.read_examples) as:"
                              "\n\n    tfapp train x=1\n\n- a: one\n  - b [::]:port\n")


def _layers(tmp_path: Path) -> tuple[Path, Path]:
    base = tmp_path / "base.yaml"
    base.write_text("trainer:\n  epochs: 2\n  early_stopping_patience: 7\n"
                    "data:\n  batch_size: 8\n")
    local = tmp_path / "local.yaml"
    local.write_text("trainer:\n  epochs: 5\n")
    return base, local


def test_repeated_configs_merge_in_order_later_wins(tmp_path, capsys):
    base, local = _layers(tmp_path)
    assert cli.main(["train", "--config", str(base), "--config", str(local),
                     "--print-config", "data.seq_length=32"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["trainer"]["epochs"] == 5  # the later file wins
    assert cfg["trainer"]["early_stopping_patience"] == 7  # the earlier file's keys stay
    assert cfg["data"]["batch_size"] == 8
    assert cfg["data"]["seq_length"] == 32
    assert cfg["name"] == "base"  # the run is named after the first file (the experiment)
    # the other order: the base file's epochs win
    assert cli.main(["train", "--config", str(local), "--config", str(base),
                     "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["epochs"] == 2


def test_print_config_sources_names_where_each_value_came_from(tmp_path, capsys):
    base, local = _layers(tmp_path)
    argv = ["train", "--config", str(base), "--config", str(local), "--print-config",
            "--sources", "data.seq_length=32"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    sources, groups = {}, []
    for indent, key, source in re.findall(r"^( *)(\w+):(?: .*  # (.+))?$", out, flags=re.M):
        groups = groups[:len(indent) // 2] + [key]
        if source:
            sources[".".join(groups)] = source
    assert sources["trainer.epochs"] == str(local)
    assert sources["trainer.early_stopping_patience"] == sources["data.batch_size"] == str(base)
    assert sources["data.seq_length"] == "override"
    assert sources["optimizer.learning_rate"] == "default"
    assert set(sources) == {key for key, *_ in config_reference()}  # every key, once
    assert sources["name"] == f"{base} (its file name)"
    # still the same YAML: the comments change nothing
    assert cli.main(argv[:-2] + ["data.seq_length=32"]) == 0
    assert yaml.safe_load(out) == yaml.safe_load(capsys.readouterr().out)


def test_shell_completion_script_and_completions():
    proc = run_python(["-m", "tfapp.cli", "completion", "bash"], timeout=120)
    assert proc.returncode == 0 and "_TFAPP_COMPLETE=bash_complete" in proc.stdout
    env = subprocess_env(_TFAPP_COMPLETE="bash_complete", COMP_WORDS="tfapp lr",
                         COMP_CWORD="1")
    code = "from tfapp.cli import SUITE; SUITE.main(prog_name='tfapp')"
    proc = run_python(["-c", code], env=env, timeout=120)
    assert proc.stdout.split() == ["plain,lr-find"], proc.stdout + proc.stderr
    env.update(COMP_WORDS="tfapp train --resume", COMP_CWORD="2")
    proc = run_python(["-c", code], env=env, timeout=120)
    assert proc.stdout.split() == ["plain,--resume-anyway"], proc.stdout + proc.stderr


@pytest.mark.parametrize("argv, fragment", [
    (["train", "--epochs", "3"], "no such option '--epochs'; config keys are key=value "
                                 "arguments, e.g. trainer.epochs=...; see: tfapp train --help"),
    (["hub"], "no command given; choose one of: build-bert, convert, resolve"),
    (["train", "--sources"], "--sources goes with --print-config"),
    (["train", "--start-over", "--resume-anyway"], "exclude each other"),
])
def test_bad_flags_are_one_line_and_exit_2(argv, fragment, capsys):
    assert cli.main(argv) == cli.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tfapp: error: ") and fragment in err, err


# A C++ log line of TensorFlow (absl's I0000/W0000 format, or TF 2.20's dated one).
TF_LOG_LINE = re.compile(r"^([IWE]\d{4} |\d{4}-\d\d-\d\d [\d:.]+: [IWE] )")


def _console_script() -> str:
    """The installed ``tfapp`` entry point (pip's wrapper calling tfapp.cli:main)."""
    script = shutil.which("tfapp", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("tfapp is not installed in this environment (pip install -e .)")
    return script


def test_the_console_script_is_as_quiet_as_python_m():
    """``tfapp doctor`` (which imports TensorFlow) through the installed console script:
    none of TensorFlow's C++ start-up notices reach stderr, as with ``python -m``."""
    env = subprocess_env()
    env.pop("TFAPP_TF_LOGS", None)
    proc = __import__("subprocess").run([_console_script(), "doctor"], capture_output=True,
                                        text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: doctor found a problem
    assert "tensorflow" in proc.stdout.lower()  # it did look at TensorFlow
    noise = [line for line in proc.stderr.splitlines()
             if TF_LOG_LINE.match(line) or re.search(console.NOISE, line)]
    assert noise == [], proc.stderr[-2000:]
    assert "oneDNN custom operations" not in proc.stderr and "cuInit" not in proc.stderr


def test_the_resume_line_repeats_the_command_as_it_was_typed(tmp_path):
    """An interrupted run ends with the command that resumes it: ``tfapp train ...`` when
    it was started that way, ``python -m tfapp.train ...`` when started so; --start-over
    (which would move the run aside again) left out, the arguments shell-quoted."""
    from tfapp.train import command as train_command

    args = ["--start-over", "trainer.epochs=3", "name=a b"]
    group = cli.SUITE.make_context(cli.PROG, ["train", *args])
    typed = {}
    with group:
        sub = cli.SUITE.get_command(group, "train")
        with sub.make_context("train", list(args), parent=group) as ctx:
            typed["tfapp"] = cli.resume_line("tfapp.train", ctx.meta["tfapp.argv"], tmp_path)
    with train_command.make_context("python -m tfapp.train", list(args)) as ctx:
        typed["module"] = cli.resume_line("tfapp.train", ctx.meta["tfapp.argv"], tmp_path)
    start = "no backup was written yet, so a rerun starts over: "
    assert typed == {"tfapp": start + "tfapp train trainer.epochs=3 'name=a b'",
                     "module": start + "python -m tfapp.train trainer.epochs=3 'name=a b'"}
