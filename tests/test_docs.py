"""The docs name only what exists: README links every guide, and the commands and config
keys README.md and docs/*.md show (in code spans and code blocks) are today's."""

from __future__ import annotations

import importlib
import re

from tfapp import cli
from tfapp.config import TASKS, config_reference

import click
import yaml
from conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
KEYS = {key for task in TASKS for key, *_ in config_reference(task)}  # any task's
GROUPS = sorted({key.split(".")[0] for key in KEYS if "." in key})

#: dotted names in the docs that look like config keys and are something else
NOT_CONFIG_KEYS = {
    "trainer.epochz": "errors.md: the misspelt key of an error example",
    "optimizer.learning_rat": "errors.md: the misspelt key of an error example",
    "model.predict": "Keras's Model.predict",
    "model.save_pretrained": "Hugging Face's save_pretrained",
    "optimizer.iterations": "the Keras optimizer's step counter",
}
#: file names that start like a config group (model.safetensors)
FILE_SUFFIX = re.compile(r"\.(safetensors|json|yaml|md|py|txt|csv|bin|png|html)$")


def _code(text: str) -> list[str]:
    """The code blocks and the inline code spans of a Markdown text."""
    blocks = re.findall(r"```[\w-]*\n(.*?)```", text, flags=re.S)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return blocks + re.findall(r"`([^`\n]+)`", prose)


def _is_config_key(name: str) -> bool:
    """A leaf key, a group of them, or a key inside a mapping-valued one (tune.space.x)."""
    return (name in KEYS or any(key.startswith(name + ".") for key in KEYS)
            or any(name.startswith(key + ".") for key in KEYS))


def _subcommands(module: str) -> set[str] | None:
    cmd = cli.SUITE if module == "tfapp.cli" else importlib.import_module(module).command
    return set(cmd.commands) if isinstance(cmd, click.Group) else None


def test_readme_links_every_guide():
    readme = (REPO / "README.md").read_text()
    missing = [doc.name for doc in DOCS[1:] if f"](docs/{doc.name}" not in readme]
    assert missing == [], f"README.md links no guide for: {missing}"


def stale_commands(docs: dict[str, str]) -> list[str]:
    """``python -m tfapp.X [SUB]`` and ``tfapp X`` in the docs' code that no longer exist."""
    stale = []
    modules = {entry.module.removesuffix(".__main__"): entry.module
               for entry in cli.COMMANDS.values()}
    for name, text in docs.items():
        for code in _code(text):
            # (a capital is a placeholder: python -m tfapp.X)
            for m in re.finditer(r"python -m tfapp\.([a-z_][\w.]*)(?:[ \t]+([a-z][\w-]*))?",
                                 code):
                module = f"tfapp.{m.group(1)}"
                if module not in modules:
                    stale.append(f"{name}: python -m {module}")
                    continue
                subs = _subcommands(modules[module])
                if subs is not None and m.group(2) is not None and m.group(2) not in subs:
                    stale.append(f"{name}: python -m {module} {m.group(2)}")
            # the console script, as a command line (a block's line or a span's start)
            for m in re.finditer(r"(?:^|\$ )tfapp ([a-z][\w-]*)", code, flags=re.M):
                if m.group(1) not in cli.COMMANDS:
                    spelling = cli.ALIASES.get(m.group(1))
                    stale.append(f"{name}: tfapp {m.group(1)}"
                                 + (f" (write tfapp {spelling})" if spelling else ""))
    return stale


