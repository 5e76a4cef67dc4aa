"""The step arithmetic of a training input, once for every task: which shard files each
input pipeline reads, how many steps a pass has, where a resumed run starts.

Files are the unit: the shard list is permuted once with the run's seed (the same
permutation on every worker) and pipeline ``i`` of ``N`` reads files ``i::N`` of it, as
Model Garden's input reader does. With fewer files than pipelines every pipeline reads
every file and keeps elements ``i::N`` (said once in the log). Every pipeline takes the
same number of examples per pass (whole global batches of the smallest part), so all
workers run the same steps. ``plan_steps`` works it out (a ``StepPlan``) and the stream
(``tfapp.data.input.stream``) cuts its batches by it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

__all__ = ["Part", "Source", "Start", "StepPlan", "partition", "plan_steps"]

log = logging.getLogger("tfapp.data")
_warned: set[str] = set()


@dataclass(frozen=True)
class Source:
    """One split as pipelines read it: its shard files and how many examples each gives.

    Attributes:
      name: the split (train/validation/test), for messages.
      files: shard paths, in manifest order.
      counts: examples of this split in each file (after the task's filters).
    """

    name: str
    files: tuple[str, ...]
    counts: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(sum(self.counts))


@dataclass(frozen=True)
class Part:
    """What one input pipeline reads of a ``Source``.

    Attributes:
      files: indices (into ``Source.files``) of the files it reads, in a fixed order.
      element_shard: ``(index, count)`` when it reads every file and keeps elements
        ``index::count`` (fewer files than pipelines), else None.
      size: examples it gets per full pass.
    """

    files: tuple[int, ...]
    element_shard: tuple[int, int] | None
    size: int


@dataclass(frozen=True)
class Start:
    """Where a training stream begins: ``consumed`` examples into pass ``epoch``."""

    epoch: int = 0
    consumed: int = 0


@dataclass(frozen=True)
class StepPlan:
    """A training input's step arithmetic, the one copy every task uses (``plan_steps``).

    Attributes:
      global_batch: examples per optimizer step, over all replicas.
      pipelines: input pipelines (one per input worker).
      steps: steps in one pass over the training split.
      start: where a resumed run's stream begins.
      seed: the run's seed (which files each pipeline reads, each pass's order).
    """

    global_batch: int
    pipelines: int
    steps: int
    start: Start
    seed: int = 0

    @property
    def per_step(self) -> int:
        """Examples each input pipeline gives one step."""
        return self.global_batch // self.pipelines

    def first_batch(self, local_batch: int) -> int:
        """The stream's batch number (of ``local_batch`` examples) at ``start``."""
        return (self.start.epoch * self.steps * self.per_step + self.start.consumed) \
            // local_batch

    def eval_steps(self, examples: int) -> int | None:
        """Steps of an evaluation pass over ``examples`` (fit needs the count: a
        distributed dataset has no known size); None without examples."""
        return -(-examples // self.global_batch) if examples else None


def plan_steps(source: Source, *, global_batch: int, pipelines: int, seed: int,
               resumed_batches: int = 0) -> StepPlan:
    """The ``StepPlan`` of training on ``source``: whole steps of the smallest pipeline's
    part per pass (every pipeline takes part in every step), resumed after
    ``resumed_batches`` global batches."""
    per_step = global_batch // pipelines
    steps = min(partition(source, i, pipelines, seed).size for i in range(pipelines)) \
        // per_step
    start = Start(resumed_batches // steps, resumed_batches % steps * per_step) if steps \
        else Start()
    return StepPlan(global_batch, pipelines, steps, start, seed)


def partition(source: Source, index: int, count: int, seed: int) -> Part:
    """The part pipeline ``index`` of ``count`` reads (see the module docstring)."""
    n = len(source.files)
    if count <= 1:
        return Part(tuple(range(n)), None, source.size)
    if n >= count:
        order = np.random.default_rng(seed).permutation(n)
        mine = tuple(int(j) for j in order[index::count])
        return Part(mine, None, int(sum(source.counts[j] for j in mine)))
    if source.name not in _warned:
        _warned.add(source.name)
        log.warning("data: the %s split has %d file(s) for %d input pipelines; each reads "
                    "every file and keeps every %d-th example (prepare more shards to shard "
                    "by file)", source.name, n, count, count)
    return Part(tuple(range(n)), (index, count), len(range(index, source.size, count)))
