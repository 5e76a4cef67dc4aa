"""BERT's masked-LM head on a native ``BertEncoder``, trained with ``fit``.

``BertMaskedLM(encoder)`` takes the features ``tfapp.data.text.masking.MlmMasker`` makes
(the encoder inputs plus ``masked_lm_positions`` [batch, P]) and returns float32 logits
[batch, P, vocab] at those positions only: the full [batch, seq, vocab] would be ~7x
larger for nothing. The head is BERT's: dense + activation + LayerNorm, then the
output projection *tied* to the word embeddings, plus a per-token bias.

Loss and metrics are weighted by ``masked_lm_weights`` (padding predictions weigh 0):
``mlm_loss`` is the cross-entropy averaged over the masked tokens of the *global* batch,
``masked_accuracy`` the share of masked tokens predicted right. ``train_step`` divides
each replica's summed loss by the global number of masked tokens (an all-reduce), so the
gradients the strategy sums across replicas are exactly those of the global mean --
replicas usually hold different numbers of masked tokens.
"""

from __future__ import annotations

from tfapp.models.bert import INPUT_KEYS, BertEncoder, activation

import tensorflow as tf

__all__ = ["BertMaskedLM", "MaskedLMHead"]


class MaskedLMHead(tf.keras.layers.Layer):
    """transform (dense, activation, LayerNorm) -> tied word-embedding projection + bias."""

    def __init__(self, encoder: BertEncoder, **kwargs):
        super().__init__(**kwargs)
        cfg = encoder.cfg
        self.cfg = cfg
        self.embeddings = encoder.embeddings  # tied: the projection reads its word table
        # To the embedding width: the tied projection reads the word table (ELECTRA's is
        # narrower than hidden_size, as its generator head's transform is).
        self.dense = tf.keras.layers.Dense(
            cfg.embedding_width, activation=activation(cfg.activation),
            kernel_initializer=tf.keras.initializers.TruncatedNormal(
                stddev=cfg.initializer_range), name="transform")
        self.layer_norm = tf.keras.layers.LayerNormalization(
            epsilon=cfg.layer_norm_epsilon, name="transform_layer_norm")

    def build(self, input_shape) -> None:
        # autocast=False: the bias is added to float32 logits (below); under a mixed
        # policy an autocast read would give the compute dtype and the add would fail.
        self.output_bias = self.add_weight("output_bias", shape=(self.cfg.vocab_size,),
                                           initializer="zeros", autocast=False)
        super().build(input_shape)

    def call(self, sequence_output: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
        x = tf.gather(sequence_output, tf.cast(positions, tf.int32), batch_dims=1)
        x = self.layer_norm(self.dense(x))
        table = tf.cast(self.embeddings.word_embeddings, x.dtype)
        logits = tf.matmul(x, table, transpose_b=True)
        # Softmax/cross-entropy in float32 under mixed precision (a 30k-way softmax in bf16
        # loses the small probabilities).
        return tf.cast(logits, tf.float32) + self.output_bias


class BertMaskedLM(tf.keras.Model):
    """Encoder + masked-LM head; ``fit`` on ``(inputs, masked_lm_ids, masked_lm_weights)``."""

    def __init__(self, encoder: BertEncoder, name: str = "bert_masked_lm", **kwargs):
        super().__init__(name=name, **kwargs)
        self.encoder = encoder
        # The masked-LM loss never reaches the pooler (BERT trained it by next-sentence
        # prediction): freeze it rather than apply no gradients to it every step.
        encoder.pooler.trainable = False
        self.head = MaskedLMHead(encoder, name="mlm_head")
        self.loss_tracker = tf.keras.metrics.Mean(name="mlm_loss")
        self.accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="masked_accuracy")

    @property
    def metrics(self) -> list[tf.keras.metrics.Metric]:
        return [self.loss_tracker, self.accuracy]  # reset by fit at each epoch

    def call(self, inputs: dict[str, tf.Tensor], training=None) -> tf.Tensor:
        outputs = self.encoder({k: inputs[k] for k in INPUT_KEYS}, training=training)
        return self.head(outputs["sequence_output"], inputs["masked_lm_positions"])

    def _step(self, data, training: bool) -> tf.Tensor:
        inputs, labels, weights = data
        logits = self(inputs, training=training)
        ce = tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        local_sum = tf.reduce_sum(ce * weights)
        local_count = tf.reduce_sum(weights)
        global_count = tf.distribute.get_replica_context().all_reduce("sum", local_count)
        loss = local_sum / tf.maximum(global_count, 1.0)
        self.loss_tracker.update_state(local_sum / tf.maximum(local_count, 1.0),
                                       sample_weight=local_count)
        self.accuracy.update_state(labels, logits, sample_weight=weights)
        return loss

    def train_step(self, data) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = self._step(data, training=True)
        # minimize() applies loss scaling when compile wrapped the optimizer for float16.
        self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data) -> dict[str, tf.Tensor]:
        self._step(data, training=False)
        return {m.name: m.result() for m in self.metrics}
