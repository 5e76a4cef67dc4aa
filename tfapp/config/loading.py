"""Loading a config: defaults -> YAML -> dotted overrides -> validation; saving it.

``task`` is read first (from the overrides, else the file, else the default), then the
rest is merged into that task's class (``registry.TASK_CONFIGS``) by OmegaConf's structured
configs, which do the type checking, so a key of another task is an unknown key. A file
saved by an older tfapp, whose one config held every task's keys, still loads: other
tasks' keys that hold their default value are dropped.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfapp.atomic import write_text
from tfapp.config.base import ExperimentConfig
from tfapp.config.keys import check_known, keys_at, translate
from tfapp.config.registry import DEFAULT_TASK, TASK_CONFIGS, config_class
from tfapp.config.validation import validate
from tfapp.errors import ConfigError
from tfapp.run_layout import RunLayout
from tfapp.textio import decode_strict

import yaml
from omegaconf import OmegaConf
from omegaconf import errors as oc_errors


def _parse_overrides(overrides: list[str]) -> Any:
    for item in overrides:
        if "=" not in item or item.startswith("="):
            # repr: an override may hold a "\r" (a script saved with CRLF endings) that
            # would overwrite the printed line
            raise ConfigError(f"override {item!r} is not of the form key=value "
                              "(e.g. trainer.epochs=3)")
    # "key=" sets the empty string (YAML reads an empty value as null).
    overrides = [f"{item}''" if item.endswith("=") else item for item in overrides]
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except Exception as err:  # malformed YAML value in an override
        raise ConfigError(f"cannot parse overrides {overrides}: "
                          f"{str(err).splitlines()[0]}") from None


def _check_groups(node: Any, source: str, schema: Any, prefix: str = "") -> None:
    """Each config group (``trainer``, ``data.service`` ...) given a mapping. OmegaConf's own
    error for ``trainer: 3`` or ``trainer=[1, 2]`` names neither the group nor what it takes
    ("config: wrong type ..., got None"), so this is checked before it merges."""
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        group = getattr(schema, str(key), None) if isinstance(key, str) else None
        if not dataclasses.is_dataclass(group):
            continue  # a plain key (or an unknown one: the merge names it)
        where = f"{prefix}{key}"
        if not isinstance(value, dict):
            shown = "an empty value" if value is None else repr(value)
            raise ConfigError(f"{where}: a config group takes a mapping of its keys, not "
                              f"{shown} ({source}); set its keys, e.g. "
                              f"{where}.{keys_at(group)[0]}=... (in YAML: indented under "
                              f"'{key}:')")
        _check_groups(value, source, group, where + ".")


# Half a surrogate pair: a "\ud800" YAML escape, or undecodable bytes of an argument.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_bad_strings(node: Any, prefix: str = "") -> None:
    """No ``${...}``: OmegaConf would resolve ``${oc.env:VAR}`` and so copy any environment
    variable (a token, say) of whoever runs a shared config into params.yaml, W&B and the
    HTML report. No lone surrogate either: params.yaml is UTF-8, which cannot hold one
    (writing it failed with UnicodeEncodeError when the run started)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) else ()
    for key, value in items:
        where = f"{prefix}{key}"
        if isinstance(value, dict | list):
            _refuse_bad_strings(value, where + ".")
        elif isinstance(value, str) and "${" in value:
            raise ConfigError(f"{where}: {value!r} is an interpolation; tfapp configs take "
                              "plain values (write the value itself)")
        elif isinstance(value, str) and _SURROGATE.search(value):
            raise ConfigError(f"{where}: {value!r} is not UTF-8 text (undecodable bytes or a "
                              "\\ud800-style escape); write it as UTF-8")




def _read_yaml(path: str | os.PathLike) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {path} "
                          "(give a YAML file such as configs/classifier.yaml)")
    try:
        loaded = yaml.safe_load(decode_strict(p.read_bytes(), str(path))) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        # A ReaderError (a NUL or other control character) has no ``problem`` and
        # its str() spans lines: the message must stay one line.
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ConfigError(f"{path}:{where} is not valid YAML ({problem})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of config groups at the top level")
    return loaded


