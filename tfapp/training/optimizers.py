"""Optimizers and learning-rate schedules built from ``OptimizerConfig``.

Schedules are functions of the optimizer step (``optimizer.iterations``), so a
resumed run continues at the same point of its schedule: the step is part of the
optimizer state that checkpoints and BackupAndRestore save.
"""

from __future__ import annotations

import math

from tfapp import compat
from tfapp.config import OptimizerConfig

import tensorflow as tf

# Substrings of variable names that AdamW's decoupled weight decay skips: biases and
# LayerNorm scale/offset (the BERT recipe). Hub-restored variables keep their
# original names, so these match both native and TF-Hub encoders.
NO_DECAY = ("bias", "layer_norm", "LayerNorm", "layernorm", "gamma", "beta")


# Kept, not tf-keras's CosineDecay(warmup_target=...): its warm-up gives lr 0 at step 0 (a
# wasted step; the cosine after it is the same), and PolynomialDecay has no warm-up
# (tests/test_training.py::test_one_cycle_is_keras_cosine_decay_but_for_the_warmup_step).
@tf.keras.utils.register_keras_serializable(package="tfapp")
class WarmupSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to ``peak`` over ``warmup_steps``, then a decay to 0 at ``total_steps``.

    ``decay``: linear (BERT's default), cosine (one-cycle's annealing phase), constant.
    """

    def __init__(self, peak: float, total_steps: int, warmup_steps: int,
                 decay: str = "linear", name: str = "warmup"):
        super().__init__()
        self.peak = float(peak)
        self.total_steps = max(int(total_steps), 1)
        self.warmup_steps = int(warmup_steps)
        self.decay = decay
        self.name = name

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = tf.cast(max(self.warmup_steps, 1), tf.float32)
        warmup_lr = self.peak * (step + 1.0) / warm
        span = tf.cast(max(self.total_steps - self.warmup_steps, 1), tf.float32)
        progress = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
        if self.decay == "linear":
            after = self.peak * (1.0 - progress)
        elif self.decay == "cosine":
            after = self.peak * 0.5 * (1.0 + tf.cos(math.pi * progress))
        else:  # the step's shape, so a vector of steps (plots, per-step logs) works too
            after = tf.fill(tf.shape(step), self.peak)
        if self.warmup_steps <= 0:
            return after
        return tf.where(step < self.warmup_steps, warmup_lr, after)

    def get_config(self) -> dict:
        return {"peak": self.peak, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps, "decay": self.decay, "name": self.name}


@tf.keras.utils.register_keras_serializable(package="tfapp")
class ExponentialSweep(tf.keras.optimizers.schedules.LearningRateSchedule):
    """The LR range test's schedule: ``start`` at step 0 growing geometrically to ``end``
    at step ``steps - 1`` (equal steps in log(lr), as in Smith 2017)."""

    def __init__(self, start: float, end: float, steps: int, name: str = "lr_sweep"):
        super().__init__()
        self.start, self.end, self.steps = float(start), float(end), max(int(steps), 2)
        self.name = name

    def __call__(self, step):
        fraction = tf.cast(step, tf.float32) / float(self.steps - 1)
        return self.start * tf.pow(self.end / self.start, fraction)

    def value(self, step: int) -> float:
        """The rate at ``step`` in float64 (reports; ``__call__`` is float32)."""
        return self.start * (self.end / self.start) ** (step / (self.steps - 1))

    def get_config(self) -> dict:
        return {"start": self.start, "end": self.end, "steps": self.steps, "name": self.name}


@tf.keras.utils.register_keras_serializable(package="tfapp")
class FusedAdamW(tf.keras.optimizers.AdamW):
    """tf.keras AdamW whose dense update is one fused kernel (``ResourceApplyAdam``).

    Why: tf.keras's AdamW updates each variable with ~8 separate element-wise ops, each
    a pass over the variable and its two slots; on a CPU that made the optimizer step of
    a 4-layer BERT (11 M parameters, mostly the word embedding) cost 5x the fused
    kernel the TF1 optimizers use (scripts/bench_train.py, docs/performance.md). The
    maths is the same (m, v, bias-corrected step, epsilon outside the square root);
    the slots have the same names, so checkpoints of either class restore into the
    other. AMSGrad, TPU variables and a tf-keras whose slots ``compat.adam_slots`` cannot
    find take tf.keras's own path.

    Sparse gradients (an embedding gather's IndexedSlices) are applied densely: the
    decoupled weight decay touches every row anyway, and a scatter into the variable
    would switch it to copy-on-read, so that each later read copies the whole table.
    """

    def update_step(self, gradient, variable):
        slots = None if self.amsgrad or _on_tpu() else compat.adam_slots(self, variable)
        if slots is None:
            return super().update_step(gradient, variable)
        m, v = slots
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        dtype = variable.dtype
        local_step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        return tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=m.handle, v=v.handle,
            beta1_power=tf.pow(beta_1, local_step), beta2_power=tf.pow(beta_2, local_step),
            lr=tf.cast(self.learning_rate, dtype), beta1=beta_1, beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(gradient, dtype),
            use_locking=False)


def _on_tpu() -> bool:
    strategy = tf.distribute.get_strategy()
    return isinstance(strategy, (tf.distribute.TPUStrategy,
                                 tf.distribute.experimental.TPUStrategy))


def warmup_steps(cfg: OptimizerConfig, total_steps: int) -> int:
    """Optimizer steps spent warming up (one_cycle warms up 30% when warmup_ratio is 0)."""
    warmup_ratio = cfg.warmup_ratio
    if cfg.schedule == "one_cycle" and warmup_ratio == 0:
        warmup_ratio = 0.3
    return int(round(total_steps * warmup_ratio))


def build_schedule(cfg: OptimizerConfig, *, peak: float, total_steps: int
                   ) -> tf.keras.optimizers.schedules.LearningRateSchedule:
    """linear: warmup + linear decay; one_cycle: warmup + cosine annealing (30% warmup
    if warmup_ratio is 0); constant: warmup then flat."""
    decay = {"linear": "linear", "one_cycle": "cosine", "constant": "constant"}[cfg.schedule]
    return WarmupSchedule(peak, total_steps, warmup_steps(cfg, total_steps), decay,
                          name=cfg.schedule)


def build_optimizer(cfg: OptimizerConfig, *, peak: float = 0.0, total_steps: int = 0,
                    schedule: tf.keras.optimizers.schedules.LearningRateSchedule | None = None
                    ) -> tf.keras.optimizers.Optimizer:
    """The optimizer for ``cfg`` with its schedule (``build_schedule(peak, total_steps)``
    unless ``schedule`` is given, as the LR finder does); build it inside the strategy
    scope."""
    if schedule is None:
        schedule = build_schedule(cfg, peak=peak, total_steps=total_steps)
    clip = {"global_clipnorm": cfg.clipnorm} if cfg.clipnorm > 0 else {}
    if cfg.ema_decay > 0:  # tf-keras keeps the average as optimizer variables (checkpointed)
        clip.update(use_ema=True, ema_momentum=cfg.ema_decay)
    if cfg.name == "adamw":
        opt = FusedAdamW(learning_rate=schedule, weight_decay=cfg.weight_decay, epsilon=1e-6,
                         **clip)
        opt.exclude_from_weight_decay(var_names=list(NO_DECAY))
        return opt
    if cfg.name == "adam":
        return tf.keras.optimizers.Adam(learning_rate=schedule, **clip)
    return tf.keras.optimizers.SGD(learning_rate=schedule, momentum=0.9, **clip)