def stale_keys(docs: dict[str, str]) -> list[str]:
    """Dotted config keys (``group.key``) in the docs' code, and the keys of their YAML
    blocks, that are not config keys today."""
    stale = []
    groups = "|".join(GROUPS)
    dotted = re.compile(rf"(?<![\w/.$-])((?:{groups})\.[a-z_][\w.]*[a-z_\d])(\(?)")
    for doc, text in docs.items():
        for code in _code(text):
            for m in dotted.finditer(code):
                name, call = m.groups()
                group = name.split(".")[0]
                module = importlib.import_module(f"tfapp.{group}") \
                    if (REPO / "tfapp" / f"{group}.py").is_file() else None
                if (call or name in NOT_CONFIG_KEYS or FILE_SUFFIX.search(name)
                        or (module is not None and hasattr(module, name.split(".")[1]))):
                    continue  # a call, a file name, or a function of tfapp/<group>.py
                if not _is_config_key(name):
                    stale.append(f"{doc}: {name}")
        for block in re.findall(r"```ya?ml\n(.*?)```", text, flags=re.S):
            for key in cli.dotted_keys(yaml.safe_load(block)):
                # tune.space.<config key>.<type|min|...>: the searched key must exist too
                searched = key.removeprefix("tune.space.").rsplit(".", 1)[0] \
                    if key.startswith("tune.space.") else key
                if not _is_config_key(key) or searched not in KEYS:
                    stale.append(f"{doc} (yaml): {key}")
    return sorted(set(stale))


def _docs() -> dict[str, str]:
    return {str(doc.relative_to(REPO)): doc.read_text() for doc in DOCS}


def test_docs_name_only_commands_that_exist():
    stale = stale_commands(_docs())
    assert stale == [], f"the docs name commands that do not exist: {stale}"


def test_docs_name_only_config_keys_that_exist():
    stale = stale_keys(_docs())
    assert stale == [], f"the docs name config keys that do not exist: {stale}"


def test_the_checks_find_stale_names():
    """The greps catch what they look for: a removed command or module, an alias spelling,
    a renamed key, a key of a YAML block, a searched key that is gone."""
    doc = {"x.md": "run `python -m tfapp.report RUN` or `python -m tfapp.hub build`\n"
                   "```bash\ntfapp lr_find\ntfapp train data.bidirectional=true\n```\n"
                   "```yaml\ntrainer:\n  epoch: 3\ntune:\n  space:\n    model.unit:\n"
                   "      type: int\n```\n"
                   "and `model.bidirectional`, `model.safetensors`, `model.predict(x)`."}
    assert stale_commands(doc) == ["x.md: tfapp lr_find (write tfapp lr-find)",
                                   "x.md: python -m tfapp.report",
                                   "x.md: python -m tfapp.hub build"]
    assert stale_keys(doc) == ["x.md (yaml): trainer.epoch",
                               "x.md (yaml): tune.space.model.unit.type",
                               "x.md: data.bidirectional", "x.md: model.unit"]


def _logical_lines(text: str) -> list[str]:
    """The lines of a text's code (blocks and inline spans), backslash continuations
    joined."""
    return [line for code in _code(text) for line in re.sub(r"\\\n\s*", " ", code).splitlines()]


def _command_of(module_or_name: str, rest: str) -> tuple[str, click.Command, str] | None:
    """(command path, click command, the words after it) for ``tfapp NAME`` or ``python -m
    tfapp.MODULE`` followed by ``rest``; a group's subcommand is opened."""
    modules = {entry.module.removesuffix(".__main__"): name for name, entry in cli.COMMANDS.items()}
    name = modules.get(f"tfapp.{module_or_name}", module_or_name)
    name = cli.ALIASES.get(name, name)
    if name not in cli.COMMANDS:
        return None  # stale_commands reports it
    cmd = cli.SUITE.get_command(None, name)
    words = rest.split()
    if isinstance(cmd, click.Group) and words and words[0] in cmd.commands:
        return f"{name} {words[0]}", cmd.commands[words[0]], " ".join(words[1:])
    return name, cmd, rest


def stale_flags(docs: dict[str, str]) -> list[str]:
    """``--flags`` the docs' command lines (``tfapp X ...``, ``python -m tfapp.X ...``)
    give a command that it does not take. A command that passes unknown flags on
    (beam-predict: Beam's pipeline options) is left out."""
    stale = []
    start = re.compile(r"(?:^|(?<=[\s(]))(?:python -m tfapp\.([a-z_][\w.]*)|tfapp ([a-z][\w-]*))")
    for doc, text in docs.items():
        for line in _logical_lines(text):
            for m in start.finditer(line):
                # the command's words: up to a pipe, &&, ;, a comment or a closing paren
                rest = re.split(r"\s(?:\||&&|;|#)\s|\)", line[m.end():])[0]
                found = _command_of(m.group(1) or m.group(2), rest)
                if found is None:
                    continue
                path, cmd, words = found
                if cmd.context_settings.get("ignore_unknown_options"):
                    continue
                takes = {o for p in cmd.params for o in (*getattr(p, "opts", []),
                                                         *getattr(p, "secondary_opts", []))}
                for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", words):
                    if flag not in takes | {"--help"}:
                        stale.append(f"{doc}: tfapp {path} {flag}")
    return sorted(set(stale))


