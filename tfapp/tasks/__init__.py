"""Tasks by name: ``get_task(cfg.task)`` returns the Task class.

Each task is a package ``tfapp/tasks/<name>/``: ``task.py`` holds the Task class, and
``config.py`` (no TensorFlow; the package's ``__init__`` imports nothing, so reading it
stays cheap) says which config keys the task cannot honour, so ``tfapp.config.validate``
refuses them before anything runs.
"""

from __future__ import annotations

import importlib

from tfapp.config import ConfigError

# Imported lazily so `--help` and config errors never pay for TensorFlow.
_TASKS = {
    "classifier": "tfapp.tasks.classifier.task:ClassifierTask",
    "generator": "tfapp.tasks.generator.task:GeneratorTask",
    "mlm": "tfapp.tasks.mlm.task:MaskedLMTask",
    "ner": "tfapp.tasks.ner.task:NerTask",
}


def get_task(name: str) -> type:
    if name not in _TASKS:
        raise ConfigError(f"task: '{name}' is unknown; choose one of: {', '.join(_TASKS)}")
    module, attr = _TASKS[name].split(":")
    return getattr(importlib.import_module(module), attr)
