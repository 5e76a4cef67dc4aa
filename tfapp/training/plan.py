"""How long a run trains and when it evaluates: epochs or max_steps -> the fit arguments.

Keras's ``fit`` evaluates, checkpoints (ModelCheckpoint), backs up (BackupAndRestore) and
counts early-stopping patience at epoch ends. Step-based training therefore runs
"virtual epochs": ``fit(steps_per_epoch=eval_every_steps x accumulation, epochs=max_steps /
eval_every_steps)`` over the repeated training stream, so every callback counts
evaluations and a resumed run continues at the right evaluation.

Units: a *batch* is one global batch through ``train_step`` (what fit's ``steps_per_epoch``
counts); an *optimizer step* applies gradients once and is ``gradient_accumulation_steps``
batches. ``max_steps``, ``eval_every_steps``, ``log_every_steps`` and the learning-rate
schedule count optimizer steps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tfapp.config import ConfigError, ExperimentConfig
from tfapp.runtime import Runtime, default_steps_per_execution

log = logging.getLogger("tfapp")


@dataclass(frozen=True)
class TrainingPlan:
    """The numbers fit runs with.

    Attributes:
      fit_epochs: ``epochs`` given to fit (evaluations in step mode).
      fit_steps_per_epoch: batches per fit epoch.
      total_steps: optimizer steps of the whole run (what the schedule spans).
      accumulation: batches per optimizer step.
      global_batch: examples per batch over all replicas.
      step_mode: True when evaluation is every ``eval_every_steps`` optimizer steps.
      eval_every_steps: optimizer steps between evaluations (step mode), else 0.
      batches_per_pass: batches in one pass of the training data (or trainer.steps_per_epoch).
    """

    fit_epochs: int
    fit_steps_per_epoch: int
    total_steps: int
    accumulation: int
    global_batch: int
    step_mode: bool
    eval_every_steps: int
    batches_per_pass: int

    @property
    def effective_batch(self) -> int:
        """Examples behind one optimizer step."""
        return self.global_batch * self.accumulation


def plan_training(cfg: ExperimentConfig, num_train_examples: int, global_batch: int,
                  batches_per_pass: int | None = None) -> TrainingPlan:
    """The fit arguments for ``cfg``; ConfigError when the numbers cannot work.
    ``batches_per_pass``: the training stream's pass, when the inputs know it (several
    input pipelines take the batches their smallest part holds)."""
    t = cfg.trainer
    acc = t.gradient_accumulation_steps
    per_pass = t.steps_per_epoch or batches_per_pass or num_train_examples // global_batch
    if per_pass < 1:
        raise ConfigError(f"data.batch_size: the training split has {num_train_examples} "
                          f"examples, fewer than one global batch ({global_batch}); lower "
                          "data.batch_size")
    common = dict(accumulation=acc, global_batch=global_batch, batches_per_pass=per_pass)
    if not t.max_steps and not t.eval_every_steps:  # plain epochs, as Keras users know them
        # A pass that is not a multiple of the accumulation carries its partial sum over to
        # the next epoch; the last partial one is never applied.
        total = per_pass * t.epochs // acc
        if total < 1:
            raise ConfigError(f"trainer.gradient_accumulation_steps={acc} is more than the "
                              f"{per_pass * t.epochs} batches of the whole run; lower it")
        return TrainingPlan(fit_epochs=t.epochs, fit_steps_per_epoch=per_pass,
                            total_steps=total, step_mode=False, eval_every_steps=0, **common)
    total = t.max_steps or per_pass * t.epochs // acc
    if total < 1:
        raise ConfigError(f"trainer.gradient_accumulation_steps={acc} is more than the "
                          f"{per_pass * t.epochs} batches of the whole run; lower it or set "
                          "trainer.max_steps")
    every = t.eval_every_steps or total
    if every > total or total % every:
        lower = total // every * every
        fix = (f"trainer.max_steps={lower + every}" + (f" or {lower}" if lower else "")
               if every <= total else f"trainer.eval_every_steps <= {total}")
        raise ConfigError(f"trainer.eval_every_steps={every}: the run has {total} optimizer "
                          f"steps ({'max_steps' if t.max_steps else 'from epochs'}), not a "
                          f"multiple of it; set {fix}")
    return TrainingPlan(fit_epochs=total // every, fit_steps_per_epoch=every * acc,
                        total_steps=total, step_mode=True, eval_every_steps=every, **common)


def resolve_jit_compile(cfg: ExperimentConfig, rt: Runtime, *,
                        recompiles_under_xla: bool) -> bool:
    """trainer.jit_compile, with auto decided per device and model: the one place XLA is
    switched on or off for a run (``RunContext.create`` asks it with the task's trait before
    the model exists, ``RunContext.for_model`` again with the model built)."""
    return resolve_jit_compile_choice(cfg, rt, recompiles_under_xla=recompiles_under_xla)[0]


def resolve_jit_compile_choice(cfg: ExperimentConfig, rt: Runtime, *,
                               recompiles_under_xla: bool) -> tuple[bool, str]:
    """``resolve_jit_compile``'s answer and why (the run header's jit_compile line)."""
    jit, why = rt.jit_compile_choice(cfg.trainer.jit_compile,
                                     recompiles_under_xla=recompiles_under_xla)
    if jit and rt.kind == "mirrored" and rt.device_kind == "CPU":
        raise ConfigError("trainer.jit_compile: XLA cannot run MirroredStrategy over CPU "
                          "devices (its CPU backend binds one device); set "
                          "trainer.jit_compile=false")
    return jit, why


def resolve_steps_per_execution(cfg: ExperimentConfig, rt: Runtime,
                                plan: TrainingPlan) -> tuple[int, str]:
    """trainer.steps_per_execution, with auto (null) decided per device kind
    (``runtime.default_steps_per_execution``), and where it came from (for the run
    header): the one place the batches per ``tf.function`` call of a run are decided.

    Capped at one fit epoch (Keras runs the rest of an epoch in one shorter call anyway;
    the cap keeps the number the header shows true). ``auto`` is also capped at
    ``log_every_steps`` (in batches), so every log line the config asks for still comes at
    its step; an explicit value is the user's choice (lines then come once per execution).
    """
    configured = cfg.trainer.steps_per_execution
    if configured is None:
        value, source = default_steps_per_execution(rt.device_kind), f"auto: {rt.device_kind}"
        every = cfg.trainer.log_every_steps * plan.accumulation
        if every and value > every:
            log.debug("trainer.steps_per_execution auto: %d capped at log_every_steps "
                      "(%d batches)", value, every)
            value, source = every, f"{source}, capped at log_every_steps"
    else:
        value, source = configured, "config"
    if value > plan.fit_steps_per_epoch:
        log.debug("trainer.steps_per_execution: %d capped at the %d batches of a fit epoch",
                  value, plan.fit_steps_per_epoch)
        value, source = plan.fit_steps_per_epoch, f"{source}, capped at one epoch"
    return value, source
