"""Gradient accumulation for functional tf.keras models.

tf-keras optimizers have no ``gradient_accumulation_steps`` (Keras 3's do, but Keras 3
fails under the strategies tfapp needs; see DESIGN.md). ``AccumulatingModel`` sums
gradients of ``steps`` consecutive batches in per-replica accumulators and applies
their mean once, so one optimizer step sees ``steps x global batch`` examples. The
optimizer's ``iterations`` (which drives the learning-rate schedule) counts applied
updates only.
"""

from __future__ import annotations

from tfapp import compat
from tfapp.config import ConfigError

import tensorflow as tf


class AccumulatingModel(tf.keras.Model):
    """A functional model whose ``train_step`` applies gradients every ``steps`` batches."""

    def __init__(self, *args, accumulation_steps: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self.accumulation_steps = int(accumulation_steps)
        self._accumulators: list[tf.Variable] | None = None
        self._micro_step: tf.Variable | None = None

    @classmethod
    def wrap(cls, model: tf.keras.Model, steps: int) -> AccumulatingModel:
        """The same layers and weights as the functional ``model``, accumulating."""
        return cls(inputs=model.inputs, outputs=model.outputs, name=model.name,
                   accumulation_steps=steps)

    def _build_accumulators(self) -> None:
        # ON_READ variables live per replica: each replica sums its own gradients and
        # the optimizer's all-reduce happens once, when the mean is applied.
        with tf.init_scope():
            self._accumulators = [
                tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                            synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.SUM,
                            name=f"accum_{i}")
                for i, v in enumerate(self.trainable_variables)]
            self._micro_step = tf.Variable(
                0, dtype=tf.int64, trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA, name="micro_step")

    def train_step(self, data):
        if self._accumulators is None:
            self._build_accumulators()
        x, y, sample_weight = tf.keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
            scaled = self.optimizer.get_scaled_loss(loss) if hasattr(
                self.optimizer, "get_scaled_loss") else loss
        grads = tape.gradient(scaled, self.trainable_variables)
        if hasattr(self.optimizer, "get_unscaled_gradients"):
            grads = self.optimizer.get_unscaled_gradients(grads)
        for acc, g in zip(self._accumulators, grads, strict=True):
            if g is not None:
                acc.assign_add(tf.cast(g, acc.dtype))
        self._micro_step.assign_add(1)

        def apply():
            n = tf.cast(self.accumulation_steps, tf.float32)
            pairs = [(acc / tf.cast(n, acc.dtype), v)
                     for acc, v in zip(self._accumulators, self.trainable_variables,
                                       strict=True)]
            self.optimizer.apply_gradients(pairs)
            for acc in self._accumulators:
                acc.assign(tf.zeros_like(acc))
            return tf.constant(True)

        tf.cond(self._micro_step % self.accumulation_steps == 0, apply,
                lambda: tf.constant(False))
        return self.compute_metrics(x, y, y_pred, sample_weight)

    def get_config(self):
        config = super().get_config()
        config["accumulation_steps"] = self.accumulation_steps
        return config


def wrap_for_accumulation(model: tf.keras.Model, steps: int, num_replicas: int
                          ) -> tf.keras.Model:
    """``model`` itself for ``steps <= 1``, else an ``AccumulatingModel`` of it; a
    ConfigError where accumulation cannot work."""
    if steps <= 1:
        return model
    if num_replicas > 1:
        # Applying inside a tf.cond would need a cross-replica merge_call there, which
        # MirroredStrategy does not support; with several replicas the global batch is
        # already replicas x data.batch_size.
        raise ConfigError(f"trainer.gradient_accumulation_steps={steps} runs on one replica; "
                          f"with {num_replicas} replicas raise data.batch_size instead")
    if not compat.is_functional_model(model):
        raise ConfigError("trainer.gradient_accumulation_steps > 1 needs a functional model "
                          f"({type(model).__name__} has its own train_step); set it to 1")
    return AccumulatingModel.wrap(model, steps)
