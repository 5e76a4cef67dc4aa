"""Each task's config class, by task name (TF Model Garden registers its ``TaskConfig``
subclasses the same way). A new task adds its class here; the loader reads ``task`` first
and validates the rest against that class, so a key of another task is an unknown key."""

from __future__ import annotations

from tfapp.config.base import ExperimentConfig
from tfapp.config.classifier import ClassifierConfig
from tfapp.config.generator import GeneratorConfig
from tfapp.config.mlm import MaskedLmConfig
from tfapp.config.ner import NerConfig
from tfapp.errors import ConfigError

TASK_CONFIGS: dict[str, type[ExperimentConfig]] = {
    "classifier": ClassifierConfig,
    "generator": GeneratorConfig,
    "mlm": MaskedLmConfig,
    "ner": NerConfig,
}
TASKS = tuple(TASK_CONFIGS)
DEFAULT_TASK = "classifier"


def config_class(task: object) -> type[ExperimentConfig]:
    """The config class of ``task``; a name that is none is one ``ConfigError`` line."""
    if isinstance(task, str) and task in TASK_CONFIGS:
        return TASK_CONFIGS[task]
    raise ConfigError(f"task: '{task}' is not allowed; choose one of: {', '.join(TASKS)}")
