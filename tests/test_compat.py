"""tfapp.compat: each private touch works on its internal path and on its public fallback."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

from tfapp import compat
from tfapp.config import ConfigError
from tfapp.training.optimizers import FusedAdamW
from tfapp.training.preemption import ResumableBackup

import keras_tuner as kt
import numpy as np
import pytest
import tensorflow as tf
from conftest import REPO, run_python, subprocess_env


def test_no_private_library_name_outside_the_compat_module():
    pattern = re.compile(r"tensorflow\.python|tf_keras\.src|keras_tuner\.src|"
                         r"\._(learning_rate|training_state|ckpt_saved|index_dict|var_key|"
                         r"momentums|velocities|is_graph_network|retry_queue|current_epoch|"
                         r"supports_tf_logs)\b")
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in (REPO / "tfapp").rglob("*.py")
                 if p.name != "compat.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if pattern.search(line)]
    assert offenders == []


def test_an_untested_library_version_takes_the_public_path(monkeypatch):
    assert compat.use_private("determinism_query")  # TF 2.20/2.21: the internal path
    monkeypatch.setitem(compat.TESTED_VERSIONS, "tensorflow", ((2, 99),))
    assert not compat.use_private("determinism_query")


def test_the_environment_forces_public_paths(monkeypatch):
    monkeypatch.setenv("TFAPP_COMPAT_PUBLIC", "adam_slots,determinism_query")
    assert not compat.use_private("adam_slots") and not compat.use_private("determinism_query")
    assert compat.use_private("onednn_query")
    monkeypatch.setenv("TFAPP_COMPAT_PUBLIC", "all")
    assert not any(compat.use_private(name) for name in compat.TOUCHES)
    with pytest.raises(KeyError, match="nope"):
        with compat.public_path("nope"):
            pass


@pytest.mark.parametrize("env_value, public", [("1", True), ("0", False), (None, None)])
def test_onednn_query_both_ways(monkeypatch, env_value, public):
    # tfapp turns oneDNN on for x86 at import; TensorFlow itself confirms it.
    assert compat.onednn_enabled() is True
    if env_value is None:
        monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    else:
        monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", env_value)
    with compat.public_path("onednn_query"):
        assert compat.onednn_enabled() is public


def test_determinism_query_and_reset_both_ways():
    # Op determinism is global to a process: check it in a fresh one.
    code = textwrap.dedent("""
        import tfapp
        from tfapp import compat
        import tensorflow as tf
        print(compat.op_determinism_enabled())
        with compat.public_path("determinism_query"):
            print(compat.op_determinism_enabled())
        tf.config.experimental.enable_op_determinism()   # behind tfapp's back
        print(compat.op_determinism_enabled())
        with compat.public_path("determinism_query"):
            print(compat.op_determinism_enabled())       # cannot know
            compat.enable_op_determinism()
            print(compat.op_determinism_enabled())
        with compat.public_path("determinism_reset"):
            print(compat.disable_op_determinism())       # cannot turn it off
            print(compat.op_determinism_enabled())
        print(compat.disable_op_determinism())
        print(compat.op_determinism_enabled())
        with compat.public_path("determinism_query"):
            print(compat.op_determinism_enabled())
        with compat.public_path("determinism_reset"):
            print(compat.disable_op_determinism())       # off already
    """)
    proc = run_python(["-c", code], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "False", "True", "False", "True",
                                   "False", "True", "True", "False", "False", "True"]


def test_learning_rate_both_ways():
    schedule = tf.keras.optimizers.schedules.PolynomialDecay(1.0, 100, 0.0)
    opt = tf.keras.optimizers.SGD(learning_rate=schedule)
    var = tf.Variable([1.0])
    opt.apply_gradients([(tf.constant([1.0]), var)])  # the update at step 0: rate 1.0
    opt.iterations.assign(50)                           # as a restore leaves it
    assert compat.current_learning_rate(opt) == pytest.approx(0.5)
    with compat.public_path("learning_rate_schedule"):
        # The public value is the rate of the last update, not of the restored step.
        assert compat.current_learning_rate(opt) == pytest.approx(1.0)
    plain = tf.keras.optimizers.SGD(learning_rate=0.25)
    with compat.public_path("learning_rate_schedule"):
        assert compat.current_learning_rate(plain) == pytest.approx(0.25)


def _adamw_run(cls):
    var = tf.Variable(np.linspace(-1, 1, 6, dtype=np.float32))
    opt = cls(learning_rate=1e-2, weight_decay=0.1, epsilon=1e-6)
    for i in range(4):
        opt.apply_gradients([(tf.sin(3.0 * var + i), var)])
    return var, opt


def test_adam_slots_both_ways():
    var, opt = _adamw_run(FusedAdamW)
    m, v = compat.adam_slots(opt, var)
    # The second moment of four non-zero gradients is positive everywhere.
    assert m.shape == v.shape == (6,) and float(tf.reduce_min(v)) > 0
    reference, _ = _adamw_run(tf.keras.optimizers.AdamW)
    with compat.public_path("adam_slots"):
        assert compat.adam_slots(opt, var) is None
        fallback, _ = _adamw_run(FusedAdamW)   # tf.keras's own update
    assert not np.allclose(var.numpy(), np.linspace(-1, 1, 6))
    np.testing.assert_allclose(var.numpy(), reference.numpy(), atol=1e-6)
    np.testing.assert_allclose(fallback.numpy(), reference.numpy(), atol=1e-7)


def test_functional_model_both_ways():
    inp = tf.keras.Input((3,))
    functional = tf.keras.Model(inp, tf.keras.layers.Dense(1)(inp))
    sequential = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])

    class OwnStep(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = tf.keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            return {}

    class FunctionalOwnStep(tf.keras.Model):  # a graph network, but with its own step
        def train_step(self, data):
            return {}

    own = OwnStep()
    own(tf.zeros((1, 3)))
    functional_own = FunctionalOwnStep(inp, tf.keras.layers.Dense(1)(inp))
    for forced in (False, True):
        with compat.public_path("functional_model") if forced else _nothing():
            assert compat.is_functional_model(functional)
            assert compat.is_functional_model(sequential)
            assert not compat.is_functional_model(own)
            assert not compat.is_functional_model(functional_own)


def test_replica_context_can_synchronise_both_ways():
    """No strategy: a replica may apply gradients in its own tf.cond; under a strategy
    on CPU it must go through merge_call (tests/test_training.py runs both under fit)."""
    one_device = tf.distribute.OneDeviceStrategy("/cpu:0")
    for forced in (False, True):
        with compat.public_path("no_merge_call") if forced else _nothing():
            assert compat.replica_context_can_synchronise()
            with one_device.scope():
                assert not compat.replica_context_can_synchronise()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Killed(RuntimeError):
    """The crash _StopAt injects: the only exception _fit lets pass."""


class _StopAt(tf.keras.callbacks.Callback):
    """Crash (as a kill would) when epoch ``at`` begins; record the epochs that ran."""

    def __init__(self, at: int | None):
        super().__init__()
        self.at, self.epochs = at, []

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.at:
            raise _Killed("killed")
        self.epochs.append(epoch)


def _fit(backup_dir: Path, stop_at: int | None) -> tuple[list[int], ResumableBackup]:
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    model.compile(tf.keras.optimizers.SGD(0.1), "mse")
    x, y = np.ones((8, 2), np.float32), np.zeros((8, 1), np.float32)
    backup, stop = ResumableBackup(backup_dir), _StopAt(stop_at)
    try:
        model.fit(x, y, batch_size=4, epochs=3, verbose=0, callbacks=[backup, stop])
    except _Killed:  # anything else (a RuntimeError of the backup's own) fails the test
        pass
    return stop.epochs, backup


@pytest.mark.parametrize("forced", [False, True])
def test_backups_resume_both_ways(tmp_path, forced, caplog):
    with compat.public_path("step_backups") if forced else _nothing():
        assert compat.step_backups_supported() is not forced
        ran, _ = _fit(tmp_path / "backup", stop_at=2)
        assert ran == [0, 1]
        assert any((tmp_path / "backup").iterdir())
        with caplog.at_level("INFO", logger="tfapp"):
            resumed, _ = _fit(tmp_path / "backup", stop_at=None)
    assert resumed == [2]                        # epochs 0 and 1 were not trained again
    # Only the step path knows where it resumed (epoch 1's last step, optimizer step 4).
    said = [r.getMessage() for r in caplog.records if "resuming from the backup" in r.getMessage()]
    if forced:
        assert said == []
    else:
        assert len(said) == 1 and said[0].endswith(
            "at epoch 3 step 0 (optimizer step 4, learning rate 0.1)"), said
    # Kept after a finished fit: the training loop deletes it once the export exists.
    assert any((tmp_path / "backup").iterdir())


def test_tuner_tracebacks_both_ways():
    from keras_tuner.src import config as kt_config

    kt_config.DEBUG = True
    with compat.public_path("tuner_debug"):
        compat.quiet_tuner_tracebacks()
        assert kt_config.DEBUG is True
    compat.quiet_tuner_tracebacks()
    assert kt_config.DEBUG is False


def _oracle(tmp_path: Path, retries: int = 0) -> kt.Oracle:
    hp = kt.HyperParameters()
    hp.Float("lr", 1e-3, 1e-1, sampling="log")
    oracle = kt.oracles.RandomSearchOracle(objective=kt.Objective("score", "max"),
                                           max_trials=5, hyperparameters=hp, seed=1,
                                           max_retries_per_trial=retries)
    oracle._set_project_dir(str(tmp_path), "search")
    return oracle


def test_oracle_server_parts_both_ways(tmp_path):
    from keras_tuner.src import protos

    seen = []
    parts = compat.oracle_server_parts(lambda request, context: seen.append(request.tuner_id))
    assert parts is not None
    servicer_class, _, exit_chief = parts
    oracle = _oracle(tmp_path)
    servicer = servicer_class(oracle)
    reply = servicer.CreateTrial(protos.get_service().CreateTrialRequest(tuner_id="w1"), None)
    assert seen == ["w1"] and reply.trial.trial_id == oracle.ongoing_trials["w1"].trial_id
    assert not exit_chief(oracle)                # a trial is still running
    with compat.public_path("oracle_server"):
        assert compat.oracle_server_parts(lambda r, c: None) is None


def test_the_oracle_service_refuses_bad_calls_and_never_hangs(tmp_path):
    """Over real gRPC: an unknown trial id, rewritten hyperparameter values and an oracle
    call that fails inside KerasTuner's lock (a full disk on save) are each refused with a
    gRPC error, and the chief keeps answering (KerasTuner's lock has no `finally`)."""
    from concurrent import futures

    import grpc
    from keras_tuner.src import protos
    from keras_tuner.src.engine import trial as trial_module

    class DiskFullOracle(kt.oracles.RandomSearchOracle):
        full = False

        def save(self):
            if self.full:
                raise OSError(28, "No space left on device")
            super().save()

    hp = kt.HyperParameters()
    hp.Float("lr", 1e-3, 1e-1, sampling="log")
    oracle = DiskFullOracle(objective=kt.Objective("score", "max"), max_trials=5,
                            hyperparameters=hp, seed=1)
    oracle._set_project_dir(str(tmp_path), "search")
    servicer_class, add, _ = compat.oracle_server_parts(lambda request, context: None)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add(servicer_class(oracle), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    service = protos.get_service()
    stub = protos.get_service_grpc().OracleStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    try:
        with pytest.raises(grpc.RpcError) as err:
            stub.UpdateTrial(service.UpdateTrialRequest(trial_id="nope", step=0), timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert "no trial 'nope'" in err.value.details()

        given = trial_module.Trial.from_proto(
            stub.CreateTrial(service.CreateTrialRequest(tuner_id="w1"), timeout=10).trial)
        forged = trial_module.Trial.from_proto(given.to_proto())
        forged.hyperparameters.values["lr"] = 99.0  # outside tune.space
        forged.status = "COMPLETED"
        with pytest.raises(grpc.RpcError) as err:
            stub.EndTrial(service.EndTrialRequest(trial=forged.to_proto()), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "hyperparameter values differ" in err.value.details()

        # KerasTuner raises inside its lock for a trial completed with no objective value...
        given.status = "COMPLETED"
        with pytest.raises(grpc.RpcError) as err:
            stub.EndTrial(service.EndTrialRequest(trial=given.to_proto()), timeout=10)
        assert err.value.details() == "EndTrial: Unknown metric: score"
        # ... and when saving fails (a full disk).
        stub.UpdateTrial(service.UpdateTrialRequest(trial_id=given.trial_id,
                                                    metrics={"score": 0.5}, step=0), timeout=10)
        oracle.full = True
        with pytest.raises(grpc.RpcError) as err:
            stub.EndTrial(service.EndTrialRequest(trial=given.to_proto()), timeout=10)
        assert "No space left on device" in err.value.details()
        oracle.full = False
        # Still serving: the lock was released (without that, this call would block).
        reply = stub.GetSpace(service.GetSpaceRequest(), timeout=10)
        assert [h.name for h in kt.HyperParameters.from_proto(reply.hyperparameters).space] \
            == ["lr"]
    finally:
        server.stop(grace=0)


def test_serve_oracle_steps_aside_on_the_public_path(monkeypatch, tmp_path):
    from tfapp.tuning import distributed

    monkeypatch.setenv(distributed.ENV_IP, "127.0.0.1")
    monkeypatch.setenv(distributed.ENV_PORT, "1")   # never bound: nothing is served
    with compat.public_path("oracle_server"):
        assert distributed.serve_oracle(_oracle(tmp_path)) is False
        # KerasTuner's own chief checks no token: it is refused, not ignored.
        monkeypatch.setenv(distributed.ENV_TOKEN, "s3cret")
        with pytest.raises(ConfigError, match="TFAPP_ORACLE_TOKEN is set but this "
                                              "KerasTuner's chief cannot check it"):
            distributed.serve_oracle(_oracle(tmp_path))


@pytest.mark.parametrize("forced", [False, True])
def test_oracle_client_routing_both_ways(monkeypatch, tmp_path, forced):
    """A worker's KerasTuner client sends tfapp's token (internal path); on the public path
    its calls carry none, so a chief with a token refuses them, and a worker with a token
    refuses to start."""
    from tfapp.tuning import distributed

    import grpc
    from keras_tuner.src.distribute import oracle_client

    monkeypatch.setenv(distributed.ENV_TOKEN, "s3cret")
    oracle = _oracle(tmp_path)
    servicer_class, add, _ = compat.oracle_server_parts(lambda request, context: None)
    server = distributed.build_server(distributed.Workers(60.0),
                                      lambda server: add(servicer_class(oracle), server))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    monkeypatch.setenv(distributed.ENV_IP, "127.0.0.1")
    monkeypatch.setenv(distributed.ENV_PORT, str(port))
    monkeypatch.setenv(distributed.ENV_ID, "tuner-1")
    try:
        client = oracle_client.OracleClient(oracle)
        stub = client.stub
        with compat.public_path("oracle_client") if forced else _nothing():
            assert compat.route_oracle_client(
                client, distributed.worker_channel()) is not forced
            if forced:
                with pytest.raises(ConfigError, match="cannot send it"):
                    distributed.route_client(client)
        assert (client.stub is stub) is forced
        if forced:
            with pytest.raises(grpc.RpcError) as err:
                client.get_space()
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        else:
            assert [h.name for h in client.get_space().space] == ["lr"]
            assert client.create_trial("tuner-1").trial_id in oracle.trials
    finally:
        server.stop(grace=0)


@pytest.mark.parametrize("forced, retries, next_is_same", [
    (False, 0, True),    # internal path: back in the queue, not a failed try
    (True, 0, False),    # public path: ended as INVALID, no retries left -> FAILED
    (True, 1, True),     # public path within max_retries_per_trial: retried
])
def test_requeue_both_ways(tmp_path, forced, retries, next_is_same):
    oracle = _oracle(tmp_path, retries)
    first = oracle.create_trial("w1")
    with compat.public_path("oracle_requeue") if forced else _nothing():
        assert compat.requeue_trial(oracle, "w1") == first.trial_id
        assert compat.requeue_trial(oracle, "w1") is None        # nothing left running
    assert "w1" not in oracle.ongoing_trials
    nxt = oracle.create_trial("w2")
    assert (nxt.trial_id == first.trial_id) is next_is_same
    if not next_is_same:
        assert oracle.trials[first.trial_id].status == "FAILED"


def test_ema_averages_both_ways():
    var = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.SGD(0.5, use_ema=True, ema_momentum=0.5)
    for _ in range(2):
        opt.apply_gradients([(tf.constant([1.0, 1.0]), var)])
    (average,) = compat.ema_averages(opt, [var])
    # var: 1 -> 0.5 -> 0; the average starts at var and takes half of it each step:
    # 0.5 * 1 + 0.5 * 0.5 = 0.75, then 0.5 * 0.75 + 0.5 * 0 = 0.375.
    np.testing.assert_allclose(var.numpy(), [0.0, 1.0])
    np.testing.assert_allclose(average.numpy(), [0.375, 1.375])
    assert compat.ema_averages(tf.keras.optimizers.SGD(0.5), [var]) is None  # no EMA
    with compat.public_path("ema_averages"):
        assert compat.ema_averages(opt, [var]) is None


def test_deferred_train_graph_both_ways(tmp_path):
    """Internal path: Keras's TensorBoard callback leaves the graph to the caller, who
    writes it later (a graph in the events); public path: Keras keeps writing it itself."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    model = tf.keras.Sequential([tf.keras.Input([3]), tf.keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(np.ones([8, 3], np.float32), np.ones([8, 1], np.float32), verbose=0)
    callback = tf.keras.callbacks.TensorBoard(str(tmp_path), write_graph=True)
    callback.set_model(model)
    callback.on_train_begin()
    with compat.public_path("deferred_train_graph"):
        assert compat.defer_train_graph(callback) is None  # Keras still writes it
    write = compat.defer_train_graph(callback)
    assert write is not None and compat.defer_train_graph(callback) is None  # taken once
    write()
    callback.on_train_end()
    acc = ea.EventAccumulator(str(tmp_path / "train"))
    acc.Reload()
    assert len(acc.Graph().node) > 5


def test_tensor_logs_both_ways():
    """Internal path: a callback that declares it gets its batch logs as tensors (Keras
    copies nothing to the host for it); public path: Keras converts them to NumPy."""
    class Seen(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.declared = compat.accept_tensor_logs(self)
            self.losses: list = []

        def on_train_batch_end(self, batch, logs=None):
            self.losses.append(logs["loss"])

    def fit() -> Seen:
        seen = Seen()
        model = tf.keras.Sequential([tf.keras.Input([2]), tf.keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        model.fit(np.ones([8, 2], np.float32), np.ones([8, 1], np.float32), batch_size=4,
                  verbose=0, callbacks=[seen])
        return seen

    seen = fit()
    assert seen.declared and len(seen.losses) == 2
    assert all(isinstance(v, tf.Tensor) for v in seen.losses)
    with compat.public_path("tensor_logs"):
        seen = fit()
    assert not seen.declared and len(seen.losses) == 2
    assert not any(isinstance(v, tf.Tensor) for v in seen.losses)


def test_keras_save_traces_both_ways(tmp_path):
    """Internal path: a Keras model inside a saved root (as tfapp.hub.export attaches its
    encoder) is saved with its variables, the root's function gives the same outputs after
    loading, but tf-keras saves no traces of its layers' calls; public path: tf-keras
    traces and saves those too."""
    from tensorflow.core.protobuf import saved_model_pb2

    model = tf.keras.Sequential([tf.keras.Input([3]), tf.keras.layers.Dense(2, name="dense")])
    root = tf.train.Checkpoint(model=model, variables=list(model.variables))
    root.f = tf.function(lambda x: model(x), input_signature=[tf.TensorSpec([None, 3])])
    x = tf.constant([[1.0, 2.0, 3.0]])

    def save(path: Path) -> list[str]:
        with compat.without_keras_traces():
            tf.saved_model.save(root, str(path))
        loaded = tf.saved_model.load(str(path))
        np.testing.assert_array_equal(loaded.f(x).numpy(), model(x).numpy())
        assert sorted(v.name for v in loaded.variables) == ["dense/bias:0", "dense/kernel:0"]
        proto = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
        return [f.signature.name for f in proto.meta_graphs[0].graph_def.library.function
                if "call_and_return_conditional_losses" in f.signature.name]

    assert save(tmp_path / "private") == []
    with compat.public_path("keras_save_traces"):
        assert save(tmp_path / "public")  # the layers' calls, traced by tf-keras


# ------------------------------------------------------------------ serving an export
def test_text_op_libraries_register_the_ops_they_are_listed_with():
    """Each op library of ``TEXT_OP_LIBRARIES`` is in the installed tensorflow_text and
    defines the ops listed for it (its Python wrappers are named after them)."""
    import importlib.util

    folder = Path(importlib.util.find_spec("tensorflow_text").origin).parent / "python" / "ops"
    for library, ops in compat.TEXT_OP_LIBRARIES.items():
        module = tf.load_op_library(str(folder / library))
        missing = [op for op in ops if not hasattr(module, op.replace(">", "_"))]
        assert missing == [], (library, missing)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["private", "public"])
def test_serving_imports_and_text_ops_both_ways(path):
    """In a fresh process: TensorFlow imported for serving (without tf-keras on the
    internal path), a Hub preprocessor's TensorFlow Text ops registered from their libraries
    (without tensorflow_text), and the preprocessor loads and tokenizes as with both
    imported (the public paths); tf.keras still works afterwards."""
    code = textwrap.dedent("""
        import json, sys
        from tfapp import compat
        from tfapp.hub.handles import resolve_hub_handle
        preprocessor = resolve_hub_handle("builtin:tiny")[1]
        tf = compat.import_tensorflow_for_serving()
        compat.register_text_ops(preprocessor)
        ops = sorted(op for op in compat.graph_ops(preprocessor) if not hasattr(tf.raw_ops, op))
        ids = tf.saved_model.load(preprocessor)(tf.constant(["Zoë's café, not bad"]))
        modules = [m for m in ("tf_keras", "tensorflow_text") if m in sys.modules]
        dense = tf.keras.layers.Dense(2)(tf.ones([1, 3]))  # Keras still imports on first use
        print(json.dumps({"ops": ops, "modules": modules, "keras": dense.shape.as_list(),
                          "ids": ids["input_word_ids"].numpy().tolist()}))
    """)
    env = subprocess_env(**({"TFAPP_COMPAT_PUBLIC": "serving_import,text_op_libraries"}
                            if path == "public" else {}))
    proc = run_python(["-c", code], env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["ops"] == ["CaseFoldUTF8", "NormalizeUTF8", "RegexSplitWithOffsets",
                          "TFText>RoundRobinTrim", "WordpieceTokenizeWithOffsets"]
    assert got["modules"] == ([] if path == "private" else ["tf_keras", "tensorflow_text"])
    assert got["keras"] == [1, 2]
    from tfapp.hub.handles import resolve_hub_handle

    import tensorflow_text  # noqa: F401  (this process tokenizes as it always did)

    want = tf.saved_model.load(resolve_hub_handle("builtin:tiny")[1])(
        tf.constant(["Zoë's café, not bad"]))["input_word_ids"].numpy().tolist()
    assert got["ids"] == want and len([i for i in want[0] if i]) > 4
