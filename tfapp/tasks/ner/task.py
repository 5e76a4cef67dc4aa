"""Token classification (NER): a TF-Hub BERT encoder tags each word; entity-level scores."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from tfapp.atomic import write_text
from tfapp.data.lengths import grouping_for
from tfapp.data.ner_splits import demo_ner_file, load_ner_splits
from tfapp.data.pipeline import distribute
from tfapp.data.prepare import RowSpec
from tfapp.data.stream import plan_steps
from tfapp.data.token_classification import (
    KeptWindows,
    NerData,
    build_ner_data,
    eval_windows,
    gold_tags,
    make_ner_dataset,
    predict_tags,
    window_lengths,
)
from tfapp.model_card import ModelCard
from tfapp.models.token_classifier import (
    MaskedTokenAccuracy,
    build_token_classifier,
    masked_token_loss,
)
from tfapp.tasks.ner.export import NerServing, export_ner
from tfapp.tasks.ner.metrics import EntityCounts, micro_scores
from tfapp.tasks.ner.scores import entity_report, format_entity_report
from tfapp.tasks.ner.serving import FORMAT
from tfapp.training.bert_inputs import BertInputs, bert_setup, hub_encoder_recompiles
from tfapp.training.task import Task, TaskOutput
from tfapp.training.tb_logging import log_test_metrics

import numpy as np
import tensorflow as tf

log = logging.getLogger("tfapp")

#: the scores of a split that the logs, the card and TaskOutput carry
SUMMARY = {"entity_f1": "f1", "entity_precision": "precision", "entity_recall": "recall",
           "token_accuracy": "token_accuracy"}


@dataclass
class NerInputs(BertInputs):
    """The tagger's inputs: the prepared splits and their window counts (the BERT
    preprocessing and Hub handles: ``BertInputs``).

    Attributes:
      data: the splits, tag names and windows per shard file (``build_ner_data``).
      gold: split name -> its sentences' tags (what the entity scores compare against).
      windows: split name -> its windows in order (``eval_windows``), built once and
        kept after the first evaluation (``KeptWindows``).
    """

    data: NerData | None = None
    gold: dict[str, list[list[str]]] = field(default_factory=dict)
    windows: dict[str, KeptWindows] = field(default_factory=dict)


def tagger(model: tf.keras.Model):
    """``features -> tag ids [batch, seq_length]``, not ``predict``: every worker of a
    multi-worker run does it on its own. The model runs in a replica context (called
    from the cross-replica context, a mirrored model fails), every replica on the same
    batch; the first one's answer is taken. For the end-of-run reports only: the
    per-epoch scores come from fit's own validation pass (``EntityCounts``)."""
    strategy = model.distribute_strategy

    def tag(features):
        return tf.argmax(model(features, training=False), axis=-1, output_type=tf.int32)

    @tf.function(reduce_retracing=True)
    def call(features):
        return strategy.experimental_local_results(strategy.run(tag, args=(features,)))[0]

    return call


class EntityF1(tf.keras.callbacks.Callback):
    """Adds ``val_entity_f1`` (and precision, recall) to each evaluation's logs, from the
    entity counts fit's validation pass left in ``metric`` (Keras resets the metrics when
    an evaluation begins, so at ``on_epoch_end`` they are the evaluation's alone)."""

    def __init__(self, metric: EntityCounts):
        super().__init__()
        self.metric = metric

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or "val_loss" not in logs:
            return
        scores = micro_scores(self.metric.counts())
        logs.update({f"val_{k}": scores[v] for k, v in SUMMARY.items() if k != "token_accuracy"})
        log.info("validation entity F1 %.4f (precision %.4f, recall %.4f)", scores["f1"],
                 scores["precision"], scores["recall"])


