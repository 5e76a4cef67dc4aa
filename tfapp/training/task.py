"""The Task interface (TF Model Garden style), kept apart from the training loop.

A task knows its data and its model; ``tfapp.training.driver`` knows the loop (strategy
scope, optimizer, callbacks, checkpoints, export timing). The loop calls, in order and
inside ``runtime.strategy.scope()`` where it matters:

1. ``build_inputs()`` -> ``Inputs`` (tf.data datasets of fixed-shape tensors, the facts
   the loop needs, and the task's own facts in a typed subclass)
2. ``build_model(inputs)`` -> an uncompiled ``tf.keras.Model``
3. ``build_losses(inputs)`` / ``build_metrics(inputs)`` -> what ``model.compile`` takes
4. ``callbacks(model, inputs)`` -> task-specific callbacks (text samples, reports);
   ``metric_callbacks(model, inputs)`` -> those adding validation metrics (run first)
5. ``finish(model, inputs, history)`` -> ``TaskOutput``: reports, the serving export

Every method reads what it needs from its arguments and the ``RunContext``; a task keeps
no state between them. The traits the loop asks for are class attributes/methods, decided
once: ``default_monitor`` and ``recompiles_under_xla``.
"""

from __future__ import annotations

import abc
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfapp.data.rows.spec import RowSpec
from tfapp.demo import EXAMPLES

if TYPE_CHECKING:
    from tfapp.config import ExperimentConfig
    from tfapp.training.context import RunContext


@dataclass
class Inputs:
    """Datasets and facts about them (tasks subclass it to carry their own facts).

    Attributes:
      train: training dataset of (features, labels) batches of the *global* batch size
        (or a ``tf.distribute.DistributedDatasetInterface`` built per input worker); it
        repeats, the loop gives ``steps_per_epoch``.
      validation: validation dataset, or None.
      num_train_examples: examples in one pass of the training data (after bad rows).
      num_validation_examples: examples in the validation data.
      validation_steps: batches per validation pass when the dataset is distributed
        (fit needs it then; None lets Keras run the dataset to its end).
      batches_per_pass: global batches in one pass of the training stream (None: the
        examples over the global batch); a resumed run's input resumes by it.
    """

    train: Any
    validation: Any = None
    num_train_examples: int = 0
    batches_per_pass: int | None = None
    num_validation_examples: int = 0
    validation_steps: int | None = None


@dataclass
class TaskOutput:
    """What ``finish`` made: files (label -> path), final metrics, lines to print."""

    paths: dict[str, Path] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    try_it: str = ""  # a command that uses what the run made, printed last


class Task(abc.ABC):
    """One kind of model and its data."""

    #: validation metric for the best checkpoint and early stopping when trainer.monitor is "".
    default_monitor = "val_loss"

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.runtime = ctx.runtime
        self.layout = ctx.layout  # this process's run directory (a scratch copy off-chief)

    @classmethod
    def input_files(cls, cfg: ExperimentConfig) -> dict[str, str]:
        """split -> the files (a data spec) the task reads for it, ``demo`` resolved and
        empty splits left out: what ``python -m tfapp.prepare`` prepares."""
        d = cfg.data
        files = {"train": d.train_files, "validation": d.validation_files,
                 "test": d.test_files}
        return {k: v for k, v in files.items() if v}

    @classmethod
    def row_spec(cls, cfg: ExperimentConfig) -> Any:
        """What a row of the task's files is and how it is read (a
        ``tfapp.data.rows.spec.RowSpec``)."""
        return RowSpec.from_config("labelled", cfg.data)

    @classmethod
    def recompiles_under_xla(cls, cfg: ExperimentConfig, model: Any = None) -> bool:
        """Whether this task's train step recompiles every step under XLA (so ``auto``
        leaves XLA off on GPUs for it; see ``Runtime.default_jit_compile``).

        Asked twice: by ``RunContext.create`` with ``model=None`` (what a task's
        ``build_model`` may read as ``ctx.jit_compile``), then by ``fit.build_model`` with
        the model built, whose answer settles the run's XLA (the loop compiles with the
        context ``fit.build_model`` returns; the task's own ``ctx`` keeps the first
        answer). A task whose answer depends on the model (which BERT encoder was built)
        must not read ``ctx.jit_compile``."""
        return False

    @abc.abstractmethod
    def build_inputs(self) -> Inputs: ...

    @abc.abstractmethod
    def build_model(self, inputs: Inputs) -> Any: ...

    def build_losses(self, inputs: Inputs) -> Any:
        """The compiled loss; None for models whose ``train_step`` computes their own."""
        return None

    def build_metrics(self, inputs: Inputs) -> list:
        return []

    def callbacks(self, model: Any, inputs: Inputs) -> list:
        return []

    def metric_callbacks(self, model: Any, inputs: Inputs) -> list:
        """Callbacks that add validation metrics to the epoch logs (e.g. ``val_entity_f1``);
        the loop puts them before its own, so the history, TensorBoard, the best
        checkpoint and early stopping all see what they add."""
        return []

    def finish(self, model: Any, inputs: Inputs, history: dict[str, list[float]]
               ) -> TaskOutput:
        return TaskOutput()

    def try_it(self, command: str) -> str:
        """The command line that tries this run's export: ``tfapp COMMAND --model RUN_DIR``
        and the demo's examples of this task (a placeholder on the user's own data)."""
        texts = (EXAMPLES.get(self.cfg.task, ()) if self.cfg.data.train_files == "demo"
                 else ()) or ("your text here",)
        return " ".join(["tfapp", command, "--model", _quoted(str(self.layout.root)),
                         *map(_quoted, texts)])


def _quoted(text: str) -> str:
    """``text`` as a shell word: in double quotes, as the docs write examples, where that
    is safe; else shlex's single quotes."""
    if text and not set(text) & set('"$`\\!'):
        return f'"{text}"' if set(text) & set(" '&|;<>()*?[]#~") else text
    return shlex.quote(text)
