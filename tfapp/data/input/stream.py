"""Input streams over prepared shards: the order of each pass, exact resume, evaluation
passes.

Every task's training input is one infinite stream per input pipeline, a sequence of
*passes* over that pipeline's examples. What a pass reads is decided here, once for all
tasks (which files each pipeline reads and how many steps a pass has: ``plan.py``); what
an example is (a parsed row, a window of a sentence...) is the task's ``examples(file,
file_index)`` function.

* **A pass.** Pass ``e`` merges all the pipeline's files (``_merged``): runs of
  ``merge_unit(block)`` examples of each file, taken in an order drawn from ``(seed, e)``,
  so a sorted source or one file per class reaches every block mixed. It cuts the merged
  examples into consecutive blocks of ``data.shuffle_buffer`` and permutes each block
  with a seed of ``(seed, e, block)``. Block 0 reads the files one after another, in
  order.
* **Exact resume.** Because the order is a function of the position, a stream can start
  anywhere: at example ``p`` of pass ``e`` it draws the pass's merge order again, finds
  the runs wholly before the block of ``p`` and each file's share of them, skips those
  examples of each file, permutes the block exactly as the first run did and drops the
  examples before ``p``. A run killed mid-epoch resumes at its next unseen batch,
  reading (and dropping) what the interrupted pass had read.
* **Evaluation** reads its files in order, all examples, once per pass.

Examples travel in *chunks*: ``examples(file, file_index)`` yields nests of tensors whose
first dimension counts examples (a parsed batch of rows, a batch of windows, a stored
chunk), and every step here (skipping, the blocks, element sharding) slices, gathers or
``rebatch``es whole chunks. Nothing works one example at a time, which would cost more
than the tokenising (per-example ``unbatch``/``batch`` ran at ~70k examples/s on this
machine; the same pass over chunks at several hundred thousand).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfapp.data.input import pipeline as stages
from tfapp.data.input.plan import Part, Source, Start, StepPlan, partition
from tfapp.errors import DataError

import numpy as np
import tensorflow as tf

__all__ = ["ExamplesFn", "batches", "eval_stream", "in_order", "rows", "service_stream",
           "skip_rows", "take_rows", "training_stream"]

ExamplesFn = Callable[[tf.Tensor, tf.Tensor], tf.data.Dataset]
#: the most examples a merged pass takes from one file at a time
MAX_UNIT = 64


def _files(source: Source, part: Part) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    files = tf.constant([source.files[j] for j in part.files] or [""], tf.string)[
        :len(part.files)]
    index = tf.constant(list(part.files) or [0], tf.int64)[:len(part.files)]
    counts = tf.constant([source.counts[j] for j in part.files] or [0], tf.int64)[
        :len(part.files)]
    return files, index, counts


def _read(files: tf.Tensor, index: tf.Tensor, examples: ExamplesFn) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((files, index)).flat_map(examples)


def _own_buffers(chunk: Any) -> Any:
    return tf.nest.map_structure(lambda t: tf.raw_ops.DeepCopy(x=t), chunk)


def merge_unit(block: int) -> int:
    """Examples taken from one file at a time when a pass merges its files: small enough
    that a shuffle block holds at least 256 such runs from files drawn at random, at most
    ``MAX_UNIT``. Each run is one step of ``choose_from_datasets``, so short runs read
    slower (docs/data.md has the rates, ``scripts/bench_stream.py`` measures them); a
    batch's label mix varies a little more than a full shuffle's as runs grow (at the
    default block of 10,000: runs of 39, a batch of 32's share of a 60% class varies by
    0.092 instead of 0.087)."""
    return int(min(MAX_UNIT, max(1, block // 256)))


def _merged(files: tf.Tensor, index: tf.Tensor, counts: tuple[int, ...],
            examples: ExamplesFn, unit: int, key: tf.Tensor, skip: tf.Tensor
            ) -> tf.data.Dataset:
    """Every file's examples merged into one stream, from its example ``skip`` on.

    Each file is read in its own order, cut into runs of ``unit`` examples (its last run
    shorter); the runs of all files are merged in an order drawn from ``key``: a seeded
    permutation of the multiset holding file ``j`` once per run, so at any point of the
    pass every file has been read in proportion to its size, and each shuffle block draws
    on all files at once. The merge is a pure function of ``key``, so a start at ``skip``
    is exact: the runs wholly before it are found from the same permutation, each file
    skips its own share of them, and the merged stream drops the rest of the way.
    """
    n = len(counts)
    runs = [-(-c // unit) for c in counts]
    last = [c - unit * (r - 1) if r else 0 for c, r in zip(counts, runs, strict=True)]
    starts = np.concatenate([[0], np.cumsum(runs)[:-1]]).astype(np.int64)
    total = int(sum(runs))
    choice = tf.random.experimental.stateless_shuffle(
        tf.repeat(tf.range(n, dtype=tf.int64), runs), seed=key)
    # occurrence[k]: how many runs of choice[k]'s file come before position k.
    by_file = tf.argsort(choice, stable=True)
    rank = tf.range(total, dtype=tf.int64) - tf.gather(starts, tf.gather(choice, by_file))
    occurrence = tf.scatter_nd(by_file[:, None], rank, [total])
    sizes = tf.where(occurrence == tf.gather(tf.constant(runs, tf.int64) - 1, choice),
                     tf.gather(tf.constant(last, tf.int64), choice), unit)
    ends = tf.cumsum(sizes)
    first = tf.reduce_sum(tf.cast(ends <= skip, tf.int64))  # runs wholly before skip
    before = tf.concat([[0], ends], 0)[first]
    done = tf.math.bincount(choice[:first], minlength=n, maxlength=n, dtype=tf.int64)
    # Each run in a buffer of its own: a run that rebatch cut out of a chunk aliases it,
    # and the shuffle block's rebatch of aliased runs logs TensorFlow's "RefCount not
    # reliable if buf_ points to a SubBuffer" error line once per run.
    parts = [skip_rows(examples(files[j], index[j]), done[j] * unit).rebatch(unit).map(
        _own_buffers) for j in range(n)]
    merged = tf.data.Dataset.choose_from_datasets(
        parts, tf.data.Dataset.from_tensor_slices(choice[first:]))
    return skip_rows(merged, skip - before)


def rows(chunk: Any) -> tf.Tensor:
    """Examples in a chunk (int64)."""
    return tf.shape(tf.nest.flatten(chunk)[0], out_type=tf.int64)[0]


def _slice(chunk: Any, start: tf.Tensor, end: tf.Tensor) -> Any:
    return tf.nest.map_structure(lambda t: t[start:end], chunk)


def _nonempty(dataset: tf.data.Dataset) -> tf.data.Dataset:
    return dataset.filter(lambda chunk: rows(chunk) > 0)


def skip_rows(dataset: tf.data.Dataset, n: tf.Tensor) -> tf.data.Dataset:
    """The chunked stream without its first ``n`` examples."""
    def step(left, chunk):
        cut = tf.minimum(left, rows(chunk))
        return left - cut, _slice(chunk, cut, rows(chunk))
    return _nonempty(dataset.scan(tf.cast(n, tf.int64), step))


def take_rows(dataset: tf.data.Dataset, n: tf.Tensor, read_to_end: bool = False
              ) -> tf.data.Dataset:
    """The first ``n`` examples of the chunked stream (with ``read_to_end``, the rest is
    still read, and dropped)."""
    def step(left, chunk):
        keep = tf.minimum(left, rows(chunk))
        return left - keep, (left, _slice(chunk, 0, keep))
    dataset = dataset.scan(tf.cast(n, tf.int64), step)
    if not read_to_end:
        dataset = dataset.take_while(lambda left, _: left > 0)
    return _nonempty(dataset.map(lambda _, chunk: chunk))


def _keep_elements(dataset: tf.data.Dataset, shard: tuple[int, int],
                   first: tf.Tensor) -> tf.data.Dataset:
    """Elements ``i::N`` of the pass, ``dataset`` starting at the pass's element ``first``."""
    i, n = shard

    def step(offset, chunk):
        size = rows(chunk)
        keep = tf.equal((offset + tf.range(size, dtype=tf.int64)) % n, i)
        return offset + size, tf.nest.map_structure(lambda t: tf.boolean_mask(t, keep), chunk)
    return _nonempty(dataset.scan(tf.cast(first, tf.int64), step))


