"""The generator task: text lines/pairs -> Seq2Seq -> a strings-in, strings-out SavedModel.

The driver (``tfapp.training.driver``) runs it like every task. What is specific here:

* ``build_inputs`` adapts the vocabulary on the training split and writes it to
  ``RUN_DIR/vocab.txt``;
* ``callbacks`` add ``TextSamples`` (``samples.py``): after each epoch a few prompts are
  decoded and written to TensorBoard (Text tab, ``RUN_DIR/logs/samples``);
* ``finish`` scores the test split and exports ``RUN_DIR/export`` (``export.py``: a
  SavedModel whose functions take raw prompt strings and return generated strings,
  loadable with ``tf.saved_model.load`` and nothing else; ``card.py``: its model card).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp.atomic import write_text
from tfapp.data.examples import generator
from tfapp.data.input.reader import training_inputs
from tfapp.data.input.splits import SplitData
from tfapp.data.text import words
from tfapp.models import seq2seq
from tfapp.tasks.generator.card import generator_card
from tfapp.tasks.generator.export import TextGenerator, export_generator, serving_copy
from tfapp.tasks.generator.samples import TextSamples
from tfapp.tasks.generator.scores import SUMMARY, format_generator_report
from tfapp.tasks.generator.serving import FORMAT, score_split
from tfapp.training.task import Inputs, Task, TaskOutput
from tfapp.training.tb_logging import log_scalars

import tensorflow as tf

log = logging.getLogger("tfapp")

@dataclass
class GeneratorInputs(Inputs):
    """The generator's inputs and what its model and export need.

    Attributes:
      vocabulary: the adapted word vocabulary (also RUN_DIR/vocab.txt).
      sample_prompts: prompts decoded after each epoch and at the end.
      test: the test split, if any.
      serving: the run's one ``TextGenerator`` (the epoch samples' and the export's), made
        on first use (``GeneratorTask.generator_for``): a new one would trace and compile
        its decoders again (seconds each) for the same graph. It lives with the inputs,
        which every later step is handed, so the task itself keeps no state.
    """

    vocabulary: list[str] = field(default_factory=list)
    sample_prompts: list[str] = field(default_factory=list)
    test: SplitData | None = None
    serving: TextGenerator | None = None


class GeneratorTask(Task):
    """Seq2seq text generation (``task: generator``, ``model.kind: seq2seq``)."""

    @classmethod
    def input_files(cls, cfg) -> dict[str, str]:
        files = zip(("train", "validation", "test"), generator.demo_files(cfg.data),
                    strict=True)
        return {k: v for k, v in files if v}

    @classmethod
    def row_spec(cls, cfg):
        return generator.generator_rows(cfg.data)

    def build_inputs(self) -> GeneratorInputs:
        d, seed = self.cfg.data, self.cfg.runtime.seed
        data = generator.build_generator_data(d, seed=seed, vocab_path=self.layout.vocab,
                                              keep_vocab=self.ctx.resuming)
        words.save_vocabulary(data.vocabulary, self.layout.vocab)
        inputs = training_inputs(
            lambda split: generator.generator_examples(data, split, d), data.train,
            data.validation, d, runtime=self.runtime, seed=seed,
            resumed_batches=self.ctx.resumed_batches(),
            steps_per_execution=self.cfg.trainer.steps_per_execution)
        return GeneratorInputs(
            **inputs.fields(), vocabulary=data.vocabulary, sample_prompts=data.sample_prompts,
            test=data.test if data.size(data.test) else None)

    def build_model(self, inputs: GeneratorInputs) -> seq2seq.Seq2Seq:
        # The fused LSTM recompiles every step under XLA; unfused cells do not.
        model = seq2seq.build_seq2seq(self.cfg.model, len(inputs.vocabulary),
                                      fused_lstm=not self.ctx.jit_compile,
                                      continuation=self.cfg.data.example_shape != "pairs")
        return model.build_for(self.cfg.data.context_words, self.cfg.data.target_words)

    def build_losses(self, inputs: GeneratorInputs) -> tf.keras.losses.Loss:
        return seq2seq.MaskedSequenceLoss()

    def build_metrics(self, inputs: GeneratorInputs) -> list:
        return [seq2seq.MaskedTokenAccuracy(), seq2seq.Perplexity()]

    def callbacks(self, model: Any, inputs: GeneratorInputs) -> list:
        if not self.runtime.is_chief:
            return []
        log_dir = self.layout.task_logs("samples") if self.cfg.tracking.tensorboard else None
        return [TextSamples(inputs.sample_prompts,
                            lambda m: self.generator_for(m, inputs),
                            log_dir)]

    def finish(self, model: Any, inputs: GeneratorInputs, history: dict) -> TaskOutput:
        generator = self.generator_for(model, inputs)
        texts = generator.generate(tf.constant(inputs.sample_prompts))["text"].numpy()
        out = TaskOutput(paths={"vocab": self.layout.vocab})
        out.lines = [f"sample ({self.cfg.generation.method}): "
                     f"{(p + ' ' + t.decode('utf-8')).strip()}"
                     for p, t in zip(inputs.sample_prompts, texts, strict=True)]
        test = self._test_report(model, generator, inputs, out) if inputs.test else None
        if self.cfg.trainer.export:
            card = generator_card(self.cfg, self.layout, inputs,
                                  details=FORMAT.describe(json.loads(generator.meta_json)),
                                  test=test)
            out.paths["exported"] = export_generator(generator, self.layout.export,
                                                     card=card.render())
            out.try_it = self.try_it("generate")
        return out

    def _test_report(self, model: Any, generator: TextGenerator, inputs: GeneratorInputs,
                     out: TaskOutput) -> dict:
        """The test split scored by the export's own ``score`` function (what ``evaluate``
        calls on an export): ``test_report.json``, the printed lines and ``test_*``; the
        report."""
        report = score_split(generator.score, inputs.test, self.cfg.data).report()
        out.paths["test_report"] = write_text(self.layout.test_report,
                                              json.dumps(report, indent=1))
        out.lines += ["test report:", format_generator_report(report)]
        scores = {k: report[k] for k in SUMMARY}
        out.metrics.update({f"test_{k}": v for k, v in scores.items()})
        if self.cfg.tracking.tensorboard and self.runtime.is_chief:
            log_scalars(self.layout.task_logs("test"),
                        int(model.optimizer.iterations.numpy()), scores)
        return report

    # ----------------------------------------------------------------- helpers

    def generator_for(self, model: Any, inputs: GeneratorInputs) -> TextGenerator:
        """``inputs.serving`` over a single-device copy of ``model``'s current weights:
        made on the first call, its copy refreshed on each later one."""
        d = self.cfg.data
        if inputs.serving is not None:
            serving_copy(model, d.context_words, d.target_words, source=inputs.serving.model)
            return inputs.serving
        # XLA's CPU backend binds to one device, and the copy lives on the default one.
        copy = serving_copy(model, d.context_words, d.target_words)
        inputs.serving = TextGenerator(
            copy, inputs.vocabulary, context_words=d.context_words,
            keep="first" if d.example_shape == "pairs" else "last",
            strip_punctuation=d.strip_punctuation, generation=self.cfg.generation,
            target_words=d.target_words)
        return inputs.serving
