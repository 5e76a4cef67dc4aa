"""Token classification (NER): a TF-Hub BERT encoder tags each word; entity-level scores."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from tfapp.atomic import write_text
from tfapp.data.bert_preprocess import make_bert_preprocess_fn
from tfapp.data.pipeline import distribute_split
from tfapp.data.tagged import NerSplits, load_ner_splits
from tfapp.data.token_classification import (
    WindowedSentences,
    make_ner_dataset,
    rejoin,
    window_sentences,
)
from tfapp.hub.handles import resolve_hub_handle
from tfapp.model_card import ModelCard
from tfapp.models.token_classifier import (
    MaskedTokenAccuracy,
    build_token_classifier,
    masked_token_loss,
)
from tfapp.tasks.base import Inputs, Task, TaskOutput
from tfapp.tasks.ner.export import NerServing, export_ner
from tfapp.tasks.ner.scores import entity_report, format_entity_report
from tfapp.training.callbacks import averaged_weights
from tfapp.training.tb_logging import log_scalars

import numpy as np
import tensorflow as tf

log = logging.getLogger("tfapp")

#: the scores of a split that the logs, the card and TaskOutput carry
SUMMARY = {"entity_f1": "f1", "entity_precision": "precision", "entity_recall": "recall",
           "token_accuracy": "token_accuracy"}


@dataclass
class NerInputs(Inputs):
    """The tagger's inputs: sentences, their windows per split, the preprocessing.

    Attributes:
      splits: the sentences of each split and the tag names.
      windowed: split name -> its sentences cut into windows (``window_sentences``).
      preprocess: the BERT preprocessing function (its ``.module`` tokenises and packs).
      encoder_handle / preprocessor_handle: the resolved Hub handles.
    """

    splits: NerSplits | None = None
    windowed: dict[str, WindowedSentences] = field(default_factory=dict)
    preprocess: Any = None
    encoder_handle: str = ""
    preprocessor_handle: str = ""


def tagger(model: tf.keras.Model):
    """``features -> tag ids [batch, seq_length]``, not ``predict``: every worker of a
    multi-worker run does it on its own. The model runs in a replica context (called
    from the cross-replica context inside ``fit``, a mirrored model fails), every replica
    on the same batch; the first one's answer is taken."""
    strategy = model.distribute_strategy

    def tag(features):
        return tf.argmax(model(features, training=False), axis=-1, output_type=tf.int32)

    @tf.function(reduce_retracing=True)
    def call(features):
        return strategy.experimental_local_results(strategy.run(tag, args=(features,)))[0]

    return call


def predict_tags(call, data: WindowedSentences, preprocess: Any, tag_names: list[str],
                 data_cfg, *, batch_size: int) -> list[list[str]]:
    """The predicted IOB2 tags of every sentence of ``data``: ``call`` (a ``tagger``) on
    its windows, each word read at its first piece."""
    dataset = make_ner_dataset(data, preprocess, tag_names, data_cfg, batch_size=batch_size,
                               training=False, seed=0)
    ids = np.concatenate([call(features).numpy() for features, _ in dataset])
    return [[tag_names[i] for i in sentence] for sentence in rejoin(data, ids)]


class EntityF1(tf.keras.callbacks.Callback):
    """Adds ``val_entity_f1`` (and precision, recall) to each evaluation's logs."""

    def __init__(self, score):
        super().__init__()
        self.score, self.call = score, None

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or "val_loss" not in logs:
            return
        self.call = self.call or tagger(self.model)  # traced once per run
        with averaged_weights(self.model):  # what validation scored (optimizer.ema_decay)
            report = self.score(self.call)
        logs.update({f"val_{k}": report[v] for k, v in SUMMARY.items() if k != "token_accuracy"})
        log.info("validation entity F1 %.4f (precision %.4f, recall %.4f)", report["f1"],
                 report["precision"], report["recall"])