def _defaults(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> default value of every leaf of a default config group."""
    out: dict[str, Any] = {}
    for name in keys_at(node):
        value = getattr(node, name)
        if dataclasses.is_dataclass(value):
            out.update(_defaults(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


def _every_tasks_defaults() -> dict[str, Any]:
    """Dotted key -> default, over every task's class (a key's default is the same in each
    class that has it)."""
    out: dict[str, Any] = {}
    for cls in reversed(TASK_CONFIGS.values()):
        out.update(_defaults(cls()))
    return out


def _drop_other_tasks_defaults(node: dict, group: Any, defaults: dict[str, Any],
                               prefix: str = "") -> dict:
    """``node`` without the keys ``group`` lacks that hold another task's default: a file
    saved when one config held every task's keys (params.yaml, a backup, best_params.yaml)
    has them all. Any other unknown key stays, to be refused by name."""
    out = {}
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if isinstance(key, str) and key in keys_at(group):
            child = getattr(group, key)
            if dataclasses.is_dataclass(child) and isinstance(value, dict):
                value = _drop_other_tasks_defaults(value, child, defaults, dotted + ".")
            out[key] = value
        elif isinstance(value, dict) and any(k.startswith(dotted + ".") for k in defaults):
            rest = _drop_other_tasks_defaults(value, None, defaults, dotted + ".")
            if rest:
                out[key] = rest
        elif not (dotted in defaults and _same(defaults[dotted], value)):
            out[key] = value
    return out


def _same(default: Any, value: Any) -> bool:
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value) == default  # YAML reads 1.0 as written by a dump, 1 by hand
    return type(default) is type(value) and default == value


def _task_of(loaded: dict, overrides: dict) -> type[ExperimentConfig]:
    """The class of the task the overrides name, else the file, else the default task."""
    for source in (overrides, loaded):
        if "task" in source:
            return config_class(source["task"])
    return config_class(DEFAULT_TASK)


def load_config(path: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Defaults, then the YAML file at ``path`` (several: merged in order, a later file's
    keys win), then ``key=value`` overrides; validated against the class of the task they
    name. Unless a file sets ``name``, it is the first file's stem (the experiment; later
    files adjust it)."""
    paths = [] if path is None else [path] if isinstance(path, str | os.PathLike) else path
    files = [(p, _read_yaml(p)) for p in paths]
    parsed = _parse_overrides(list(overrides)) if overrides else None
    given = OmegaConf.to_container(parsed, resolve=False) if parsed is not None else {}
    named = {k: v for _, loaded in files for k, v in loaded.items() if k == "task"}
    schema = _task_of(named, given)
    cfg = OmegaConf.structured(schema)
    for index, (p, loaded) in enumerate(files):
        loaded = _drop_other_tasks_defaults(loaded, schema(), _every_tasks_defaults())
        _check_groups(loaded, str(p), schema())
        check_known(loaded, str(p), schema)
        try:
            cfg = OmegaConf.merge(cfg, loaded)
        except oc_errors.OmegaConfBaseException as err:
            raise translate(err, str(p), schema) from None
        except RecursionError:  # a YAML alias inside what it names: {epochs: *a} under &a
            raise ConfigError(f"{p}: a YAML alias (*name) refers to a mapping or list "
                              "that contains it; write the values out") from None
        if index == 0 and not loaded.get("name"):
            cfg.name = Path(p).stem
    if parsed is not None:
        _check_groups(given, "command-line override", schema())
        check_known(given, "command-line override", schema)
        try:
            cfg = OmegaConf.merge(cfg, parsed)
        except oc_errors.OmegaConfBaseException as err:
            raise translate(err, "command-line override", schema) from None
    _refuse_bad_strings(OmegaConf.to_container(cfg, resolve=False))
    try:
        obj: ExperimentConfig = OmegaConf.to_object(cfg)
    except oc_errors.OmegaConfBaseException as err:
        raise translate(err, "config", schema) from None
    if not obj.name:
        obj.name = obj.task
    validate(obj)
    return obj


# --------------------------------------------------------------------------- saving


def to_yaml(cfg: ExperimentConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def save_params(cfg: ExperimentConfig, run_dir: str | os.PathLike, *,
                path: str | os.PathLike | None = None,
                note: str = "Resolved tfapp config; rerun with") -> Path:
    """Write the resolved config to ``run_dir/params.yaml`` (or ``path``) atomically (temp +
    rename), under a comment ``note`` ending in the command that reruns it."""
    target = Path(path) if path is not None else RunLayout(run_dir).params
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_text(target, f"# {note}: python -m tfapp.train --config {target}\n"
                      + to_yaml(cfg))