class NerTask(Task):
    """Fine-tunes ``model.hub_handle`` to tag words; exports raw text -> entities."""

    default_monitor = "val_entity_f1"

    @classmethod
    def input_files(cls, cfg) -> dict[str, str]:
        d = cfg.data
        files = {"train": d.train_files, "validation": d.validation_files,
                 "test": d.test_files}
        if d.train_files.strip() == "demo":
            files = {k: v or demo_ner_file(k) for k, v in files.items()}
            files["train"] = demo_ner_file("train")
        return {k: v for k, v in files.items() if v}

    @classmethod
    def row_spec(cls, cfg):
        return RowSpec.from_config("tagged", cfg.data)

    @classmethod
    def recompiles_under_xla(cls, cfg, model=None) -> bool:
        return hub_encoder_recompiles(model)  # a restored Hub encoder does (docs/hub.md)

    def build_inputs(self) -> NerInputs:
        d, rt = self.cfg.data, self.runtime
        seed = self.cfg.runtime.seed
        bert = bert_setup(self.cfg)
        preprocess = bert.preprocess
        splits = load_ner_splits(d, seed, self.layout.labels, keep_vocab=self.ctx.resuming)
        data = build_ner_data(splits, preprocess, d.seq_length)
        if splits.report.count:
            log.warning("data: %s", splits.report.summary())
        log.info("data: %d train / %d validation / %d test sentences, %d tags",
                 data.sentences.get("train", 0), data.sentences.get("validation", 0),
                 data.sentences.get("test", 0), len(splits.tag_names))
        train = data.split("train")
        plan = plan_steps(data.source(train), global_batch=rt.global_batch_size(d.batch_size),
                          pipelines=rt.input_pipelines, seed=seed,
                          resumed_batches=self.ctx.resumed_batches())
        grouping, why = grouping_for(
            d.length_buckets, d.seq_length, seed,
            window_lengths(data, preprocess, d.seq_length) if d.length_buckets > 1
            else np.zeros([0]), device_kind=rt.device_kind, input_pipelines=plan.pipelines,
            steps_per_execution=self.cfg.trainer.steps_per_execution)
        log.info("data: %s", why)

        def dataset(split, training):
            return distribute(rt.strategy, lambda input_context: (
                make_ner_dataset(data, split, preprocess, d, batch_size=plan.global_batch,
                                 training=training, seed=seed, input_context=input_context,
                                 start=plan.start, grouping=grouping)))

        validation = data.split("validation") if data.size(data.split("validation")) else None
        gold = {name: gold_tags(data, data.split(name)) for name in ("validation", "test")
                if data.size(data.split(name))}
        windows = {name: KeptWindows(eval_windows(data, data.split(name), preprocess,
                                                  d.seq_length, plan.global_batch))
                   for name in gold}
        return NerInputs(
            train=dataset(train, True),
            validation=dataset(validation, False) if validation else None,
            num_train_examples=data.size(train), batches_per_pass=plan.steps,
            num_validation_examples=data.size(validation),
            validation_steps=plan.eval_steps(data.size(validation)),
            data=data, gold=gold, windows=windows, **bert._asdict())

    def build_model(self, inputs: NerInputs):
        return build_token_classifier(self.cfg.model, num_tags=len(inputs.data.tag_names),
                                      seq_length=self.cfg.data.seq_length,
                                      hub_handle=inputs.encoder_handle)

    def build_losses(self, inputs: NerInputs):
        return masked_token_loss

    def build_metrics(self, inputs: NerInputs) -> list:
        metrics: list = [MaskedTokenAccuracy()]
        self._entities = None
        if "validation" in inputs.gold:  # counted in every step, read after validation
            self._entities = EntityCounts(inputs.data.tag_names)
            metrics.append(self._entities)
        return metrics

    def _report(self, call, inputs: NerInputs, split: str) -> dict:
        pred = predict_tags(call, inputs.windows[split], inputs.data.tag_names)
        return entity_report(inputs.gold[split], pred)

    def metric_callbacks(self, model, inputs: NerInputs) -> list:
        metric = getattr(self, "_entities", None)
        return [] if metric is None else [EntityF1(metric)]

    def finish(self, model, inputs: NerInputs, history: dict) -> TaskOutput:
        """Entity reports of the exported weights on validation and test; the export."""
        out, scores, call = TaskOutput(), {}, tagger(model)
        for split, path, prefix in (("validation", self.layout.validation_report, "val_report_"),
                                    ("test", self.layout.test_report, "test_")):
            if split not in inputs.gold:
                continue
            report = self._report(call, inputs, split)
            out.paths[f"{split}_report"] = write_text(path, json.dumps(report, indent=1))
            out.lines += [f"{split} report:", format_entity_report(report)]
            scores[split] = {k: report[v] for k, v in SUMMARY.items()}
            out.metrics.update({f"{prefix}{k}": v for k, v in scores[split].items()})
            if split == "test" and self.cfg.tracking.tensorboard and self.runtime.is_chief:
                log_test_metrics(self.layout, scores[split])
        if self.cfg.trainer.export:
            d = self.cfg.data
            serving = NerServing(model, inputs.preprocess.module, seq_length=d.seq_length,
                                 tag_names=inputs.data.tag_names)
            metadata = {
                "task": "ner", "tag_names": inputs.data.tag_names,
                "entity_types": inputs.data.splits.entity_types, "seq_length": d.seq_length,
                "hub_handle": self.cfg.model.hub_handle,
                "preprocessor": inputs.preprocessor_handle}
            card = self._card(inputs, scores, details=FORMAT.describe(metadata))
            out.paths["exported"] = export_ner(serving, self.layout.export, metadata=metadata,
                                               card=card.render())
        return out

    def _card(self, inputs: NerInputs, scores: dict, *,
              details: dict[str, str]) -> ModelCard:
        s, d, m = inputs.data.splits, self.cfg.data, self.cfg.model
        demo = d.train_files.strip() == "demo"
        examples = {k: v for k, v in inputs.data.sentences.items() if v}
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
                         cfg=self.cfg, examples=examples, files=files, details=details,
                         labels=s.tag_names,
                         metrics=scores,
                         best=self.layout.best(),
                         usage=usage, limits=limits)
