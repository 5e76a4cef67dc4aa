"""Length-aware batches: each batch padded to the smallest of a few bucket lengths that
holds its longest example, instead of to ``data.seq_length``.

How a pipeline's batches are made (``Grouping``):

1. The stream's examples are taken a *window* at a time: ``WINDOW_BATCHES`` batches' worth
   (rounded up to whole units), as Hugging Face's ``LengthGroupedSampler`` takes
   megabatches of 50 batches. Training windows are cut from one pass each (a pass's last
   window is shorter), so an epoch trains each example once; a resume rebuilds the window
   it stopped in and skips the batches already trained on (``stream.batches``): the
   batches are exactly those of an uninterrupted run.
2. The window is sorted by bucket (longest first; randomly within a bucket, whose
   examples all pad to one length anyway) and cut into batches of the same
   number of examples as without buckets, so steps per pass, the learning-rate schedule
   and the loss normalisation (a mean over the batch's examples, or over its real tokens
   for token-level losses) do not change.
3. A *unit* of consecutive batches shares one length: the replicas' batches of one step
   (``distribute_datasets_from_function`` hands a pipeline's consecutive batches to its
   replicas), times the steps of one execution where a TPU needs one shape per execution.
   The unit is padded to the smallest bucket boundary that holds its longest example.
4. Training takes the window's units in a random order drawn from ``(seed, window)``, so
   lengths do not cycle; evaluation keeps them sorted (its metrics are sums).

Boundaries (``boundaries``) are quantiles of the training examples' token lengths, rounded
up to a multiple that suits the device (8 on CPU and GPU, 128 on TPU), the last one
``seq_length``; so a run has at most ``data.length_buckets`` batch shapes, and XLA compiles
the step at most once per shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["LengthPlan", "Grouping", "Lengths", "boundaries", "WINDOW_BATCHES",
           "first_lengths", "grouping_for", "multiple_for", "padding_efficiency", "mask_lengths",
           "trim_to_longest"]

#: batches sorted together (Hugging Face's LengthGroupedSampler uses megabatches of 50)
WINDOW_BATCHES = 50


def multiple_for(device_kind: str) -> int:
    """Bucket lengths are rounded up to this: 128 on TPU (its XLA layouts tile the minor
    dimensions by 128, Cloud TPU performance guide), 8 elsewhere (tensor-core and
    vector-unit friendly)."""
    return 128 if device_kind == "TPU" else 8


def boundaries(lengths: np.ndarray, buckets: int, seq_length: int, multiple: int
               ) -> tuple[int, ...]:
    """Up to ``buckets`` ascending padded lengths, the last ``seq_length``: the
    ``i/buckets`` quantiles of ``lengths`` (lengths that occur) rounded up to ``multiple``
    (duplicates merged)."""
    top = int(seq_length)
    if buckets <= 1 or len(lengths) == 0:
        return (top,)
    qs = np.quantile(np.asarray(lengths, np.float64), np.arange(1, buckets) / buckets,
                     method="higher")
    edges = {min(top, max(multiple, int(math.ceil(q / multiple)) * multiple)) for q in qs}
    edges.add(top)
    return tuple(sorted(edges))


@dataclass(frozen=True)
class LengthPlan:
    """How one pipeline's batches are grouped by length.

    Attributes:
      boundaries: the padded lengths, ascending; the last is ``data.seq_length``.
      batch: examples per batch (the per-replica batch).
      unit: consecutive batches that share one length (the replicas of one step).
      seq_length: the length the examples arrive padded to.
    """

    boundaries: tuple[int, ...]
    batch: int
    unit: int = 1
    seq_length: int = 0

    @property
    def window_batches(self) -> int:
        """Batches per window (a multiple of ``unit``)."""
        return max(1, -(-WINDOW_BATCHES // self.unit)) * self.unit

    @property
    def window_examples(self) -> int:
        return self.window_batches * self.batch


def mask_lengths(batch: dict[str, tf.Tensor]) -> tf.Tensor:
    """Tokens per example of BERT inputs: the sum of ``input_mask``."""
    return tf.reduce_sum(tf.cast(batch["input_mask"], tf.int32), axis=1)


def first_lengths(batches: Iterable[Any], lengths: Callable[[Any], np.ndarray], rows: int
                  ) -> np.ndarray:
    """``lengths(batch)`` of the first ``rows`` examples of ``batches`` (in file order, the
    same on every worker): what ``boundaries`` places the buckets by."""
    out: list[np.ndarray] = []
    for batch in batches:
        out.append(np.asarray(lengths(batch)))
        if sum(len(o) for o in out) >= rows:
            break
    return np.concatenate(out)[:rows] if out else np.zeros([0], np.int64)


def trim_to_longest(features: dict[str, tf.Tensor], seq_length: int, multiple: int = 8
                    ) -> dict[str, tf.Tensor]:
    """BERT ``features`` ``[n, seq_length]`` cut to the batch's longest example rounded up to
    ``multiple`` (at most ``seq_length``): what a serving call computes, as Hugging Face's
    pipeline pads a batch to its longest. The encoder masks padding, so every real
    position's output is the one it has at ``seq_length``."""
    longest = tf.reduce_max(mask_lengths(features))
    length = tf.minimum((tf.maximum(longest, 1) + multiple - 1) // multiple * multiple,
                        seq_length)
    return {k: v[:, :length] for k, v in features.items()}


