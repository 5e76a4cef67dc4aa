"""Optimizer, schedules and gradient accumulation, on tiny real models."""

from __future__ import annotations

import json
import math

from tfapp.config import ConfigError, OptimizerConfig
from tfapp.training.accumulation import AccumulatingModel, wrap_for_accumulation
from tfapp.training.optimizers import NO_DECAY, FusedAdamW, build_optimizer, build_schedule

import numpy as np
import pytest
import tensorflow as tf
from conftest import run_two_workers, two_replica_results


def test_linear_warmup_then_decay():
    sched = build_schedule(OptimizerConfig(schedule="linear", warmup_ratio=0.1),
                           peak=1.0, total_steps=100)
    lrs = [float(sched(s)) for s in (0, 4, 9, 10, 55, 100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[1] == pytest.approx(0.5)
    assert lrs[2] == pytest.approx(1.0) and lrs[3] == pytest.approx(1.0)
    assert lrs[4] == pytest.approx(0.5) and lrs[5] == pytest.approx(0.0)


def test_one_cycle_and_constant():
    cyc = build_schedule(OptimizerConfig(schedule="one_cycle", warmup_ratio=0.0),
                         peak=2.0, total_steps=10)
    values = [float(cyc(s)) for s in range(11)]
    assert max(values) == pytest.approx(2.0) and values.index(max(values)) == 2  # 30% warmup
    assert values[-1] == pytest.approx(0.0, abs=1e-6)
    const = build_schedule(OptimizerConfig(schedule="constant", warmup_ratio=0.0),
                           peak=0.3, total_steps=10)
    assert [float(const(s)) for s in (0, 9)] == pytest.approx([0.3, 0.3])


def test_one_cycle_is_keras_cosine_decay_but_for_the_warmup_step():
    """one_cycle's annealing is tf-keras's CosineDecay(warmup_target=peak) step for step;
    the warm-up is Keras's one step ahead (Keras gives lr 0 at step 0, a wasted step): why
    WarmupSchedule is kept (tfapp/training/optimizers.py)."""
    ours = build_schedule(OptimizerConfig(schedule="one_cycle", warmup_ratio=0.1),
                          peak=2.0, total_steps=100)
    keras = tf.keras.optimizers.schedules.CosineDecay(0.0, decay_steps=90, warmup_target=2.0,
                                                      warmup_steps=10)
    np.testing.assert_allclose([float(ours(s)) for s in range(10, 101)],
                               [float(keras(s)) for s in range(10, 101)], atol=1e-6)
    np.testing.assert_allclose([float(ours(s)) for s in range(10)],
                               [float(keras(s + 1)) for s in range(10)], atol=1e-6)
    assert float(keras(0)) == 0.0 and float(ours(0)) == pytest.approx(0.2)


def test_adamw_skips_decay_on_biases_and_layer_norm():
    inp = tf.keras.Input((4,))
    h = tf.keras.layers.Dense(4, name="dense")(inp)
    out = tf.keras.layers.LayerNormalization(name="layer_norm")(h)
    model = tf.keras.Model(inp, out)
    opt = build_optimizer(OptimizerConfig(name="adamw", weight_decay=0.1), peak=1e-3,
                          total_steps=10)
    opt.build(model.trainable_variables)
    # One step of zero gradients from weights of ones: Adam's update is 0, so a weight
    # moves only if it is decayed.
    for v in model.trainable_variables:
        v.assign(tf.ones_like(v))
    opt.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables])
    decayed = {v.name.split("/")[-1].split(":")[0] + "@" + v.name.split("/")[0]
               for v in model.trainable_variables if not np.all(v.numpy() == 1.0)}
    assert decayed == {"kernel@dense"}


