"""The NER task's config: a BERT tags each token of CoNLL or JSONL data."""

from __future__ import annotations

from dataclasses import dataclass, field

from tfapp.config.base import ExperimentConfig, SupervisedTrainerConfig
from tfapp.config.data_model import (
    BertModelConfig,
    BertPreprocessorConfig,
    DataConfig,
    HeldOutDataConfig,
    LengthBucketsConfig,
    ModelConfig,
    StoredDataConfig,
    TokenizedDataConfig,
)
from tfapp.config.fields import MATCH, NEVER, bounded, choices, setting
from tfapp.errors import ConfigError


@dataclass
class NerDataConfig(StoredDataConfig, LengthBucketsConfig, TokenizedDataConfig, HeldOutDataConfig,
                    DataConfig):
    """Input files and the tf.data pipeline of NER.

    JSONL rows hold the keys "tokens" and "tags"; CoNLL files take data.tag_column.

    Attributes:
      tag_column: ner CoNLL files: the whitespace-separated column holding each word's tag,
        counted from 0 (the word itself) or, negative, from the end (-1 = the last column,
        as in CoNLL-2003's "word POS chunk tag" lines).
        JSONL rows hold the lists "tokens" and "tags".
      tag_scheme: ner: the data's tag scheme, iob2 (B- begins every entity), iob1 (B- only
        between adjacent entities of one type) or bioes (B- I- E- S-). Each file is read
        in the scheme its tags are written in and converted to IOB2; entities this
        setting would have lost are counted as converted in the log (docs/ner.md).
    """

    tag_column: int = bounded(-1, min=-64, max=64, resume=MATCH)
    tag_scheme: str = choices("iob2", "iob1", "bioes", default="iob2", resume=MATCH)


@dataclass
class NerModelConfig(BertPreprocessorConfig, BertModelConfig, ModelConfig):
    """The NER network: a BERT with a token-classification head.

    Attributes:
      kind: bert (TF-Hub encoder + a tag per token).
    """

    kind: str = choices("bert", default="bert", resume=NEVER)


@dataclass
class NerConfig(ExperimentConfig):
    """A named-entity tagger run (task=ner)."""

    task: str = setting("ner", resume=NEVER)
    data: NerDataConfig = field(default_factory=NerDataConfig)
    model: NerModelConfig = field(default_factory=NerModelConfig)
    trainer: SupervisedTrainerConfig = field(default_factory=SupervisedTrainerConfig)

    def check(self) -> None:
        d = self.data
        if d.format not in ("auto", "conll", "jsonl"):
            raise ConfigError(f"data.format: task ner reads conll or jsonl files (or auto), "
                              f"not {d.format}")
        if d.tag_column == 0:
            raise ConfigError("data.tag_column: 0 is the word itself; give the tag's column, "
                              "e.g. -1 (the last) or 3 (CoNLL-2003)")
