"""Where a dotted key lives in a task's config class, and the one-line errors for a key that
does not (a typo, or a key of another task)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any

from tfapp.config.base import ExperimentConfig
from tfapp.config.docs import type_name
from tfapp.config.registry import TASK_CONFIGS, config_class
from tfapp.errors import ConfigError

from omegaconf import errors as oc_errors


def keys_at(node: Any) -> list[str]:
    """The field names of a config group (none for a plain value)."""
    return [f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node) else []


def node_for(path: str, schema: type[ExperimentConfig]) -> Any:
    """The group (a default instance) owning the dotted ``path`` in ``schema``, if any."""
    node: Any = schema()
    for part in path.split(".")[:-1]:
        if part not in keys_at(node):
            return None
        node = getattr(node, part)
    return node


def task_uses(task: str | type[ExperimentConfig], key: str) -> bool:
    """Whether ``key`` (a dotted leaf or group) is a config key of ``task``'s class."""
    schema = config_class(task) if isinstance(task, str) else task
    node = node_for(key, schema)
    return key.split(".")[-1] in keys_at(node)


def unknown_key_message(full_key: str, source: str, schema: type[ExperimentConfig]) -> str:
    """``unknown config key ...`` naming the first part of ``full_key`` the task's class
    lacks, the closest key there, the keys it has, and the task a key of another is of."""
    parts = full_key.split(".")
    node: Any = schema()
    depth = 0
    while depth < len(parts) - 1 and parts[depth] in keys_at(node) \
            and dataclasses.is_dataclass(getattr(node, parts[depth])):
        node = getattr(node, parts[depth])
        depth += 1
    keys = keys_at(node)
    parent = ".".join(parts[:depth])
    where = f" in '{parent}'" if parent else ""
    unknown = ".".join(parts[:depth + 1])
    owners = [task for task, cls in TASK_CONFIGS.items() if task_uses(cls, unknown)]
    hint = ""
    close = difflib.get_close_matches(parts[depth], keys, n=1)
    if owners:
        hint = (f"; '{unknown}' belongs to task {', '.join(owners)}, not to task "
                f"{schema().task} (choose that task, or remove the key).")
    elif close:
        hint = f"; did you mean '{(parent + '.') if parent else ''}{close[0]}'?"
    allowed = f" Allowed keys{where}: {', '.join(keys)}." if keys else ""
    # repr: a key may hold a "\r" or "\n" (a CRLF file) that would break the line
    return f"unknown config key {full_key!r} ({source}){hint}{allowed}"


def check_known(node: Any, source: str, schema: type[ExperimentConfig]) -> None:
    """Each key of a loaded mapping (a YAML file, the overrides) is a key of the task's
    class: the first that is not is one line naming it in full (OmegaConf's own error names
    only the first missing part of a group the task does not have)."""
    def walk(value: Any, group: Any, prefix: str) -> None:
        if not isinstance(value, dict) or not dataclasses.is_dataclass(group):
            return  # a plain value, or a mapping-valued key such as tune.space
        for key, child in value.items():
            dotted = f"{prefix}{key}"
            if not isinstance(key, str) or key not in keys_at(group):
                while isinstance(child, dict) and len(child) == 1:  # name the leaf
                    (sub, child), = child.items()
                    dotted += f".{sub}"
                raise ConfigError(unknown_key_message(dotted, source, schema))
            walk(child, getattr(group, key), dotted + ".")

    walk(node, schema(), "")


def translate(err: Exception, source: str, schema: type[ExperimentConfig]) -> ConfigError:
    """OmegaConf's error as one ``ConfigError`` line naming the key."""
    full_key = getattr(err, "full_key", "") or ""
    if isinstance(err, oc_errors.ConfigKeyError | oc_errors.ConfigAttributeError):
        m = re.search(r"Key '([^']+)' not in", str(err))
        key = full_key or (m.group(1) if m else "?")
        return ConfigError(unknown_key_message(key, source, schema))
    if isinstance(err, oc_errors.ValidationError):
        node = node_for(full_key, schema) if full_key else None
        expected = ""
        if node is not None:
            f = {f.name: f for f in dataclasses.fields(node)}.get(full_key.split(".")[-1])
            if f is not None:
                expected = f" expected {type_name(f)}"
        value = getattr(err, "value", None)
        return ConfigError(f"{full_key or 'config'}: wrong type ({source}):{expected}, "
                           f"got {value!r}")
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return ConfigError(f"{source}: {first}")