def _permute_blocks(dataset: tf.data.Dataset, block: int, first_block: tf.Tensor,
                    seed: int, epoch: tf.Tensor) -> tf.data.Dataset:
    """Each run of ``block`` consecutive examples permuted with a seed of (seed, epoch,
    block number); block numbers count from ``first_block``. Chunks in, blocks out."""
    def permute(examples, number):
        key = tf.stack([epoch * 1_000_003 + seed, number])
        order = tf.random.experimental.stateless_shuffle(tf.range(rows(examples)), seed=key)
        return tf.nest.map_structure(lambda t: tf.gather(t, order), examples)

    numbers = tf.data.Dataset.range(first_block, tf.int64.max)
    return tf.data.Dataset.zip((dataset.rebatch(block), numbers)).map(permute)


def training_stream(source: Source, part: Part, examples: ExamplesFn, *, seed: int,
                    block: int, examples_per_pass: int, start: Start | None = None,
                    read_to_end: bool = False, window: int = 0) -> tf.data.Dataset:
    """The endless chunked example stream of one pipeline: pass after pass from ``start``.

    ``block`` is the shuffle block (0: no shuffling, files in order); each pass yields
    ``examples_per_pass`` examples. With a ``window``, each pass comes in chunks of
    ``window`` examples, its last chunk shorter: a window never holds two passes.
    ``examples(file, file_index)`` gives the examples of one shard file in chunks, in
    file order, the same on every call. ``read_to_end``
    reads the rest of each pass's files (what a pass does not use, less than a global
    batch on one pipeline) instead of stopping: a store (``tfapp.data.input.store``) then
    completes every file in the first pass.
    """
    start = start or Start()
    files, index, counts = _files(source, part)
    shuffle = block > 0
    span = block if shuffle else 1
    start_epoch = tf.constant(start.epoch, tf.int64)
    start_at = tf.constant(start.consumed, tf.int64)
    total = tf.constant(examples_per_pass, tf.int64)

    def one_pass(epoch):
        at = tf.where(epoch == start_epoch, start_at, 0)
        block_start = at // span * span
        if shuffle:
            dataset = _permute_blocks(_merged_pass(epoch, block_start), block,
                                      block_start // block, seed, epoch)
        else:
            dataset = _in_order(block_start)
        dataset = skip_rows(dataset, at - block_start)
        dataset = take_rows(dataset, total - at, read_to_end)
        # Own buffers before the windows are cut (see batches).
        return dataset.map(_own_buffers).rebatch(window) if window else dataset

    def _merged_pass(epoch, block_start):
        # Element sharding: this pipeline's example k is the pass's example k * count + i.
        shard = part.element_shard
        first = block_start * (shard[1] if shard else 1)
        key = tf.stack([tf.constant(seed, tf.int64), epoch])
        live = [k for k, j in enumerate(part.files) if source.counts[j]]
        if not live:
            return _read(files, index, examples)
        dataset = _merged(tf.gather(files, live), tf.gather(index, live),
                          tuple(source.counts[part.files[k]] for k in live), examples,
                          merge_unit(block), key, first)
        if shard is not None:
            dataset = _keep_elements(dataset, shard, first)
        return dataset

    def _in_order(block_start):
        cum = tf.cumsum(counts)
        if part.element_shard is not None:
            i, count = part.element_shard
            mine = tf.maximum(cum - i + count - 1, 0) // count  # my elements in the first cum
            skip = tf.reduce_sum(tf.cast(mine <= block_start, tf.int64))
            before_all = tf.concat([[0], cum], 0)[skip]
            before = tf.concat([[0], mine], 0)[skip]
            dataset = _keep_elements(_read(files[skip:], index[skip:], examples),
                                     part.element_shard, before_all)
        else:
            skip = tf.reduce_sum(tf.cast(cum <= block_start, tf.int64))
            before = tf.concat([[0], cum], 0)[skip]
            dataset = _read(files[skip:], index[skip:], examples)
        return skip_rows(dataset, block_start - before)

    return tf.data.Dataset.range(start.epoch, tf.int64.max).flat_map(one_pass)


def eval_stream(source: Source, part: Part, examples: ExamplesFn) -> tf.data.Dataset:
    """One pass of a pipeline's part in file order, every example, in chunks."""
    files, index, _ = _files(source, part)
    dataset = _read(files, index, examples)
    if part.element_shard is not None:
        dataset = _keep_elements(dataset, part.element_shard, tf.constant(0, tf.int64))
    return dataset


def in_order(source: Source, examples: ExamplesFn) -> tf.data.Dataset:
    """Every example of ``source`` in file order, in chunks, on one pipeline (reports and
    counts: what a split holds, not a training stream)."""
    return eval_stream(source, partition(source, 0, 1, 0), examples)


def service_stream(source: Source, examples: ExamplesFn, *, seed: int, block: int,
                   training: bool, deterministic: bool = False) -> tf.data.Dataset:
    """One pass of ``source`` in the shape the tf.data service shards: a dataset of shard
    files, read (interleaved) by ``examples``. The dispatcher hands these files out to
    its workers (``dynamic``: on request; ``file``: worker ``i`` of ``N`` reads files
    ``i::N``), or each worker reads them all (``off``). Training reads its files in a
    seeded new order each pass and shuffles examples over ``block``, its files read side
    by side in any order unless ``deterministic``; the consumer repeats the pass. The
    service decides who reads what, so this stream cannot start mid-pass: a resumed run
    begins a new pass (docs/scale_out.md).
    """
    files = tf.constant(list(source.files), tf.string)
    index_of = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        files, tf.range(len(source.files), dtype=tf.int64)), -1)
    dataset = tf.data.Dataset.from_tensor_slices(files)
    shuffle = training and block > 0
    if shuffle:
        dataset = dataset.shuffle(len(source.files), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.interleave(
        lambda file: examples(file, index_of.lookup(file)),
        cycle_length=min(4, len(source.files)) if training else 1,
        num_parallel_calls=tf.data.AUTOTUNE if training else None,
        deterministic=deterministic or not training)
    if shuffle:
        dataset = dataset.unbatch().shuffle(block, seed=seed, reshuffle_each_iteration=True)
        return dataset.batch(1024)
    return dataset


def batches(source: Source, examples: ExamplesFn, data_cfg: Any, *, plan: StepPlan,
            training: bool, input_context: tf.distribute.InputContext | None,
            store: Any = None, what: str = "example", grouping: Any = None) -> tf.data.Dataset:
    """Batches of one pipeline of ``source``: the training stream from ``plan.start``
    (whole per-replica batches of ``plan.global_batch``, ``plan.steps`` a pass) or an
    evaluation pass (every example), or the tf.data service's shape of them when
    ``data.service.address`` is set. ``store`` (``tfapp.data.input.store``), when
    ``examples`` reads through one, makes the first pass read its files to the end so the
    store completes. A DataError when a training pipeline's part holds less than one step
    (``what``: its unit, for it).

    With a ``grouping`` (``tfapp.data.input.lengths.Grouping``) batches are grouped by
    length: each pass is cut into windows of whole batches (its last window shorter, so
    an epoch trains each example once), and a resume rebuilds its window and skips the
    batches already done."""
    seed, start = plan.seed, plan.start
    pipelines, index, local_batch, replicas = 1, 0, plan.global_batch, 1
    if input_context is not None:
        pipelines, index = input_context.num_input_pipelines, input_context.input_pipeline_id
        local_batch = input_context.get_per_replica_batch_size(plan.global_batch)
        replicas = input_context.num_replicas_in_sync // pipelines
    length_plan = grouping.plan(local_batch, replicas) if grouping is not None else None
    if data_cfg.service.address or not training:
        if data_cfg.service.address:
            dataset = service_stream(source, examples, seed=seed, block=data_cfg.shuffle_buffer,
                                     training=training, deterministic=data_cfg.deterministic)
        else:
            dataset = eval_stream(source, partition(source, index, pipelines, seed), examples)
        if length_plan is not None:
            return grouping(dataset.rebatch(length_plan.window_examples,
                                            drop_remainder=training),
                            length_plan, training=training)
        return dataset.rebatch(local_batch, drop_remainder=training)
    part = partition(source, index, pipelines, seed)
    steps, per_step = plan.steps, plan.per_step
    if steps < 1:
        raise DataError(
            f"the {source.name} split has {source.size} {what}(s)"
            + (f" ({part.size} in input pipeline {index} of {pipelines})" if pipelines > 1
               else "")
            + f", fewer than one batch of {per_step}; training drops incomplete batches, "
            "so lower data.batch_size or add data")
    first = plan.first_batch(local_batch)
    aligned, first_window = first, 0
    if length_plan is not None:  # back to the start of first's window in its pass
        pass_batches = steps * per_step // local_batch
        window = length_plan.window_batches
        epoch, at = divmod(first, pass_batches)
        aligned = first - at % window
        first_window = epoch * -(-pass_batches // window) + at // window
        done = aligned * local_batch
        start = Start(done // (steps * per_step), done % (steps * per_step))
    dataset = training_stream(source, part, examples, seed=seed, block=data_cfg.shuffle_buffer,
                              examples_per_pass=steps * per_step, start=start,
                              read_to_end=store is not None and store.done() < len(source.files),
                              window=length_plan.window_examples if length_plan else 0)
    if length_plan is None:
        # Own buffers: rebatching chunks that were cut at a pass's end (slices aliasing
        # their chunk) makes TensorFlow log a 'RefCount not reliable' error line for each
        # (windows are cut from own buffers already, in training_stream).
        dataset = dataset.map(_own_buffers).rebatch(local_batch, drop_remainder=True)
    else:
        dataset = grouping(dataset, length_plan, training=True, first_window=first_window)
        dataset = dataset.skip(first - aligned)
    return stages.log_ids(dataset, first_batch=first, pipeline=index)
