"""The Task interface (TF Model Garden style), kept apart from the training loop.

A task knows its data and its model; ``tfapp.training.driver`` knows the loop
(strategy scope, optimizer, callbacks, checkpoints, export timing). The driver calls,
in order and inside ``runtime.strategy.scope()`` where it matters:

1. ``build_inputs()`` -> ``Inputs`` (tf.data datasets of fixed-shape tensors plus the
   facts the loop needs: example counts, label names)
2. ``build_model(inputs)`` -> an uncompiled ``tf.keras.Model``
3. ``build_losses()`` / ``build_metrics()`` -> what ``model.compile`` takes
4. ``callbacks(model, inputs)`` -> task-specific callbacks (text samples, reports)
5. ``finish(model, inputs)`` -> after training: reports, serving export; returns a
   dict of result paths/metrics the entry point prints.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfapp.config import ExperimentConfig
from tfapp.runtime import Runtime


@dataclass
class Inputs:
    """Datasets and facts about them.

    Attributes:
      train: training dataset of (features, labels) batches of the *global* batch size
        (or a ``tf.distribute.DistributedDatasetInterface`` built per replica).
      validation: validation dataset, or None.
      test: test dataset, or None.
      num_train_examples: examples in one pass of the training data (after bad rows).
      num_validation_examples: examples in the validation data.
      validation_steps: batches per validation pass when the dataset is distributed
        (fit needs it then; None lets Keras run the dataset to its end).
      info: task-specific facts (label names, vocab paths, ...), saved with the run.
    """

    train: Any
    validation: Any = None
    test: Any = None
    num_train_examples: int = 0
    num_validation_examples: int = 0
    validation_steps: int | None = None
    info: dict = field(default_factory=dict)


class Task(abc.ABC):
    """One kind of model and its data."""

    #: validation metric for the best checkpoint and early stopping when trainer.monitor is "".
    default_monitor = "val_loss"

    def __init__(self, cfg: ExperimentConfig, runtime: Runtime, run_dir: Path):
        self.cfg = cfg
        self.runtime = runtime
        self.run_dir = Path(run_dir)

    @abc.abstractmethod
    def build_inputs(self) -> Inputs: ...

    @abc.abstractmethod
    def build_model(self, inputs: Inputs) -> Any: ...

    @abc.abstractmethod
    def build_losses(self) -> Any: ...

    def build_metrics(self) -> list:
        return []

    def callbacks(self, model: Any, inputs: Inputs) -> list:
        return []

    def finish(self, model: Any, inputs: Inputs) -> dict:
        return {}
