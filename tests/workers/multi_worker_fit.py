"""One worker of a two-process MultiWorkerMirrored run (TF_CONFIG comes from the env).

Fits a tiny Dense model for a few steps through tfapp's runtime and saves its final
weights and losses to OUT.npz, so the test can compare the workers.
Usage: python tests/workers/multi_worker_fit.py OUT.npz
"""

import sys

import tfapp  # noqa: F401
from tfapp import runtime
from tfapp.config import load_config

import numpy as np
import tensorflow as tf

cfg = load_config(None, ["runtime.strategy=multi_worker", "data.batch_size=8"])
rt = runtime.setup(cfg.runtime)
global_batch = rt.global_batch_size(cfg.data.batch_size)

rng = np.random.default_rng(0)  # same data on every worker; the strategy shards it
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1)) > 0).astype("float32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch).with_options(options)

with rt.strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="binary_crossentropy",
                  steps_per_execution=2)
history = model.fit(ds, epochs=3, steps_per_epoch=8, verbose=0)
np.savez(sys.argv[1], *model.get_weights(), losses=np.array(history.history["loss"]),
         replicas=rt.num_replicas, chief=rt.is_chief)
