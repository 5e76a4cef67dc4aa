"""The NER task's config rules (read by ``tfapp.config.validate``; no TensorFlow)."""

from __future__ import annotations

from tfapp.errors import ConfigError

MODEL_KINDS = ("bert",)

#: keys of the other tasks; setting one for an NER run is refused. The tokens and tags of
#: JSONL rows are the keys ``tokens`` and ``tags``; CoNLL files take ``data.tag_column``.
UNUSED = (
    "data.labels", "data.text_column", "data.text_pair_column", "data.label_column",
    "data.multi_label", "data.label_separator", "data.class_weight", "data.drop_regex",
    "data.strip_punctuation",
    "data.vocab_size", "data.example_shape", "data.context_words", "data.target_words",
    "data.source_column", "data.target_column", "model.pooling", "model.label_smoothing",
    "model.embedding_dim", "model.units", "model.bidirectional", "model.attention",
    "generation", "mlm",
)


def _formats(cfg) -> None:
    d = cfg.data
    if d.format not in ("auto", "conll", "jsonl"):
        raise ConfigError(f"data.format: task ner reads conll or jsonl files (or auto), not "
                          f"{d.format}")
    if d.tag_column == 0:
        raise ConfigError("data.tag_column: 0 is the word itself; give the tag's column, "
                          "e.g. -1 (the last) or 3 (CoNLL-2003)")


CHECKS = (_formats,)
