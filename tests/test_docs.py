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
