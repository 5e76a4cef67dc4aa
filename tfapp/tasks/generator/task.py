"""The generator task: text lines/pairs -> Seq2Seq -> a strings-in, strings-out SavedModel.

The driver (``tfapp.training.driver``) runs it like every task. What is specific here:

* ``build_inputs`` adapts the vocabulary on the training split and writes it to
  ``RUN_DIR/vocab.txt``;
* ``callbacks`` add ``TextSamples``: after each epoch a few prompts are decoded and written
  to TensorBoard (Text tab, ``RUN_DIR/logs/samples``);
* ``finish`` exports ``RUN_DIR/export``: a SavedModel whose functions take raw prompt
  strings and return generated strings (standardization, vocabulary and the XLA-compiled
  decoding loop inside), loadable with ``tf.saved_model.load`` and nothing else.

Decoding always runs on a single-device copy of the trained model (``serving_copy``), so
neither the training strategy's distributed variables nor XLA's one-device CPU backend
get in the way of generating text during or after training.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp.atomic import write_text
from tfapp.config import GenerationConfig
from tfapp.data import text_lines
from tfapp.data.pipeline import distribute
from tfapp.data.splits import SplitData
from tfapp.data.stream import plan_steps
from tfapp.model_card import CARD_FILE, ModelCard, vocabulary_scripts
from tfapp.models import decoding, seq2seq
from tfapp.tasks.generator.scores import SUMMARY, format_generator_report, generator_report
from tfapp.tasks.generator.serving import FORMAT, score_in_batches
from tfapp.training.callbacks import history_row
from tfapp.training.task import Inputs, Task, TaskOutput
from tfapp.training.tb_logging import log_scalars

import tensorflow as tf

log = logging.getLogger("tfapp")

STRING_BATCH = tf.TensorSpec([None], tf.string, name="prompts")


class TextGenerator(tf.Module):
    """Prompts -> generated continuations, all in TF ops (what the export serves).

    Functions (each also a SavedModel signature, returning ``{"text": [B] strings}``):
      generate(prompts): the settings of ``generation`` (method, temperature, ...).
      greedy(prompts, max_length)
      sample(prompts, max_length, temperature, top_k, top_p, seed): top_k=0 and top_p=1
        switch those filters off (plain temperature sampling).
      beam_search(prompts, max_length, length_penalty): ``generation.num_beams`` beams.
    ``max_length`` may not exceed ``generation.max_length`` (the decoding buffer size).
    And, given ``target_words``, the ``score`` signature (``score_lines(texts)`` for
    continuation, ``score_pairs(sources, targets)`` for pairs): the examples training
    made of each text, scored by teacher forcing; per text the sums ``cross_entropy``,
    ``tokens``, ``correct`` (argmax right) and ``examples``, and ``lm_cross_entropy`` and
    ``lm_tokens`` of the windows that score each token once (``lm_windows``), float32
    ``[B]``, from which the test report's LM perplexity, window perplexity and token
    accuracy come (``tfapp.tasks.generator.scores``).
    """

    def __init__(self, model: seq2seq.Seq2Seq, vocabulary: list[str], *, context_words: int,
                 keep: str = "last", strip_punctuation: bool = True,
                 generation: GenerationConfig | None = None,
                 jit_compile: bool | None = None, target_words: int | None = None):
        super().__init__(name="text_generator")
        gen = generation or GenerationConfig()
        # Only the variables are tracked (what the SavedModel must hold); tracking the Keras
        # model itself would make saving trace every layer for Keras metadata (~20 s).
        self._model = lambda: model
        self.model_variables = list(model.variables)
        # The vectorizer: the adapted vocabulary as a lookup table (word -> id, else [UNK]).
        self.table = text_lines.vocabulary_table(vocabulary)
        self._vocabulary = tf.constant(vocabulary)
        self.context_words, self.keep, self.strip = context_words, keep, strip_punctuation
        self.target_words = target_words
        self.generation = gen
        self.max_length = gen.max_length
        # JSON, not a dict attribute: tf.Module would try to track a dict's contents.
        self.meta_json = json.dumps({
            "max_length": gen.max_length, "num_beams": gen.num_beams,
            "context_words": context_words, "keep": keep, "strip_punctuation": strip_punctuation,
            "example_shape": "pairs" if keep == "first" else "continuation",
            "target_words": target_words,
            "defaults": {k: getattr(gen, k) for k in ("method", "temperature", "top_k", "top_p",
                                                      "num_beams", "length_penalty",
                                                      "max_length", "seed")}})
        ids = dict(start_id=text_lines.START_ID, end_id=text_lines.END_ID,
                   pad_id=text_lines.PAD_ID,
                   suppress_ids=(text_lines.PAD_ID, text_lines.UNK_ID, text_lines.START_ID))
        # jit_compile None: XLA where the host has it (the TPU build does not).
        common = dict(max_length=gen.max_length, jit_compile=jit_compile, **ids)
        self._greedy = decoding.make_decoder(model, method="greedy", **common)
        self._sample = decoding.make_decoder(model, method="sample", **common)
        self._beam = decoding.make_decoder(model, method="beam", num_beams=gen.num_beams,
                                           **common)

    # ----------------------------------------------------------------- strings <-> ids

    @property
    def model(self) -> seq2seq.Seq2Seq:
        return self._model()

    def encode_prompts(self, prompts: tf.Tensor) -> tf.Tensor:
        """Raw prompts [B] -> encoder ids [B, context_words], as the training windows."""
        words = tf.strings.split(text_lines.standardize(prompts, self.strip))
        ids = tf.ragged.map_flat_values(self.table.lookup, words)
        return text_lines.prompt_encoder_ids(ids, self.context_words, self.keep)

    def detokenize(self, tokens: tf.Tensor) -> tf.Tensor:
        """Generated ids -> one string per row (specials and padding dropped)."""
        words = tf.ragged.boolean_mask(tokens, tokens > text_lines.END_ID)
        return tf.strings.reduce_join(tf.gather(self._vocabulary, words), axis=-1,
                                      separator=" ")

    def _run(self, decoder, prompts, limit, temperature=1.0, top_k=0, top_p=1.0,
             length_penalty=0.0, seed=0) -> dict:
        tokens, _, _ = decoder(self.encode_prompts(prompts), tf.cast(limit, tf.int32),
                               tf.cast(temperature, tf.float32), tf.cast(top_k, tf.int32),
                               tf.cast(top_p, tf.float32), tf.cast(length_penalty, tf.float32),
                               tf.cast(seed, tf.int32))
        return {"text": self.detokenize(tokens)}

    # ----------------------------------------------------------------- serving functions

    @tf.function(input_signature=[STRING_BATCH])
    def generate(self, prompts):
        g = self.generation
        if g.method == "greedy":
            return self._run(self._greedy, prompts, g.max_length)
        if g.method == "beam":
            return self._run(self._beam, prompts, g.max_length, length_penalty=g.length_penalty)
        top_k, top_p = decoding.method_filters(g.method, g.top_k, g.top_p)
        return self._run(self._sample, prompts, g.max_length, g.temperature, top_k, top_p,
                         seed=g.seed)

    @tf.function(input_signature=[STRING_BATCH, tf.TensorSpec([], tf.int32, name="max_length")])
    def greedy(self, prompts, max_length):
        return self._run(self._greedy, prompts, max_length)

    @tf.function(input_signature=[
        STRING_BATCH, tf.TensorSpec([], tf.int32, name="max_length"),
        tf.TensorSpec([], tf.float32, name="temperature"),
        tf.TensorSpec([], tf.int32, name="top_k"), tf.TensorSpec([], tf.float32, name="top_p"),
        tf.TensorSpec([], tf.int32, name="seed")])
    def sample(self, prompts, max_length, temperature, top_k, top_p, seed):
        return self._run(self._sample, prompts, max_length, temperature, top_k, top_p,
                         seed=seed)

    @tf.function(input_signature=[STRING_BATCH, tf.TensorSpec([], tf.int32, name="max_length"),
                                  tf.TensorSpec([], tf.float32, name="length_penalty")])
    def beam_search(self, prompts, max_length, length_penalty):
        return self._run(self._beam, prompts, max_length, length_penalty=length_penalty)

    def _score(self, windows: dict, texts: tf.Tensor, lm: tf.Tensor) -> dict:
        """Per-text sums of the token scores of ``windows`` (of ``texts`` texts); the
        ``lm_*`` sums count only the windows where ``lm`` [W] is 1 (float32)."""
        logits = self.model({"encoder_ids": windows["encoder_ids"],
                             "decoder_ids": windows["decoder_ids"]}, training=False)
        losses, mask, right = seq2seq.token_scores(windows["labels"], logits)
        per_example = {"cross_entropy": tf.reduce_sum(losses, axis=1),
                       "tokens": tf.reduce_sum(mask, axis=1),
                       "correct": tf.reduce_sum(right, axis=1),
                       "examples": tf.ones_like(mask[:, 0])}
        per_example["lm_cross_entropy"] = per_example["cross_entropy"] * lm
        per_example["lm_tokens"] = per_example["tokens"] * lm
        return {name: tf.math.unsorted_segment_sum(x, windows["line"], texts)
                for name, x in per_example.items()}

    def _ids(self, texts: tf.Tensor) -> tf.RaggedTensor:
        return text_lines.word_ids(self.table, text_lines.standardize(texts, self.strip))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def score_lines(self, texts):
        windows = text_lines.continuation_windows(self._ids(texts), self.context_words,
                                                  self.target_words)
        texts = tf.shape(texts, out_type=tf.int64)[0]
        return self._score(windows, texts, lm_windows(windows["line"], texts,
                                                      self.target_words))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sources"),
                                  tf.TensorSpec([None], tf.string, name="targets")])
    def score_pairs(self, sources, targets):
        windows = text_lines.pair_windows(self._ids(sources), self._ids(targets),
                                          self.context_words, self.target_words)
        # One window a pair: each target token is scored once already.
        return self._score(windows, tf.shape(sources, out_type=tf.int64)[0],
                           tf.ones_like(windows["line"], tf.float32))

    @property
    def score(self):
        """The scoring function of this generator's example shape."""
        return self.score_pairs if self.keep == "first" else self.score_lines

    def signatures(self) -> dict:
        out = {"serving_default": self.generate, "generate": self.generate,
               "greedy": self.greedy, "sample": self.sample, "beam_search": self.beam_search}
        if self.target_words is not None:
            out["score"] = self.score
        return out


