"""Regenerate the config reference in README.md from the config dataclasses' docstrings.

    python scripts/gen_config_reference.py          # rewrite README.md in place
    python scripts/gen_config_reference.py --check  # exit 1 if README.md is stale

Each task has its own config class: the groups every task has alike are listed once, then
each task's own groups (data, model, trainer, generation, mlm) under its name.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfapp.config import DEFAULT_TASK, TASKS, config_reference, group_docs

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def _by_group(task: str) -> dict[str, list[tuple[str, str, str, str]]]:
    groups: dict[str, list[tuple[str, str, str, str]]] = {}
    for row in config_reference(task):
        groups.setdefault(row[0].split(".")[0] if "." in row[0] else "", []).append(row)
    return groups


def _table(group: str, title: str, rows: list[tuple[str, str, str, str]]) -> list[str]:
    out = ["", f"#### {title}", "", "| key | type | default | meaning |", "|---|---|---|---|"]
    for key, type_name, default, doc in rows:
        type_cell = type_name.replace("|", " \\| ")
        out.append(f"| `{key}` | {type_cell} | `{default}` | {doc.replace('|', '/')} |")
    return out


def render() -> str:
    per_task = {task: _by_group(task) for task in TASKS}
    default = per_task[DEFAULT_TASK]
    # the top level (task's default aside) and every group all tasks have alike
    shared = [g for g in default if g == "" or all(per_task[t].get(g) == default[g]
                                                  for t in TASKS)]
    docs = group_docs(DEFAULT_TASK)
    out = ["", "### Keys of every task"]
    for group in shared:
        title = f"`{group}` — {docs[group]}" if group else "Top level"
        out += _table(group, title, default[group])
    for task in TASKS:
        docs = group_docs(task)
        out += ["", f"### Keys of task={task}"]
        for group, rows in per_task[task].items():
            if group not in shared:
                out += _table(group, f"`{group}` (task={task}) — {docs[group]}", rows)
    return "\n".join(out).strip() + "\n"


def main() -> int:
    text = README.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{START}\n{render()}{END}{tail}"
    if "--check" in sys.argv:
        if new != text:
            print("README.md config reference is stale: run python scripts/gen_config_reference.py")
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