@pytest.mark.parametrize("mirrored", [False, True])
def test_fused_adamw_matches_keras_adamw(mirrored):
    # The fused kernel must be the same maths as tf.keras's AdamW (decay exclusions,
    # bias correction, epsilon), also inside a distribution strategy's update context.
    def run(cls) -> list[np.ndarray]:
        strategy = (tf.distribute.MirroredStrategy(["/cpu:0"]) if mirrored
                    else tf.distribute.get_strategy())
        with strategy.scope():
            kernel = tf.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
                                 name="kernel")
            bias = tf.Variable(np.ones(4, np.float32), name="bias")
            table = tf.Variable(np.full((5, 2), 0.5, np.float32), name="word_embeddings")
            opt = cls(learning_rate=1e-2, weight_decay=0.1, epsilon=1e-6)
            opt.exclude_from_weight_decay(var_names=list(NO_DECAY))

        @tf.function
        def step(i):
            def apply():
                t = tf.cast(i, tf.float32)
                # An embedding gather's gradient: IndexedSlices over rows 1 and 3.
                rows = tf.IndexedSlices(tf.fill([2, 2], 0.1 * t + 0.3), tf.constant([1, 3]),
                                        tf.constant([5, 2]))
                grads = [tf.sin(3.0 * kernel + t), tf.cos(bias + t), rows]
                opt.apply_gradients(zip(grads, [kernel, bias, table], strict=True))
            strategy.run(apply)

        for i in range(5):
            step(tf.constant(i))
        return [kernel.numpy(), bias.numpy(), table.numpy()]

    fused, reference = run(FusedAdamW), run(tf.keras.optimizers.AdamW)
    assert not np.allclose(fused[0], np.linspace(-1, 1, 12).reshape(3, 4))  # it trained
    assert not np.allclose(fused[2][[1, 3]], 0.5)
    for a, b in zip(fused, reference, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert isinstance(build_optimizer(OptimizerConfig(name="adamw"), peak=1e-3,
                                      total_steps=10), FusedAdamW)


def _tiny(acc: int):
    tf.keras.utils.set_random_seed(1)
    inp = tf.keras.Input((4,))
    out = tf.keras.layers.Dense(1)(tf.keras.layers.Dense(8, activation="tanh")(inp))
    model = tf.keras.Model(inp, out)
    if acc > 1:
        model = AccumulatingModel.wrap(model, acc)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse", steps_per_execution=2)
    return model


def test_accumulating_two_batches_equals_one_double_batch():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")
    accumulated, plain = _tiny(2), _tiny(1)
    accumulated.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    plain.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    assert int(accumulated.optimizer.iterations) == 2  # 4 batches -> 2 updates
    for a, b in zip(accumulated.trainable_weights, plain.trainable_weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)


def test_accumulation_refuses_a_model_with_its_own_train_step():
    class OwnStep(tf.keras.Model):
        def train_step(self, data):
            return {}

    inp = tf.keras.Input((4,))
    own = OwnStep(inp, tf.keras.layers.Dense(1)(inp))
    assert wrap_for_accumulation(own, 1) is own
    with pytest.raises(ConfigError, match="needs a functional model .*OwnStep"):
        wrap_for_accumulation(own, 2)


@pytest.mark.slow
def test_accumulation_on_two_replicas_equals_one_step_of_the_larger_global_batch(
        tmp_path_factory):
    """MirroredStrategy over 2 logical CPUs (tests/workers/two_replicas.py: devices are
    fixed at start): 4 accumulated batches of global batch 8 give the update of one batch
    of 32, with Adam (whose moments would drift if a batch that does not apply touched
    them)."""
    out = two_replica_results(tmp_path_factory)["accumulation"]
    assert out["merge_call"]  # the replicas synchronise through merge_call here
    assert out["updates"] == [2, 2, 2]
    accumulated, plain, one = ([np.array(w) for w in ws] for ws in out["weights"])
    moved = np.concatenate([w.ravel() for w in accumulated])
    assert np.abs(moved - np.array(out["start"])).max() > 0.05  # it trained
    for a, b, c in zip(accumulated, plain, one, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
        np.testing.assert_allclose(a, c, atol=1e-6)


@pytest.mark.slow
def test_accumulation_on_two_worker_processes_matches_the_larger_batch(tmp_path):
    """Two MultiWorkerMirrored workers, each reading its own half: accumulating 3 batches
    of 4 per replica equals steps of 12 per replica, and both workers end equal."""
    w0, w1 = (np.load(p) for p in run_two_workers("tests/workers/multi_worker_accumulate.py",
                                                   ["3"], tmp_path, timeout=300))
    assert int(w0["replicas"]) == 2
    assert w0["updates"].tolist() == [6, 6] and w1["updates"].tolist() == [6, 6]
    n = len([k for k in w0.files if k.startswith("arr_")]) // 2
    accumulated = [w0[f"arr_{i}"] for i in range(n)]
    plain = [w0[f"arr_{i + n}"] for i in range(n)]
    assert np.abs(np.concatenate([w.ravel() for w in accumulated]) - w0["start"]).max() > 0.05
    for i in range(2 * n):
        np.testing.assert_array_equal(w0[f"arr_{i}"], w1[f"arr_{i}"])
    for a, b in zip(accumulated, plain, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def _tiny_fit(callbacks, *, epochs, initial_epoch=0, lr=0.1):
    tf.keras.utils.set_random_seed(3)
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse")
    x = np.random.default_rng(0).normal(size=(32, 2)).astype("float32")
    model.fit(x, x.sum(axis=1), epochs=epochs, initial_epoch=initial_epoch, verbose=0,
              callbacks=callbacks)
    return model


def test_history_log_drops_the_rows_a_resumed_run_repeats(tmp_path):
    from tfapp.training.callbacks import HistoryLog

    path = tmp_path / "history.csv"
    _tiny_fit([HistoryLog(path)], epochs=3)
    whole = path.read_text().splitlines()
    # A kill after epoch 2's row but before its backup, mid-way through writing another:
    path.write_text("\n".join(whole) + "\n3,0.5")
    _tiny_fit([HistoryLog(path)], epochs=3, initial_epoch=2)  # resumes at epoch index 2
    rows = path.read_text().splitlines()
    assert [r.split(",")[0] for r in rows] == ["epoch", "0", "1", "2"]
    assert rows[:3] == whole[:3]  # rows before the resumed epoch are kept as written
    _tiny_fit([HistoryLog(path)], epochs=3, initial_epoch=3)  # nothing left to run
    assert path.read_text().splitlines() == rows


def test_history_leaves_out_columns_no_epoch_logged(tmp_path):
    from tfapp.training.callbacks import read_history

    path = tmp_path / "history.csv"
    # Keras's CSVLogger writes a val_ column per metric even when nothing validates.
    path.write_text("epoch,loss,val_auc,val_loss\n0,0.9,,\n1,0.7,0.61,\n")
    history = read_history(path)
    assert list(history) == ["loss", "val_auc"]
    assert history["loss"] == [0.9, 0.7]
    assert math.isnan(history["val_auc"][0]) and history["val_auc"][1] == 0.61


def test_early_stopping_patience_survives_a_resume(tmp_path):
    """history.csv holds val_loss 1.0, 0.5, 0.6 (epochs 0-2); with patience 2, a resumed
    epoch 3 that does not beat 0.5 is the second epoch without improvement: stop. Keras's
    own EarlyStopping forgets epochs 0-2 and would go on."""
    from tfapp.training.callbacks import ResumableEarlyStopping

    path = tmp_path / "history.csv"
    path.write_text("epoch,loss,val_loss\n0,1,1.0\n1,1,0.5\n2,1,0.6\n")
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])

    def resumed(cb, value):
        cb.set_model(model)
        model.stop_training = False
        cb.on_train_begin()
        cb.on_epoch_begin(3)
        cb.on_epoch_end(3, {"val_loss": value})
        return model.stop_training

    assert resumed(ResumableEarlyStopping(path, monitor="val_loss", patience=2), 0.7)
    assert not resumed(ResumableEarlyStopping(path, monitor="val_loss", patience=2), 0.4)
    assert not resumed(ResumableEarlyStopping(path, monitor="val_loss", patience=3), 0.7)
    assert not resumed(tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=2), 0.7)


