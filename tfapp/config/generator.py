"""The generator's config: a seq2seq model that writes text, and how it writes it."""

from __future__ import annotations

from dataclasses import dataclass, field

from tfapp.config.base import ExperimentConfig, SupervisedTrainerConfig
from tfapp.config.data_model import (
    DataConfig,
    EmbeddingModelConfig,
    HeldOutDataConfig,
    LengthBucketsConfig,
    ModelConfig,
    StoredDataConfig,
    TextDataConfig,
)
from tfapp.config.fields import FREE, MATCH, NEVER, bounded, choices, setting


@dataclass
class GeneratorDataConfig(StoredDataConfig, LengthBucketsConfig, TextDataConfig,
                          HeldOutDataConfig, DataConfig):
    """Input files and the tf.data pipeline of the generator.

    Attributes:
      drop_regex: generator corpus filter: drop lines matching this Python regular expression
        ("" keeps all), e.g. "^(chapter|contents)\\b" for headings.
      strip_punctuation: generator: remove punctuation (apostrophes inside words stay) from
        corpus lines and prompts; lowercasing always applies.
      vocab_size: generator: most frequent words kept by TextVectorization, including the
        padding, [UNK], [START] and [END] tokens; rarer words become [UNK].
      example_shape: generator examples: continuation (the last context_words words of a line
        -> its next target_words words) or pairs (source_column -> target_column rows of a
        TSV/JSONL file).
      context_words: generator encoder length: context words per example, [START] included
        (pairs: source tokens kept).
      target_words: generator decoder length: target words per example, [END] included
        (pairs: target tokens kept).
      source_column: generator pairs: column (TSV header or JSONL key) holding the source text.
      target_column: generator pairs: column holding the target text.
      length_buckets: generator: batches grouped by target length, decoder inputs and
        labels cut to the bucket (up to target_words); 0 or 1 (the default) pads every
        batch to target_words. Off by default: it saved only 8-9% of a step's CPU time
        (a window's context is always full), and one of three demo seeds stalled with it
        (docs/generator.md).
    """

    drop_regex: str = setting("", resume=MATCH)
    strip_punctuation: bool = setting(True, resume=MATCH)
    vocab_size: int = bounded(5000, min=8, resume=MATCH)
    example_shape: str = choices("continuation", "pairs", default="continuation", resume=MATCH)
    context_words: int = bounded(8, min=1, max=1024, resume=MATCH)
    target_words: int = bounded(12, min=1, max=1024, resume=MATCH)
    source_column: str = setting("source", resume=MATCH)
    target_column: str = setting("target", resume=MATCH)
    length_buckets: int = bounded(0, min=0, max=64, resume=MATCH)


@dataclass
class GeneratorModelConfig(EmbeddingModelConfig, ModelConfig):
    """The generator network: an LSTM encoder-decoder with attention.

    Attributes:
      kind: seq2seq (the generator's encoder-decoder).
      attention: seq2seq attention: bahdanau (additive) or luong (dot).
      tie_embeddings: seq2seq: the output layer reuses the word embedding matrix (logits =
        hidden . embedding^T + bias), as in tied-embedding language models.
      lm_loss: seq2seq continuation: weigh each target token by 1 / (the windows that hold
        it), so a pass counts each token of a line once, as the LM perplexity does.
    """

    kind: str = choices("seq2seq", default="seq2seq", resume=NEVER)
    attention: str = choices("bahdanau", "luong", default="bahdanau", resume=MATCH)
    tie_embeddings: bool = setting(False, resume=NEVER)
    lm_loss: bool = setting(False, resume=MATCH)


@dataclass
class GenerationConfig:
    """How the generator writes text (training samples, export defaults, the generate CLI).

    Attributes:
      method: greedy (argmax), sample (temperature sampling), top_k, top_p (nucleus) or beam.
      temperature: divides the logits before sampling (sample, top_k, top_p); < 1 is safer.
      top_k: top_k method: sample among the k most likely words.
      top_p: top_p method: sample among the most likely words whose probabilities sum to p.
      num_beams: beam method: hypotheses kept per prompt (fixed in the exported beam_search).
      length_penalty: beam method: GNMT length-normalisation exponent alpha (0 = raw
        log-probability; larger favours longer texts).
      max_length: most words generated per prompt ([END] stops earlier); also the longest
        request the export accepts.
      seed: seed of the stateless random ops used by sampling (same seed -> same text).
      no_repeat_ngram_size: every method: a word that would complete an n-gram of this many
        words the continuation already holds is never chosen (Hugging Face's
        no_repeat_ngram_size; the prompt does not count; 0 = off).
      repetition_penalty: every method: a word the continuation already holds has its
        positive logit divided by this and its negative one multiplied (Hugging Face's
        repetition_penalty, CTRL's 1.2; beam search: its log-probability; 1 = off).
    """

    method: str = choices("greedy", "sample", "top_k", "top_p", "beam", default="top_k",
                          resume=MATCH)
    temperature: float = bounded(0.8, gt=0.0, resume=MATCH)
    top_k: int = bounded(5, min=1, resume=MATCH)
    top_p: float = bounded(0.9, gt=0.0, max=1.0, resume=MATCH)
    num_beams: int = bounded(4, min=1, max=64, resume=MATCH)
    length_penalty: float = bounded(0.6, min=0.0, resume=MATCH)
    max_length: int = bounded(30, min=1, max=1024, resume=MATCH)
    seed: int = setting(0, resume=MATCH)
    # Decoding only: nothing trained depends on them, so a resume may change them.
    no_repeat_ngram_size: int = bounded(3, min=0, max=1024, resume=FREE)
    repetition_penalty: float = bounded(1.0, gt=0.0, resume=FREE)


@dataclass
class GeneratorConfig(ExperimentConfig):
    """A text generator run (task=generator).

    Attributes:
      generation: how the generator writes text.
    """

    task: str = setting("generator", resume=NEVER)
    data: GeneratorDataConfig = field(default_factory=GeneratorDataConfig)
    model: GeneratorModelConfig = field(default_factory=GeneratorModelConfig)
    trainer: SupervisedTrainerConfig = field(default_factory=SupervisedTrainerConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
