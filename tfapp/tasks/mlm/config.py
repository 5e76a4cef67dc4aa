"""The masked-LM task's config rules (read by ``tfapp.config.validate``; no TensorFlow)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfapp.errors import ConfigError

if TYPE_CHECKING:
    from tfapp.config import ExperimentConfig

MODEL_KINDS = ("bert",)

#: keys the masked-LM loop cannot honour: no labels, no validation split, masks drawn anew
#: every step (so no snapshot or cache of the masked batches), one text column
UNUSED = (
    "data.labels", "data.tag_column", "data.tag_scheme",
    "data.validation_files", "data.test_files", "data.test_split", "data.validation_split",
    "data.class_weight", "model.label_smoothing",
    "data.text_pair_column", "data.label_column", "data.multi_label", "data.label_separator",
    "data.cache", "data.snapshot", "data.service", "data.drop_regex",
    "data.strip_punctuation", "data.vocab_size", "data.example_shape", "data.context_words",
    "data.target_words", "data.source_column", "data.target_column",
    "model.hub_preprocessor", "model.pooling", "model.embedding_dim", "model.units",
    "model.bidirectional", "model.attention", "generation",
    "trainer.gradient_accumulation_steps", "trainer.monitor",
)


def _no_auto_learning_rate(cfg: ExperimentConfig) -> None:
    if cfg.optimizer.learning_rate == "auto":
        raise ConfigError("optimizer.learning_rate=auto is not supported by task mlm (the "
                          "range test reads a compiled loss; the masked-LM model computes its "
                          "own); give a number, e.g. optimizer.learning_rate=1e-4")


CHECKS = (_no_auto_learning_rate,)