def test_best_checkpoint_is_recorded_after_it_is_complete_and_only_improves(tmp_path):
    from tfapp.run_layout import RunLayout
    from tfapp.training.callbacks import BestCheckpoint

    layout = RunLayout(tmp_path)
    model = _tiny_fit([BestCheckpoint(layout, "loss", "min")], epochs=4)
    record = json.loads(layout.best_record.read_text())
    assert record["epoch"] == 4 and record["monitor"] == "loss"  # the loss falls each epoch
    files = sorted(p.name for p in layout.checkpoints.glob("best-*"))
    assert files == [f"{record['checkpoint']}.data-00000-of-00001",
                     f"{record['checkpoint']}.index"]  # earlier bests deleted
    fresh = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
    fresh.load_weights(str(layout.best_checkpoint))
    np.testing.assert_allclose(fresh.get_weights()[0], model.get_weights()[0])
    # A resumed run knows the best so far: a worse epoch (a diverging lr) replaces nothing,
    # and an unrecorded checkpoint a kill left behind is deleted.
    (layout.checkpoints / "best-009-dead00.index").write_text("half")
    _tiny_fit([BestCheckpoint(layout, "loss", "min")], epochs=5, initial_epoch=4, lr=5.0)
    assert json.loads(layout.best_record.read_text()) == record
    assert not (layout.checkpoints / "best-009-dead00.index").exists()


