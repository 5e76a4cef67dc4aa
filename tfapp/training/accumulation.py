"""Gradient accumulation for functional tf.keras models.

tf-keras optimizers have no ``gradient_accumulation_steps`` (Keras 3's do, but Keras 3
fails under the strategies tfapp needs; see docs/training.md, "Why tf-keras").
``AccumulatingModel`` sums gradients of ``steps`` consecutive batches in per-replica
accumulators and applies their mean once, so one optimizer step sees ``steps x global
batch`` examples: the same update as one step of a ``steps`` times larger global batch,
under every strategy. The optimizer's ``iterations`` (which drives the learning-rate
schedule) counts applied updates only.

With several replicas the update is conditional *and* a synchronisation point (the
optimizer all-reduces the gradients). Strategies that synchronise through ``merge_call``
(Mirrored and multi-worker without XLA-on-GPU, TPU) cannot take that branch inside a
replica's ``tf.cond``, so the condition is evaluated in the cross-replica context and the
apply re-enters the replicas, the pattern tf-keras's own ``LossScaleOptimizer`` uses to
skip non-finite steps. Gradients stay on each replica until the step that applies them:
one all-reduce per optimizer step, not per batch.
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
        if compat.replica_context_can_synchronise():
            tf.cond(self._apply_now(), self._apply, lambda: None)
        else:
            tf.distribute.get_replica_context().merge_call(self._apply_across_replicas)
        return self.compute_metrics(x, y, y_pred, sample_weight)

    def _apply_now(self) -> tf.Tensor:
        return tf.equal(self._micro_step % self.accumulation_steps, 0)

    def _apply(self) -> None:
        """Replica context: one optimizer step with this replica's mean accumulated gradients
        (the optimizer aggregates them across replicas, as in a plain ``train_step``), then
        the accumulators start again. Only on the batches that apply: no pass over the
        accumulators on the others."""
        n = self.accumulation_steps
        means = [acc.read_value() / tf.cast(n, acc.dtype) for acc in self._accumulators]
        self.optimizer.apply_gradients(zip(means, self.trainable_variables, strict=True))
        for acc in self._accumulators:
            acc.assign(tf.zeros_like(acc))

    def _apply_across_replicas(self, strategy: tf.distribute.Strategy) -> None:
        """Cross-replica context: every replica's step counter agrees (each counts the same
        batches), so the first replica's decides for all."""
        tf.cond(self._apply_now(),
                lambda: strategy.extended.call_for_each_replica(self._apply),
                lambda: None)

    def get_config(self):
        config = super().get_config()
        config["accumulation_steps"] = self.accumulation_steps
        return config


def wrap_for_accumulation(model: tf.keras.Model, steps: int) -> tf.keras.Model:
    """``model`` itself for ``steps <= 1``, else an ``AccumulatingModel`` of it; a
    ConfigError where accumulation cannot work."""
    if steps <= 1:
        return model
    if not compat.is_functional_model(model):
        raise ConfigError("trainer.gradient_accumulation_steps > 1 needs a functional model "
                          f"({type(model).__name__} has its own train_step); set it to 1")
    return AccumulatingModel.wrap(model, steps)
