"""The generator network: an LSTM encoder-decoder with attention, plus its loss and metrics.

    encoder_ids -> Embedding -> LSTM encoder (optionally bidirectional) -> memory, state
    decoder_ids -> Embedding -> LSTM decoder (initial state = encoder state) -> queries
    queries x memory -> attention (additive/Bahdanau or multiplicative/Luong) -> context
    [query; context] -> Dense(tanh) -> Dense(vocab, float32) -> logits
    (``tie_embeddings``: Dense(tanh) to embedding_dim, logits = that . embedding^T + bias)

Attention reads the decoder LSTM's output (Luong's arrangement, as in the TensorFlow NMT
tutorial) instead of being fed back into the next LSTM input (tfa's AttentionWrapper
"input feeding"). Training then runs the decoder as one LSTM layer over the whole
sequence (fast kernels, cuDNN on GPUs), and decoding steps the same LSTM cell with its
(h, c) state as the only cache. ``encode`` + ``decode_step`` are the decoding interface
(``tfapp.models.decoding``); ``call`` is teacher-forced training.

Ids 0 (padding) and the special tokens follow ``tfapp.data.examples.generator``; this module only
assumes that 0 is padding.
"""

from __future__ import annotations

from typing import Any

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

import tensorflow as tf

NEG_INF = -1e9  # finite "minus infinity": a fully masked row stays NaN-free