class NerTask(Task):
    """Fine-tunes ``model.hub_handle`` to tag words; exports raw text -> entities."""

    default_monitor = "val_entity_f1"

    @classmethod
    def recompiles_under_xla(cls, cfg) -> bool:
        return True  # a restored TF-Hub encoder recompiles every step (docs/hub.md)

    def build_inputs(self) -> NerInputs:
        d, m = self.cfg.data, self.cfg.model
        encoder, bundled_pre = resolve_hub_handle(m.hub_handle)
        preprocessor = m.hub_preprocessor or bundled_pre
        preprocess = make_bert_preprocess_fn(hub_preprocessor=preprocessor,
                                             seq_length=d.seq_length)
        s = load_ner_splits(d, self.cfg.runtime.seed, self.layout.labels,
                            keep_vocab=self.ctx.resuming)
        windowed = {name: window_sentences(sentences, preprocess.module.tokenize,
                                           d.seq_length, name)
                    for name, sentences in (("train", s.train), ("validation", s.validation),
                                            ("test", s.test)) if sentences}
        global_batch = self.runtime.global_batch_size(d.batch_size)

        def dataset(data, training):
            return distribute_split(self.runtime.strategy, lambda input_context: (
                make_ner_dataset(data, preprocess, s.tag_names, d, batch_size=global_batch,
                                 training=training, seed=self.cfg.runtime.seed,
                                 input_context=input_context)), training=training)

        validation = windowed.get("validation")
        return NerInputs(
            train=dataset(windowed["train"], True),
            validation=dataset(validation, False) if validation else None,
            num_train_examples=len(windowed["train"]),
            num_validation_examples=len(validation) if validation else 0,
            validation_steps=math.ceil(len(validation) / global_batch) if validation else None,
            splits=s, windowed=windowed, preprocess=preprocess, encoder_handle=encoder,
            preprocessor_handle=preprocessor)

    def build_model(self, inputs: NerInputs):
        return build_token_classifier(self.cfg.model, num_tags=len(inputs.splits.tag_names),
                                      seq_length=self.cfg.data.seq_length,
                                      hub_handle=inputs.encoder_handle)

    def build_losses(self, inputs: NerInputs):
        return masked_token_loss

    def build_metrics(self, inputs: NerInputs) -> list:
        return [MaskedTokenAccuracy()]

    def _report(self, call, inputs: NerInputs, split: str) -> dict:
        data = inputs.windowed[split]
        pred = predict_tags(call, data, inputs.preprocess, inputs.splits.tag_names,
                            self.cfg.data,
                            batch_size=self.runtime.global_batch_size(self.cfg.data.batch_size))
        return entity_report([s.tags for s in data.sentences], pred)

    def metric_callbacks(self, model, inputs: NerInputs) -> list:
        if "validation" not in inputs.windowed:
            return []
        return [EntityF1(lambda m: self._report(m, inputs, "validation"))]

    def finish(self, model, inputs: NerInputs, history: dict) -> TaskOutput:
        """Entity reports of the exported weights on validation and test; the export."""
        out, scores, call = TaskOutput(), {}, tagger(model)
        for split, path, prefix in (("validation", self.layout.validation_report, "val_report_"),
                                    ("test", self.layout.test_report, "test_")):
            if split not in inputs.windowed:
                continue
            report = self._report(call, inputs, split)
            out.paths[f"{split}_report"] = write_text(path, json.dumps(report, indent=1))
            out.lines += [f"{split} report:", format_entity_report(report)]
            scores[split] = {k: report[v] for k, v in SUMMARY.items()}
            out.metrics.update({f"{prefix}{k}": v for k, v in scores[split].items()})
            if split == "test" and self.cfg.tracking.tensorboard and self.runtime.is_chief:
                log_scalars(self.layout.task_logs("test"),
                            int(model.optimizer.iterations.numpy()), scores[split])
        if self.cfg.trainer.export:
            d = self.cfg.data
            serving = NerServing(model, inputs.preprocess.module, seq_length=d.seq_length,
                                 tag_names=inputs.splits.tag_names)
            out.paths["exported"] = export_ner(serving, self.layout.export, metadata={
                "task": "ner", "tag_names": inputs.splits.tag_names,
                "entity_types": inputs.splits.entity_types, "seq_length": d.seq_length,
                "hub_handle": self.cfg.model.hub_handle,
                "preprocessor": inputs.preprocessor_handle},
                card=self._card(inputs, scores).render())
        return out

    def _card(self, inputs: NerInputs, scores: dict) -> ModelCard:
        s, d, m = inputs.splits, self.cfg.data, self.cfg.model
        demo = d.train_files.strip() == "demo"
        examples = {k: len(v.sentences) for k, v in inputs.windowed.items()}
        files = {"train": "the NER demo shipped with tfapp" if demo else f"`{d.train_files}`",
                 "validation": f"`{d.validation_files}`" if d.validation_files else
                 "the demo's" if demo else f"{d.validation_split:g} of train (seeded)",
                 "test": f"`{d.test_files}`" if d.test_files else
                 "the demo's" if demo else f"{d.test_split:g} of train (seeded)"}
        usage = "\n".join([
            "```bash", 'python -m tfapp.predict --model PATH_TO_THIS_FOLDER "Anna Berg flew '
            'to Oslo"', "```", "", "```python", "import tensorflow as tf",
            "import tensorflow_text  # registers the tokenizer ops", "",
            'model = tf.saved_model.load("PATH_TO_THIS_FOLDER")',
            'out = model.signatures["serving_default"](text=tf.constant(["a text"]))',
            '# entity_type/entity_text/entity_start/entity_end/entity_score [n, E], '
            'num_entities [n]', "```"])
        limits = [f"Sentences are read in windows of {d.seq_length - 2} word pieces; a "
                  "window sees no context beyond its edges.",
                  "Serving splits text into words at whitespace and at each punctuation "
                  "mark; data tokenised differently may tag less well."]
        if m.hub_handle.startswith("builtin:"):
            limits.append(f"`{m.hub_handle}` is a small encoder built from the demo texts, "
                          "not a pretrained BERT: for tests and smoke runs.")
        return ModelCard(title=f"Token classifier (BERT, {len(s.entity_types)} entity types)",
                         cfg=self.cfg, examples=examples, files=files, labels=s.tag_names,
                         metrics=scores,
                         best=self.layout.best(),
                         usage=usage, limits=limits)