def lm_windows(line: tf.Tensor, texts: tf.Tensor, target_words: int) -> tf.Tensor:
    """Which continuation windows (``line`` [W], in line order, every position of each of
    ``texts`` lines) score each token of a line once: float32 [W], 1 at the windows at
    positions 0, ``target_words``, ``2 * target_words``, ... of their line, whose targets
    are the consecutive ``target_words``-token chunks of ``line + [END]``."""
    index = tf.range(tf.size(line, out_type=tf.int64))
    first = tf.math.unsorted_segment_min(index, line, texts)
    position = index - tf.gather(first, line)
    return tf.cast(tf.equal(position % target_words, 0), tf.float32)


def serving_copy(model: seq2seq.Seq2Seq, context_words: int, target_words: int,
                 source: seq2seq.Seq2Seq | None = None) -> seq2seq.Seq2Seq:
    """A single-device ``Seq2Seq`` with ``model``'s weights (built outside any strategy)."""
    # Unfused LSTMs: the decoding loop runs under XLA (see seq2seq._lstm).
    copy = source or seq2seq.Seq2Seq(**{**model.get_config(), "fused_lstm": False},
                                     name="seq2seq")
    if source is None:
        copy.build_for(context_words, target_words)
    copy.set_weights(model.get_weights())
    return copy