def _trim(batch: dict[str, tf.Tensor], length: tf.Tensor, seq_length: int,
          keys: tuple[str, ...] | None = None) -> dict[str, tf.Tensor]:
    """The ``keys`` of ``batch`` (None: every ``[n, seq_length, ...]`` tensor) cut to
    ``[n, length, ...]``."""
    def cut(k: str, t: tf.Tensor) -> tf.Tensor:
        if (k in keys) if keys is not None else (
                t.shape.rank is not None and t.shape.rank >= 2 and t.shape[1] == seq_length):
            out = t[:, :length]
            return tf.ensure_shape(out, [t.shape[0], None] + t.shape[2:].as_list())
        return t
    return {k: cut(k, v) for k, v in batch.items()}


@dataclass(frozen=True)
class Grouping:
    """A run's length grouping, before it meets a pipeline (``stream.batches`` makes the
    ``LengthPlan`` of each pipeline from its batch and replicas).

    Attributes:
      boundaries: the bucket lengths (``boundaries``).
      seq_length: the length examples arrive padded to.
      seed: the run's seed (the order of units within a window).
      length_fn: an example's real length, from a window of examples (BERT inputs: the
        sum of ``input_mask``).
      keys: the tensors cut to a bucket's length (None: every ``[n, seq_length, ...]``
        one; a task whose other inputs could be as wide names its own).
    """

    boundaries: tuple[int, ...]
    seq_length: int
    seed: int
    length_fn: Callable[[dict], tf.Tensor] = mask_lengths
    keys: tuple[str, ...] | None = None

    def plan(self, batch: int, replicas: int) -> LengthPlan:
        return LengthPlan(self.boundaries, batch, max(1, replicas), self.seq_length)

    def __call__(self, dataset: tf.data.Dataset, plan: LengthPlan, *, training: bool,
                 first_window: int = 0) -> tf.data.Dataset:
        """Batches grouped by length, from ``dataset``: windows of ``plan.window_examples``
        examples padded to ``plan.seq_length`` (training: whole windows of an endless
        stream, window numbers counted from ``first_window``; evaluation: the last window
        may be short)."""
        per_batch, unit = plan.batch, plan.unit
        seq = plan.seq_length
        edges = tf.constant(plan.boundaries, tf.int32)
        windows = dataset.enumerate(start=first_window) if training else \
            dataset.map(lambda w: (tf.constant(0, tf.int64), w))

        def cut(number: tf.Tensor, window: dict[str, tf.Tensor]) -> tf.data.Dataset:
            lengths = self.length_fn(window)
            n = tf.shape(lengths)[0]
            # Sorted by bucket, in a random order within each bucket: a batch pads to its
            # bucket's length anyway, and examples of one bucket but different lengths (and
            # different content) then share batches, as they would without buckets.
            slot = tf.minimum(tf.searchsorted(edges, lengths, side="left"),
                              len(plan.boundaries) - 1)
            noise = tf.random.stateless_uniform(
                [n], seed=tf.stack([tf.cast(self.seed, tf.int64), number + (1 << 40)]))
            order = tf.argsort(tf.cast(slot, tf.float32) + noise, direction="DESCENDING",
                               stable=True)
            batches = (n + per_batch - 1) // per_batch
            units = (batches + unit - 1) // unit
            # Each unit's largest bucket is its first example's (the window is sorted).
            bucket = tf.gather(edges, tf.gather(slot, tf.gather(
                order, tf.range(units) * unit * per_batch)))
            unit_order = tf.range(units)
            if training:
                unit_order = tf.random.experimental.stateless_shuffle(
                    unit_order, seed=tf.stack([tf.cast(self.seed, tf.int64), number]))
            batch_ids = tf.reshape(unit_order[:, None] * unit + tf.range(unit)[None, :], [-1])
            batch_ids = tf.boolean_mask(batch_ids, batch_ids < batches)

            def take(i):
                j = tf.gather(batch_ids, tf.cast(i, tf.int32))
                rows = tf.gather(order, tf.range(j * per_batch,
                                                 tf.minimum((j + 1) * per_batch, n)))
                picked = {k: tf.gather(v, rows) for k, v in window.items()}
                if training:  # whole batches: a static batch size, as drop_remainder gives
                    picked = {k: tf.ensure_shape(v, [per_batch] + v.shape[1:].as_list())
                              for k, v in picked.items()}
                return _trim(picked, bucket[j // unit], seq, self.keys)

            return tf.data.Dataset.range(tf.cast(tf.size(batch_ids), tf.int64)).map(take)

        return windows.flat_map(cut)


@dataclass(frozen=True)
class Lengths:
    """What a task's length buckets group its examples by (``grouping_for``'s arguments).

    Attributes:
      sample: the lengths of some training examples, read only when buckets are on.
      seq_length: the length examples arrive padded to; ``name`` its config key.
      length_fn, keys: the ``Grouping``'s.
    """

    sample: Callable[[], np.ndarray]
    seq_length: int
    length_fn: Callable[[dict], tf.Tensor] = mask_lengths
    keys: tuple[str, ...] | None = None
    name: str = "seq_length"


def grouping_for(buckets: int, lengths: Lengths, seed: int, *, device_kind: str,
                 input_pipelines: int, steps_per_execution: int | None = 1
                 ) -> tuple[Grouping | None, str]:
    """The run's ``Grouping`` for ``data.length_buckets`` (None: every batch padded to
    ``lengths.seq_length``) and a line saying what was chosen and why; ``lengths.sample``
    is read only when buckets are possible."""
    seq_length, length_name = lengths.seq_length, lengths.name
    if buckets <= 1:
        return None, f"every batch padded to {length_name} {seq_length} (data.length_buckets=" \
            f"{buckets})"
    if input_pipelines > 1:
        # Each worker's pipeline picks its own lengths, but a step's collectives need one
        # shape on every worker: the all-gather of an embedding's sparse gradient is
        # [tokens, width] (measured: "Shape mismatch in the collective instance"), and a
        # TPU program spanning hosts compiles for one input shape.
        return None, (f"every batch padded to {length_name} {seq_length}: length buckets need "
                      f"one input pipeline (this run has {input_pipelines}; workers would "
                      "pad one step to different lengths)")
    sample = lengths.sample()
    edges = boundaries(sample, buckets, seq_length, multiple_for(device_kind))
    if device_kind == "TPU" and steps_per_execution != 1 and len(edges) > 1:
        # Keras runs an execution's steps in one loop, compiled once for the TPU: the
        # steps inside it cannot change shape, and units of one step do not line up with
        # executions. Not tried on a TPU; fixed padding is what is known to work. (None is
        # trainer.steps_per_execution's auto: 50 on TPU.)
        return None, (f"every batch padded to {length_name} {seq_length}: length buckets on a "
                      "TPU need trainer.steps_per_execution=1 (this run has "
                      f"{steps_per_execution or 'auto'})")
    if len(edges) == 1:
        return None, (f"every batch padded to {length_name} {seq_length}: the training texts' "
                      f"lengths leave one bucket at a multiple of {multiple_for(device_kind)}")
    grouping = Grouping(edges, seq_length, seed, lengths.length_fn, lengths.keys)
    plan = LengthPlan(edges, 32, 1, seq_length)
    return grouping, (f"{len(edges)} length buckets ({', '.join(map(str, edges))} tokens); "
                      f"{padding_efficiency(sample, None, seq_length):.0%} of a fixed-length "
                      f"batch is real tokens, ~{padding_efficiency(sample, plan, seq_length):.0%}"
                      " of a bucketed one")


def padding_efficiency(lengths: np.ndarray, plan: LengthPlan | None, seq_length: int) -> float:
    """Real tokens / computed tokens when ``lengths`` are batched as ``plan`` would (in
    stream order, sorted per window), or padded to ``seq_length`` without a plan."""
    lengths = np.minimum(np.asarray(lengths, np.int64), seq_length)
    if plan is None or len(lengths) == 0:
        return float(lengths.sum() / max(1, len(lengths) * seq_length))
    edges = np.asarray(plan.boundaries)
    computed = 0
    for start in range(0, len(lengths), plan.window_examples):
        window = np.sort(lengths[start:start + plan.window_examples])[::-1]
        for u in range(0, len(window), plan.unit * plan.batch):
            chunk = window[u:u + plan.unit * plan.batch]
            pad = edges[min(np.searchsorted(edges, chunk[0]), len(edges) - 1)]
            computed += len(chunk) * pad
    return float(lengths.sum() / max(1, computed))
