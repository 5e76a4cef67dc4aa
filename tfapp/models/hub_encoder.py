"""Load a TF-Hub BERT encoder as a (fine-tunable) ``hub.KerasLayer``, or fail clearly.

Any handle tensorflow_hub takes works: a tfhub.dev/Kaggle URL (downloaded and cached
under ``TFHUB_CACHE_DIR``), a local SavedModel directory, a ``gs://`` path. tfapp's
``builtin:`` handles are resolved to a directory first by
``tfapp.hub.handles.resolve_hub_handle`` (the task does that; models know nothing of
caches or files).

A wrong handle fails here, before any training, with one ``HubHandleError`` line
naming the handle and what was expected: missing path, unreachable URL, a directory
that is not a SavedModel, or a SavedModel that is not a BERT encoder (its
``__call__`` does not take the ``input_word_ids``/``input_mask``/``input_type_ids``
dict or does not return ``pooled_output`` and ``sequence_output``). The interface
check reads the traced signatures of the restored ``__call__`` and runs nothing, so it
is free on any device (TPU included).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, NamedTuple

from tfapp import compat
from tfapp.config import ConfigError
from tfapp.models.bert import BertConfig, BertEncoder, stable_weight_name

import tensorflow as tf
import tensorflow_hub as hub

__all__ = ["BERT_INPUT_KEYS", "BERT_OUTPUT_KEYS", "ENCODER_REASON_ATTR", "BuiltEncoder",
           "HubHandleError", "built_encoder", "check_bert_interface", "load_hub_encoder",
           "native_encoder_from_hub", "native_encoder_wanted", "unseeded_random_ops"]

BERT_INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")
BERT_OUTPUT_KEYS = ("pooled_output", "sequence_output")
EXPECTED = ("a TF-Hub BERT encoder SavedModel (dict of input_word_ids/input_mask/"
            "input_type_ids in, pooled_output/sequence_output out)")


class HubHandleError(ConfigError):
    """``model.hub_handle`` cannot be used as a BERT encoder; the message is one line."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line[:200]


def _is_remote(handle: str) -> bool:
    return "://" in handle


def _describe(structure: Any) -> str:
    if isinstance(structure, dict):
        return "{" + ", ".join(sorted(map(str, structure))) + "}"
    if isinstance(structure, tf.TensorSpec):
        return f"a {structure.dtype.name} tensor"
    return type(structure).__name__


def check_bert_interface(obj: Any, handle: str) -> None:
    """Raise ``HubHandleError`` unless ``obj`` (from ``hub.load``) is a BERT encoder."""
    # The restored tf.function (its traced signatures), not a callability test.
    call = getattr(obj, "__call__", None)  # noqa: B004
    concrete = list(getattr(call, "concrete_functions", None) or [])
    if not concrete:
        # A TF1 Hub module or a SavedModel without a restored __call__ (only signatures).
        raise HubHandleError(f"model.hub_handle: '{handle}' has no callable __call__ (a TF1 "
                             f"Hub module or a plain signature export?); expected {EXPECTED}")
    for fn in concrete:
        args, _ = fn.structured_input_signature
        inputs = args[0] if args else None
        outputs = fn.structured_outputs
        if (isinstance(inputs, dict) and all(k in inputs for k in BERT_INPUT_KEYS)
                and isinstance(outputs, dict) and all(k in outputs for k in BERT_OUTPUT_KEYS)):
            return
    args = concrete[0].structured_input_signature[0]
    got_in = _describe(args[0]) if args else "nothing"
    got_out = _describe(concrete[0].structured_outputs)
    raise HubHandleError(f"model.hub_handle: '{handle}' is not a BERT encoder (it takes "
                         f"{got_in} and returns {got_out}); expected {EXPECTED}")