class BahdanauAttention(tf.keras.layers.Layer):
    """Additive attention: score(q, k) = v . tanh(W_q q + W_k k)."""

    def __init__(self, units: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.units = units
        self.query_dense = tf.keras.layers.Dense(units, use_bias=False, name="query")
        self.memory_dense = tf.keras.layers.Dense(units, use_bias=False, name="memory")
        self.score_dense = tf.keras.layers.Dense(1, use_bias=False, name="score")

    def keys(self, memory: tf.Tensor) -> tf.Tensor:
        """Memory projection, computed once per prompt and reused at every decoding step."""
        return self.memory_dense(memory)

    def scores(self, query: tf.Tensor, keys: tf.Tensor) -> tf.Tensor:
        q = self.query_dense(query)  # [B, T, A]
        return tf.squeeze(self.score_dense(tf.tanh(q[:, :, None, :] + keys[:, None])), -1)

    def get_config(self) -> dict:
        return {**super().get_config(), "units": self.units}


class LuongAttention(tf.keras.layers.Layer):
    """Multiplicative ("general") attention: score(q, k) = q . W k."""

    def __init__(self, units: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.units = units
        self.memory_dense = tf.keras.layers.Dense(units, use_bias=False, name="memory")

    def keys(self, memory: tf.Tensor) -> tf.Tensor:
        return self.memory_dense(memory)

    def scores(self, query: tf.Tensor, keys: tf.Tensor) -> tf.Tensor:
        return tf.matmul(query, keys, transpose_b=True)  # [B, T, S]

    def get_config(self) -> dict:
        return {**super().get_config(), "units": self.units}


def attend(attention: tf.keras.layers.Layer, query: tf.Tensor, memory: tf.Tensor,
           keys: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """Context vectors [B, T, D] for queries [B, T, d] over memory [B, S, D] (mask [B, S]).

    Scores are softmaxed in float32 (mixed precision would overflow the mask constant).
    """
    scores = tf.cast(attention.scores(query, keys), tf.float32)
    scores += (1.0 - tf.cast(mask, tf.float32))[:, None, :] * NEG_INF
    weights = tf.nn.softmax(scores, axis=-1)
    return tf.matmul(tf.cast(weights, memory.dtype), memory)


class TiedProjection(tf.keras.layers.Layer):
    """Logits from the embedding matrix itself (``hidden . embedding^T + bias``): a word's
    input and output vectors are one, so a rare word's few examples train both."""

    def __init__(self, embedding: tf.keras.layers.Embedding, **kwargs: Any):
        super().__init__(**kwargs)
        self.embedding = embedding

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=[self.embedding.input_dim],
                                    initializer="zeros", dtype=tf.float32)
        super().build(input_shape)

    def call(self, hidden: tf.Tensor) -> tf.Tensor:
        matrix = tf.cast(self.embedding.embeddings, tf.float32)
        return tf.matmul(tf.cast(hidden, tf.float32), matrix, transpose_b=True) + self.bias


def lm_token_weights(encoder_ids: tf.Tensor, target_words: tf.Tensor | int,
                     width: tf.Tensor | int | None = None) -> tf.Tensor:
    """float32 ``[B, width]`` (default ``target_words``; a batch cut to a shorter length
    bucket has fewer target slots): 1 / (the number of continuation windows whose
    targets hold the token), so that a pass over every window of a line counts each of its
    tokens once, as the LM perplexity does (``tfapp.tasks.generator.scores``).

    Token ``i`` of ``line + [END]`` (1-based) is a target of the windows at positions
    ``max(0, i - target_words) .. i - 1``: ``min(i, target_words)`` of them. A window's
    encoder holds ``min(position + 1, context_words)`` non-padding ids, so ``i`` is that
    count plus the target slot -- exact until the encoder is full, a lower bound after
    (a line's words past ``context_words``; their weight is then at most too large).
    """
    filled = tf.reduce_sum(tf.cast(tf.not_equal(encoder_ids, 0), tf.float32), axis=1)
    slots = target_words if width is None else width
    index = filled[:, None] + tf.range(tf.cast(slots, tf.float32))[None, :]
    return 1.0 / tf.minimum(index, tf.cast(target_words, tf.float32))


class Seq2Seq(tf.keras.Model):
    """Encoder-decoder LSTM with attention; inputs {"encoder_ids", "decoder_ids"} -> logits.

    ``lm_loss``: the loss weighs each target token by ``lm_token_weights`` (continuation
    windows; pairs have one window each and leave it off).
    """

    def __init__(self, vocab_size: int, embedding_dim: int = 64, units: int = 64,
                 bidirectional: bool = False, attention: str = "bahdanau",
                 dropout: float = 0.0, fused_lstm: bool = True, tie_embeddings: bool = False,
                 lm_loss: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        if attention not in ("bahdanau", "luong"):
            raise ValueError(f"attention must be bahdanau or luong, got {attention!r}")
        self.vocab_size, self.embedding_dim, self.units = vocab_size, embedding_dim, units
        self.bidirectional, self.attention_kind, self.dropout_rate = (
            bidirectional, attention, dropout)
        self.fused_lstm = fused_lstm
        self.tie_embeddings, self.lm_loss = tie_embeddings, lm_loss
        # The decoder length build_for was given: lm_token_weights' cap. Batches may come
        # cut to a shorter length bucket (data.length_buckets), and a token's weight must
        # not depend on the padding it arrived with.
        self.target_words: int | None = None
        # The decoder state must match the encoder state it starts from: a bidirectional
        # encoder hands over [forward; backward], twice as wide.
        self.decoder_units = units * (2 if bidirectional else 1)
        # One embedding for both sides: continuation examples read and write the same words.
        self.embedding = tf.keras.layers.Embedding(vocab_size, embedding_dim, name="embedding")
        encoder = _lstm(units, fused_lstm, "encoder_lstm")
        self.encoder = (tf.keras.layers.Bidirectional(encoder, name="encoder")
                        if bidirectional else encoder)
        self.decoder = _lstm(self.decoder_units, fused_lstm, "decoder_lstm")
        attention_cls = BahdanauAttention if attention == "bahdanau" else LuongAttention
        self.attention = attention_cls(self.decoder_units, name=f"{attention}_attention")
        self.combine = tf.keras.layers.Dense(
            embedding_dim if tie_embeddings else self.decoder_units, activation="tanh",
            name="attention_output")
        self.dropout = tf.keras.layers.Dropout(dropout)
        # float32 logits even under a mixed policy: softmax/loss need the range.
        self.projection = (TiedProjection(self.embedding, dtype="float32", name="logits")
                           if tie_embeddings else
                           tf.keras.layers.Dense(vocab_size, dtype="float32", name="logits"))

    # ----------------------------------------------------------------- pieces

    def encode(self, encoder_ids: tf.Tensor, training: bool = False
               ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        """encoder_ids [B, S] -> (memory [B, S, D], keys, mask [B, S], [h, c])."""
        mask = tf.not_equal(encoder_ids, 0)
        x = self.dropout(self.embedding(encoder_ids), training=training)
        out = self.encoder(x, mask=mask, training=training)
        if self.bidirectional:
            memory, fh, fc, bh, bc = out
            state = [tf.concat([fh, bh], -1), tf.concat([fc, bc], -1)]
        else:
            memory, h, c = out
            state = [h, c]
        return memory, self.attention.keys(memory), mask, state

    def _output(self, query: tf.Tensor, memory: tf.Tensor, keys: tf.Tensor, mask: tf.Tensor,
                training: bool) -> tf.Tensor:
        context = attend(self.attention, query, memory, keys, mask)
        hidden = self.combine(tf.concat([query, tf.cast(context, query.dtype)], -1))
        return self.projection(self.dropout(hidden, training=training))

    def decode_step(self, token_ids: tf.Tensor, state: list[tf.Tensor], memory: tf.Tensor,
                    keys: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """One decoding step: previous tokens [B] and state -> logits [B, V], new state."""
        x = self.embedding(token_ids)
        query, new_state = self.decoder.cell(x, state, training=False)
        logits = self._output(query[:, None, :], memory, keys, mask, training=False)
        return logits[:, 0, :], list(new_state)

    # ----------------------------------------------------------------- keras

    def call(self, inputs: dict, training: bool = False) -> tf.Tensor:
        """Teacher forcing: ``decoder_ids`` holds [START] + the gold previous words."""
        memory, keys, mask, state = self.encode(inputs["encoder_ids"], training=training)
        y = self.dropout(self.embedding(inputs["decoder_ids"]), training=training)
        query, _, _ = self.decoder(y, initial_state=state, training=training)
        return self._output(query, memory, keys, mask, training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None):
        """The compiled loss, each token weighted by ``lm_token_weights`` under ``lm_loss``
        (validation too: ``val_loss`` is then a per-token LM cross-entropy)."""
        if self.lm_loss and sample_weight is None and isinstance(x, dict):
            sample_weight = lm_token_weights(x["encoder_ids"],
                                             self.target_words or tf.shape(y)[1],
                                             tf.shape(y)[1])
        return super().compute_loss(x, y, y_pred, sample_weight)

    def build_for(self, context_words: int, target_words: int) -> Seq2Seq:
        """Create the variables by one call on dummy ids (before compile/restore/summary);
        ``target_words`` is the full decoder length (batches may arrive shorter)."""
        self.target_words = target_words
        self({"encoder_ids": tf.zeros([1, context_words], tf.int32),
              "decoder_ids": tf.zeros([1, target_words], tf.int32)})
        self.attention.built = True  # used through keys()/scores(), never __call__
        return self

    def get_config(self) -> dict:
        return {"vocab_size": self.vocab_size, "embedding_dim": self.embedding_dim,
                "units": self.units, "bidirectional": self.bidirectional,
                "attention": self.attention_kind, "dropout": self.dropout_rate,
                "fused_lstm": self.fused_lstm, "tie_embeddings": self.tie_embeddings,
                "lm_loss": self.lm_loss}


def _lstm(units: int, fused: bool, name: str) -> tf.keras.layers.Layer:
    """The LSTM layer: ``fused`` = ``tf.keras.layers.LSTM`` (cuDNN on GPUs without XLA),
    else ``RNN(LSTMCell)``, the same weights in a plain ``tf.while_loop``.

    Measured with tf-keras 2.21: inside a ``jit_compile`` function the fused layer makes
    XLA recompile whenever its weights change, i.e. at every training step (2-16 s/step
    on CPU instead of milliseconds); ``RNN(LSTMCell)`` compiles once.
    """
    if fused:
        return tf.keras.layers.LSTM(units, return_sequences=True, return_state=True, name=name)
    return tf.keras.layers.RNN(tf.keras.layers.LSTMCell(units), return_sequences=True,
                               return_state=True, name=name)


def build_seq2seq(model_cfg: Any, vocab_size: int, *, fused_lstm: bool = True,
                  continuation: bool = True) -> Seq2Seq:
    """A ``Seq2Seq`` from ``cfg.model`` (kind, embedding_dim, units, bidirectional, ...).

    Pass ``fused_lstm=False`` when the model trains or decodes under XLA (``jit_compile``);
    ``continuation`` False (pairs) leaves ``model.lm_loss`` off (one window a pair).
    """
    return Seq2Seq(vocab_size=vocab_size, embedding_dim=model_cfg.embedding_dim,
                   units=model_cfg.units, bidirectional=model_cfg.bidirectional,
                   attention=model_cfg.attention, dropout=model_cfg.dropout,
                   fused_lstm=fused_lstm, tie_embeddings=model_cfg.tie_embeddings,
                   lm_loss=model_cfg.lm_loss and continuation, name="seq2seq")


# --------------------------------------------------------------------------- loss, metrics


def _token_losses(y_true: tf.Tensor, y_pred: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    y_true = tf.cast(y_true, tf.int32)
    mask = tf.cast(tf.not_equal(y_true, 0), tf.float32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y_true, logits=tf.cast(y_pred, tf.float32))
    return ce * mask, mask


def token_scores(y_true: tf.Tensor, y_pred: tf.Tensor
                 ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(cross-entropy, is-a-token, argmax-is-right) of each target position, each
    ``[batch, target_words]`` float32 and 0 at padding: the sums the loss, ``Perplexity``
    and ``MaskedTokenAccuracy`` average, for scoring an export's test split."""
    losses, mask = _token_losses(y_true, y_pred)
    right = tf.equal(tf.argmax(y_pred, axis=-1, output_type=tf.int32), tf.cast(y_true, tf.int32))
    return losses, mask, tf.cast(right, tf.float32) * mask


class MaskedSequenceLoss(tf.keras.losses.Loss):
    """Mean cross-entropy over non-padding target tokens (label 0 is ignored).

    Returns sum(loss) / count(tokens) of the replica's batch; Keras then divides by the
    replica count and sums over replicas, i.e. the mean of per-replica token means.
    """

    def __init__(self, name: str = "masked_sequence_loss", **kwargs: Any):
        super().__init__(name=name, **kwargs)

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        losses, mask = _token_losses(y_true, y_pred)
        return tf.reduce_sum(losses) / tf.maximum(tf.reduce_sum(mask), 1.0)

    def __call__(self, y_true, y_pred, sample_weight=None):
        """Per-token ``sample_weight`` ``[batch, target_words]`` (``lm_token_weights``):
        sum(weight * loss) / sum(weight) over non-padding tokens; none: ``call``."""
        if sample_weight is None:
            return super().__call__(y_true, y_pred)
        losses, mask = _token_losses(y_true, y_pred)
        weights = mask * tf.cast(sample_weight, tf.float32)
        return tf.reduce_sum(losses * weights) / tf.maximum(tf.reduce_sum(weights), 1e-9)


class MaskedTokenAccuracy(tf.keras.metrics.SparseCategoricalAccuracy):
    """Share of non-padding target tokens whose argmax is right (padding weighs 0)."""

    def __init__(self, name: str = "token_accuracy", **kwargs: Any):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        mask = tf.cast(tf.not_equal(tf.cast(y_true, tf.int32), 0), tf.float32)
        return super().update_state(y_true, y_pred, sample_weight=mask)


class Perplexity(tf.keras.metrics.Mean):
    """exp(token-weighted mean cross-entropy over non-padding target tokens): Keras's
    ``Mean`` of the token losses weighted by the mask, exponentiated."""

    def __init__(self, name: str = "perplexity", **kwargs: Any):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        losses, mask = _token_losses(y_true, y_pred)
        return super().update_state(losses, sample_weight=mask)

    def result(self):
        return tf.exp(super().result())
