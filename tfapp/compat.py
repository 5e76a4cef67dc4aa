"""Every private TensorFlow, tf-keras and KerasTuner name tfapp touches, in one place.

tfapp supports TensorFlow 2.20 (the newest TPU build, ``tensorflow-tpu``) and 2.21, with
the matching tf-keras, and KerasTuner 1.4. A few things it needs have no public API; each
is one function here that

* uses the library's internal path only on a version tfapp was tested on
  (``TESTED_VERSIONS``) and only if the internal names are really there;
* otherwise takes the public path, or turns the speed-up off, and says so in one debug
  line (``-v`` shows it), once per process.

Nothing else in ``tfapp/`` imports ``tensorflow.python``, ``tf_keras.src`` or
``keras_tuner.src``, reads their underscore attributes or patches their objects.
``tests/test_compat.py`` runs every touch both ways: ``TFAPP_COMPAT_PUBLIC=all`` (or a
comma-separated list of the names in ``TOUCHES``) forces the public path in a process, and
``public_path(name)`` does it inside a test.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("tfapp")

# (major, minor) releases each private path was tested on.
TESTED_VERSIONS: dict[str, tuple[tuple[int, int], ...]] = {
    "tensorflow": ((2, 20), (2, 21)),
    "tf_keras": ((2, 20), (2, 21)),
    "tensorflow_text": ((2, 20), (2, 21)),
    "keras_tuner": ((1, 4),),
}

# name -> (library, what the internal path buys, what the public fallback does)
TOUCHES: dict[str, tuple[str, str, str]] = {
    "onednn_query": ("tensorflow", "TensorFlow's own answer to 'are oneDNN kernels on?'",
                     "read TF_ENABLE_ONEDNN_OPTS; unknown when unset"),
    "determinism_query": ("tensorflow", "TensorFlow's own op-determinism flag",
                          "what tfapp enabled, or TF_DETERMINISTIC_OPS"),
    "determinism_reset": ("tensorflow", "op determinism turned off again (TensorFlow has no "
                          "public way), for a process that wanted it for one part only",
                          "it stays on until the process ends"),
    "learning_rate_schedule": ("tf_keras", "the optimizer's schedule, evaluated at its step",
                               "optimizer.learning_rate (the rate of the last update)"),
    "adam_slots": ("tf_keras", "AdamW's update as one fused ResourceApplyAdam kernel",
                   "tf.keras AdamW's own update"),
    "functional_model": ("tf_keras", "tf-keras's own 'is a functional model' flag",
                         "a model with inputs and Keras's own train_step"),
    "no_merge_call": ("tensorflow", "accumulated gradients applied in the replica's own "
                      "tf.cond where the strategy allows it (XLA on GPUs, no strategy)",
                      "applied through merge_call and a cross-replica tf.cond under every "
                      "strategy (fails under XLA on GPUs: set trainer.jit_compile=false)"),
    "step_backups": ("tf_keras", "BackupAndRestore saves and resumes at a step, on SIGTERM",
                     "BackupAndRestore at epoch ends (SIGTERM stops without a new backup)"),
    "backup_on_disk": ("tf_keras", "the (epoch, step) a backup was written at, read before "
                       "the input pipeline is built: a resumed run's data resumes there",
                       "unknown: the resumed run reads its data from the start of a pass "
                       "(examples of the interrupted epoch are seen again)"),
    "deferred_train_graph": ("tf_keras", "TensorBoard's train graph written at the first "
                             "epoch end, outside the batches Keras times (no 'on_train_batch_"
                             "end is slow' warning)",
                             "Keras writes it after the first batch (and may warn that "
                             "on_train_batch_end is slow)"),
    "tensor_logs": ("tf_keras", "batch callbacks get a step's logs as tensors: Keras copies "
                    "no metric to the host at the end of an execution, a callback reads only "
                    "the values it needs when it needs them",
                    "Keras converts every execution's logs to NumPy (a device-to-host copy "
                    "of every metric per execution)"),
    "ema_averages": ("tf_keras", "validation scores the averaged weights (optimizer.ema_decay)",
                     "validation scores the raw weights; the export still uses the average"),
    "keras_save_traces": ("tf_keras", "the Keras encoder inside a Hub module tfapp writes is "
                          "saved without what only tf-keras's own loader reads (its traces of "
                          "each layer's call, keras_api): ~3 CPU-s less per BERT export and a "
                          "saved_model.pb a third the size",
                          "tf-keras traces every layer's call again and saves those too"),
    "tuner_debug": ("keras_tuner", "one line per failed trial instead of its traceback",
                    "KerasTuner prints the traceback"),
    "oracle_server": ("keras_tuner", "a chief that polls twice a second and hands a silent "
                      "worker's trial to the next worker",
                      "KerasTuner's own chief (polls every 20 s, no heartbeats)"),
    "oracle_requeue": ("keras_tuner", "a dead worker's trial is retried, not counted failed",
                       "the trial is ended as failed"),
    "oracle_client": ("keras_tuner", "a worker's oracle calls carry its token, id and nonce",
                      "they carry none: a chief with a token refuses them, and a duplicate "
                      "worker id is caught only when the worker starts"),
    "serving_import": ("tensorflow", "a process that serves an export imports TensorFlow "
                       "without tf-keras (nor the SciPy and PIL tf-keras imports): ~1 s and "
                       "~40 MB less before its first prediction",
                       "import tensorflow, which imports tf-keras's optimizers"),
    "text_op_libraries": ("tensorflow_text", "an export's TensorFlow Text ops come from the "
                          "op libraries its graph uses (4 of 22 for a BERT tokenizer), without "
                          "importing tensorflow_text (which imports tf-keras): ~100 MB less",
                          "import tensorflow_text (every op library, and tf-keras)"),
}

#: touches that decide how their library is imported: its version is read from the
#: installed distribution, before the import
_BEFORE_IMPORT = {"serving_import": ("tensorflow", "tensorflow-cpu", "tensorflow-tpu"),
                  "text_op_libraries": ("tensorflow-text",)}

_forced_public: set[str] = set()
_said: set[str] = set()


def _env_forced() -> set[str]:
    raw = os.environ.get("TFAPP_COMPAT_PUBLIC", "")
    names = {n.strip() for n in raw.split(",") if n.strip()}
    return set(TOUCHES) if "all" in names else names


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as ``2.20.0`` or ``2.21.0rc1``."""
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.cache
def installed_version(library: str) -> tuple[int, int] | None:
    """(major, minor) of an importable library (by module, so the TPU build of TensorFlow,
    a different distribution, counts as TensorFlow), or None."""
    try:
        module = __import__(library)
    except ImportError:
        return None
    return parse_version(getattr(module, "__version__", ""))


