"""Regenerate the config reference in README.md from the config dataclasses' docstrings.

    python scripts/gen_config_reference.py          # rewrite README.md in place
    python scripts/gen_config_reference.py --check  # exit 1 if README.md is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfapp.config import config_reference, group_docs

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def render() -> str:
    groups = group_docs()
    out, current = [], None
    for key, type_name, default, doc in config_reference():
        group = key.split(".")[0] if "." in key else ""
        if group != current:
            current = group
            title = f"`{group}` — {groups[group]}" if group else "Top level"
            out += ["", f"#### {title}", "", "| key | type | default | meaning |",
                    "|---|---|---|---|"]
        type_cell = type_name.replace("|", " \\| ")
        out.append(f"| `{key}` | {type_cell} | `{default}` | {doc.replace('|', '/')} |")
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
