"""tf.data performance stages shared by tfapp's input pipelines.

Each stage is a ``DataConfig`` switch:

* ``snapshot`` -- the preprocessed blocks are written once into
  ``<data.snapshot>/<name>-<key>`` and read back from there afterwards. ``key`` hashes
  everything that decides the preprocessed values (the examples' content, the
  preprocessing's fingerprint, seq_length, shard), so an unchanged pipeline reuses the
  snapshot across runs and any change writes a new one. tf.data's own ``snapshot`` op keys
  by a hash of the dataset graph, which changes between processes for graphs holding
  loaded SavedModel functions or ``py_function``s; an explicit key is reproducible.
  Each block is one file of raw little-endian tensors (integers narrowed to the smallest
  dtype that holds them), read back with ``read_file`` + ``decode_raw``: a replay starts
  from a list of file names (``Dataset.save``/``load`` spent ~15 ms per epoch before its
  first element, and read 2-4x the bytes) and, when the caller shuffles, reads the blocks
  in a new seeded order each epoch without holding them all. The snapshot sits before
  shuffling, so it never freezes one random order.
* ``cache`` -- ``memory`` or a file prefix (keyed the same way, so a stale cache of other
  data is never read).
* ``shuffle_buffer``, ``prefetch`` (``AUTOTUNE``), ``deterministic`` and the
  ``tf.data.Options`` (autotune on, map parallelisation, sharding policy).
* ``service.address`` -- hand the pipeline to a tf.data service dispatcher.

Every map of these pipelines goes through ``host_map``: the same ``Dataset.map``, but its
function starts in well under a millisecond when an iterator is made, instead of after a
Grappler pass (see there). A finite pipeline makes a new iterator every epoch.

``stored_batches`` (snapshot, cache, shuffling the stored blocks into batches) and
``finalize`` (service, prefetch, options) are the stages every task's pipeline shares: the
classifier's (``classification.make_classification_dataset``) and the generator's
(``text_lines.make_generator_dataset``) differ only in how they make their blocks.
``distribute`` builds one pipeline per input worker through
``strategy.distribute_datasets_from_function``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfapp import compat
from tfapp.config import DataConfig, DataServiceConfig
from tfapp.data.errors import DataError

import numpy as np
import tensorflow as tf

__all__ = ["pipeline_key", "Snapshot", "write_snapshot", "apply_cache", "stored_batches",
           "host_map", "make_options", "apply_service", "finalize", "distribute",
           "distribute_split", "Shard", "local_shard",
           "SNAPSHOT_FORMAT_VERSION", "STORE_BLOCK"]

log = logging.getLogger("tfapp.data")

# Bump when the layout of preprocessed elements changes, so old snapshots are not reused.
SNAPSHOT_FORMAT_VERSION = 3
_DONE = "tfapp_snapshot.json"
# Examples per stored block in snapshots and caches: replay reads whole blocks, so bigger
# blocks mean less per-element work (measured: 1024 reads ~2x faster than 256).
STORE_BLOCK = 1024


def pipeline_key(**parts: Any) -> str:
    """A short stable hash of the values that decide the preprocessed data."""
    blob = json.dumps({"v": SNAPSHOT_FORMAT_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def snapshot_dir(root: str, name: str, key: str) -> str:
    return os.path.join(root, f"{name}-{key}")


@dataclass(frozen=True)
class Snapshot:
    """A complete snapshot: ``blocks`` files, each one block's tensors as raw bytes.

    Integer tensors are stored in the narrowest dtype that holds their values (see
    ``_write_blocks``) and come back in it: cast them where it is cheapest (after a gather).
    """

    path: str
    blocks: int
    dtypes: tuple[str, ...]
    element_spec: Any

    def files(self) -> tf.Tensor:
        """The block files, ``[blocks]`` strings."""
        return tf.constant([_block_file(self.path, i) for i in range(self.blocks)], tf.string)

    def dataset(self, shuffle_seed: int | None = None) -> tf.data.Dataset:
        """The blocks one by one, in written order or a new seeded order each epoch."""
        files = tf.data.Dataset.from_tensor_slices(self.files())
        if shuffle_seed is not None and self.blocks > 1:
            files = files.shuffle(self.blocks, seed=shuffle_seed,
                                  reshuffle_each_iteration=True)
        return host_map(files, self._read, num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=True)

    def _read(self, name: tf.Tensor) -> Any:
        specs = tf.nest.flatten(self.element_spec)
        dtypes = [np.dtype(d) for d in self.dtypes]
        sizes = _row_bytes(specs, dtypes)
        data = tf.io.read_file(name)
        rows = tf.strings.length(data) // sum(sizes)
        parts, offset = [], 0
        for spec, dtype, size in zip(specs, dtypes, sizes, strict=True):
            raw = tf.strings.substr(data, rows * offset, rows * size)
            parts.append(tf.reshape(tf.io.decode_raw(raw, tf.as_dtype(dtype)),
                                    [-1, *spec.shape[1:]]))
            offset += size
        return tf.nest.pack_sequence_as(self.element_spec, parts)


def write_snapshot(dataset: tf.data.Dataset, root: str, name: str, key: str,
                   describe: dict[str, Any] | None = None) -> Snapshot:
    """The snapshot of ``dataset`` for ``key``, written first if absent.

    Elements are blocks of examples: nests of numeric tensors whose first dimension may
    vary and whose other dimensions are static. The write is one full pass over
    ``dataset`` into a temporary directory, marked complete and then renamed into place,
    so an interrupted run never leaves a snapshot that a later run would half-read, nor
    an unmarked one that every later run would rewrite and discard.
    """
    path = snapshot_dir(root, name, key)
    marker = os.path.join(path, _DONE)
    if tf.io.gfile.exists(marker):
        log.info("data: reading %s snapshot %s", name, path)
        with tf.io.gfile.GFile(marker) as fh:
            meta = json.loads(fh.read())
        return Snapshot(path, int(meta["blocks"]), tuple(meta["dtypes"]), dataset.element_spec)
    log.info("data: writing %s snapshot %s", name, path)
    tf.io.gfile.makedirs(root)
    tmp = os.path.join(root, f".{name}-{key}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        tf.io.gfile.makedirs(tmp)
        blocks, dtypes = _write_blocks(dataset, tmp)
    except (tf.errors.OpError, OSError) as err:
        _remove(tmp)
        message = err.message if isinstance(err, tf.errors.OpError) else str(err)
        raise DataError(f"data.snapshot: cannot write {tmp} ({message.splitlines()[0]}); "
                        "check that the directory is writable or set data.snapshot=''"
                        ) from None
    # The marker goes in before the rename: the directory appears complete or not at all.
    with tf.io.gfile.GFile(os.path.join(tmp, _DONE), "w") as fh:
        fh.write(json.dumps({"key": key, "name": name, "blocks": blocks,
                             "dtypes": dtypes, **(describe or {})}, default=str))
    if tf.io.gfile.exists(marker):  # a concurrent writer won the race; keep its (same) copy
        _remove(tmp)
    else:
        if tf.io.gfile.exists(path):  # unmarked: an older writer died before marking it
            _remove(path)
        tf.io.gfile.rename(tmp, path)
    return Snapshot(path, blocks, tuple(dtypes), dataset.element_spec)


def _block_file(path: str, block: int) -> str:
    return os.path.join(path, f"{block:06d}.raw")


def _write_blocks(dataset: tf.data.Dataset, path: str) -> tuple[int, list[str]]:
    """Write each element (block) as one file: its tensors' raw little-endian bytes, in turn.

    Returns the number of blocks and the stored dtype of each tensor: integer tensors are
    stored in the narrowest of uint8/uint16/int16 that holds every value written (token
    ids under 65536 take half the bytes; 0/1 masks a quarter), since what a replay costs
    grows with the bytes it reads. Narrowing needs the whole range, so the files are
    rewritten narrowed after the pass. One file per block, not per tensor: each
    ``read_file`` costs ~80 us, a tenth of a short corpus's replay at four per block.
    """
    specs = tf.nest.flatten(dataset.element_spec)
    for spec in specs:
        if not spec.shape[1:].is_fully_defined() or spec.dtype in (tf.string, tf.variant):
            raise ValueError(f"snapshot blocks need numeric tensors with static inner "
                             f"dimensions, got {spec}")
    wide = [np.dtype(spec.dtype.as_numpy_dtype) for spec in specs]
    lows: list[int | None] = [None] * len(specs)
    highs: list[int | None] = [None] * len(specs)
    blocks = 0
    for blocks, element in enumerate(dataset.as_numpy_iterator(), start=1):
        values = tf.nest.flatten(element)
        for part, value in enumerate(values):
            if value.dtype.kind in "iu" and value.size:
                low, high = int(value.min()), int(value.max())
                lows[part] = low if lows[part] is None else min(lows[part], low)
                highs[part] = high if highs[part] is None else max(highs[part], high)
        _write_block(_block_file(path, blocks - 1), values)
    narrow = [next(d for d in (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.int16), w)
                   if np.iinfo(d).min <= low and high <= np.iinfo(d).max)
              if low is not None else w
              for w, low, high in zip(wide, lows, highs, strict=True)]
    if narrow != wide:
        for block in range(blocks):
            name = _block_file(path, block)
            with tf.io.gfile.GFile(name, "rb") as fh:
                values = _split_block(fh.read(), specs, wide)
            _write_block(name, [v.astype(d) for v, d in zip(values, narrow, strict=True)])
    return blocks, [d.name for d in narrow]


def _row_bytes(specs: list[tf.TensorSpec], dtypes: list[np.dtype]) -> list[int]:
    return [int(np.prod(spec.shape[1:], dtype=np.int64)) * dtype.itemsize
            for spec, dtype in zip(specs, dtypes, strict=True)]


def _write_block(name: str, values: list[np.ndarray]) -> None:
    with tf.io.gfile.GFile(name, "wb") as fh:
        for value in values:
            fh.write(np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"),
                                                        copy=False).tobytes())


def _split_block(data: bytes, specs: list[tf.TensorSpec],
                 dtypes: list[np.dtype]) -> list[np.ndarray]:
    sizes = _row_bytes(specs, dtypes)
    rows, offset, values = len(data) // max(1, sum(sizes)), 0, []
    for size, dtype in zip(sizes, dtypes, strict=True):
        values.append(np.frombuffer(data, dtype.newbyteorder("<"), rows * size // dtype.itemsize,
                                    offset))
        offset += rows * size
    return values


# The function attribute that sends a tf.data function down TensorFlow's single-device path.
_HOST_FUNCTION_ATTRS = {"experimental_ints_on_device": True}
# False restores plain Dataset.map (scripts/bench_input.py --compare-maps times both).
HOST_MAP = True


def host_map(dataset: tf.data.Dataset, fn: Callable, *, num_parallel_calls: int | None = None,
             deterministic: bool | None = None) -> tf.data.Dataset:
    """``dataset.map(fn, num_parallel_calls, deterministic)``, started without Grappler.

    tf.data instantiates a map's function for every new iterator, i.e. every epoch of a
    finite pipeline (fit's validation pass, a pipeline read epoch by epoch). TensorFlow
    instantiates it as a multi-device function and runs the Grappler meta-optimizer over
    its graph each time. Measured on a 2-core CPU, that took 120-220 ms for the tokeniser
    map and 30-100 ms for a snapshot replay's maps, as much as the replay's whole epoch of
    work. A function carrying ``experimental_ints_on_device`` takes the
    single-device path instead (``FunctionMetadata`` in TF's captured_function.cc; TF's own
    ``copy_to_device`` uses it) and starts in under 1 ms. tf.data functions run on the
    host CPU, where int32 tensors live in host memory either way, so nothing else changes.

    ``Dataset.map`` has no parameter for function attributes, so the dataset is built
    from the same private pieces ``Dataset.map`` uses (``compat.host_map_dataset``, on the
    TensorFlow versions tfapp tested it on). If they are missing, or in tf.data debug
    mode, this is plain ``Dataset.map``.
    The dataset turns off the ``inject_prefetch`` rewrite, which cannot read functions
    with several int32 outputs on this path; tfapp adds its own prefetch (``data.prefetch``).
    """
    if HOST_MAP:
        mapped = compat.host_map_dataset(dataset, fn, num_parallel_calls, deterministic,
                                         _HOST_FUNCTION_ATTRS)
        if mapped is not None:
            options = tf.data.Options()
            options.experimental_optimization.inject_prefetch = False
            return mapped.with_options(options)
    return dataset.map(fn, num_parallel_calls=num_parallel_calls, deterministic=deterministic)


def _remove(path: str) -> None:
    if path.startswith("gs://"):
        if tf.io.gfile.exists(path):
            tf.io.gfile.rmtree(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def apply_cache(dataset: tf.data.Dataset, cache: str, name: str, key: str) -> tf.data.Dataset:
    """``cache=memory`` keeps elements in RAM; a path prefix caches to keyed files."""
    if not cache:
        return dataset
    if cache == "memory":
        return dataset.cache()
    parent = os.path.dirname(cache)
    if parent:
        tf.io.gfile.makedirs(parent)
    return dataset.cache(f"{cache}-{name}-{key}")


def _widen(label_dtype: tf.DType) -> Callable:
    def widen(features, labels):
        return ({k: tf.cast(v, tf.int32) for k, v in features.items()},
                tf.cast(labels, label_dtype))
    return widen


def _permute_and_cut(seed: int, batch: int, label_dtype: tf.DType) -> Callable:
    """The map fn ``(pool, r) -> batches``: a seeded row permutation of one pool, widened.

    The gather moves the stored narrow rows (uint8 masks, a snapshot's uint8/uint16 ids and
    labels); the cast to int32 / ``label_dtype`` comes after it. The pool is cut into
    whole batches by a reshape, dropping its last ``len % batch`` rows.
    """
    def permute_and_cut(element, r):
        features, labels = element
        # A seeded Fisher-Yates shuffle of the row indices: a third of the cost of
        # argsort over random keys (0.4 vs 1.2 ms for a pool of 9216 rows).
        rows = tf.shape(labels)[0]
        idx = tf.random.experimental.stateless_shuffle(
            tf.range(rows), seed=tf.stack([r, tf.constant(seed, tf.int64)]))
        idx = idx[:rows // batch * batch]

        def cut(v, dtype):
            return tf.reshape(tf.cast(tf.gather(v, idx), dtype), [-1, batch, *v.shape[1:]])

        return ({k: cut(v, tf.int32) for k, v in features.items()},
                cut(labels, label_dtype))

    return permute_and_cut


def _shuffle_blocks(dataset: tf.data.Dataset, buffer: int, block: int, n: int,
                    seed: int, batch: int, label_dtype: tf.DType,
                    blocks_shuffled: bool = False) -> tf.data.Dataset:
    """Shuffle stored (narrow) blocks into int32 training batches without unbatching them.

    Each epoch the blocks come in a new seeded order (here, or already when
    ``blocks_shuffled``: a snapshot shuffles its block files, so it never holds more
    than the pools in flight), are joined into pools of about ``buffer`` examples
    (``rebatch``, no per-example work) and the rows of each pool are permuted -- the
    mixing of a ``shuffle(buffer)`` at the cost of one gather per pool. Each pool is then
    cut into whole batches by a reshape; ``unbatch`` hands them out one by one, which
    costs less per batch than a ``rebatch`` over the pools. Blocks are multiples of
    ``batch``, so only the last pool has a partial batch, and dropping it drops exactly
    the remainder ``drop_remainder`` would.
    """
    num_blocks = -(-n // block)
    if not blocks_shuffled:
        dataset = dataset.shuffle(num_blocks, seed=seed, reshuffle_each_iteration=True)
    pool = max(1, min(buffer, n) // block)
    if pool > 1:
        dataset = dataset.rebatch(pool * block)
    noise = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
    return host_map(tf.data.Dataset.zip((dataset, noise)),
                    _permute_and_cut(seed, batch, label_dtype),
                    num_parallel_calls=tf.data.AUTOTUNE).unbatch()


def stored_batches(blocks: tf.data.Dataset, data_cfg: DataConfig, name: str, key: str, *,
                   block: int, batch: int, examples: int, training: bool, seed: int,
                   describe: dict[str, Any] | None = None) -> tf.data.Dataset:
    """Batches of ``batch`` from ``blocks`` computed once: ``data.snapshot``, ``data.cache``.

    ``blocks`` is one pass over the examples of one input pipeline (``examples`` of them)
    in blocks of ``block`` rows (the last may be shorter; ``block`` a multiple of
    ``batch``), each element ``(features, labels)`` with ``features`` a dict of integer
    tensors. ``key`` must hash everything that decides the blocks' values (see
    ``pipeline_key``); ``name`` is the split. In order: the snapshot is written (first
    run) and replayed, the cache is applied, then training with ``data.shuffle_buffer``
    shuffles the stored blocks into batches (``_shuffle_blocks``) and anything else cuts
    them into batches in order. Training drops the remainder; features come back int32,
    labels in their dtype in ``blocks``.
    """
    label_dtype = blocks.element_spec[1].dtype
    shuffle = training and data_cfg.shuffle_buffer > 0
    snapshot = None
    if data_cfg.snapshot:
        snapshot = write_snapshot(blocks, data_cfg.snapshot, name, key, describe=describe)
    # Read straight into the shuffle, a snapshot reads its block files in a new order each
    # epoch; a cache after it must see a fixed order (it would freeze the first).
    files_shuffled = shuffle and snapshot is not None and not data_cfg.cache
    dataset = blocks if snapshot is None else snapshot.dataset(seed if files_shuffled else None)
    dataset = apply_cache(dataset, data_cfg.cache, name, key)
    if shuffle:
        return _shuffle_blocks(dataset, data_cfg.shuffle_buffer, block, examples, seed, batch,
                               label_dtype, blocks_shuffled=files_shuffled)
    dataset = host_map(dataset, _widen(label_dtype))
    return dataset.rebatch(batch, drop_remainder=training)


def make_options(data_cfg: DataConfig, *, sharded_by_context: bool,
                 deterministic: bool | None = None) -> tf.data.Options:
    """tf.data options: autotuning, parallel maps, determinism, sharding policy."""
    options = tf.data.Options()
    options.autotune.enabled = True
    options.deterministic = bool(data_cfg.deterministic if deterministic is None
                                 else deterministic)
    options.experimental_optimization.map_parallelization = True
    options.experimental_optimization.parallel_batch = True
    # We shard explicitly per InputContext; otherwise in-memory sources shard by element.
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.OFF if sharded_by_context
        else tf.data.experimental.AutoShardPolicy.DATA)
    return options


#: data.service.processing_mode -> tf.data's sharding policy
SERVICE_MODES = {"distributed_epoch": "DYNAMIC", "dynamic": "DYNAMIC",
                 "parallel_epochs": "OFF", "off": "OFF", "file": "FILE"}


def serialized_graph_bytes(dataset: tf.data.Dataset) -> int:
    """Size of the graph ``dataset`` is sent to a tf.data dispatcher as (its serialised
    GraphDef: what ``register_dataset`` transmits)."""
    graph = tf.raw_ops.DatasetToGraphV2(input_dataset=tf.data.experimental.to_variant(dataset),
                                        external_state_policy=0, strip_device_assignment=True)
    return int(tf.strings.length(graph))


def apply_service(dataset: tf.data.Dataset, service: DataServiceConfig,
                  name: str) -> tf.data.Dataset:
    """Send the pipeline built so far to a tf.data service dispatcher, if configured.

    ``processing_mode`` picks tf.data's sharding policy (``SERVICE_MODES``): DYNAMIC hands
    shard files out to the workers on request (each example once per epoch), OFF gives
    every worker a full epoch, FILE gives each worker a fixed set of files.
    """
    if not service.address:
        return dataset
    address = service.address
    if "://" not in address:
        address = "grpc://" + address
    policy = getattr(tf.data.experimental.service.ShardingPolicy,
                     SERVICE_MODES[service.processing_mode])
    job_name = f"{service.job_name}-{name}" if service.job_name else None
    log.info("data: the %s pipeline goes to the tf.data service at %s (%s sharding; a graph "
             "of %.0f KB)", name, address, policy.name, serialized_graph_bytes(dataset) / 1024)
    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=policy, service=address, job_name=job_name))


def finalize(dataset: tf.data.Dataset, data_cfg: DataConfig, name: str, *,
             sharded_by_context: bool, deterministic: bool, training: bool = False
             ) -> tf.data.Dataset:
    """The last stages of every pipeline: ``data.service``, ``data.prefetch``, options.

    ``deterministic`` is the element order the caller needs. Under the service a training
    pipeline is one pass, repeated here (a new job epoch per pass).
    """
    dataset = apply_service(dataset, data_cfg.service, name)
    if training and data_cfg.service.address:
        dataset = dataset.repeat()
    if data_cfg.prefetch:
        dataset = dataset.prefetch(tf.data.AUTOTUNE)
    return dataset.with_options(make_options(data_cfg, sharded_by_context=sharded_by_context,
                                             deterministic=deterministic))


#: a file prefix: every training pipeline appends the example ids of each batch it makes to
#: PREFIX.<pipeline>, one line "<batch> <id> <id> ...": a diagnostic of what the input
#: delivered (tests check exact resume with it)
INPUT_LOG = "TFAPP_INPUT_LOG"


def log_ids(dataset: tf.data.Dataset, *, first_batch: int = 0, pipeline: int = 0
            ) -> tf.data.Dataset:
    """With ``$TFAPP_INPUT_LOG`` set, append each batch's ``id`` s to the log (see
    ``INPUT_LOG``); batches are numbered from ``first_batch``. Without it, ``dataset``."""
    prefix = os.environ.get(INPUT_LOG)
    if not prefix:
        return dataset
    target = f"{prefix}.{pipeline}"

    def append(number, ids):
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(f"{int(number)} {' '.join(str(int(i)) for i in ids.numpy())}\n")
        return np.int64(0)

    def record(number, batch):
        done = tf.py_function(append, [number, batch["id"]], tf.int64)
        with tf.control_dependencies([done]):
            return tf.nest.map_structure(tf.identity, batch)

    return dataset.enumerate(start=first_batch).map(record)


def distribute(strategy: tf.distribute.Strategy,
               dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset]) -> Any:
    """One input pipeline per input worker, sharded by its ``InputContext``.

    ``dataset_fn(input_context)`` must shard by ``input_context.input_pipeline_id`` and
    batch to ``input_context.get_per_replica_batch_size(global_batch)`` --
    ``make_classification_dataset(..., input_context=ctx)`` does both. The result feeds
    ``model.fit`` directly; each step gets one per-replica batch per replica, i.e. one
    global batch in total.
    """
    return strategy.distribute_datasets_from_function(dataset_fn)


def distribute_split(strategy: tf.distribute.Strategy,
                     make: Callable[[tf.distribute.InputContext | None], tf.data.Dataset],
                     *, training: bool) -> Any:
    """``distribute`` of one split's dataset function; the training stream repeats, as
    fit runs a fixed number of steps per epoch from one iterator and must not run dry at
    the end of a pass."""
    def dataset_fn(input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        ds = make(input_context)
        return ds.repeat() if training else ds

    return distribute(strategy, dataset_fn)


@dataclass(frozen=True)
class Shard:
    """This input pipeline's part of a split: shard ``index`` of ``count``, ``size``
    examples, batches of ``batch`` (per replica)."""

    index: int
    count: int
    size: int
    batch: int


def local_shard(input_context: tf.distribute.InputContext | None, num_examples: int,
                global_batch: int, *, training: bool, what: str) -> Shard:
    """The shard an ``InputContext`` (from ``distribute``) reads, or the whole split
    without one; a DataError naming ``what`` when a training shard holds less than one
    batch (training drops incomplete batches, so it would yield nothing)."""
    count, index, batch = 1, 0, global_batch
    if input_context is not None:
        count, index = input_context.num_input_pipelines, input_context.input_pipeline_id
        batch = input_context.get_per_replica_batch_size(global_batch)
    size = len(range(index, num_examples, count))
    if training and size < batch:
        raise DataError(
            f"{what} has {num_examples} example(s)"
            + (f" ({size} in input shard {index} of {count})" if count > 1 else "")
            + f", fewer than one batch of {batch}; training drops incomplete batches, "
            "so lower data.batch_size or add data")
    return Shard(index=index, count=count, size=size, batch=batch)
