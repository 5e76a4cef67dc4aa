"""Token classification (NER): a TF-Hub BERT encoder tags each word; entity-level scores."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from tfapp.atomic import write_text
from tfapp.data.examples.ner import (
    NerData,
    count_windows,
    demo_files,
    eval_windows,
    gold_tags,
    load_ner_splits,
    ner_examples,
)
from tfapp.data.input.reader import training_inputs
from tfapp.data.rows.spec import RowSpec
from tfapp.data.text.bert_preprocess import FEATURE_KEYS
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
      data: the splits, tag names and windows per shard file (``load_ner_splits``,
        ``count_windows``).
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


#: the most bytes of an evaluation split's windows ``KeptWindows`` holds in memory
KEEP_WINDOWS_BYTES = 256 << 20


class KeptWindows:
    """The numpy batches of an ``eval_windows`` dataset, read from it once and then kept
    (up to ``limit`` bytes; a larger split is read again each time): a run scores its
    validation windows at every epoch and at the end, and each new iterator of the
    dataset costs seconds (its functions, the tokenizer's among them, are instantiated
    and optimized anew) besides tokenising and windowing every sentence again."""

    def __init__(self, dataset: tf.data.Dataset, limit: int = KEEP_WINDOWS_BYTES):
        self.dataset, self.limit = dataset, limit
        self.batches: list[dict[str, np.ndarray]] | None = None

    def __iter__(self):
        return iter(self.batches) if self.batches is not None else self._first_pass()

    def _first_pass(self):
        kept: list[dict[str, np.ndarray]] | None = []
        size = 0
        for batch in self.dataset.as_numpy_iterator():
            if kept is not None:
                size += sum(v.nbytes for v in batch.values())
                if size <= self.limit:
                    kept.append(batch)
                else:
                    kept = None
            yield batch
        self.batches = kept


def predict_tags(call: Callable, windows: tf.data.Dataset | KeptWindows, tag_names: list[str]
                 ) -> list[list[str]]:
    """The predicted IOB2 tags of every sentence of an ``eval_windows`` dataset (or its
    ``KeptWindows``), in order: ``call`` (a tagger: features -> tag ids) on its windows,
    each word read at its first piece (O for a word without pieces)."""
    window_sentences, window_words, positions, seen = [], [], [], 0
    batches = windows.as_numpy_iterator() if isinstance(windows, tf.data.Dataset) else windows
    for batch in batches:
        predicted = np.asarray(call({k: batch[k] for k in FEATURE_KEYS}))
        rows, cols = np.nonzero(batch["word_index"] >= 0)
        # (window, word in its sentence, predicted tag) of every word's first piece
        positions.append(np.stack([seen + rows, batch["word_index"][rows, cols],
                                   predicted[rows, cols]], 1))
        window_sentences.append(batch["sentence"])
        window_words.append(batch["words"])
        seen += len(batch["sentence"])
    if not window_sentences:
        return []
    sentence_of_window = np.concatenate(window_sentences)
    # Windows of a sentence are consecutive: a new sentence wherever the id changes.
    new = np.r_[True, sentence_of_window[1:] != sentence_of_window[:-1]]
    starts, index_of_window = np.flatnonzero(new), np.cumsum(new) - 1
    words = np.concatenate(window_words)[starts].astype(np.int64)
    offsets = np.r_[0, np.cumsum(words)]
    tags = np.zeros(offsets[-1], np.int64)  # O for words without pieces
    found = np.concatenate(positions)
    tags[offsets[index_of_window[found[:, 0]]] + found[:, 1]] = found[:, 2]
    names = np.array(tag_names)
    return [names[tags[offsets[i]:offsets[i + 1]]].tolist() for i in range(len(words))]


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
        files = dict(zip(("train", "validation", "test"), demo_files(cfg.data), strict=True))
        return {k: v for k, v in files.items() if v}

    @classmethod
    def row_spec(cls, cfg):
        return RowSpec.from_config("tagged", cfg.data)

    @classmethod
    def recompiles_under_xla(cls, cfg, model=None) -> bool:
        return hub_encoder_recompiles(model)  # a restored Hub encoder does (docs/hub.md)

    def build_inputs(self) -> NerInputs:
        d = self.cfg.data
        seed = self.cfg.runtime.seed
        bert = bert_setup(self.cfg)
        preprocess = bert.preprocess
        data = count_windows(load_ner_splits(d, seed, self.layout.labels,
                                             keep_vocab=self.ctx.resuming),
                             preprocess, d.seq_length)
        if data.report.count:
            log.warning("data: %s", data.report.summary())
        log.info("data: %d train / %d validation / %d test sentences, %d tags",
                 data.sentences.get("train", 0), data.sentences.get("validation", 0),
                 data.sentences.get("test", 0), len(data.tag_names))
        inputs = training_inputs(
            lambda split: ner_examples(data, split, preprocess, d.seq_length),
            data.train, data.validation, d, runtime=self.runtime, seed=seed,
            resumed_batches=self.ctx.resumed_batches(),
            steps_per_execution=self.cfg.trainer.steps_per_execution)
        gold = {name: gold_tags(data, getattr(data, name)) for name in ("validation", "test")
                if data.size(getattr(data, name))}
        windows = {name: KeptWindows(eval_windows(data, getattr(data, name), preprocess,
                                                  d.seq_length, inputs.plan.global_batch))
                   for name in gold}
        return NerInputs(**inputs.fields(), data=data, gold=gold, windows=windows,
                         **bert._asdict())

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
                "entity_types": inputs.data.entity_types, "seq_length": d.seq_length,
                "hub_handle": self.cfg.model.hub_handle,
                "preprocessor": inputs.preprocessor_handle}
            card = self._card(inputs, scores, details=FORMAT.describe(metadata))
            out.paths["exported"] = export_ner(serving, self.layout.export, metadata=metadata,
                                               card=card.render())
            out.try_it = self.try_it("predict")
        return out

    def _card(self, inputs: NerInputs, scores: dict, *,
              details: dict[str, str]) -> ModelCard:
        s, d, m = inputs.data, self.cfg.data, self.cfg.model
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
