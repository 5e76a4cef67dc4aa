"""The classifier's export behind ``tfapp.serving.ExportFormat``: its marker
(``tfapp_export.json``), loading (``LoadedClassifier``: predict and evaluate), the facts
its model card shows and its Hugging Face form (``BertForSequenceClassification``, for
``tfapp export-hf``). No TensorFlow at import: ``--help`` and the export lookup stay fast.

``predict_in_batches`` is how probabilities come out of a classifier's serving functions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tfapp.config import ClassifierDataConfig, ConfigError, ExperimentConfig, load_config
from tfapp.data.rows.bad_rows import BadRowPolicy, BadRowReport
from tfapp.data.rows.names import KnownNames
from tfapp.data.rows.spec import RowSpec
from tfapp.errors import DataError, Setting
from tfapp.hub.hf_checkpoint import SEQUENCE_CLASSIFICATION, binary_as_two_logits
from tfapp.serving import (
    BATCH,
    EVALUATE,
    PREDICT,
    Evaluation,
    ExportedModel,
    ExportFormat,
    HfForm,
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

    output_columns = ("label", "probabilities")
    evaluation_columns = ("text", "text_pair", "label", "probabilities", "gold_label")

    def __init__(self, model: str | os.PathLike):
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

    def predict_rows(self, texts: Any, pairs: Any | None = None) -> list[dict]:
        """Per text: ``{"label", "probabilities": {label: p}}`` of one call of the
        export's serving function on the batch."""
        if self.text_pair and pairs is None:
            raise ConfigError("this model classifies sentence pairs; give the second texts "
                              "(--pair / --text-pair-column)")
        out = (self.module.serve_pair(texts, pairs) if self.text_pair
               else self.module.serve(texts))
        probs = out["probabilities"].numpy().tolist()
        names = self.label_names
        return [{"label": label.decode(), "probabilities": dict(zip(names, p, strict=True))}
                for label, p in zip(out["label"].numpy(), probs, strict=True)]

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

    def evaluate(self, files: str, params: Path, flags: dict[str, Any],
                 rows: Callable[[list[dict]], None] | None = None,
                 keep: Sequence[str] = ()) -> Evaluation:
        """Accuracy, AUC, ... on labelled ``files``, read with the run's columns and format
        (``params``) unless ``flags`` say otherwise. ``rows`` gets each batch's rows: the
        ``keep`` columns, the texts, the prediction as ``predict_rows`` gives it and
        ``gold_label`` (a multi-label row's labels joined by '|', as its predicted
        ``label``)."""
        from tfapp.data.rows.read import file_formats, iter_rows
        from tfapp.training.metrics import format_report
        from tfapp.training.report_counts import ClassificationCounts

        if flags.get("format") == "conll":
            raise ConfigError("--format conll: CoNLL files hold tagged words (an NER "
                              "export's input); a classifier reads csv, tsv, jsonl, parquet, "
                              "text or tfrecord files")
        data = load_config(params).data if params.is_file() else ClassifierDataConfig()
        for key in ("text_column", "text_pair_column", "label_column", "format",
                    "on_bad_rows"):
            if flags.get(key) is not None:
                setattr(data, key, flags[key])
        # The export knows how it was trained; the run's config is only a fallback.
        multi_label = bool(self.metadata.get("multi_label", data.multi_label))
        data.multi_label = multi_label
        report = BadRowReport()
        bad = BadRowPolicy(data.on_bad_rows, report, "test")
        index = {name: i for i, name in enumerate(self.label_names)}
        known = KnownNames(tuple(self.label_names), "the model")
        counts = ClassificationCounts(self.label_names, multi_label)
        # Streamed: a batch of rows at a time, scored and counted (no list of the rows).
        texts: list[str] = []
        pairs: list[str] = []
        labels: list[list[str]] = []
        kept: list[dict[str, Any]] = []

        def score() -> None:
            probs, predicted = self.predict(texts, pairs if data.text_pair_column else None)
            if rows is not None:
                rows([{**own, "text": text,
                       **({"text_pair": pair} if data.text_pair_column else {}),
                       "label": label, "probabilities": dict(zip(self.label_names, p,
                                                                 strict=True)),
                       "gold_label": "|".join(sorted(gold, key=index.__getitem__))}
                      for own, text, pair, label, p, gold in zip(
                          kept, texts, pairs, predicted, probs.tolist(), labels,
                          strict=True)])
            if len(self.label_names) == 2 and not multi_label:
                probs = probs[:, 1:]  # the report scores a binary model by P(positive)
            if multi_label:
                truth = np.zeros((len(labels), len(index)), np.float32)
                for i, names in enumerate(labels):
                    truth[i, [index[n] for n in names]] = 1.0
            else:
                truth = np.array([index[names[0]] for names in labels], np.int32)
            counts.update(truth, probs)
            texts.clear(), pairs.clear(), labels.clear(), kept.clear()

        spec = RowSpec.from_config("labelled", data)
        examples = iter_rows(file_formats(files, spec, Setting("data.test_files")), spec,
                             split="test", kept=keep, known=known)
        for row in bad.good(examples):
            texts.append(row.values[0])
            pairs.append(row.values[1] if data.text_pair_column else "")
            labels.append(row.values[-1])
            kept.append(row.kept)
            if len(texts) == BATCH:
                score()
        if texts:
            score()
        if not counts.examples:
            raise DataError(Setting("data.test_files"), (
                f": no usable examples left after dropping {report.count} bad row(s): "
                f"{report.summary()}" if report.count else f": no usable examples in '{files}'"))
        return Evaluation(counts.report(), report, format_report)