@functools.cache
def distribution_version(*distributions: str) -> tuple[int, int] | None:
    """(major, minor) of the first of ``distributions`` installed, without importing it."""
    import importlib.metadata

    for dist in distributions:
        try:
            return parse_version(importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _say(name: str, why: str) -> None:
    if name not in _said:
        _said.add(name)
        log.debug("compat: %s takes the public path (%s): %s", name, why, TOUCHES[name][2])


def use_private(name: str) -> bool:
    """Whether ``name``'s internal path may be tried here (version tested, not forced off)."""
    library = TOUCHES[name][0]
    if name in _forced_public or name in _env_forced():
        _say(name, "forced by TFAPP_COMPAT_PUBLIC")
        return False
    version = (distribution_version(*_BEFORE_IMPORT[name]) if name in _BEFORE_IMPORT
               else installed_version(library))
    if version not in TESTED_VERSIONS[library]:
        shown = ".".join(map(str, version)) if version else "unknown"
        _say(name, f"{library} {shown} is not a version tfapp tested it on")
        return False
    return True


def _missing(name: str, err: BaseException) -> None:
    _say(name, f"internal API missing: {type(err).__name__}: {err}")


@contextlib.contextmanager
def public_path(*names: str) -> Iterator[None]:
    """Force the public path of ``names`` (all touches if none) inside the block."""
    chosen = set(names or TOUCHES)
    unknown = chosen - set(TOUCHES)
    if unknown:
        raise KeyError(f"unknown compat touch(es): {sorted(unknown)}")
    added = chosen - _forced_public
    _forced_public.update(added)
    _said.difference_update(added)
    try:
        yield
    finally:
        _forced_public.difference_update(added)


# -- TensorFlow ---------------------------------------------------------------------------

def onednn_enabled() -> bool | None:
    """Whether TensorFlow runs its oneDNN CPU kernels in this process; None if unknown."""
    if use_private("onednn_query"):
        try:
            from tensorflow.python.util import _pywrap_util_port
            return bool(_pywrap_util_port.IsMklEnabled())
        except (ImportError, AttributeError) as err:
            _missing("onednn_query", err)
    value = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip().lower()
    if value in ("1", "true"):
        return True
    if value in ("0", "false"):
        return False
    return None


_determinism_enabled_here = False


def enable_op_determinism() -> None:
    """``tf.config.experimental.enable_op_determinism()``, remembered for the public query."""
    global _determinism_enabled_here
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    _determinism_enabled_here = True


def op_determinism_enabled() -> bool:
    """Whether TensorFlow's op determinism is on (TF has no public query)."""
    if use_private("determinism_query"):
        try:
            from tensorflow.python.framework import config
            return bool(config.is_op_determinism_enabled())
        except (ImportError, AttributeError) as err:
            _missing("determinism_query", err)
    env = os.environ.get("TF_DETERMINISTIC_OPS", "").strip().lower()
    return _determinism_enabled_here or env in ("1", "true")


def disable_op_determinism() -> bool:
    """Turn TensorFlow's op determinism off again (it is process-wide, and TensorFlow has
    only a public way to turn it on); returns whether it is off now."""
    global _determinism_enabled_here
    if use_private("determinism_reset"):
        try:
            from tensorflow.python.framework import config
            config.disable_op_determinism()
            _determinism_enabled_here = False
            return True
        except (ImportError, AttributeError) as err:
            _missing("determinism_reset", err)
    return not op_determinism_enabled()


def current_learning_rate(optimizer: Any) -> float:
    """The rate of ``optimizer``'s current step: its schedule evaluated at
    ``optimizer.iterations`` (tf-keras's public ``learning_rate`` is the rate of the last
    update, stale right after a restore)."""
    import tensorflow as tf

    lr = None
    if use_private("learning_rate_schedule"):
        lr = getattr(optimizer, "_learning_rate", None)
        if lr is None:
            _missing("learning_rate_schedule", AttributeError("no _learning_rate"))
    if lr is None:
        lr = optimizer.learning_rate
    if isinstance(lr, tf.keras.optimizers.schedules.LearningRateSchedule):
        return float(lr(optimizer.iterations))
    return float(tf.keras.backend.get_value(lr))


def adam_slots(optimizer: Any, variable: Any) -> tuple[Any, Any] | None:
    """(m, v) slot variables of ``variable`` in a tf.keras Adam/AdamW, or None."""
    if not use_private("adam_slots"):
        return None
    try:
        index = optimizer._index_dict[optimizer._var_key(variable)]
        return optimizer._momentums[index], optimizer._velocities[index]
    except (AttributeError, KeyError, IndexError) as err:
        _missing("adam_slots", err)
        return None


def ema_averages(optimizer: Any, var_list: list) -> list | None:
    """The moving averages a tf-keras optimizer built with ``use_ema=True`` keeps of
    ``var_list`` (in that order), or None (no EMA, or the public path: tf-keras only
    offers ``finalize_variable_values``, a one-way copy of the averages into the model)."""
    if not getattr(optimizer, "use_ema", False) or not use_private("ema_averages"):
        return None
    try:
        averages = optimizer._model_variables_moving_average
        return [averages[optimizer._index_dict[optimizer._var_key(v)]] for v in var_list]
    except (AttributeError, KeyError, IndexError, TypeError) as err:
        _missing("ema_averages", err)
        return None


def replica_context_can_synchronise() -> bool:
    """Whether the current strategy lets a replica synchronise (all-reduce, apply
    gradients) without ``merge_call``: true with no strategy and under XLA on GPUs. Then a
    conditional update can sit in the replica's own ``tf.cond``; elsewhere it must go
    through ``merge_call``. tf-keras's ``LossScaleOptimizer`` asks TensorFlow the same."""
    import tensorflow as tf

    if use_private("no_merge_call"):
        try:
            return bool(tf.__internal__.distribute.strategy_supports_no_merge_call())
        except AttributeError as err:
            _missing("no_merge_call", err)
    return not tf.distribute.has_strategy()


def is_functional_model(model: Any) -> bool:
    """Whether ``model`` is a functional/Sequential tf.keras model (a graph of layers
    with Keras's own ``train_step``), not a subclass with its own step."""
    import tensorflow as tf

    # A functional subclass with its own step is a graph network too, but wrapping it
    # (AccumulatingModel) would drop that step.
    own_step = type(model).train_step is not tf.keras.Model.train_step
    if use_private("functional_model"):
        flag = getattr(model, "_is_graph_network", None)
        if flag is not None:
            return bool(flag) and not own_step
        _missing("functional_model", AttributeError("no _is_graph_network"))
    return not own_step and bool(getattr(model, "inputs", None))


def defer_train_graph(callback: Any) -> Callable[[], None] | None:
    """Take the train-graph write out of the first batch end of Keras's ``TensorBoard``
    callback (call after its ``on_train_begin``) and return what writes it, for the caller
    to run later; None where Keras keeps writing it itself (public path, no graph asked).

    Keras times the batch hooks of the first batches against the batches and warns that
    ``on_train_batch_end`` is slow: the graph write (~0.25 s) alone makes it warn for any
    model whose step takes less than a twentieth of that.
    """
    if not use_private("deferred_train_graph"):
        return None
    pending = getattr(callback, "_should_write_train_graph", None)
    write = getattr(callback, "_write_keras_model_train_graph", None)
    if pending is None or write is None:
        _missing("deferred_train_graph", AttributeError("_should_write_train_graph"))
        return None
    if not pending:
        return None
    callback._should_write_train_graph = False
    return write


def accept_tensor_logs(callback: Any) -> bool:
    """Declare that ``callback`` takes its batch logs as tensors, so Keras does not convert
    the logs of every execution to NumPy for it (tf-keras converts them for all callbacks
    unless every callback with batch hooks declares this; its own TensorBoard,
    BackupAndRestore and ProgbarLogger do). Returns whether it was declared: on the public
    path the callback gets NumPy values, so it must read both (``float(v)`` does).
    """
    if not use_private("tensor_logs"):
        return False
    if not hasattr(callback, "_supports_tf_logs"):  # set by tf-keras's Callback.__init__
        _missing("tensor_logs", AttributeError("Callback._supports_tf_logs"))
        return False
    callback._supports_tf_logs = True
    return True


def step_backups_supported() -> bool:
    """Whether ``BackupAndRestore``'s training state can be read and written at a step."""
    if not use_private("step_backups"):
        return False
    try:
        from tf_keras.src.distribute import worker_training_state
    except ImportError as err:
        _missing("step_backups", err)
        return False
    cls = worker_training_state.WorkerTrainingState
    if not hasattr(cls, "back_up"):
        _missing("step_backups", AttributeError("WorkerTrainingState.back_up"))
        return False
    return True


def backup_position(callback: Any) -> tuple[int, int]:
    """(epoch, step) the restored backup of a running ``BackupAndRestore`` was written at;
    epoch is -1 when there was none. Only when ``step_backups_supported()``."""
    state = callback._training_state
    return int(state._ckpt_saved_epoch.numpy()), int(state._ckpt_saved_batch.numpy())


def saved_backup_position(backup_dir: str | os.PathLike) -> tuple[int, int] | None:
    """(epoch, step) the newest backup in ``backup_dir`` (a ``BackupAndRestore`` folder) was
    written at, read from its checkpoint files without building a model; step is -1 for
    an epoch-end backup of Keras's own kind. None when there is none, or on the public
    path (tf-keras names these variables, under ``chief/``, with no API to read them)."""
    if not use_private("backup_on_disk"):
        return None
    import tensorflow as tf

    checkpoint = tf.train.latest_checkpoint(os.path.join(os.fspath(backup_dir), "chief"))
    if checkpoint is None:
        return None
    try:
        reader = tf.train.load_checkpoint(checkpoint)
        epoch = reader.get_tensor("ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE")
        step = reader.get_tensor("ckpt_saved_batch/.ATTRIBUTES/VARIABLE_VALUE")
    except (tf.errors.OpError, ValueError) as err:
        _missing("backup_on_disk", err)
        return None
    return int(epoch), int(step)


def write_backup(callback: Any, epoch: int, step: int) -> None:
    """Write ``callback``'s backup now, recording (epoch, step) as its position. Only when
    ``step_backups_supported()``."""
    state = callback._training_state
    state._ckpt_saved_epoch.assign(epoch)
    state._ckpt_saved_batch.assign(step)
    state.back_up(epoch=epoch, batch=step)


@contextlib.contextmanager
def without_keras_traces() -> Iterator[None]:
    """Inside the block, ``tf.saved_model.save`` saves a tf-keras layer or model it meets
    (as an attribute of the root it saves) with its variables and sublayers but without
    Keras's own traced functions of every layer and the attributes only tf-keras's loader
    reads (``keras_api``, the layer's ``variables`` list) -- what
    ``model.save(save_traces=False)`` does, for any root. The root's own tf.functions and
    attributes are saved as always."""
    scope = None
    if use_private("keras_save_traces"):
        try:
            from tf_keras.src.saving.legacy.saved_model import utils as keras_saving
            scope = keras_saving.keras_option_scope(
                save_traces=False, in_tf_saved_model_scope=keras_saving.in_tf_saved_model_scope())
        except (ImportError, AttributeError) as err:
            _missing("keras_save_traces", err)
    with scope or contextlib.nullcontext():
        yield


# -- Serving an export --------------------------------------------------------------------

def import_tensorflow_for_serving() -> Any:
    """``import tensorflow``, for a process that loads exports: without the eager import
    of Keras's optimizers that TensorFlow's ``__init__`` makes (2.16-2.21: the tf-keras
    or Keras 3 ones, to register them for SavedModels holding Keras optimizers, which
    loading an export never needs; the import fails quietly there when the module is
    absent). ``tf.keras`` still imports tf-keras on first use. Returns the module."""
    if "tensorflow" not in sys.modules and use_private("serving_import"):
        legacy = os.environ.get("TF_USE_LEGACY_KERAS", "") in ("1", "true", "True")
        eager = "tf_keras.src.optimizers" if legacy else "keras.src.optimizers"
        if eager not in sys.modules:
            sys.modules[eager] = None  # importing it raises ImportError, which TF catches
            try:
                import tensorflow  # noqa: F401
            finally:
                del sys.modules[eager]
    import tensorflow as tf

    return tf


#: the op libraries of tensorflow_text 2.20-2.21 (``tensorflow_text/python/ops``) that
#: tokenizers use, and the ops each registers (as a graph names them)
TEXT_OP_LIBRARIES = {
    "_normalize_ops.so": ("CaseFoldUTF8", "FindSourceOffsets", "NormalizeUTF8",
                          "NormalizeUTF8WithOffsetsMap"),
    "_regex_split_ops.so": ("RegexSplitWithOffsets",),
    "_wordpiece_tokenizer.so": ("WordpieceTokenizeWithOffsets",),
    "_trimmer_ops.so": ("TFText>RoundRobinGenerateMasks", "TFText>RoundRobinTrim"),
    "_fast_wordpiece_tokenizer.so": ("FastWordpieceTokenizeWithOffsets",
                                     "TFText>FastWordpieceDetokenize"),
    "_fast_bert_normalizer.so": ("FastBertNormalize",),
    "_sentencepiece_tokenizer.so": (
        "SentencepieceDetokenizeOp", "SentencepieceIdToStringOp", "SentencepieceOp",
        "SentencepieceStringToIdOp", "SentencepieceTokenizeOp",
        "SentencepieceTokenizeWithOffsetsOp", "SentencepieceVocabSizeOp"),
    "_fast_sentencepiece_tokenizer.so": ("TFText>FastSentencepieceDetokenize",
                                         "TFText>FastSentencepieceTokenize"),
    "_whitespace_tokenizer.so": ("WhitespaceTokenizeWithOffsets",),
    "_whitespace_tokenizer_v2.so": ("TFText>WhitespaceTokenizeWithOffsetsV2",),
    "_unicode_script_tokenizer.so": ("UnicodeScriptTokenizeWithOffsets",),
}
_loaded_text_libraries: set[str] = set()


def graph_ops(saved_model_dir: str | os.PathLike) -> set[str]:
    """The op types a SavedModel's graph and functions use (not the functions it calls)."""
    from tensorflow.core.protobuf import saved_model_pb2

    model = saved_model_pb2.SavedModel()
    model.ParseFromString((Path(saved_model_dir) / "saved_model.pb").read_bytes())
    ops: set[str] = set()
    for meta in model.meta_graphs:
        library = meta.graph_def.library
        ops.update(node.op for node in meta.graph_def.node)
        ops.update(node.op for f in library.function for node in f.node_def)
        ops.difference_update(f.signature.name for f in library.function)
    return ops


def register_text_ops(saved_model_dir: str | os.PathLike) -> None:
    """Register the TensorFlow Text ops the SavedModel uses, so that it loads: from their
    op libraries alone where all of them are known (``TEXT_OP_LIBRARIES``), else by
    importing ``tensorflow_text``. A graph with no op outside TensorFlow loads nothing."""
    import importlib.util

    import tensorflow as tf

    if use_private("text_op_libraries"):
        try:
            ops = graph_ops(saved_model_dir)
            where = {op: lib for lib, names in TEXT_OP_LIBRARIES.items() for op in names}
            outside = {op for op in ops if not hasattr(tf.raw_ops, op)}
            if outside <= set(where):
                folder = Path(importlib.util.find_spec("tensorflow_text").origin).parent
                for lib in sorted({where[op] for op in outside} - _loaded_text_libraries):
                    tf.load_op_library(str(folder / "python" / "ops" / lib))
                    _loaded_text_libraries.add(lib)
                return
            _say("text_op_libraries", f"ops of no known library: {sorted(outside - set(where))}")
        except (ImportError, AttributeError, OSError, tf.errors.NotFoundError) as err:
            _missing("text_op_libraries", err)
    import tensorflow_text  # noqa: F401  (registers every TensorFlow Text op)


# -- KerasTuner ---------------------------------------------------------------------------

def quiet_tuner_tracebacks() -> None:
    """Stop KerasTuner printing every failed trial's traceback (no public switch)."""
    if not use_private("tuner_debug"):
        return
    try:
        from keras_tuner.src import config as kt_config
    except ImportError as err:
        _missing("tuner_debug", err)
        return
    kt_config.DEBUG = False


def oracle_server_parts(on_create_trial: Callable[[Any, Any], None]
                        ) -> tuple[Any, Callable[[Any, Any], None], Callable[[Any], bool]
                                   ] | None:
    """What a tfapp chief needs from KerasTuner's gRPC service, or None (then use
    ``BaseTuner.search``'s own chief).

    Returns ``(servicer_class, add_servicer_to_server, exit_chief)``: ``servicer_class(
    oracle)`` is KerasTuner's ``OracleServicer`` calling ``on_create_trial(request,
    context)`` before each ``CreateTrial``; ``exit_chief(oracle)`` says every worker has
    been told the search is over."""
    if not use_private("oracle_server"):
        return None
    try:
        from keras_tuner.src import protos
        from keras_tuner.src.distribute import oracle_chief
        base = oracle_chief.OracleServicer
        add = protos.get_service_grpc().add_OracleServicer_to_server
        exit_chief = oracle_chief.exit_chief
    except (ImportError, AttributeError) as err:
        _missing("oracle_server", err)
        return None

    try:
        from keras_tuner.src.engine import oracle as oracle_module
        from keras_tuner.src.engine import trial as trial_module
        locks, threads = oracle_module.LOCKS, oracle_module.THREADS
    except (ImportError, AttributeError) as err:
        _missing("oracle_server", err)
        return None

    import grpc

    def unlock(oracle: Any) -> None:
        # KerasTuner's @synchronized takes the oracle's lock with no `finally`: an exception
        # inside an oracle call would leave it held and hang the chief for good.
        if threads[oracle] == threading.current_thread().name:
            threads[oracle] = None
            locks[oracle].release()

    def guarded(servicer: Any, call: Callable, request: Any, context: Any) -> Any:
        """``call(request, context)``; a failure refuses this one call (gRPC error back to
        the client, the oracle's lock released) and the chief serves on."""
        try:
            return call(request, context)
        except Exception as err:  # noqa: BLE001 (whatever failed, the chief must not hang)
            unlock(servicer.oracle)
            name = getattr(call, "__name__", "oracle call")
            log.warning("oracle: %s refused: %s", name, err)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"{name}: {str(err).splitlines()[0] if str(err) else repr(err)}")

    def known_trial(servicer: Any, trial_id: str, context: Any) -> Any:
        trial = servicer.oracle.trials.get(trial_id)
        if trial is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no trial '{trial_id}' in this search")
        return trial

    class Servicer(base):
        def GetSpace(self, request, context):  # noqa: N802  (the gRPC method names)
            return guarded(self, super().GetSpace, request, context)

        def UpdateSpace(self, request, context):  # noqa: N802
            return guarded(self, super().UpdateSpace, request, context)

        def CreateTrial(self, request, context):  # noqa: N802
            on_create_trial(request, context)
            return guarded(self, super().CreateTrial, request, context)

        def UpdateTrial(self, request, context):  # noqa: N802
            known_trial(self, request.trial_id, context)
            return guarded(self, super().UpdateTrial, request, context)

        def EndTrial(self, request, context):  # noqa: N802
            sent = trial_module.Trial.from_proto(request.trial)
            trial = known_trial(self, sent.trial_id, context)
            # A client reports on a trial; it may not rewrite what the trial tried (values
            # outside tune.space would reach best_params.yaml).
            if sent.hyperparameters.values != trial.hyperparameters.values:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"trial '{sent.trial_id}': "
                              "its hyperparameter values differ from the ones it was given")
            return guarded(self, super().EndTrial, request, context)

        def GetTrial(self, request, context):  # noqa: N802
            known_trial(self, request.trial_id, context)
            return guarded(self, super().GetTrial, request, context)

        def GetBestTrials(self, request, context):  # noqa: N802
            return guarded(self, super().GetBestTrials, request, context)

    return Servicer, add, exit_chief


