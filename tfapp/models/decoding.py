"""Batched, XLA-compiled decoding for ``Seq2Seq``: greedy, sampling, top-k, top-p, beam.

One ``tf.while_loop`` writes a fixed ``[batch, max_length]`` buffer, carrying the decoder
LSTM's (h, c) as the only cache: each step feeds one token per row through
``model.decode_step``. The three sampling methods share one traced program (temperature,
``top_k`` and ``top_p`` are tensors, so changing them never recompiles); greedy is argmax
in the same loop; beam search runs the loop over ``batch * num_beams`` rows and reorders
rows by their parent beam each step. Rows stop at the end token (then emit padding) and
the loop exits when every row has stopped or at the step limit, which is a tensor, too.

Repetition control, with Hugging Face ``generate``'s meanings: ``repetition_penalty``
(CTRL, Keskar et al. 2019: a word the row has generated has its positive logit divided by
the penalty and its negative one multiplied, once however often it occurred) and
``no_repeat_ngram_size`` n (a word that would complete an n-gram the row has already
generated is banned). Both look at the continuation only, as HF's encoder-decoder models
look at their decoder's own tokens: the prompt (the encoder's input) does not count.
Greedy and sampling apply them to the logits (before temperature, top-k and top-p); beam
search, as HF's, to the log-probabilities that its beam scores add up. Both are tensors:
switching them never recompiles.

Randomness is stateless: step ``i`` samples with seed ``(seed, i)``, so one seed gives
the same text on every run, and rows of a batch still differ. (XLA and plain TensorFlow
implement the stateless sampler differently: a seed reproduces within one mode.)

Designed after TF Model Garden's ``sampling_module.py``/``beam_search.py`` (fixed-size
buffers, finished flags, GNMT length penalty) and keras-hub's samplers (one loop, the
choice of the next token as a pluggable step), reduced to what an LSTM cache needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp.runtime import HOST_XLA, host_xla_available

import tensorflow as tf

NEG_INF = -1e9
METHODS = ("greedy", "sample", "top_k", "top_p", "beam")
# top-k sampling with k up to this draws among tf.math.top_k's k best (XLA needs a static
# k, so it takes this many and masks past the caller's k) instead of sorting the whole
# vocabulary: 0.2x -> ~1x greedy's speed at batch 64 (docs/performance.md).
TOP_K_CAP = 64


@dataclass(frozen=True)
class DecodeOutput:
    """tokens [B, max_length] (end token included, then 0), lengths [B] (tokens written,
    end token included), scores [B] (greedy, sampling: the model's log-probability of the
    tokens; beam: the beam's score, repetition penalty included, length-normalised)."""

    tokens: tf.Tensor
    lengths: tf.Tensor
    scores: tf.Tensor


def filter_logits(logits: tf.Tensor, temperature: tf.Tensor, top_k: tf.Tensor,
                  top_p: tf.Tensor) -> tf.Tensor:
    """Temperature, then keep the ``top_k`` best (0 = all), then the nucleus ``top_p``.

    One descending sort serves both filters; everything outside is set to NEG_INF.
    Ties at the k-th value are all kept (so k=1 can keep two exactly equal logits).
    """
    logits = logits / tf.cast(temperature, logits.dtype)
    vocab = tf.shape(logits)[-1]
    ordered = tf.sort(logits, axis=-1, direction="DESCENDING")
    k = tf.where(top_k > 0, tf.minimum(top_k, vocab), vocab)
    kth = tf.gather(ordered, k - 1, axis=-1)[..., None]
    logits = tf.where(logits < kth, NEG_INF, logits)
    ordered = tf.where(tf.range(vocab) < k, ordered, NEG_INF)
    # Nucleus: the smallest prefix of the sorted words whose probability reaches top_p;
    # a word is kept when the mass before it is still short of top_p (the first always is).
    probs = tf.nn.softmax(ordered, axis=-1)
    before = tf.cumsum(probs, axis=-1, exclusive=True)
    kept = before < tf.cast(top_p, probs.dtype)
    threshold = tf.reduce_min(tf.where(kept, ordered, -NEG_INF), axis=-1, keepdims=True)
    return tf.where(logits < threshold, NEG_INF, logits)


def sample_tokens(logits: tf.Tensor, temperature: tf.Tensor, top_k: tf.Tensor,
                  top_p: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """One token id per row [B] drawn from ``logits`` [B, V] under the filters.

    Plain top-k (``0 < top_k <= TOP_K_CAP``, ``top_p`` 1) draws among the k best of
    ``tf.math.top_k`` (exactly k: a tie at the k-th value keeps the lower id); no filter
    draws from all logits; anything else goes through ``filter_logits``. The choice is a
    ``tf.cond`` on the tensors, so one compiled program still serves every method.
    """
    cap = min(TOP_K_CAP, int(logits.shape[-1]))

    def among_top_k():
        values, ids = tf.math.top_k(logits / tf.cast(temperature, logits.dtype), k=cap)
        values = tf.where(tf.range(cap) < top_k, values, NEG_INF)
        pick = tf.random.stateless_categorical(values, 1, seed, dtype=tf.int32)
        return tf.gather(ids, pick, batch_dims=1)[:, 0]

    def filtered():
        kept = filter_logits(logits, temperature, top_k, top_p)
        return tf.random.stateless_categorical(kept, 1, seed, dtype=tf.int32)[:, 0]

    def unfiltered():
        scaled = logits / tf.cast(temperature, logits.dtype)
        return tf.random.stateless_categorical(scaled, 1, seed, dtype=tf.int32)[:, 0]

    nucleus = top_p < 1.0
    return tf.cond(
        tf.logical_and(tf.logical_not(nucleus), tf.logical_and(top_k > 0, top_k <= cap)),
        among_top_k,
        lambda: tf.cond(tf.logical_or(nucleus, top_k > 0), filtered, unfiltered))


def penalize_repeats(scores: tf.Tensor, seen: tf.Tensor, penalty: tf.Tensor) -> tf.Tensor:
    """Hugging Face's ``RepetitionPenaltyLogitsProcessor``: where ``seen`` [B, V], a
    negative score is multiplied by ``penalty`` and any other divided by it (1 = off)."""
    penalty = tf.cast(penalty, scores.dtype)
    return tf.where(seen, tf.where(scores < 0, scores * penalty, scores / penalty), scores)


def _token_mask(tokens: tf.Tensor, where: tf.Tensor, vocab_size: int) -> tf.Tensor:
    """[B, V] bool: the ids ``tokens`` [B, L] holds at the positions ``where`` [B, L]
    (a scatter: no [B, L, V] one-hot)."""
    rows = tf.broadcast_to(tf.range(tf.shape(tokens)[0])[:, None], tf.shape(tokens))
    hits = tf.scatter_nd(tf.stack([rows, tokens], -1), tf.cast(where, tf.int32),
                         tf.stack([tf.shape(tokens)[0], vocab_size]))
    return hits > 0


def repeat_masks(tokens: tf.Tensor, matches: tf.Tensor, step: tf.Tensor, ngram_size: tf.Tensor,
                 vocab_size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """(seen, banned), each [B, V] bool, before the token of ``step`` is chosen.

    ``tokens`` [B, L]: the tokens of steps ``0 .. step - 1`` (later columns unused).
    ``matches`` [B, L] (``next_matches``): at ``p < step``, how many tokens end at
    ``tokens[:, p - 1]`` ([START] at p = 0) as they end at the last one. seen: the ids
    generated so far. banned (``ngram_size`` n > 0): ``tokens[:, p]`` wherever the
    n - 1 tokens before it equal the last n - 1, i.e. the ids that would complete an
    n-gram a second time (n = 1: every id generated so far), as Hugging Face's
    ``NoRepeatNGramLogitsProcessor``.
    """
    past = tf.range(tf.shape(tokens)[1])[None, :] < step
    seen = _token_mask(tokens, tf.broadcast_to(past, tf.shape(tokens)), vocab_size)
    repeats = past & (ngram_size > 0) & (matches >= ngram_size - 1)
    return seen, _token_mask(tokens, repeats, vocab_size)


def next_matches(matches: tf.Tensor, tokens: tf.Tensor, token: tf.Tensor, step: tf.Tensor,
                 start_id: int) -> tf.Tensor:
    """``matches`` once ``token`` [B] is appended as the token of ``step``.

    The sequence is ``s = [START] + tokens``; at position p, ``matches[:, p]`` is the
    length of the longest common suffix of ``s[:p + 1]`` and ``s`` (p before its last
    position): ``s[p] == token`` extends the match ending at ``p - 1`` by one, anything
    else ends it. O(L) per step, so any n-gram size is a tensor, not a traced constant.
    """
    length = tf.shape(tokens)[1]
    head = tf.concat([tf.fill([tf.shape(tokens)[0], 1], start_id), tokens[:, :-1]], 1)
    before = tf.concat([tf.zeros_like(matches[:, :1]), matches[:, :-1]], 1)
    extend = tf.equal(head, token[:, None]) & (tf.range(length)[None, :] <= step)
    return tf.where(extend, before + 1, 0)


def _write(buffer: tf.Tensor, i: tf.Tensor, column: tf.Tensor) -> tf.Tensor:
    """buffer[:, i] = column, as a select (XLA-friendly, static shapes)."""
    return tf.where(tf.equal(tf.range(tf.shape(buffer)[1]), i)[None, :], column[:, None],
                    buffer)


def _suppression(vocab_size: int, suppress_ids: Sequence[int]) -> tf.Tensor:
    """[V] additive mask: NEG_INF on ids the model must never emit (padding, [START]...)."""
    hot = tf.reduce_sum(tf.one_hot(list(suppress_ids), vocab_size), 0) if suppress_ids else 0.0
    return tf.zeros([vocab_size]) + hot * NEG_INF


def decode(model: Any, encoder_ids: tf.Tensor, *, method: str = "greedy", max_length: int = 30,
           limit: tf.Tensor | int | None = None, temperature: tf.Tensor | float = 1.0,
           top_k: tf.Tensor | int = 0, top_p: tf.Tensor | float = 1.0, num_beams: int = 1,
           length_penalty: tf.Tensor | float = 0.0, seed: tf.Tensor | int = 0,
           no_repeat_ngram_size: tf.Tensor | int = 0,
           repetition_penalty: tf.Tensor | float = 1.0, start_id: int = 2, end_id: int = 3,
           pad_id: int = 0, suppress_ids: Sequence[int] = (0, 1, 2)) -> DecodeOutput:
    """Generate up to ``max_length`` tokens (static; ``limit`` may lower it per call).

    ``model`` provides ``vocab_size``, ``encode(ids)`` and ``decode_step(...)``.
    ``method`` picks the program: greedy, beam (``num_beams``, ``length_penalty``), or
    sampling (sample/top_k/top_p differ only in which filters the caller enables).
    ``suppress_ids`` are never generated (default: padding, [UNK], [START]).
    ``no_repeat_ngram_size`` (0 = off) and ``repetition_penalty`` (1 = off): see the
    module's docstring.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    beam_search = method == "beam"  # even with one beam: then it must equal greedy
    beams = num_beams if beam_search else 1
    vocab = model.vocab_size
    if beams > vocab - len(suppress_ids):
        raise ValueError(f"num_beams={beams} exceeds the {vocab - len(suppress_ids)} "
                         "words the model can generate")
    encoder_ids = tf.convert_to_tensor(encoder_ids, tf.int32)
    limit = tf.minimum(tf.cast(max_length if limit is None else limit, tf.int32), max_length)
    temperature = tf.cast(temperature, tf.float32)
    top_k, top_p = tf.cast(top_k, tf.int32), tf.cast(top_p, tf.float32)
    seed = tf.cast(seed, tf.int32)  # XLA's stateless sampler takes int32 seeds
    ngram_size = tf.cast(no_repeat_ngram_size, tf.int32)
    repetition_penalty = tf.cast(repetition_penalty, tf.float32)
    controlled = tf.logical_or(ngram_size > 0, tf.not_equal(repetition_penalty, 1.0))
    suppress = _suppression(vocab, suppress_ids)

    batch = tf.shape(encoder_ids)[0]
    memory, keys, mask, state = model.encode(encoder_ids, training=False)
    if beam_search:  # every prompt's encoding, repeated once per beam: rows b*K .. b*K+K-1
        memory, keys, mask = (tf.repeat(t, beams, axis=0) for t in (memory, keys, mask))
        state = [tf.repeat(s, beams, axis=0) for s in state]
    rows = batch * beams

    def step_sample(i, logp_all, logits, scores, finished):
        if method == "greedy":
            token = tf.argmax(logits + suppress, axis=-1, output_type=tf.int32)
        else:
            token = sample_tokens(logits + suppress, temperature, top_k, top_p,
                                  tf.stack([seed, i]))
        token_logp = tf.gather(logp_all, token, axis=1, batch_dims=1)
        token = tf.where(finished, pad_id, token)
        scores += tf.where(finished, 0.0, token_logp)
        return token, tf.range(rows), scores

    def step_beam(i, logp_all, logits, scores, finished):
        # A finished beam may only extend itself with padding at no cost, so it keeps its
        # score and one slot; alive beams compete with it on summed log-probability.
        pad_only = tf.where(tf.equal(tf.range(vocab), pad_id), 0.0, NEG_INF)
        logp_all = tf.where(finished[:, None], pad_only[None, :], logp_all)
        candidates = tf.reshape(scores[:, None] + logp_all, [batch, beams * vocab])
        top_scores, flat = tf.math.top_k(candidates, k=beams)
        parent = flat // vocab + tf.range(batch)[:, None] * beams
        return tf.reshape(flat % vocab, [-1]), tf.reshape(parent, [-1]), \
            tf.reshape(top_scores, [-1])

    def control(i, scores, tokens, matches):
        """``scores`` [rows, V] with the repetition penalty and the n-gram bans applied."""
        def apply():
            seen, banned = repeat_masks(tokens, matches, i, ngram_size, vocab)
            return tf.where(banned, NEG_INF, penalize_repeats(scores, seen, repetition_penalty))
        return tf.cond(controlled, apply, lambda: scores)

    def body(i, prev, state, tokens, matches, finished, lengths, scores):
        logits, state = model.decode_step(prev, state, memory, keys, mask)
        logits = tf.cast(logits, tf.float32)
        if beam_search:  # Hugging Face's beam search processes the log-probabilities
            logp_all = control(i, tf.nn.log_softmax(logits + suppress, axis=-1), tokens,
                               matches)
            token, parent, scores = step_beam(i, logp_all, logits, scores, finished)
            state = [tf.gather(s, parent) for s in state]
            tokens, matches, finished, lengths = (
                tf.gather(t, parent) for t in (tokens, matches, finished, lengths))
        else:  # the choice follows the controlled logits, the score the model's own
            logp_all = tf.nn.log_softmax(logits + suppress, axis=-1)
            token, _, scores = step_sample(i, logp_all, control(i, logits, tokens, matches),
                                           scores, finished)
        matches = next_matches(matches, tokens, token, i, start_id)
        tokens = _write(tokens, i, token)
        lengths += tf.cast(tf.logical_not(finished), tf.int32)
        finished = tf.logical_or(finished, tf.equal(token, end_id))
        return i + 1, token, state, tokens, matches, finished, lengths, scores

    def cond(i, prev, state, tokens, matches, finished, lengths, scores):
        return tf.logical_and(i < limit, tf.logical_not(tf.reduce_all(finished)))

    if beam_search:  # all beams start equal: only the first may expand at step 0
        first = tf.concat([tf.zeros([batch, 1]), tf.fill([batch, beams - 1], NEG_INF)], 1)
        scores0 = tf.reshape(first, [-1])
    else:
        scores0 = tf.zeros([rows])
    loop_vars = (tf.constant(0), tf.fill([rows], tf.constant(start_id, tf.int32)), state,
                 tf.zeros([rows, max_length], tf.int32), tf.zeros([rows, max_length], tf.int32),
                 tf.zeros([rows], tf.bool), tf.zeros([rows], tf.int32), scores0)
    _, _, _, tokens, _, _, lengths, scores = tf.while_loop(
        cond, body, loop_vars, maximum_iterations=max_length)

    if beam_search:  # GNMT length penalty ((5 + length) / 6) ** alpha picks each prompt's best
        penalty = tf.pow((5.0 + tf.cast(lengths, tf.float32)) / 6.0,
                         tf.cast(length_penalty, tf.float32))
        normalised = tf.reshape(scores / penalty, [batch, beams])
        best = tf.argmax(normalised, axis=-1, output_type=tf.int32) + tf.range(batch) * beams
        return DecodeOutput(tf.gather(tokens, best), tf.gather(lengths, best),
                            tf.gather(tf.reshape(normalised, [-1]), best))
    return DecodeOutput(tokens, lengths, scores)


def method_filters(method: str, top_k: int, top_p: float) -> tuple[int, float]:
    """The (top_k, top_p) a method uses: sample -> neither, top_k -> k, top_p -> p."""
    if method == "top_k":
        return top_k, 1.0
    if method == "top_p":
        return 0, top_p
    return 0, 1.0


def make_decoder(model: Any, *, method: str, max_length: int, num_beams: int = 1,
                 jit_compile: bool | None = True, **fixed: Any):
    """A ``tf.function`` (XLA with ``jit_compile``) decoding ``encoder_ids`` [B, N].

    ``jit_compile=None``: XLA where the host has it (``runtime.host_xla_available``; the TPU
    build has no XLA for the CPU), in a function named with ``runtime.HOST_XLA``.

    Call it as ``fn(encoder_ids, limit, temperature, top_k, top_p, length_penalty, seed,
    no_repeat_ngram_size, repetition_penalty)`` with scalar tensors; it traces/compiles
    once per batch shape. ``fixed`` passes the special ids (``start_id``, ``end_id``,
    ``suppress_ids``) through to ``decode``.
    """

    def run(encoder_ids, limit, temperature, top_k, top_p, length_penalty, seed,
            no_repeat_ngram_size, repetition_penalty):
        out = decode(model, encoder_ids, method=method, max_length=max_length, limit=limit,
                     temperature=temperature, top_k=top_k, top_p=top_p, num_beams=num_beams,
                     length_penalty=length_penalty, seed=seed,
                     no_repeat_ngram_size=no_repeat_ngram_size,
                     repetition_penalty=repetition_penalty, **fixed)
        return out.tokens, out.lengths, out.scores

    if jit_compile is None:
        jit_compile = host_xla_available()
        run.__name__ = f"{HOST_XLA}_{method}_decode"
    return tf.function(run, jit_compile=jit_compile, reduce_retracing=True)
