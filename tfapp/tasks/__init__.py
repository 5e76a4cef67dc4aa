"""Tasks by name, exports by marker.

``get_task(cfg.task)`` returns the Task class. ``export_formats()`` lists each task's
``tfapp.serving.ExportFormat``, and ``find_export(model, command)`` / ``load_export(model,
command)`` find an export's format by the marker file in it: predict, evaluate and
generate go through these and never name a task.

Each task is a package ``tfapp/tasks/<name>/``: ``task.py`` holds the Task class (its
config class, holding the keys it reads, is ``tfapp/config/<name>.py``). A task that exports
a model has ``serving.py`` (its ``FORMAT``; no TensorFlow at import, so the lookup costs
nothing).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from tfapp import serving
from tfapp.config import ConfigError
from tfapp.tasks.classifier.serving import FORMAT as _CLASSIFIER_EXPORT
from tfapp.tasks.generator.serving import FORMAT as _GENERATOR_EXPORT
from tfapp.tasks.ner.serving import FORMAT as _NER_EXPORT

# Imported lazily so `--help` and config errors never pay for TensorFlow.
_TASKS = {
    "classifier": "tfapp.tasks.classifier.task:ClassifierTask",
    "generator": "tfapp.tasks.generator.task:GeneratorTask",
    "mlm": "tfapp.tasks.mlm.task:MaskedLMTask",
    "ner": "tfapp.tasks.ner.task:NerTask",
}

#: every export a task writes; the first that serves a command names it in its errors
#: ("no exported classifier there" for predict and evaluate). mlm writes a hub module
#: (``tfapp.hub``), not an export.
_EXPORTS: tuple[serving.ExportFormat, ...] = (_CLASSIFIER_EXPORT, _GENERATOR_EXPORT,
                                              _NER_EXPORT)


def get_task(name: str) -> type:
    if name not in _TASKS:
        raise ConfigError(f"task: '{name}' is unknown; choose one of: {', '.join(_TASKS)}")
    module, attr = _TASKS[name].split(":")
    return getattr(importlib.import_module(module), attr)


def export_formats() -> tuple[serving.ExportFormat, ...]:
    return _EXPORTS


def find_export(model: str | os.PathLike, command: str) -> tuple[Path, serving.ExportFormat]:
    """(SavedModel directory, format) of the export at ``--model`` that serves ``command``
    (``serving.PREDICT``, ...); a one-line ConfigError when there is none. No TensorFlow."""
    return serving.find_export(model, _EXPORTS, command)


def load_export(model: str | os.PathLike, command: str) -> serving.ExportedModel:
    """The export at ``--model`` loaded by its own format, which serves ``command``."""
    _, fmt = find_export(model, command)
    return fmt.load(model)
