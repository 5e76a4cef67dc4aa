"""Tasks by name: ``get_task(cfg.task)`` returns the Task class."""

from __future__ import annotations

import importlib

from tfapp.config import ConfigError

# Imported lazily so `--help` and config errors never pay for TensorFlow.
_TASKS = {
    "classifier": "tfapp.tasks.classifier:ClassifierTask",
    "generator": "tfapp.tasks.generator:GeneratorTask",
}


def get_task(name: str) -> type:
    if name not in _TASKS:
        raise ConfigError(f"task: '{name}' is unknown; choose one of: {', '.join(_TASKS)}")
    module, attr = _TASKS[name].split(":")
    return getattr(importlib.import_module(module), attr)
