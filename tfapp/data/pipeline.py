"""tf.data performance stages shared by tfapp's input pipelines.

Each stage is a ``DataConfig`` switch:

* ``snapshot`` -- the preprocessed examples are written once with ``Dataset.save`` into
  ``<data.snapshot>/<name>-<key>`` and read back with ``Dataset.load`` afterwards. ``key``
  hashes everything that decides the preprocessed values (the examples' content, the
  preprocessing's fingerprint, seq_length, shard), so an unchanged pipeline reuses the
  snapshot across runs and any change writes a new one. tf.data's own ``snapshot`` op keys
  by a hash of the dataset graph, which changes between processes for graphs holding
  loaded SavedModel functions or ``py_function``s; an explicit key is reproducible.
  The snapshot sits before shuffling, so it never freezes one random order.
* ``cache`` -- ``memory`` or a file prefix (keyed the same way, so a stale cache of other
  data is never read).
* ``shuffle_buffer``, ``prefetch`` (``AUTOTUNE``), ``deterministic`` and the
  ``tf.data.Options`` (autotune on, map parallelisation, sharding policy).
* ``service.address`` -- hand the pipeline to a tf.data service dispatcher.

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
from typing import Any

from tfapp.config import DataConfig, DataServiceConfig
from tfapp.data.errors import DataError

import tensorflow as tf

__all__ = ["pipeline_key", "apply_snapshot", "apply_cache", "make_options",
           "apply_service", "distribute", "SNAPSHOT_FORMAT_VERSION"]

log = logging.getLogger("tfapp.data")

# Bump when the layout of preprocessed elements changes, so old snapshots are not reused.
SNAPSHOT_FORMAT_VERSION = 2
_DONE = "tfapp_snapshot.json"


def pipeline_key(**parts: Any) -> str:
    """A short stable hash of the values that decide the preprocessed data."""
    blob = json.dumps({"v": SNAPSHOT_FORMAT_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def snapshot_dir(root: str, name: str, key: str) -> str:
    return os.path.join(root, f"{name}-{key}")


def apply_snapshot(dataset: tf.data.Dataset, root: str, name: str, key: str,
                   describe: dict[str, Any] | None = None) -> tf.data.Dataset:
    """Return a dataset read from the snapshot for ``key``, writing it first if absent.

    The write is one full pass over ``dataset`` into a temporary directory that is renamed
    into place and then marked complete, so an interrupted run never leaves a snapshot
    that a later run would half-read.
    """
    path = snapshot_dir(root, name, key)
    marker = os.path.join(path, _DONE)
    if tf.io.gfile.exists(marker):
        log.info("data: reading %s snapshot %s", name, path)
        return tf.data.Dataset.load(path, element_spec=dataset.element_spec)
    tf.io.gfile.makedirs(root)
    tmp = os.path.join(root, f".{name}-{key}.tmp-{uuid.uuid4().hex[:8]}")
    log.info("data: writing %s snapshot %s", name, path)
    try:
        dataset.save(tmp)
    except tf.errors.OpError as err:
        _remove(tmp)
        raise DataError(f"data.snapshot: cannot write {tmp} ({err.message.splitlines()[0]}); "
                        "check that the directory is writable or set data.snapshot=''") from None
    if tf.io.gfile.exists(path):  # a concurrent writer won the race; keep its copy
        _remove(tmp)
    else:
        tf.io.gfile.rename(tmp, path)
    with tf.io.gfile.GFile(marker, "w") as fh:
        fh.write(json.dumps({"key": key, "name": name, **(describe or {})}, default=str))
    return tf.data.Dataset.load(path, element_spec=dataset.element_spec)


def snapshot_exists(root: str, name: str, key: str) -> bool:
    return tf.io.gfile.exists(os.path.join(snapshot_dir(root, name, key), _DONE))


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


def apply_service(dataset: tf.data.Dataset, service: DataServiceConfig,
                  name: str) -> tf.data.Dataset:
    """Send the pipeline built so far to a tf.data service dispatcher, if configured.

    ``distributed_epoch`` splits one epoch across the workers (each element once);
    ``parallel_epochs`` lets every worker produce a full epoch.
    """
    if not service.address:
        return dataset
    address = service.address
    if "://" not in address:
        address = "grpc://" + address
    mode = (tf.data.experimental.service.ShardingPolicy.DYNAMIC
            if service.processing_mode == "distributed_epoch"
            else tf.data.experimental.service.ShardingPolicy.OFF)
    job_name = f"{service.job_name}-{name}" if service.job_name else None
    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=mode, service=address, job_name=job_name))


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
