"""The classifier's export behind ``tfapp.serving.ExportFormat``: its marker
(``tfapp_export.json``), loading (``LoadedClassifier``: predict and evaluate) and the facts
its model card shows. No TensorFlow at import: ``--help`` and the export lookup stay fast.

``predict_in_batches`` is how probabilities come out of a classifier's serving functions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tfapp.config import ClassifierDataConfig, ConfigError, load_config
from tfapp.serving import (
    BATCH,
    EVALUATE,
    PREDICT,
    Evaluation,
    ExportedModel,
    ExportFormat,
    base_encoder_fact,
    load_export,
)

import numpy as np


def predict_in_batches(module: Any, texts: list[str], pairs: list[str] | None = None,
                       *, num_labels: int) -> tuple[np.ndarray, list[str]]:
    """(probabilities [n, num_labels], predicted label strings) through ``module.serve`` or,
    for sentence pairs, ``module.serve_pair``, ``BATCH`` texts per call."""
    import tensorflow as tf

    probs, labels = [], []
    for start in range(0, len(texts), BATCH):
        batch = tf.constant(texts[start:start + BATCH])
        if pairs is not None:
            out = module.serve_pair(batch, tf.constant(pairs[start:start + BATCH]))
        else:
            out = module.serve(batch)
        probs.append(out["probabilities"].numpy())
        labels.extend(b.decode() for b in out["label"].numpy())
    if not probs:
        return np.zeros((0, num_labels)), []
    return np.concatenate(probs), labels


class LoadedClassifier(ExportedModel):
    """An exported classifier and its metadata (label names, pair input, ...)."""

    def __init__(self, model: str | os.PathLike):
        import tensorflow_text  # noqa: F401  (registers the tokenizer ops the model uses)

        super().__init__(*load_export(model, FORMAT))
        self.label_names = [b.decode() for b in self.module.label_names.numpy()]
        self.text_pair = bool(self.metadata.get("text_pair"))

    def predict(self, texts: list[str], pairs: list[str] | None = None
                ) -> tuple[np.ndarray, list[str]]:
        """(probabilities [n, classes], predicted label strings) in batches."""
        if self.text_pair and pairs is None:
            raise ConfigError("this model classifies sentence pairs; give the second texts "
                              "(--pair / the text_pair column)")
        return predict_in_batches(self.module, texts, pairs if self.text_pair else None,
                                  num_labels=len(self.label_names))

    def predict_lines(self, texts: list[str], pairs: list[str] | None, *,
                      as_json: bool) -> list[str]:
        """Per text: "label<TAB>probability<TAB>text", or JSON with every class's
        probability."""
        probs, labels = self.predict(texts, pairs)
        if as_json:
            return [json.dumps({"text": text, "label": label, "probabilities": dict(
                zip(self.label_names, map(float, probs[i]), strict=True))})
                for i, (text, label) in enumerate(zip(texts, labels, strict=True))]
        return [f"{label}\t{probs[i].max():.3f}\t{text}"
                for i, (text, label) in enumerate(zip(texts, labels, strict=True))]

    def evaluate(self, files: str, params: Path, flags: dict[str, Any]) -> Evaluation:
        """Accuracy, AUC, ... on labelled ``files``, read with the run's columns and format
        (``params``) unless ``flags`` say otherwise."""
        from tfapp.data.sources import BadRowReport, LabelVocab, encode_examples, read_examples
        from tfapp.training.metrics import classification_report, format_report

        if flags.get("format") == "conll":
            raise ConfigError("--format conll: CoNLL files hold tagged words (an NER "
                              "export's input); a classifier reads csv, tsv, jsonl, text or "
                              "tfrecord files")
        data = load_config(params).data if params.is_file() else ClassifierDataConfig()
        for key in ("text_column", "text_pair_column", "label_column", "format",
                    "on_bad_rows"):
            if flags.get(key) is not None:
                setattr(data, key, flags[key])
        # The export knows how it was trained; the run's config is only a fallback.
        multi_label = bool(self.metadata.get("multi_label", data.multi_label))
        data.multi_label = multi_label
        report = BadRowReport()
        raw = read_examples(files, data, split="test", mode=data.on_bad_rows, report=report)
        examples = encode_examples(raw, LabelVocab(self.label_names, multi_label),
                                   split="test", mode=data.on_bad_rows, report=report,
                                   known_from="the model")
        probs, _ = self.predict(examples.texts, examples.text_pairs)
        if len(self.label_names) == 2 and not multi_label:
            probs = probs[:, 1:]  # the report scores a binary model by P(positive)
        result = classification_report(examples.labels, probs, self.label_names, multi_label)
        return Evaluation(result, report, format_report)


class ClassifierExport(ExportFormat):
    task = "classifier"
    marker = "tfapp_export.json"
    train_hint = "train with trainer.export=true"
    serves = frozenset({PREDICT, EVALUATE})

    def load(self, model: str | os.PathLike) -> LoadedClassifier:
        return LoadedClassifier(model)

    def describe(self, metadata: dict) -> dict[str, str]:
        """The base encoder (BERT models), the input and, when so, multi-label output (the
        card's limits say the sequence length)."""
        bert = metadata.get("model_kind", "bert") == "bert"
        facts = base_encoder_fact(metadata) if bert else {}
        facts["input"] = "sentence pairs" if metadata.get("text_pair") else "one text"
        if metadata.get("multi_label"):
            facts["output"] = "any number of labels per text (multi-label)"
        return facts


FORMAT = ClassifierExport()
