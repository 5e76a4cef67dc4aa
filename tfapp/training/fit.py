"""The three steps every fit of tfapp goes through, whoever calls it.

The training loop (``driver.train``: classifier, generator, masked-LM pretraining, every
tuning trial) and the learning-rate range test (``lr_finder.find_lr``) build, compile and
fit models only through these, so the strategy scope, gradient accumulation, XLA and
``steps_per_execution`` are applied the same way everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tfapp import console
from tfapp.runtime import default_steps_per_execution
from tfapp.training.accumulation import wrap_for_accumulation

if TYPE_CHECKING:
    from tfapp.training.context import RunContext
    from tfapp.training.task import Inputs, Task

    import tensorflow as tf

__all__ = ["build_model", "compile_model", "fit"]


def build_model(ctx: RunContext, task: Task, inputs: Inputs
                ) -> tuple[tf.keras.Model, RunContext]:
    """The task's model, built in the strategy's scope, wrapped for gradient accumulation
    when ``trainer.gradient_accumulation_steps`` > 1, and the context to compile and fit it
    with: the run's XLA settled from the model (``RunContext.for_model``: which BERT
    encoder was built)."""
    with ctx.runtime.strategy.scope():
        model = task.build_model(inputs)
        model = wrap_for_accumulation(model, ctx.cfg.trainer.gradient_accumulation_steps)
    return model, ctx.for_model(model)


def compile_model(ctx: RunContext, model: tf.keras.Model, *, optimizer: Any, loss: Any,
                  metrics: list | None = None, steps_per_execution: int | None = None
                  ) -> None:
    """``model.compile`` in the strategy's scope with the run's XLA decision.
    ``steps_per_execution``: what ``plan.resolve_steps_per_execution`` decided (the
    training loop), or 1 (the LR range test); None: the config's value, auto the device
    kind's default uncapped."""
    if steps_per_execution is None:
        steps_per_execution = (ctx.cfg.trainer.steps_per_execution
                               or default_steps_per_execution(ctx.runtime.device_kind))
    with ctx.runtime.strategy.scope():
        model.compile(optimizer=optimizer, loss=loss, metrics=metrics or None,
                      jit_compile=ctx.jit_compile, steps_per_execution=steps_per_execution)


def fit(ctx: RunContext, model: tf.keras.Model, data: Any, *, epochs: int,
        steps_per_epoch: int, callbacks: list, validation: Any = None,
        validation_steps: int | None = None, quiet: bool = False) -> dict[str, list[float]]:
    """``model.fit``; the progress bar on the chief's terminal, one line per epoch in logs
    (``quiet``: none). Returns the history."""
    verbose = 0 if quiet else 1 if (ctx.is_chief and console.stderr_is_terminal()) else 2
    history = model.fit(data, validation_data=validation, validation_steps=validation_steps,
                        epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks,
                        verbose=verbose)
    return history.history