def export_generator(generator: TextGenerator, path: str | Path, *, card: str = "") -> Path:
    """Write the SavedModel (all signatures), ``generator.json`` (its settings) and the
    model card (``README.md``), atomically."""
    return FORMAT.write(generator, path, signatures=generator.signatures(),
                        metadata=json.loads(generator.meta_json),
                        files={CARD_FILE: card} if card else None)


class TextSamples(tf.keras.callbacks.Callback):
    """After each epoch: decode ``prompts`` and write them to TensorBoard's Text tab."""

    def __init__(self, prompts: list[str], make_generator, log_dir: str | Path | None):
        super().__init__()
        self.prompts = prompts
        self.make_generator = make_generator  # model -> TextGenerator at its weights
        self.log_dir = log_dir
        self._writer = None
        self.last: list[str] = []

    def on_train_begin(self, logs=None):
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and int(optimizer.iterations.numpy()) == 0:  # not resumed
            # Step 0: the untrained model's text, to compare every epoch against.
            self.on_epoch_end(-1)

    def on_epoch_end(self, epoch, logs=None):
        generator = self.make_generator(self.model)
        texts = generator.greedy(tf.constant(self.prompts),
                                 tf.constant(generator.max_length))["text"]
        self.last = [t.decode("utf-8") for t in texts.numpy()]
        rows = ["| prompt | greedy continuation |", "|---|---|"]
        rows += [f"| {p or '(empty)'} | {t} |" for p, t in zip(self.prompts, self.last,
                                                               strict=True)]
        log.info("epoch %d samples: %s", epoch + 1,
                 " / ".join(f"{p!r} -> {t!r}" for p, t in zip(self.prompts, self.last,
                                                              strict=True)))
        if self.log_dir is not None:
            if self._writer is None:
                self._writer = tf.summary.create_file_writer(str(self.log_dir))
            with self._writer.as_default():
                tf.summary.text("generated_text", "\n".join(rows), step=epoch + 1)
            self._writer.flush()