def requeue_trial(oracle: Any, tuner_id: str) -> str | None:
    """Forget worker ``tuner_id`` and put its ongoing trial (if any) back in the queue,
    under the oracle's lock like the gRPC calls. Returns that trial's id.

    Public fallback: the trial is ended as INVALID (KerasTuner then retries it only
    within ``max_retries_per_trial``, else records it as failed)."""
    private = use_private("oracle_requeue")
    if private:
        try:
            from keras_tuner.src.engine.oracle import synchronized
            oracle._retry_queue  # noqa: B018  (present?)
        except (ImportError, AttributeError) as err:
            _missing("oracle_requeue", err)
            private = False
    if private:
        @synchronized
        def requeue(oracle, tuner_id):
            oracle.tuner_ids.discard(tuner_id)
            trial = oracle.ongoing_trials.pop(tuner_id, None)
            if trial is None:
                return None
            oracle._retry_queue.append(trial.trial_id)
            oracle.save()
            return trial.trial_id

        return requeue(oracle, tuner_id)
    oracle.tuner_ids.discard(tuner_id)
    trial = oracle.ongoing_trials.get(tuner_id)
    if trial is None:
        return None
    trial.status = "INVALID"
    trial.message = f"worker {tuner_id} stopped sending heartbeats"
    oracle.end_trial(trial)
    return trial.trial_id


def route_oracle_client(client: Any, channel: Any) -> bool:
    """Send the calls of KerasTuner's worker-side ``OracleClient`` over ``channel`` (tfapp's,
    which adds call metadata; KerasTuner builds its own channel inside ``__init__`` with no
    way to pass one in). False where that cannot be done here: the client keeps its own
    channel."""
    if not use_private("oracle_client"):
        return False
    try:
        from keras_tuner.src import protos
        stub_class = protos.get_service_grpc().OracleStub
        if "stub" not in vars(client):
            raise AttributeError(f"{type(client).__name__} has no stub")
    except (ImportError, AttributeError, TypeError) as err:
        _missing("oracle_client", err)
        return False
    client.stub = stub_class(channel)
    return True
