"""Value checks beyond types (choices, ranges, cross-field rules, the task's own ``check``),
and the search-space checks of ``tune.space``. Every mistake is one ``ConfigError`` line
that names the key and what is allowed."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from tfapp.config.base import ExperimentConfig, OptimizerConfig
from tfapp.config.keys import keys_at, node_for, translate, unknown_key_message
from tfapp.errors import ConfigError

from omegaconf import OmegaConf
from omegaconf import errors as oc_errors


def _check_fields(node: Any, prefix: str) -> None:
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            _check_fields(value, key + ".")
            continue
        allowed = f.metadata.get("choices")
        if allowed and value not in allowed:
            raise ConfigError(f"{key}: '{value}' is not allowed; choose one of: "
                              f"{', '.join(allowed)}")
        lo, hi, gt = f.metadata.get("min"), f.metadata.get("max"), f.metadata.get("gt")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if lo is not None and value < lo:
                raise ConfigError(f"{key}: {value} is too small; must be >= {lo}")
            if hi is not None and value > hi:
                raise ConfigError(f"{key}: {value} is too large; must be <= {hi}")
            if gt is not None and value <= gt:
                raise ConfigError(f"{key}: {value} must be > {gt}")



def _normalize_learning_rate(o: OptimizerConfig) -> None:
    """optimizer.learning_rate: numbers and numeric strings -> float; "auto" stays."""
    value = o.learning_rate
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            o.learning_rate = "auto"
            return
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"optimizer.learning_rate: '{o.learning_rate}' is not a number; "
                              "give one such as 1e-3, or auto to run the LR range "
                              "finder") from None
    o.learning_rate = float(value)


def _check_model_kind(cfg: ExperimentConfig) -> None:
    """``model.kind`` is one the task builds (the choices of its ``model.kind`` field)."""
    kind = {f.name: f for f in dataclasses.fields(cfg.model)}["kind"]
    kinds = kind.metadata["choices"]
    if cfg.model.kind not in kinds:
        raise ConfigError(f"model.kind: task '{cfg.task}' needs model.kind="
                          f"{' or '.join(kinds)}, got '{cfg.model.kind}'")


_PROFILE_STEPS = re.compile(r"^\s*(\d+)\s*(,\s*(\d+)\s*)?$")


def validate(cfg: ExperimentConfig) -> None:
    """Value checks beyond types; raises ConfigError naming the first bad key."""
    _normalize_learning_rate(cfg.optimizer)
    if cfg.data.service.processing_mode in ("False", "false"):  # YAML 1.1 reads off as false
        cfg.data.service.processing_mode = "off"
    _check_model_kind(cfg)
    _check_fields(cfg, "")
    # The run directory is output_dir/name: a name is one plain folder name, never a path
    # (".." would put the run, or tune --overwrite's deletion, outside output_dir).
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", cfg.name) or cfg.name in (".", ".."):
        raise ConfigError(f"name: '{cfg.name}' must be a folder name of ASCII letters, digits, "
                          "'_', '-' and '.' (not '.' or '..')")
    if cfg.trainer.profile_steps:
        m = _PROFILE_STEPS.match(cfg.trainer.profile_steps)
        if not m or (m.group(3) and int(m.group(3)) < int(m.group(1))):
            raise ConfigError(f"trainer.profile_steps: '{cfg.trainer.profile_steps}' must be "
                              "'START,STOP' with START <= STOP (or one step, or '' for off)")
    if cfg.trainer.profiler_port and not cfg.trainer.profiler_listen_all:
        port = cfg.trainer.profiler_port
        raise ConfigError(f"trainer.profiler_port={port} starts TensorFlow's profiler server, "
                          "which listens on every network interface with no authentication "
                          "(it has no bind address); set trainer.profiler_listen_all=true to "
                          f"start it where a firewall keeps port {port} closed to other "
                          "hosts, or trainer.profiler_port=0")
    o, t = cfg.optimizer, cfg.trainer
    if o.lr_find_min >= o.lr_find_max:
        raise ConfigError(f"optimizer.lr_find_min ({o.lr_find_min}) must be below "
                          f"optimizer.lr_find_max ({o.lr_find_max})")
    if t.max_steps and t.eval_every_steps and t.max_steps % t.eval_every_steps:
        # Each evaluation ends one Keras epoch of eval_every_steps steps (see driver).
        lower = t.max_steps // t.eval_every_steps * t.eval_every_steps
        upper = lower + t.eval_every_steps
        raise ConfigError(f"trainer.max_steps={t.max_steps} is not a multiple of "
                          f"trainer.eval_every_steps={t.eval_every_steps}; set "
                          f"trainer.max_steps={upper}" + (f" or {lower}" if lower else ""))
    cfg.check()
    if cfg.tune.space:
        _validate_space(cfg)


# --------------------------------------------------------------------------- search spaces

# Keys a search must not vary: they name the run or the task, not a model/training choice.
_NOT_TUNABLE = ("task", "name", "output_dir")
# hyperparameter type -> the config field types it can set
_HP_FIELD_TYPES = {"float": ("float",), "int": ("int",), "boolean": ("bool",)}


def with_values(cfg: ExperimentConfig, values: dict[str, Any],
                source: str = "tune.space") -> ExperimentConfig:
    """A copy of ``cfg`` with dotted ``key: value`` pairs set, type-checked and validated."""
    conf = OmegaConf.structured(cfg)
    try:
        for key, value in values.items():
            OmegaConf.update(conf, key, value, merge=False)
        obj: ExperimentConfig = OmegaConf.to_object(conf)
    except oc_errors.OmegaConfBaseException as err:
        raise translate(err, source, type(cfg)) from None
    validate(obj)
    return obj


def _validate_space(cfg: ExperimentConfig) -> None:
    """Each ``tune.space`` key is a real leaf config key whose type the hyperparameter fits,
    with a consistent range, and every value it can take passes the key's own checks."""
    # Values are tried on a copy without the space, so validate() does not recurse.
    base = dataclasses.replace(cfg, tune=dataclasses.replace(cfg.tune, space={}))
    for key, hp in cfg.tune.space.items():
        where = f"tune.space.{key}"
        node, leaf = node_for(key, type(cfg)), key.split(".")[-1]
        spec = {f.name: f for f in dataclasses.fields(node)}.get(leaf) \
            if dataclasses.is_dataclass(node) else None
        if spec is not None and dataclasses.is_dataclass(getattr(node, leaf)):
            raise ConfigError(f"{where}: '{key}' is a config group; name one of its keys: "
                              f"{', '.join(keys_at(getattr(node, leaf)))}")
        if spec is None or key.split(".")[0] == "tune":
            raise ConfigError(unknown_key_message(key, "tune.space", type(cfg)))
        if key in _NOT_TUNABLE:
            raise ConfigError(f"{where}: '{key}' names the run, it cannot be tuned")
        if key.startswith("runtime.") and key != "runtime.seed":
            raise ConfigError(f"{where}: '{key}' is set up once per process (strategy, "
                              "precision, devices), it cannot change between trials")
        field_type = spec.type if isinstance(spec.type, str) else spec.type.__name__
        parts = {t.strip() for t in field_type.split("|")}  # e.g. "float | int | str"
        allowed = _HP_FIELD_TYPES.get(hp.type)
        if allowed and not parts & set(allowed):
            fits = [t for t, types in _HP_FIELD_TYPES.items() if parts & set(types)]
            raise ConfigError(f"{where}: type {hp.type} does not fit {key} ({field_type}); "
                              f"use type {fits[0] if fits else 'choice'}")
        if hp.type in ("float", "int"):
            if hp.min is None or hp.max is None:
                raise ConfigError(f"{where}: type {hp.type} needs min and max")
            if hp.min > hp.max:
                raise ConfigError(f"{where}: min {hp.min:g} > max {hp.max:g}")
            if hp.sampling != "linear" and hp.min <= 0:
                raise ConfigError(f"{where}: {hp.sampling} sampling needs min > 0, "
                                  f"got {hp.min:g}")
            if hp.step is not None and hp.step <= 0:
                raise ConfigError(f"{where}: step must be > 0, got {hp.step:g}")
            if hp.type == "int" and any(v is not None and v != int(v)
                                        for v in (hp.min, hp.max, hp.step)):
                raise ConfigError(f"{where}: type int needs whole min, max and step")
            candidates = [int(v) if hp.type == "int" else v for v in (hp.min, hp.max)]
        elif hp.type == "choice":
            if not hp.values:
                raise ConfigError(f"{where}: type choice needs a non-empty values list")
            candidates = list(hp.values)
        else:
            candidates = [False, True]
        for value in candidates:
            try:
                with_values(base, {key: value}, source=where)
            except ConfigError as err:
                raise ConfigError(f"{where}: value {value!r} is not valid here ({err})") from None


