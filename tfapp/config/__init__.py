"""Typed experiment configuration: a config class per task, loaded from defaults -> YAML ->
dotted overrides, then validated.

* ``base``: the groups every task shares and ``ExperimentConfig``, the base of the task
  classes; ``data_model``: the data and model groups' shared parts.
* ``classifier``, ``generator``, ``ner``, ``mlm``: each task's class, holding only the keys
  that task reads, with its own checks (``check``); ``registry``: the classes by task name.
* ``loading`` (``load_config``, ``save_params``), ``validation`` (``validate``,
  ``with_values``), ``keys`` (where a key lives, the unknown-key message), ``docs`` (the
  config reference, docs/config.md).
"""

from __future__ import annotations

from tfapp.config.base import (
    PRECISIONS,
    STRATEGIES,
    ExperimentConfig,
    HyperParamConfig,
    OptimizerConfig,
    RuntimeConfig,
    SupervisedTrainerConfig,
    TrackingConfig,
    TrainerConfig,
    TuneConfig,
    WandbConfig,
)
from tfapp.config.classifier import ClassifierConfig, ClassifierDataConfig, ClassifierModelConfig
from tfapp.config.data_model import DataConfig, DataServiceConfig, ModelConfig
from tfapp.config.docs import config_reference, field_docs, group_docs
from tfapp.config.generator import (
    GenerationConfig,
    GeneratorConfig,
    GeneratorDataConfig,
    GeneratorModelConfig,
)
from tfapp.config.keys import task_uses
from tfapp.config.loading import load_config, save_params, to_yaml
from tfapp.config.mlm import MaskedLmConfig, MlmConfig, MlmDataConfig, MlmModelConfig
from tfapp.config.ner import NerConfig, NerDataConfig, NerModelConfig
from tfapp.config.registry import DEFAULT_TASK, TASK_CONFIGS, TASKS, config_class
from tfapp.config.validation import validate, with_values
from tfapp.errors import ConfigError

__all__ = [
    "DEFAULT_TASK", "PRECISIONS", "STRATEGIES", "TASKS", "TASK_CONFIGS",
    "ClassifierConfig", "ClassifierDataConfig", "ClassifierModelConfig", "ConfigError",
    "DataConfig", "DataServiceConfig", "ExperimentConfig", "GenerationConfig",
    "GeneratorConfig", "GeneratorDataConfig", "GeneratorModelConfig", "HyperParamConfig",
    "MaskedLmConfig", "MlmConfig", "MlmDataConfig", "MlmModelConfig", "ModelConfig",
    "NerConfig", "NerDataConfig", "NerModelConfig", "OptimizerConfig", "RuntimeConfig",
    "SupervisedTrainerConfig", "TrackingConfig", "TrainerConfig", "TuneConfig", "WandbConfig",
    "config_class", "config_reference", "field_docs", "group_docs", "load_config",
    "save_params", "task_uses", "to_yaml", "validate", "with_values",
]
