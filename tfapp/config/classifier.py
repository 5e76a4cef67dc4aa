"""The classifier's config: text classification with a BERT or an embedding baseline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tfapp.config.base import ExperimentConfig, SupervisedTrainerConfig
from tfapp.config.data_model import (
    BertModelConfig,
    BertPreprocessorConfig,
    DataConfig,
    EmbeddingModelConfig,
    HeldOutDataConfig,
    LengthBucketsConfig,
    ModelConfig,
    StoredDataConfig,
    TextDataConfig,
    TokenizedDataConfig,
)
from tfapp.config.fields import MATCH, NEVER, bounded, choices, setting
from tfapp.errors import ConfigError


@dataclass
class ClassifierDataConfig(StoredDataConfig, LengthBucketsConfig, TokenizedDataConfig,
                           TextDataConfig, HeldOutDataConfig, DataConfig):
    """Input files and the tf.data pipeline of a text classifier.

    Attributes:
      text_pair_column: second text column for sentence-pair tasks; empty for single texts.
      label_column: column holding the label (string or integer; for multi-label, labels
        joined by label_separator).
      labels: the label names in id order (empty = every label of the training data, sorted;
        integers in numeric order). Rows with other labels are bad rows.
      multi_label: each example may carry several labels (sigmoid per class).
      label_separator: separator between labels of one example when multi_label is true.
      class_weight: weight of each label in the loss: none, balanced (from the training
        label counts: n / (labels x count) for single-label, negatives / positives per
        label for multi-label) or a mapping {label: weight} (unlisted labels weigh 1).
    """

    text_pair_column: str = setting("", resume=MATCH)
    label_column: str = setting("label", resume=MATCH)
    labels: list[str] = setting(factory=list, resume=MATCH)
    multi_label: bool = setting(False, resume=MATCH)
    label_separator: str = setting("|", resume=MATCH)
    # "none" | "balanced" | {label: weight}; see check_class_weight
    class_weight: Any = setting("none", resume=MATCH)


@dataclass
class ClassifierModelConfig(EmbeddingModelConfig, BertPreprocessorConfig, BertModelConfig,
                            ModelConfig):
    """The classifier network: a BERT with a head, or a cnn/rnn baseline.

    Attributes:
      kind: bert (TF-Hub encoder + head), cnn or rnn (embedding baselines on the same
        pipeline).
      pooling: pooled (BERT pooled_output) or mean_max (mean and max of sequence_output).
      label_smoothing: classifier loss: move this much of each target's probability
        mass evenly onto all labels (0 = off; 0.1 is common).
    """

    kind: str = choices("bert", "cnn", "rnn", default="bert", resume=NEVER)
    pooling: str = choices("pooled", "mean_max", default="pooled", resume=MATCH)
    label_smoothing: float = bounded(0.0, min=0.0, max=0.5, resume=MATCH)


@dataclass
class ClassifierConfig(ExperimentConfig):
    """A text classifier run (task=classifier)."""

    task: str = setting("classifier", resume=NEVER)
    data: ClassifierDataConfig = field(default_factory=ClassifierDataConfig)
    model: ClassifierModelConfig = field(default_factory=ClassifierModelConfig)
    trainer: SupervisedTrainerConfig = field(default_factory=SupervisedTrainerConfig)

    def check(self) -> None:
        super().check()
        check_class_weight(self.data)
        if self.data.text_pair_column and self.data.text_pair_column == self.data.text_column:
            raise ConfigError("data.text_pair_column: must differ from data.text_column")


def check_class_weight(d: ClassifierDataConfig) -> None:
    """data.class_weight: "none"/"balanced" (any case), or {label: weight > 0}."""
    value = d.class_weight
    if isinstance(value, str) and value.strip().lower() in ("none", "balanced", ""):
        d.class_weight = value.strip().lower() or "none"
        return
    if isinstance(value, dict) and value:
        weights = {}
        for label, weight in value.items():
            if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
                raise ConfigError(f"data.class_weight: the weight of '{label}' must be a "
                                  f"number > 0, not {weight!r}")
            weights[str(label)] = float(weight)
        d.class_weight = weights
        return
    raise ConfigError(f"data.class_weight: {value!r} is not allowed; give none, balanced or "
                      "a mapping {label: weight}, e.g. data.class_weight={spam: 5}")
