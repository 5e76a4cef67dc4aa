"""The config reference, generated from the dataclasses' ``Attributes:`` docstrings: what
docs/config.md shows (``scripts/gen_config_reference.py``), per task."""

from __future__ import annotations

import dataclasses
import inspect
import re

from tfapp.config.registry import DEFAULT_TASK, config_class


def _attributes(doc: str) -> dict[str, str]:
    docs: dict[str, str] = {}
    section = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
    current = None
    for line in section.splitlines():
        m = re.match(r"^  (\w+): (.*)$", line)
        if m:
            current = m.group(1)
            docs[current] = m.group(2).strip()
        elif current and line.startswith("    "):
            docs[current] += " " + line.strip()
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> description, parsed from the ``Attributes:`` docstrings of ``cls`` and
    the classes it inherits (a task's group documents the keys it adds or redefines)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        # the class's own docstring: inspect.getdoc would hand down a parent's
        docs.update(_attributes(inspect.cleandoc(klass.__dict__.get("__doc__") or "")))
    return docs


def type_name(f: dataclasses.Field) -> str:
    """The type of a config field as the reference and error messages print it."""
    if f.metadata.get("type_name"):
        return f.metadata["type_name"]
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return t.replace("bool | None", "bool|null")


def config_reference(cls: type | str = DEFAULT_TASK, prefix: str = ""
                     ) -> list[tuple[str, str, str, str]]:
    """Rows (dotted key, type, default, description) for every leaf field of a config class
    (or of the task named ``cls``)."""
    cls = config_class(cls) if isinstance(cls, str) else cls
    rows = []
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            rows.extend(config_reference(type(default), f"{prefix}{f.name}."))
            continue
        allowed = f.metadata.get("choices")
        shown = "|".join(allowed) if allowed else type_name(f)
        rows.append((f"{prefix}{f.name}", shown, repr(default), docs.get(f.name, "")))
    return rows


def group_docs(task: str = DEFAULT_TASK) -> dict[str, str]:
    """Top-level group name -> first docstring line of its dataclass, for ``task``."""
    out = {}
    for f in dataclasses.fields(config_class(task)):
        if f.default_factory is not dataclasses.MISSING:
            out[f.name] = (inspect.getdoc(f.default_factory) or "").splitlines()[0]
    return out