def test_docs_give_commands_only_flags_they_take():
    stale = stale_flags(_docs())
    assert stale == [], f"the docs give commands flags they do not take: {stale}"


def test_the_flag_check_finds_flags_a_command_does_not_take():
    doc = {"x.md": "```bash\ntfapp predict --model r --batchsize 8 \\\n    --keep id\n"
                   "echo a | python -m tfapp.generate --model r --top-k 5 --beams 2 -\n"
                   "tfapp hub build-bert --corpus c --layer 2  # --not-this\n```\n"
                   "and `tfapp train --epochs 3` or `tfapp doctor --json`."}
    assert stale_flags(doc) == ["x.md: tfapp generate --beams",
                                "x.md: tfapp hub build-bert --layer",
                                "x.md: tfapp predict --batchsize", "x.md: tfapp train --epochs"]


def _table_rows(text: str) -> list[tuple[int, str, int]]:
    """(line number, row, its cells' count less the header's) of every Markdown table row
    outside code blocks; a ``|`` escaped as ``\\|`` is inside a cell."""
    lines = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text,
                   flags=re.S).splitlines()
    rows, header = [], None
    for number, line in enumerate(lines, 1):
        if not line.startswith("|"):
            header = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line.strip())) - 1
        if header is None:
            header = cells
        rows.append((number, line, cells - header))
    return rows


def test_every_table_row_has_its_headers_cells():
    """An unescaped ``|`` in a cell (a default of ``'|'``, a regex) splits the row."""
    broken = [f"{doc}:{number}: {row[:80]}" for doc, text in _docs().items()
              for number, row, extra in _table_rows(text) if extra]
    assert broken == []
    assert [extra for *_, extra in _table_rows("| a | b |\n|---|---|\n| `'|'` | x |\n"
                                               "| `'\\|'` | x |\n")] == [0, 0, 1, 0]


#: (row of docs/training.md's precision table, what tfapp.runtime.precision_choice is given)
PRECISION_ROWS = {
    "TPU": ("TPU", None, frozenset()),
    "GPU older than Ampere (compute capability below 8.0)": ("GPU", (7, 5), frozenset()),
    "GPU, Ampere or newer (compute capability 8.0 and above)": ("GPU", (8, 0), frozenset()),
    "CPU with native bfloat16 (`avx512_bf16` or `amx_bf16` in /proc/cpuinfo)":
        ("CPU", None, frozenset({"avx512_bf16", "avx2"})),
    "CPU without native bfloat16": ("CPU", None, frozenset({"avx2", "avx512f"})),
    "any CPU, with `TFAPP_CPU_BFLOAT16=0` in the environment": ("CPU", None, None),
}


def test_the_precision_table_is_the_runtimes_rule(monkeypatch):
    """docs/training.md's table of what precision ``auto`` picks, row by row, against
    ``tfapp.runtime.precision_choice``; the config reference and configs say the same."""
    from tfapp import runtime

    text = (REPO / "docs" / "training.md").read_text()
    table = text.split("| device | `auto` picks |\n|---|---|\n")[1].split("\n\n")[0]
    rows = dict(re.findall(r"^\| (.+?) \| `(\w+)` \|$", table, flags=re.M))
    assert set(rows) == set(PRECISION_ROWS)
    monkeypatch.setenv(runtime.CPU_BF16_ENV, "0")  # read only where flags is None
    for row, (device, capability, flags) in PRECISION_ROWS.items():
        assert rows[row] == runtime.precision_choice("auto", device, capability, flags)[0], row
    monkeypatch.delenv(runtime.CPU_BF16_ENV)
    assert runtime.precision_choice("auto", "CPU", None, frozenset({"amx_bf16"}))[0] == \
        rows[next(r for r in rows if r.startswith("CPU with native"))]
    # a comment beside `precision: auto` in a config that speaks of CPUs says when bf16
    for config in (REPO / "configs").glob("*.yaml"):
        for line in config.read_text().splitlines():
            if re.match(r"\s*precision: auto\s*#.*CPU", line):
                assert "native bf16" in line and "float32 on CPU" not in line, (config, line)


