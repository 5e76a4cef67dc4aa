"""The masked-LM task's config: pretraining a BERT module on unlabelled text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from tfapp.config.base import ExperimentConfig, TrainerConfig
from tfapp.config.data_model import (
    BertModelConfig,
    DataConfig,
    DataServiceConfig,
    ModelConfig,
    TextDataConfig,
    TokenizedDataConfig,
)
from tfapp.config.fields import FREE, MATCH, NEVER, bounded, choices, setting
from tfapp.errors import ConfigError


@dataclass
class MlmDataConfig(TokenizedDataConfig, TextDataConfig, DataConfig):
    """Input files and the tf.data pipeline of masked-LM pretraining (one text column)."""

    # Not keys: the shared split and stream code reads them, and the masked-LM loop holds
    # nothing out (no labels, no validation split) and stores nothing (masks are drawn anew
    # every step, so no snapshot or cache of the masked batches, nor a service).
    validation_files: ClassVar[str] = ""
    test_files: ClassVar[str] = ""
    validation_split: ClassVar[float] = 0.0
    test_split: ClassVar[float] = 0.0
    cache: ClassVar[str] = ""
    snapshot: ClassVar[str] = ""
    service: ClassVar[DataServiceConfig] = DataServiceConfig()


@dataclass
class MlmModelConfig(BertModelConfig, ModelConfig):
    """The BERT module being pretrained.

    Attributes:
      kind: bert (the module named by model.hub_handle).
    """

    kind: str = choices("bert", default="bert", resume=NEVER)


@dataclass
class MlmTrainerConfig(TrainerConfig):
    """The training loop of masked-LM pretraining."""

    # Not keys: the shared loop reads them; the masked-LM model computes its own loss in its
    # train_step (no accumulation wrapper) and is judged by its training mlm_loss.
    gradient_accumulation_steps: ClassVar[int] = 1
    monitor: ClassVar[str] = ""


@dataclass
class MlmConfig:
    """Masked-LM pretraining of a BERT module (task=mlm, python -m tfapp.pretrain).

    Attributes:
      mask_rate: share of tokens chosen for prediction (BERT: 0.15), 80/10/10
        [MASK]/random/kept.
      whole_word: choose whole words (all their ## pieces) instead of single WordPieces.
      max_predictions: most predicted tokens per sequence; 0 = enough for nearly all.
      output: directory of the adapted module pair ("" = the run's export/); use it as
        model.hub_handle.
      overwrite: replace an existing output directory.
      pack: fill every sequence with consecutive texts (a [SEP] after each; BERT's and
        RoBERTa's pretraining inputs) instead of one text padded to data.seq_length.
    """

    mask_rate: float = bounded(0.15, gt=0.0, max=0.99, resume=MATCH)
    whole_word: bool = setting(False, resume=MATCH)
    max_predictions: int = bounded(0, min=0, resume=MATCH)
    output: str = setting("", resume=MATCH)
    overwrite: bool = setting(False, resume=FREE)
    pack: bool = setting(True, resume=MATCH)


@dataclass
class MaskedLmConfig(ExperimentConfig):
    """A masked-LM pretraining run (task=mlm).

    Attributes:
      mlm: masked-LM pretraining.
    """

    task: str = setting("mlm", resume=NEVER)
    data: MlmDataConfig = field(default_factory=MlmDataConfig)
    model: MlmModelConfig = field(default_factory=MlmModelConfig)
    trainer: MlmTrainerConfig = field(default_factory=MlmTrainerConfig)
    mlm: MlmConfig = field(default_factory=MlmConfig)

    def check(self) -> None:
        super().check()
        if self.optimizer.learning_rate == "auto":
            raise ConfigError("optimizer.learning_rate=auto is not supported by task mlm (the "
                              "range test reads a compiled loss; the masked-LM model computes "
                              "its own); give a number, e.g. optimizer.learning_rate=1e-4")
