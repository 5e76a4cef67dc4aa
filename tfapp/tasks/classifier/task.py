"""Text classification: TF-Hub BERT (or CNN/RNN baselines) on tokenised text."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from tfapp.atomic import write_bytes, write_text
from tfapp.data.examples.classification import (
    ClassificationSplits,
    classification_examples,
    demo_files,
    load_classification_splits,
    raw_batches,
)
from tfapp.data.input.reader import training_inputs
from tfapp.data.text.bert_preprocess import vocab_tokens
from tfapp.model_card import ModelCard, vocabulary_scripts
from tfapp.models.classifier import build_classifier
from tfapp.tasks.classifier.export import ClassifierServing, export_classifier
from tfapp.tasks.classifier.serving import FORMAT
from tfapp.training.bert_inputs import BertInputs, bert_setup, hub_encoder_recompiles
from tfapp.training.metrics import (
    ConfusionMatrix,
    build_loss,
    build_metrics,
    class_weights_for,
    classification_report,
    format_report,
    label_mode,
)
from tfapp.training.task import Task, TaskOutput
from tfapp.training.tb_logging import log_test_metrics, plot_confusion_matrix

import numpy as np

log = logging.getLogger("tfapp")


@dataclass
class ClassifierInputs(BertInputs):
    """The classifier's inputs and what its model, loss and export need to know (the
    BERT preprocessing and Hub handles: ``BertInputs``).

    Attributes:
      splits: the prepared splits, the label names, single or multi-label.
    """

    splits: ClassificationSplits | None = None

    @property
    def num_classes(self) -> int:
        return self.splits.num_classes


class ClassifierTask(Task):
    """Fine-tunes ``model.hub_handle`` (or a baseline) on ``data`` and exports a serving model."""

    default_monitor = "val_accuracy"

    @classmethod
    def input_files(cls, cfg) -> dict[str, str]:
        files = dict(zip(("train", "validation", "test"), demo_files(cfg.data), strict=True))
        return {k: v for k, v in files.items() if v}

    @classmethod
    def recompiles_under_xla(cls, cfg, model=None) -> bool:
        # tf-keras's fused LSTM (rnn) and a restored TF-Hub encoder recompile the train step
        # every step under XLA (docs/hub.md); the native encoder (mixed precision) does not.
        if cfg.model.kind == "bert":
            return hub_encoder_recompiles(model)
        return cfg.model.kind == "rnn"

    def build_inputs(self) -> ClassifierInputs:
        d = self.cfg.data
        bert = bert_setup(self.cfg)
        preprocess = bert.preprocess
        seed = self.cfg.runtime.seed
        s = load_classification_splits(d, seed, label_vocab_path=self.layout.labels,
                                       keep_vocab=self.ctx.resuming)
        inputs = training_inputs(
            lambda split: classification_examples(s, split, preprocess, d.seq_length),
            s.train, s.validation, d, runtime=self.runtime, seed=seed,
            resumed_batches=self.ctx.resumed_batches(),
            steps_per_execution=self.cfg.trainer.steps_per_execution)
        return ClassifierInputs(**inputs.fields(), splits=s, **bert._asdict())

    def build_model(self, inputs: ClassifierInputs):
        return build_classifier(
            self.cfg.model, num_classes=inputs.num_classes,
            multi_label=inputs.splits.multi_label, seq_length=self.cfg.data.seq_length,
            vocab_size=inputs.preprocess.vocab_size, hub_handle=inputs.encoder_handle)

    def build_losses(self, inputs: ClassifierInputs):
        s = inputs.splits
        weights = class_weights_for(self.cfg.data.class_weight, s.class_counts,
                                    s.train.manifest.rows, s.label_names, s.multi_label)
        if weights is not None:
            log.info("class weights: %s", ", ".join(
                f"{name} {w:.3g}" for name, w in zip(s.label_names, weights, strict=True)))
        return build_loss(inputs.num_classes, s.multi_label,
                          label_smoothing=self.cfg.model.label_smoothing,
                          class_weights=weights)

    def build_metrics(self, inputs: ClassifierInputs) -> list:
        metrics = build_metrics(inputs.num_classes, inputs.splits.multi_label)
        self._confusion = None
        if self._confusion_image(inputs):
            self._confusion = ConfusionMatrix(
                inputs.num_classes, label_mode(inputs.num_classes, inputs.splits.multi_label))
            metrics.append(self._confusion)
        return metrics

    def _confusion_image(self, inputs: ClassifierInputs) -> bool:
        """Whether the run plots its validation confusion matrix per epoch: single-label
        runs with validation and TensorBoard, on one worker (reading the counts of a
        multi-worker run is a collective every worker would have to join)."""
        return (self.cfg.tracking.tensorboard and not inputs.splits.multi_label
                and inputs.validation is not None and self.runtime.kind != "multi_worker")

    def callbacks(self, model, inputs: ClassifierInputs) -> list:
        """The validation confusion matrix per epoch (TensorBoard Images tab), from the
        ``ConfusionMatrix`` metric that fit's validation pass updates."""
        metric = getattr(self, "_confusion", None)
        if metric is None:
            return []
        from tfapp.training.tb_logging import ConfusionMatrixImage

        return [ConfusionMatrixImage(metric, inputs.splits.label_names,
                                     self.layout.task_logs("validation"))]

    def finish(self, model, inputs: ClassifierInputs, history: dict) -> TaskOutput:
        """Score the serving model on validation and test, then export it with its card."""
        s, d = inputs.splits, self.cfg.data
        mode = label_mode(inputs.num_classes, s.multi_label)
        out = TaskOutput()
        serving = ClassifierServing(model, inputs.preprocess.module, seq_length=d.seq_length,
                                    label_names=s.label_names, mode=mode,
                                    text_pair=bool(d.text_pair_column))
        # The reports score the model being exported (the loop restored the best weights).
        scores: dict[str, dict[str, float]] = {}
        for split, path, prefix in (
                ("validation", self.layout.validation_report, "val_report_"),
                ("test", self.layout.test_report, "test_")):
            data = getattr(s, split)
            if not s.size(data):
                continue
            labels, probs = self._predict(serving, s, data)
            if mode == "binary":
                probs = probs[:, 1:]
            report = classification_report(labels, probs, s.label_names, s.multi_label)
            out.paths[f"{split}_report"] = write_text(path, json.dumps(report, indent=1))
            if "confusion_matrix" in report and self.runtime.is_chief:
                out.paths[f"{split}_confusion_matrix"] = self._plot_confusion(report, split)
            out.lines += [f"{split} report:", format_report(report)]
            scores[split] = {k: report[k] for k in ("accuracy", "macro_f1", "auc")}
            out.metrics.update({f"{prefix}{k}": v for k, v in scores[split].items()})
            if split == "test" and self.cfg.tracking.tensorboard and self.runtime.is_chief:
                log_test_metrics(self.layout, scores[split])
        # Every worker saves (collective reads of synced variables need all of them); a
        # non-chief's layout is its own scratch copy, removed at the end of the run.
        if self.cfg.trainer.export:
            metadata = {
                "task": "classifier", "label_names": s.label_names,
                "multi_label": s.multi_label, "text_pair": bool(d.text_pair_column),
                "seq_length": d.seq_length, "model_kind": self.cfg.model.kind,
                "hub_handle": self.cfg.model.hub_handle,
                "preprocessor": inputs.preprocessor_handle}
            card = self._card(inputs, scores, details=FORMAT.describe(metadata))
            out.paths["exported"] = export_classifier(serving, self.layout.export,
                                                      metadata=metadata, card=card.render())
            out.try_it = self.try_it("predict")
        return out

    def _plot_confusion(self, report: dict, split: str):
        """The report's confusion matrix (the exported model's) as a PNG beside it."""

        best = self.layout.best()
        which = f"epoch {best['epoch']}" if best and best.get("epoch") else "last epoch"
        png = plot_confusion_matrix(np.asarray(report["confusion_matrix"]),
                                    list(report["per_class"]),
                                    title=f"{split}, exported model ({which})")
        return write_bytes(self.layout.confusion_matrix_for(split), png)

    def _predict(self, serving, s: ClassificationSplits, split) -> tuple[np.ndarray, np.ndarray]:
        """(labels, probabilities) of ``split`` through the serving functions, streamed."""
        labels, probs = [], []
        pair = bool(self.cfg.data.text_pair_column)
        for batch in raw_batches(s, split):
            out = (serving.serve_pair(batch["text"], batch["text_pair"]) if pair
                   else serving.serve(batch["text"]))
            probs.append(out["probabilities"].numpy())
            labels.append(batch["label"])
        return np.concatenate(labels), np.concatenate(probs)

    def _card(self, inputs: ClassifierInputs, scores: dict, *,
              details: dict[str, str]) -> ModelCard:
        s, d, m = inputs.splits, self.cfg.data, self.cfg.model
        examples = {"train": s.size(s.train)}
        examples.update({k: s.size(v) for k, v in (("validation", s.validation),
                                                   ("test", s.test)) if s.size(v)})
        demo = d.train_files.strip() == "demo"
        files = {"train": "the demo reviews shipped with tfapp" if demo else f"`{d.train_files}`",
                 "validation": f"`{d.validation_files}`" if d.validation_files else
                 "the demo's" if demo else f"{d.validation_split:g} of train (seeded)",
                 "test": f"`{d.test_files}`" if d.test_files else
                 "the demo's" if demo else f"{d.test_split:g} of train (seeded)"}
        kind = "multi-label" if s.multi_label else f"{len(s.label_names)} labels"
        limits = [f"Texts are cut to {d.seq_length} word pieces"
                  + (" (each text of a pair gets a share)" if d.text_pair_column else "")
                  + "; anything after that is not read."]
        vocab = vocab_tokens(inputs.preprocess.module)
        if vocab:
            limits.append(f"Vocabulary: {len(vocab)} word pieces; scripts: "
                          f"{vocabulary_scripts(vocab)}. Text in other scripts reads as "
                          "unknown tokens.")
        if m.kind == "bert" and m.hub_handle.startswith("builtin:"):
            limits.append(f"`{m.hub_handle}` is a small encoder built from the demo texts, "
                          "not a pretrained BERT: for tests and smoke runs.")
        pair = ' --pair "second text"' if d.text_pair_column else ""
        call = ('serve_pair(tf.constant(["a text"]), tf.constant(["second text"]))'
                if d.text_pair_column else 'signatures["serving_default"](text=tf.constant('
                '["a text"]))')
        usage = "\n".join([
            "```bash", f'python -m tfapp.predict --model PATH_TO_THIS_FOLDER "a text"{pair}',
            "```", "", "```python", "import tensorflow as tf",
            "import tensorflow_text  # registers the tokenizer ops", "",
            'model = tf.saved_model.load("PATH_TO_THIS_FOLDER")', f"out = model.{call}",
            'out["probabilities"], out["label"]  # [n, labels] floats, [n] label names',
            "```"])
        return ModelCard(title=f"Text classifier ({m.kind}, {kind})", cfg=self.cfg,
                         examples=examples, files=files, details=details,
                         labels=list(s.label_names),
                         metrics=scores,
                         best=self.layout.best(),
                         usage=usage, limits=limits)