def _error_rows(section: str) -> dict[str, str]:
    text = (REPO / "docs" / "errors.md").read_text()
    part = text.split(f"\n## {section}\n")[1].split("\n## ")[0]
    return dict(re.findall(r"^\| ([\w-]+) \| `(tfapp: error: [^`]*)`", part, flags=re.M))


#: the Command-line arguments rows of docs/errors.md that need no files: what is run
ARGUMENT_ROWS = {
    "hub-no-command": ("tfapp.hub.__main__", []),
    "doctor-unknown-flag": ("tfapp.doctor", ["--fix"]),
    "cli-no-command": ("tfapp.cli", []),
    "cli-unknown-command": ("tfapp.cli", ["trian"]),
    "cli-unknown-flag-predict": ("tfapp.cli", ["predict", "--model", "r", "--batchsize", "0"]),
    "cli-unknown-flag": ("tfapp.train", ["--epochs", "3"]),
    "cli-missing-required": ("tfapp.predict", []),
    "cli-bad-number": ("tfapp.generate", ["--model", "r", "--top-k", "many"]),
}


def test_errors_doc_says_click_and_shows_its_lines_as_printed():
    """Argument errors come from click (tfapp.cli turns them into tfapp's one line):
    docs/errors.md says so and shows each such line exactly as the command prints it."""
    from conftest import run_tfapp

    text = (REPO / "docs" / "errors.md").read_text()
    intro = text.split("\n## ")[0]
    assert "argparse" not in text and "click" in intro
    rows = _error_rows("Command-line arguments")
    assert set(ARGUMENT_ROWS) <= set(rows)
    for row, (module, argv) in ARGUMENT_ROWS.items():
        proc = run_tfapp(module, argv)
        assert proc.returncode == 2, (row, proc.stderr)
        assert proc.stderr.strip().splitlines()[-1] == rows[row], row


#: words about how tfapp is developed, not facts a reader can use
DEVELOPMENT_TALK = re.compile(r"\bthe issue\b|\bissue \d+|\bengineers?\b|\bthis round\b|"
                              r"\bthis session\b|\bin one session\b|\bbetween sessions\b|"
                              r"\bearlier notes\b|\bDESIGN\.md\b|\bthe lead\b", re.I)


def test_docs_configs_and_help_state_facts_not_how_tfapp_is_developed():
    from click.testing import CliRunner

    texts = {**_docs(), **{str(p.relative_to(REPO)): p.read_text()
                           for p in sorted((REPO / "configs").glob("*.yaml"))}}
    for name in cli.COMMANDS:
        cmd = cli.SUITE.get_command(None, name)
        for sub in ([*cmd.commands] if isinstance(cmd, click.Group) else [None]):
            argv = [name, sub] if sub else [name]
            texts[f"tfapp {' '.join(argv)} --help"] = CliRunner().invoke(
                cli.SUITE, [*argv, "--help"]).output
    found = [f"{where}: {m.group(0)}" for where, text in texts.items()
             for m in DEVELOPMENT_TALK.finditer(text)]
    assert found == []
    assert DEVELOPMENT_TALK.findall("as the issue decided; see DESIGN.md; issue 21") == [
        "the issue", "DESIGN.md", "issue 21"]


def test_the_cli_doc_lists_every_command():
    text = (REPO / "docs" / "cli.md").read_text()
    table = text.split("## Every command\n")[1]
    listed = set(re.findall(r"^\| `tfapp ([a-z-]+)", table, flags=re.M))
    assert listed == set(cli.COMMANDS) - {"completion"}  # completion: in the prose above
    assert "tfapp completion" in text
