"""The generator's export: ``TextGenerator`` (the SavedModel's functions: raw prompt strings
in, generated strings out, and the ``score`` signature), the single-device copy it
decodes with, and ``export_generator`` (the SavedModel, ``generator.json`` and the card).

Decoding always runs on a single-device copy of the trained model (``serving_copy``), so
neither the training strategy's distributed variables nor XLA's one-device CPU backend
get in the way of generating text during or after training.
"""

from __future__ import annotations

import json
from pathlib import Path

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp.config import GenerationConfig
from tfapp.data.text import words as text_words
from tfapp.model_card import CARD_FILE
from tfapp.models import decoding, seq2seq
from tfapp.tasks.generator.serving import FORMAT, SETTINGS

import tensorflow as tf

STRING_BATCH = tf.TensorSpec([None], tf.string, name="prompts")
REPETITION = (tf.TensorSpec([], tf.int32, name="no_repeat_ngram_size"),
              tf.TensorSpec([], tf.float32, name="repetition_penalty"))


class TextGenerator(tf.Module):
    """Prompts -> generated continuations, all in TF ops (what the export serves).

    Functions (each also a SavedModel signature, returning ``{"text": [B] strings}``):
      generate(prompts): the settings of ``generation`` (method, temperature, ...).
      greedy(prompts, max_length, no_repeat_ngram_size, repetition_penalty)
      sample(prompts, max_length, temperature, top_k, top_p, seed, no_repeat_ngram_size,
        repetition_penalty): top_k=0 and top_p=1 switch those filters off (plain
        temperature sampling).
      beam_search(prompts, max_length, length_penalty, no_repeat_ngram_size,
        repetition_penalty): ``generation.num_beams`` beams.
    ``max_length`` may not exceed ``generation.max_length`` (the decoding buffer size);
    ``no_repeat_ngram_size`` 0 and ``repetition_penalty`` 1 switch those off.
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
        self.table = text_words.vocabulary_table(vocabulary)
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
            "defaults": {k: getattr(gen, k) for k in SETTINGS}})
        ids = dict(start_id=text_words.START_ID, end_id=text_words.END_ID,
                   pad_id=text_words.PAD_ID,
                   suppress_ids=(text_words.PAD_ID, text_words.UNK_ID, text_words.START_ID))
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
        words = tf.strings.split(text_words.standardize(prompts, self.strip))
        ids = tf.ragged.map_flat_values(self.table.lookup, words)
        return text_words.prompt_encoder_ids(ids, self.context_words, self.keep)

    def detokenize(self, tokens: tf.Tensor) -> tf.Tensor:
        """Generated ids -> one string per row (specials and padding dropped)."""
        words = tf.ragged.boolean_mask(tokens, tokens > text_words.END_ID)
        return tf.strings.reduce_join(tf.gather(self._vocabulary, words), axis=-1,
                                      separator=" ")

    def _run(self, decoder, prompts, limit, temperature=1.0, top_k=0, top_p=1.0,
             length_penalty=0.0, seed=0, no_repeat_ngram_size=0,
             repetition_penalty=1.0) -> dict:
        tokens, _, _ = decoder(self.encode_prompts(prompts), tf.cast(limit, tf.int32),
                               tf.cast(temperature, tf.float32), tf.cast(top_k, tf.int32),
                               tf.cast(top_p, tf.float32), tf.cast(length_penalty, tf.float32),
                               tf.cast(seed, tf.int32), tf.cast(no_repeat_ngram_size, tf.int32),
                               tf.cast(repetition_penalty, tf.float32))
        return {"text": self.detokenize(tokens)}

    # ----------------------------------------------------------------- serving functions

    @tf.function(input_signature=[STRING_BATCH])
    def generate(self, prompts):
        g = self.generation
        repetition = dict(no_repeat_ngram_size=g.no_repeat_ngram_size,
                          repetition_penalty=g.repetition_penalty)
        if g.method == "greedy":
            return self._run(self._greedy, prompts, g.max_length, **repetition)
        if g.method == "beam":
            return self._run(self._beam, prompts, g.max_length, length_penalty=g.length_penalty,
                             **repetition)
        top_k, top_p = decoding.method_filters(g.method, g.top_k, g.top_p)
        return self._run(self._sample, prompts, g.max_length, g.temperature, top_k, top_p,
                         seed=g.seed, **repetition)

    @tf.function(input_signature=[STRING_BATCH, tf.TensorSpec([], tf.int32, name="max_length"),
                                  *REPETITION])
    def greedy(self, prompts, max_length, no_repeat_ngram_size, repetition_penalty):
        return self._run(self._greedy, prompts, max_length,
                         no_repeat_ngram_size=no_repeat_ngram_size,
                         repetition_penalty=repetition_penalty)

    @tf.function(input_signature=[
        STRING_BATCH, tf.TensorSpec([], tf.int32, name="max_length"),
        tf.TensorSpec([], tf.float32, name="temperature"),
        tf.TensorSpec([], tf.int32, name="top_k"), tf.TensorSpec([], tf.float32, name="top_p"),
        tf.TensorSpec([], tf.int32, name="seed"), *REPETITION])
    def sample(self, prompts, max_length, temperature, top_k, top_p, seed,
               no_repeat_ngram_size, repetition_penalty):
        return self._run(self._sample, prompts, max_length, temperature, top_k, top_p,
                         seed=seed, no_repeat_ngram_size=no_repeat_ngram_size,
                         repetition_penalty=repetition_penalty)

    @tf.function(input_signature=[STRING_BATCH, tf.TensorSpec([], tf.int32, name="max_length"),
                                  tf.TensorSpec([], tf.float32, name="length_penalty"),
                                  *REPETITION])
    def beam_search(self, prompts, max_length, length_penalty, no_repeat_ngram_size,
                    repetition_penalty):
        return self._run(self._beam, prompts, max_length, length_penalty=length_penalty,
                         no_repeat_ngram_size=no_repeat_ngram_size,
                         repetition_penalty=repetition_penalty)

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
        return text_words.word_ids(self.table, text_words.standardize(texts, self.strip))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def score_lines(self, texts):
        windows = text_words.continuation_windows(self._ids(texts), self.context_words,
                                                  self.target_words)
        texts = tf.shape(texts, out_type=tf.int64)[0]
        return self._score(windows, texts, lm_windows(windows["line"], texts,
                                                      self.target_words))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sources"),
                                  tf.TensorSpec([None], tf.string, name="targets")])
    def score_pairs(self, sources, targets):
        windows = text_words.pair_windows(self._ids(sources), self._ids(targets),
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
