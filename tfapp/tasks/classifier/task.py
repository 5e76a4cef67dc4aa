"""Text classification: TF-Hub BERT (or CNN/RNN baselines) on tokenised text."""

from __future__ import annotations

import json
import math

from tfapp.atomic import write_text
from tfapp.data.bert_preprocess import make_bert_preprocess_fn
from tfapp.data.classification import load_classification_splits, make_classification_dataset
from tfapp.data.pipeline import distribute
from tfapp.hub.handles import resolve_hub_handle
from tfapp.models.classifier import build_classifier
from tfapp.tasks.base import Inputs, Task
from tfapp.training.export import ClassifierServing, export_classifier
from tfapp.training.metrics import (
    build_loss,
    build_metrics,
    classification_report,
    format_report,
    label_mode,
)

import numpy as np


def _vocab_size(module) -> int | None:
    """Vocabulary size of a preprocessor (tfapp's or an official one) from its vocab asset."""
    asset = getattr(module, "vocab_file", None)
    path = getattr(asset, "asset_path", None)
    if path is None:
        return None
    import tensorflow as tf

    with tf.io.gfile.GFile(path.numpy().decode()) as fh:
        return sum(1 for _ in fh)


class ClassifierTask(Task):
    """Fine-tunes ``model.hub_handle`` (or a baseline) on ``data`` and exports a serving model."""

    default_monitor = "val_accuracy"

    def build_inputs(self) -> Inputs:
        d, m = self.cfg.data, self.cfg.model
        encoder, bundled_pre = resolve_hub_handle(m.hub_handle)
        self.encoder_handle = encoder
        preprocessor = m.hub_preprocessor or bundled_pre
        self.preprocess = make_bert_preprocess_fn(hub_preprocessor=preprocessor,
                                                  seq_length=d.seq_length)
        self.preprocessor_handle = preprocessor
        self.splits = load_classification_splits(
            d, self.cfg.runtime.seed, label_vocab_path=self.run_dir / "labels.json")
        s = self.splits
        global_batch = self.runtime.global_batch_size(d.batch_size)

        def dataset(examples, training):
            def fn(input_context=None):
                ds = make_classification_dataset(
                    examples, self.preprocess, d, batch_size=global_batch, training=training,
                    seed=self.cfg.runtime.seed, input_context=input_context)
                # fit runs a fixed number of steps per epoch from one iterator, so the
                # training stream must not run dry at the end of a pass.
                return ds.repeat() if training else ds
            return distribute(self.runtime.strategy, fn)

        validation = s.validation if s.validation is not None and len(s.validation) else None
        return Inputs(
            train=dataset(s.train, True),
            validation=dataset(validation, False) if validation is not None else None,
            num_train_examples=len(s.train),
            num_validation_examples=len(validation) if validation is not None else 0,
            # Replicas past the end of their shard get empty batches (get_next_as_optional),
            # so every replica runs the same number of validation steps. Always given: a
            # distributed dataset has no known size, and fit needs one for validation with
            # steps_per_execution > 1 even on one replica.
            validation_steps=(math.ceil(len(validation) / global_batch)
                              if validation is not None else None),
            info={"label_names": s.label_names, "multi_label": s.multi_label})

    @property
    def num_classes(self) -> int:
        return len(self.splits.label_names)

    def build_model(self, inputs: Inputs):
        return build_classifier(
            self.cfg.model, num_classes=self.num_classes, multi_label=self.splits.multi_label,
            seq_length=self.cfg.data.seq_length, vocab_size=_vocab_size(self.preprocess.module),
            hub_handle=self.encoder_handle)

    def build_losses(self):
        return build_loss(self.num_classes, self.splits.multi_label)

    def build_metrics(self) -> list:
        return build_metrics(self.num_classes, self.splits.multi_label)

    def callbacks(self, model, inputs: Inputs) -> list:
        """The validation confusion matrix per epoch (TensorBoard Images tab), single-label
        runs on one worker (predict over an extra dataset would need every worker)."""
        s, d = self.splits, self.cfg.data
        if (not self.cfg.tracking.tensorboard or s.multi_label or inputs.validation is None
                or self.runtime.kind == "multi_worker"):
            return []
        from tfapp.training.tb_logging import ConfusionMatrixImage

        def validation_dataset():
            return make_classification_dataset(
                s.validation, self.preprocess, d,
                batch_size=self.runtime.global_batch_size(d.batch_size), training=False,
                seed=self.cfg.runtime.seed)

        return [ConfusionMatrixImage(validation_dataset, s.validation.labels, s.label_names,
                                     self.run_dir / "logs" / "validation",
                                     self.run_dir / "confusion_matrix.png")]

    def finish(self, model, inputs: Inputs) -> dict:
        """Export the serving model, then report per class on validation through it."""
        s, d = self.splits, self.cfg.data
        mode = label_mode(self.num_classes, s.multi_label)
        out: dict = {"lines": []}
        serving = ClassifierServing(model, self.preprocess.module, seq_length=d.seq_length,
                                    label_names=s.label_names, mode=mode,
                                    text_pair=bool(d.text_pair_column))
        # Every worker saves (collective reads of synced variables need all of them); a
        # non-chief's run_dir is its own scratch directory, removed by the driver.
        if self.cfg.trainer.export:
            out["exported"] = export_classifier(serving, self.run_dir / "export", metadata={
                "task": "classifier", "label_names": s.label_names,
                "multi_label": s.multi_label, "text_pair": bool(d.text_pair_column),
                "seq_length": d.seq_length, "hub_handle": self.cfg.model.hub_handle,
                "preprocessor": self.preprocessor_handle})
        validation = s.validation
        if validation is not None and len(validation):
            import tensorflow as tf

            probs = []
            for start in range(0, len(validation), 256):
                texts = tf.constant(validation.texts[start:start + 256])
                if validation.text_pairs is not None:
                    pairs = tf.constant(validation.text_pairs[start:start + 256])
                    result = serving._serve_pair(texts, pairs)
                else:
                    result = serving.serve(texts)
                probs.append(result["probabilities"].numpy())
            stacked = np.concatenate(probs)
            if mode == "binary":
                stacked = stacked[:, 1:]
            report = classification_report(validation.labels, stacked, s.label_names,
                                           s.multi_label)
            out["report"] = write_text(self.run_dir / "validation_report.json",
                                       json.dumps(report, indent=1))
            out["lines"] = ["validation report:", format_report(report)]
            out["metrics"] = {f"val_report_{k}": report[k]
                              for k in ("accuracy", "macro_f1", "auc")}
        return out