def load_hub_encoder(handle: str, trainable: bool) -> hub.KerasLayer:
    """``hub.KerasLayer(handle, trainable=trainable)`` for a BERT encoder, checked.

    Call it inside the strategy scope so the module's variables become distributed
    variables. The layer is called with the 3-key int32 dict and returns a dict with
    ``pooled_output`` [b, h], ``sequence_output`` [b, s, h] (and, for standard encoders,
    ``encoder_outputs``).
    """
    handle = str(handle or "").strip()
    if not handle:
        raise HubHandleError(f"model.hub_handle is empty; expected {EXPECTED}: a URL, a local "
                             "directory, a gs:// path or builtin:tiny")
    if handle.startswith("builtin:"):
        raise HubHandleError(f"model.hub_handle: '{handle}' must be resolved to a directory "
                             "first (tfapp.hub.handles.resolve_hub_handle)")
    if not _is_remote(handle):
        path = os.path.expanduser(handle)
        if not os.path.exists(path):
            raise HubHandleError(f"model.hub_handle: '{handle}' does not exist; expected "
                                 f"{EXPECTED}")
        if not os.path.isdir(path):
            raise HubHandleError(f"model.hub_handle: '{handle}' is a file; expected a "
                                 "SavedModel directory (with saved_model.pb)")
        if not (os.path.isfile(os.path.join(path, "saved_model.pb"))
                or os.path.isfile(os.path.join(path, "saved_model.pbtxt"))):
            raise HubHandleError(f"model.hub_handle: '{handle}' is not a SavedModel directory "
                                 f"(no saved_model.pb); expected {EXPECTED}")
        handle = path
    with contextlib.suppress(ImportError):
        # Registers the text ops, so a module that holds them (a preprocessor given by
        # mistake, an encoder with built-in tokenisation) loads and is judged by interface.
        import tensorflow_text  # noqa: F401
    try:
        layer = hub.KerasLayer(handle, trainable=trainable, name="bert_encoder")
    except Exception as err:  # download/IO/parse errors arrive as many types, multi-line
        what = "cannot be downloaded or read" if _is_remote(handle) else "cannot be loaded"
        raise HubHandleError(f"model.hub_handle: '{handle}' {what} ({_first_line(err)}); "
                             f"expected {EXPECTED}") from None
    check_bert_interface(layer.resolved_object, handle)
    if trainable and not layer.trainable_weights:
        raise HubHandleError(f"model.hub_handle: '{handle}' has no trainable variables, so it "
                             "cannot be fine-tuned; set model.trainable=false or use a "
                             "reusable SavedModel (TF2 format)")
    if trainable and compat.op_determinism_enabled():
        unseeded = unseeded_random_ops(layer.resolved_object)
        if unseeded:
            raise HubHandleError(
                f"runtime.deterministic=true: the module '{handle}' fine-tunes with "
                f"{len(unseeded)} unseeded random op(s) (e.g. '{unseeded[0]}', its dropout), "
                "which TensorFlow's op determinism refuses; use a module tfapp reads natively "
                "(builtin:, or one written by python -m tfapp.hub build-bert/convert), set "
                "model.trainable=false, or runtime.deterministic=false")
    return layer


# Stateful random ops TensorFlow's op determinism refuses when both seed attributes are 0.
_RANDOM_OPS = frozenset({
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
    "ParameterizedTruncatedNormal", "RandomShuffle", "RandomGamma", "RandomPoisson",
    "RandomPoissonV2", "Multinomial"})


def unseeded_random_ops(obj: Any) -> list[str]:
    """Names of the random ops without a seed in ``obj``'s restored ``__call__`` graphs.

    A module saved without a seed (the usual case for TF-Hub encoders) keeps ``seed=0,
    seed2=0`` on its dropout ops forever; with op determinism on, TensorFlow refuses to
    run them (only in training, where dropout is live). Reads the traced graphs, runs
    nothing.
    """
    found = set()
    call = getattr(obj, "__call__", None)  # noqa: B004
    for fn in getattr(call, "concrete_functions", None) or []:
        graph_def = fn.graph.as_graph_def()
        nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
        found.update(node.name for node in nodes
                     if node.op in _RANDOM_OPS and not node.attr["seed"].i
                     and not node.attr["seed2"].i)
    return sorted(found)