def test_ema_validation_and_best_checkpoint_use_the_averaged_weights(tmp_path):
    from tfapp.run_layout import RunLayout
    from tfapp.training.callbacks import AveragedWeightsForValidation, BestCheckpoint

    tf.keras.utils.set_random_seed(3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 2)).astype("float32")
    y = x.sum(axis=1)
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05, use_ema=True, ema_momentum=0.9),
                  loss="mse")
    layout = RunLayout(tmp_path)
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0, validation_data=(x, y),
                        callbacks=[BestCheckpoint(layout, "val_loss", "min"),
                                   AveragedWeightsForValidation()])
    # fit ends by copying the averages into the model (tf-keras's finalize_variable_values):
    # the last validation loss is the averaged model's, not the raw weights' (which differ).
    averaged_loss = model.evaluate(x, y, verbose=0)
    assert history.history["val_loss"][-1] == pytest.approx(averaged_loss, rel=1e-5)
    assert history.history["val_loss"][-1] != pytest.approx(history.history["loss"][-1],
                                                             rel=1e-2)
    record = json.loads(layout.best_record.read_text())
    assert record["epoch"] == 3  # the averaged loss still falls each epoch here
    saved = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
    saved.load_weights(str(layout.best_checkpoint)).expect_partial()
    np.testing.assert_allclose(saved.get_weights()[0], model.get_weights()[0], rtol=1e-6)
    # The averages travel with the checkpoint (as with the backup): a model restored from it
    # goes on averaging from them, not from its restored weights.
    from tfapp import compat

    saved.compile(optimizer=tf.keras.optimizers.SGD(0.05, use_ema=True, ema_momentum=0.9),
                  loss="mse")
    saved.optimizer.build(saved.trainable_variables)
    saved.load_weights(str(layout.best_checkpoint)).expect_partial()
    averages = compat.ema_averages(saved.optimizer, saved.trainable_variables)
    np.testing.assert_allclose(averages[0].numpy(), model.get_weights()[0], rtol=1e-6)


def test_training_callbacks_leave_the_step_logs_on_the_device(tmp_path, caplog):
    """tfapp's own training callbacks (the standard list with TensorBoard, early stopping,
    EMA validation and step logs) all take tensor logs: Keras hands the batch hooks the
    step's logs as tensors, so no execution ends with a device-to-host copy of them (one
    callback that did not declare it would make Keras convert them all to NumPy). The
    step log counts optimizer steps on the host and still prints the right steps."""
    from tfapp import compat
    from tfapp.config import ClassifierConfig
    from tfapp.run_layout import RunLayout
    from tfapp.training.callbacks import standard_callbacks
    from tfapp.training.step_logs import LearningRateLogger, StepLogger

    class Probe(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            compat.accept_tensor_logs(self)
            self.batches: list[int] = []
            self.kinds: set[type] = set()

        def on_train_batch_end(self, batch, logs=None):
            self.batches.append(batch)
            self.kinds.update(type(v) for v in logs.values())

    cfg = ClassifierConfig()
    cfg.trainer.log_every_steps = 2
    cfg.trainer.early_stopping_patience = 2
    cfg.optimizer.ema_decay = 0.9
    layout = RunLayout(tmp_path)
    callbacks, nan_stop = standard_callbacks(cfg, layout, backup=tmp_path / "backup",
                                             monitor="loss", has_validation=False)
    probe = Probe()
    callbacks += [LearningRateLogger(layout.logs / "train"), StepLogger(2, 16, 4), probe]
    tf.keras.utils.set_random_seed(3)
    model = tf.keras.Sequential([tf.keras.Input([2]), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"],
                  steps_per_execution=3)
    x = np.random.default_rng(0).normal(size=(32, 2)).astype("float32")
    with caplog.at_level("INFO", logger="tfapp"):
        model.fit(x, x.sum(axis=1), batch_size=4, epochs=2, verbose=0, callbacks=callbacks)
    # 8 batches an epoch in executions of 3: Keras calls the batch hooks at 2, 5, 7.
    assert probe.batches == [2, 5, 7, 2, 5, 7]
    assert probe.kinds and all(issubclass(k, tf.Tensor) for k in probe.kinds), probe.kinds
    assert nan_stop.bad_batch is None and not model.stop_training
    steps = [int(r.getMessage().split()[1].split("/")[0]) for r in caplog.records
             if r.getMessage().startswith("step ")]
    assert steps == [3, 6, 8, 11, 14, 16]  # the first execution end past each multiple of 2
    assert all("loss=" in r.getMessage() and "mae=" in r.getMessage()
               for r in caplog.records if r.getMessage().startswith("step "))


def test_non_finite_loss_stops_at_the_end_of_its_execution():
    """The NaN stop reads the loss (a tensor) once per execution: a loss that turns
    non-finite in the second execution stops training at that execution's end."""
    from tfapp.training.callbacks import NonFiniteLossStop

    stop = NonFiniteLossStop()
    model = tf.keras.Sequential([tf.keras.Input([2]), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse", steps_per_execution=2)
    x = np.ones([16, 2], np.float32)
    x[5] = np.inf  # batch 2 (batch size 2): the second execution covers batches 2 and 3
    model.fit(x, np.ones([16], np.float32), batch_size=2, epochs=1, verbose=0, shuffle=False,
              callbacks=[stop])
    assert stop.bad_batch == 3 and model.stop_training