class ClassifierExport(ExportFormat):
    task = "classifier"
    marker = "tfapp_export.json"
    train_hint = "train with trainer.export=true"
    serves = frozenset({PREDICT, EVALUATE})
    hf_architecture = SEQUENCE_CLASSIFICATION
    text_ops = True

    def load(self, model: str | os.PathLike) -> LoadedClassifier:
        return LoadedClassifier(model)

    def hf_refusal(self, cfg: ExperimentConfig) -> str:
        """BertForSequenceClassification classifies the pooler's output (pooler ->
        dropout -> dense): tfapp's ``model.pooling=pooled`` head, and no other."""
        if cfg.model.pooling != "pooled":
            return (f"model.pooling={cfg.model.pooling} has no {SEQUENCE_CLASSIFICATION} "
                    "form (it classifies the pooler's output); train with "
                    "model.pooling=pooled (the default) to export")
        return ""

    def hf_form(self, module: Any, metadata: dict, kernel: Any, bias: Any,
                run_dir: Path) -> HfForm:
        """One logit per label from the pooler; a binary classifier's one sigmoid unit
        (logit z) becomes the two softmax logits ``[0, z]``, exactly tfapp's two
        probabilities. Sentence pairs: transformers' tokenizer packs the second text as
        tfapp's preprocessor does (``[CLS] a [SEP] b [SEP]``, token type 1 for b)."""
        labels = [str(x) for x in metadata["label_names"]]
        multi_label = bool(metadata.get("multi_label"))
        text_pair = bool(metadata.get("text_pair"))
        notes = []
        if len(labels) == 2 and not multi_label and kernel.shape[-1] == 1:
            kernel, bias = binary_as_two_logits(kernel, bias)
            notes.append("tfapp trained one sigmoid unit; its logit `z` is exported as the two "
                         "logits `[0, z]`, whose softmax is tfapp's two probabilities.")
        if multi_label:
            notes.append("Multi-label: apply a sigmoid to each logit (`problem_type` is "
                         "`multi_label_classification`); tfapp picks every label at >= 0.5.")
        if text_pair:
            notes.append("Sentence pairs: give the second texts as the tokenizer's second "
                         "argument; it packs `[CLS] text [SEP] pair [SEP]` with token type 1 "
                         "for the pair, as tfapp did. When both texts are too long, tfapp "
                         "trimmed them round-robin and `truncation=True` trims the longer "
                         "first: the same lengths, except that with an even "
                         "`model_max_length` and a second text at least as long as the "
                         "first, transformers keeps one word piece less of the first text "
                         "and one more of the second.")
        return HfForm(
            auto_class="AutoModelForSequenceClassification", pipeline_tag="text-classification",
            kind="Sentence-pair classifier" if text_pair else "Text classifier",
            labels=labels, kernel=kernel, bias=bias, pooler=True,
            problem_type=("multi_label_classification" if multi_label
                          else "single_label_classification"),
            notes=notes, demo_data="tfapp demo (reviews)", text_pair=text_pair)

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