def native_encoder_from_hub(handle: str, name: str = "bert_encoder") -> BertEncoder | None:
    """The module's weights read into a native ``BertEncoder``, or None if not covered.

    Why: a restored Hub graph is fixed in float32, so a ``mixed_bfloat16`` /
    ``mixed_float16`` policy never reaches inside ``hub.KerasLayer``; the native encoder
    follows the policy (and compiles once under XLA). Covered: modules that carry
    ``get_bert_config()`` (tfapp's own exports, ``tfapp.hub.export``) whose variables
    map one to one, by stable name and shape, onto the encoder that config builds.
    Anything else (official tf-models encoders, a bad handle) returns None, and the
    caller keeps the Hub layer, which also reports bad handles.

    The encoder is built under the current global policy: build it inside the strategy
    scope, after the policy is set.
    """
    handle = str(handle or "").strip()
    if not handle or handle.startswith("builtin:"):
        return None
    if not _is_remote(handle):
        handle = os.path.expanduser(handle)
        if not os.path.isfile(os.path.join(handle, "saved_model.pb")):
            return None
    try:
        module = hub.load(handle)
        get_config = getattr(module, "get_bert_config", None)
        if get_config is None:
            return None
        cfg = BertConfig.from_dict(json.loads(get_config().numpy()))
    except Exception:  # not loadable / not tfapp's format: the Hub layer path decides
        return None
    values = {stable_weight_name(v.name): v for v in module.variables}
    encoder = BertEncoder(cfg, name=name)
    own = encoder.named_weights()
    if set(own) != set(values) or any(tuple(values[k].shape) != tuple(v.shape)
                                      for k, v in own.items()):
        return None
    encoder.assign_named_weights(values)
    return encoder


class BuiltEncoder(NamedTuple):
    """Which BERT encoder a model holds: ``kind`` ``native`` (tfapp's ``BertEncoder``,
    which XLA compiles once) or ``hub`` (a restored TF-Hub SavedModel, whose fine-tuning
    XLA recompiles every step, docs/hub.md), and ``reason``: why that one was built."""

    kind: str
    reason: str

    def describe(self) -> str:
        what = ("native BertEncoder" if self.kind == "native"
                else "TF-Hub SavedModel (hub.KerasLayer)")
        return f"{what} ({self.reason})"


# The attribute bert_encoder_outputs leaves on the encoder layer it built: why that one.
# On the layer, not the model, so it survives the gradient-accumulation wrapper (a new
# model over the same layers).
ENCODER_REASON_ATTR = "tfapp_encoder_reason"


def native_encoder_wanted(compute_dtype: str, deterministic_finetune: bool) -> str | None:
    """Why ``bert_encoder_outputs`` reads a module into the native encoder (tried first,
    where the module is tfapp's format), or None: the Hub layer as restored. The one
    place the choice is made; ``doctor`` tells it for the device's precision."""
    if compute_dtype != "float32":
        return (f"{compute_dtype} compute: a restored Hub graph stays float32, tfapp's "
                "encoder follows the policy")
    if deterministic_finetune:
        return ("runtime.deterministic fine-tuning: the module's dropout is unseeded, "
                "tfapp's encoder seeds it from runtime.seed")
    return None


def built_encoder(model: tf.keras.Model) -> BuiltEncoder | None:
    """The BERT encoder ``model`` holds (native or Hub) and why it was built; None for a
    model without one (the cnn/rnn baselines, the generator). Read from the layers
    themselves, so it is the encoder actually built, whatever predicted it."""
    for layer in model.layers:
        if isinstance(layer, BertEncoder):
            kind = "native"
        elif isinstance(layer, hub.KerasLayer):
            kind = "hub"
        else:
            continue
        return BuiltEncoder(kind, getattr(layer, ENCODER_REASON_ATTR, "built by the task "
                                          "itself"))
    return None