@dataclass
class GeneratorInputs(Inputs):
    """The generator's inputs and what its model and export need.

    Attributes:
      vocabulary: the adapted word vocabulary (also RUN_DIR/vocab.txt).
      sample_prompts: prompts decoded after each epoch and at the end.
    """

    vocabulary: list[str] = field(default_factory=list)
    sample_prompts: list[str] = field(default_factory=list)
    test: SplitData | None = None


class GeneratorTask(Task):
    """Seq2seq text generation (``task: generator``, ``model.kind: seq2seq``)."""

    #: the TextGenerator the epoch samples decode with; the export reuses it (refreshed)
    _generator: TextGenerator | None = None

    @classmethod
    def input_files(cls, cfg) -> dict[str, str]:
        files = zip(("train", "validation", "test"), text_lines.resolve_demo(cfg.data),
                    strict=True)
        return {k: v for k, v in files if v}

    @classmethod
    def row_spec(cls, cfg):
        return text_lines.generator_rows(cfg.data)

    def build_inputs(self) -> GeneratorInputs:
        d, rt, seed = self.cfg.data, self.runtime, self.cfg.runtime.seed
        data = text_lines.build_generator_data(d, seed=seed, vocab_path=self.layout.vocab,
                                               keep_vocab=self.ctx.resuming)
        text_lines.save_vocabulary(data.vocabulary, self.layout.vocab)
        plan = plan_steps(data.source(data.splits.train),
                          global_batch=rt.global_batch_size(d.batch_size),
                          pipelines=rt.input_pipelines, seed=seed,
                          resumed_batches=self.ctx.resumed_batches())

        def dataset(split, training):
            return distribute(rt.strategy, lambda input_context: (
                text_lines.make_generator_dataset(
                    data, split, d, batch_size=plan.global_batch, training=training,
                    seed=seed, input_context=input_context, start=plan.start)))

        validation = data.splits.validation if data.size(data.splits.validation) else None
        n_val = data.size(validation)
        return GeneratorInputs(
            train=dataset(data.splits.train, True),
            validation=dataset(validation, False) if validation is not None else None,
            num_train_examples=data.size(data.splits.train), batches_per_pass=plan.steps,
            num_validation_examples=n_val,
            validation_steps=plan.eval_steps(n_val),
            vocabulary=data.vocabulary, sample_prompts=data.sample_prompts,
            test=data.splits.test if data.size(data.splits.test) else None)

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
                            lambda m: self._generator_for(m, inputs),
                            log_dir)]

    def finish(self, model: Any, inputs: GeneratorInputs, history: dict) -> TaskOutput:
        generator = self._generator_for(model, inputs)
        texts = generator.generate(tf.constant(inputs.sample_prompts))["text"].numpy()
        out = TaskOutput(paths={"vocab": self.layout.vocab})
        out.lines = [f"sample ({self.cfg.generation.method}): "
                     f"{(p + ' ' + t.decode('utf-8')).strip()}"
                     for p, t in zip(inputs.sample_prompts, texts, strict=True)]
        test = self._test_report(model, generator, inputs, out) if inputs.test else None
        if self.cfg.trainer.export:
            card = self._card(inputs, details=FORMAT.describe(json.loads(generator.meta_json)),
                              test=test)
            out.paths["exported"] = export_generator(generator, self.layout.export,
                                                     card=card.render())
        return out

    def _test_report(self, model: Any, generator: TextGenerator, inputs: GeneratorInputs,
                     out: TaskOutput) -> dict:
        """The test split scored by the export's own ``score`` function (what ``evaluate``
        calls on an export): ``test_report.json``, the printed lines and ``test_*``; the
        report."""
        texts, targets = text_lines.split_texts(inputs.test, self.cfg.data)
        report = generator_report(score_in_batches(generator.score, texts, targets))
        out.paths["test_report"] = write_text(self.layout.test_report,
                                              json.dumps(report, indent=1))
        out.lines += ["test report:", format_generator_report(report)]
        scores = {k: report[k] for k in SUMMARY}
        out.metrics.update({f"test_{k}": v for k, v in scores.items()})
        if self.cfg.tracking.tensorboard and self.runtime.is_chief:
            log_scalars(self.layout.task_logs("test"),
                        int(model.optimizer.iterations.numpy()), scores)
        return report

    def _card(self, inputs: GeneratorInputs, *, details: dict[str, str],
              test: dict | None = None) -> ModelCard:
        d, m, g = self.cfg.data, self.cfg.model, self.cfg.generation
        best = self.layout.best()
        row = history_row(self.layout.history, best["epoch"]) if best else {}
        metrics = {split: {k.removeprefix("val_"): v for k, v in row.items()
                           if k.startswith("val_") == (split == "validation")}
                   for split in ("train", "validation")} if row else {}
        if test:
            metrics["test"] = {k: test[k] for k in SUMMARY}
        examples = {"train": inputs.num_train_examples}
        if inputs.num_validation_examples:
            examples["validation"] = inputs.num_validation_examples
        if test:
            examples["test"] = test["examples"]
        demo = d.train_files.strip() == "demo"
        files = {"train": "the demo corpus shipped with tfapp" if demo else f"`{d.train_files}`",
                 "validation": f"`{d.validation_files}`" if d.validation_files
                 else f"{d.validation_split:g} of train (seeded)"}
        if test:
            files["test"] = (f"`{d.test_files}`" if d.test_files
                             else f"{d.test_split:g} of train (seeded)")
        usage = "\n".join([
            "```bash", 'python -m tfapp.generate --model PATH_TO_THIS_FOLDER "a prompt"', "```",
            "", "```python", "import tensorflow as tf", "",
            'model = tf.saved_model.load("PATH_TO_THIS_FOLDER")',
            'out = model.generate(tf.constant(["a prompt"]))  # also greedy, sample, '
            "beam_search", 'out["text"]  # [n] continuations', "```"])
        limits = [f"Reads the last {d.context_words} words of a prompt; writes at most "
                  f"{g.max_length} words (generation.max_length; greedy/sample/beam_search "
                  "take their own).",
                  f"Vocabulary: the {len(inputs.vocabulary)} most frequent training words "
                  f"(scripts: {vocabulary_scripts(inputs.vocabulary)}); other words read "
                  "as unknown.",
                  f"A {m.kind} model of {m.units} units trained on {inputs.num_train_examples} "
                  "examples: it continues text in the style of its corpus, it does not "
                  "know facts."]
        if test:
            limits.append("Metrics: test `lm_perplexity` scores each test token once, from the "
                          f"left context the model reads ({d.context_words} words, then its "
                          "own target so far), `[END]` counted and unknown words as `[UNK]`: "
                          "comparable with an n-gram model's perplexity over the same "
                          "vocabulary. `perplexity` is the window perplexity (Keras's "
                          "`val_perplexity`: a token counted once in each training window "
                          "that holds it).")
        return ModelCard(title=f"Text generator ({m.kind})", cfg=self.cfg, examples=examples,
                         files=files, details=details, metrics=metrics, best=best, usage=usage,
                         limits=limits)

    # ----------------------------------------------------------------- helpers

    def _generator_for(self, model: Any, inputs: GeneratorInputs) -> TextGenerator:
        """A TextGenerator over a single-device copy of ``model``'s current weights: one
        per run (the epoch samples' and the export's), its copy refreshed on each later
        call, since a new one would trace and compile its decoders again (seconds each)
        for the same graph."""
        d = self.cfg.data
        if self._generator is not None:
            serving_copy(model, d.context_words, d.target_words, source=self._generator.model)
            return self._generator
        # XLA's CPU backend binds to one device, and the copy lives on the default one.
        copy = serving_copy(model, d.context_words, d.target_words)
        self._generator = TextGenerator(
            copy, inputs.vocabulary, context_words=d.context_words,
            keep="first" if d.example_shape == "pairs" else "last",
            strip_punctuation=d.strip_punctuation, generation=self.cfg.generation,
            target_words=d.target_words)
        return self._generator
