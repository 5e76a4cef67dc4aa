"""The tf.data stages every task's pipeline ends with.

* ``finalize``: ``data.service.address`` (hand the pipeline to a tf.data service
  dispatcher, ``apply_service``), ``data.prefetch`` (``AUTOTUNE``) and the
  ``tf.data.Options``.
* ``log_ids``: a diagnostic of which examples each training batch holds.

How the examples are read (files, order, resume) is ``tfapp.data.input.stream``; where they
are stored preprocessed (``data.snapshot``, ``data.cache``) is ``tfapp.data.input.store``.
"""

from __future__ import annotations

import logging
import os

from tfapp.config import DataConfig, DataServiceConfig

import numpy as np
import tensorflow as tf

__all__ = ["apply_service", "finalize", "log_ids",
           "serialized_graph_bytes", "SERVICE_MODES", "INPUT_LOG"]

log = logging.getLogger("tfapp.data")


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
             sharded_by_context: bool, training: bool = False) -> tf.data.Dataset:
    """The last stages of every pipeline: ``data.service``, ``data.prefetch``, and the
    tf.data options (autotuning, parallel maps, the stream's order kept). Under the
    service a training pipeline is one pass, repeated here (a new job epoch per pass).
    """
    dataset = apply_service(dataset, data_cfg.service, name)
    if training and data_cfg.service.address:
        dataset = dataset.repeat()
    if data_cfg.prefetch:
        dataset = dataset.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.autotune.enabled = True
    options.deterministic = True
    options.experimental_optimization.map_parallelization = True
    options.experimental_optimization.parallel_batch = True
    # We shard explicitly per InputContext; otherwise in-memory sources shard by element.
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.OFF if sharded_by_context
        else tf.data.experimental.AutoShardPolicy.DATA)
    return dataset.with_options(options)


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
