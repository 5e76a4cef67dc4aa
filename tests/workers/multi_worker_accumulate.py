"""One worker of a two-process MultiWorkerMirrored run with gradient accumulation.

Each worker reads its own half of a fixed dataset (``distribute_datasets_from_function``)
and trains two copies of one tiny model from the same start: one accumulating K batches
of B per replica, one taking K*B per replica with no accumulation. With global-batch
semantics both see the same examples per update, so their weights must agree, and the
workers' with each other. Saves both weight lists and the update counts to OUT.npz.
Usage: python tests/workers/multi_worker_accumulate.py OUT.npz K
"""

import sys

import tfapp  # noqa: F401
from tfapp import runtime
from tfapp.config import load_config
from tfapp.training.accumulation import AccumulatingModel

import numpy as np
import tensorflow as tf

K, B, UPDATES = int(sys.argv[2]), 4, 6
cfg = load_config(None, ["runtime.strategy=multi_worker"])
rt = runtime.setup(cfg.runtime)

rng = np.random.default_rng(0)
x = rng.normal(size=(2 * K * B * UPDATES, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1)) > 0).astype("float32")


def dataset(per_replica: int):
    def fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        mine = slice(ctx.input_pipeline_id, None, ctx.num_input_pipelines)
        return tf.data.Dataset.from_tensor_slices((x[mine], y[mine])).batch(per_replica)
    return rt.strategy.distribute_datasets_from_function(fn)


STARTS: list[list[np.ndarray]] = []


def trained(accumulation: int, per_replica: int) -> tf.keras.Model:
    with rt.strategy.scope():
        tf.keras.utils.set_random_seed(7)
        inp = tf.keras.Input((8,))
        hidden = tf.keras.layers.Dense(16, activation="tanh")(inp)
        model = tf.keras.Model(inp, tf.keras.layers.Dense(1, activation="sigmoid")(hidden))
        if accumulation > 1:
            model = AccumulatingModel.wrap(model, accumulation)
        model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="binary_crossentropy")
    STARTS.append([w.numpy() for w in model.trainable_weights])
    model.fit(dataset(per_replica), epochs=1, steps_per_epoch=UPDATES * accumulation, verbose=0)
    return model


accumulated, plain = trained(K, B), trained(1, K * B)
weights = [w.numpy() for m in (accumulated, plain) for w in m.trainable_weights]
np.savez(sys.argv[1], *weights,
         start=np.concatenate([w.ravel() for w in STARTS[0]]),
         updates=[accumulated.optimizer.iterations.numpy(), plain.optimizer.iterations.numpy()],
         replicas=rt.num_replicas)
