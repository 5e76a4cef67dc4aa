"""Export a BERT encoder and its preprocessor as TF-Hub SavedModels.

What a TF-Hub *reusable SavedModel* needs (tensorflow.org/hub/reusable_saved_models),
and why each piece is here:

* ``__call__(inputs, training=...)`` traced for ``training=False`` *and* ``True``:
  ``hub.KerasLayer`` picks one by the Python value of ``training`` (dropout on only
  when fine-tuning).
* ``variables``, ``trainable_variables``, ``regularization_losses`` as saved
  attributes: ``hub.KerasLayer(trainable=True)`` registers exactly these as its
  weights. A plain ``tf.Module`` exposes them as Python properties, which are *not*
  saved, so the root here is an auto-tracking object with real attributes.
* every variable a traced function captures must be reachable from the root, or
  saving fails (or the reloaded module cannot run): the Keras encoder itself is
  attached, which brings along any dropout RNG state it owns.

The output dict matches tf-models' ``export_tfhub_lib``: ``pooled_output``,
``sequence_output``, ``encoder_outputs`` and ``default`` (alias of pooled_output).
Like the official encoders, the module also carries ``vocab_file`` (an asset) and
``do_lower_case`` for users who tokenise themselves; tfapp adds ``get_bert_config()``
(JSON of the architecture) so the weights can be read back into a native encoder.

Every write goes to a temporary sibling directory that is renamed into place at the
end: a crash never leaves a half-written module where a loader would find it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tfapp import compat
from tfapp.atomic import atomic_directory
from tfapp.config import ConfigError
from tfapp.data.text.bert_preprocess import BertPreprocessor
from tfapp.models.bert import INPUT_KEYS, BertEncoder

import tensorflow as tf

__all__ = [
    "HUB_METADATA_FILE",
    "ReusableBertEncoder",
    "check_out_dir",
    "export_bert_modules",
    "export_encoder",
    "export_preprocessor",
    "float32_policy",
    "read_metadata",
]

HUB_METADATA_FILE = "tfapp_hub.json"
METADATA_FORMAT = 1


@contextlib.contextmanager
def float32_policy() -> Iterator[None]:
    """Build under the float32 policy: a Hub module's graph is fixed in float32, and
    Keras sublayers take the *global* policy, not their parent's dtype."""
    previous = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy("float32")
    try:
        yield
    finally:
        tf.keras.mixed_precision.set_global_policy(previous)


class ReusableBertEncoder(tf.train.Checkpoint):
    """Root object of an exported encoder (see the module docstring).

    ``tf.train.Checkpoint`` is used as the public auto-tracking base: unlike
    ``tf.Module`` it lets ``variables`` etc. be plain attributes, which SavedModel
    serialises and ``hub.load`` restores.
    """

    def __init__(self, encoder: BertEncoder, *, vocab_file: str | None = None,
                 lower_case: bool | None = None):
        super().__init__()
        encoder.build_weights()
        if encoder.compute_dtype != "float32":
            raise ValueError("export the encoder in float32 (build it under float32_policy()); "
                             f"its compute dtype is {encoder.compute_dtype}")
        self.encoder = encoder
        self.variables = list(encoder.variables)
        self.trainable_variables = list(encoder.trainable_variables)
        self.regularization_losses = []  # no weight penalties; the optimizer's decay applies

        # autograph=False: the encoder branches on Python values only (training, shapes);
        # autograph would rewrite every Keras layer's source on each trace.
        @tf.function(autograph=False)
        def call(inputs, training=False):
            outputs = dict(encoder({k: inputs[k] for k in INPUT_KEYS}, training=training))
            outputs["default"] = outputs["pooled_output"]
            return outputs

        spec = {k: tf.TensorSpec([None, None], tf.int32, name=k) for k in INPUT_KEYS}
        for training in (False, True):
            call.get_concrete_function(spec, training=training)
        self.__call__ = call

        config_json = json.dumps(encoder.cfg.to_dict(), sort_keys=True)
        self.get_bert_config = tf.function(lambda: tf.constant(config_json), input_signature=[])
        if vocab_file:
            self.vocab_file = tf.saved_model.Asset(vocab_file)
        if lower_case is not None:
            self.do_lower_case = tf.function(lambda: tf.constant(bool(lower_case)),
                                             input_signature=[])


def _save(root: Any, path: Path) -> None:
    # The root's traced functions are all a loader runs; tf-keras would trace and save
    # every layer of an attached encoder again (most of an export's time).
    with compat.without_keras_traces():
        tf.saved_model.save(root, str(path))


def export_encoder(encoder: BertEncoder, export_dir: str | os.PathLike, *,
                   vocab_file: str | None = None, lower_case: bool | None = None,
                   overwrite: bool = False) -> Path:
    """Write ``encoder`` as a reusable TF-Hub SavedModel at ``export_dir`` (atomically)."""
    export_dir = Path(export_dir)
    with atomic_directory(export_dir, overwrite=overwrite) as tmp:
        _save(ReusableBertEncoder(encoder, vocab_file=vocab_file, lower_case=lower_case), tmp)
    return export_dir


def export_preprocessor(vocab_file: str | os.PathLike, export_dir: str | os.PathLike, *,
                        lower_case: bool, default_seq_length: int = 128,
                        overwrite: bool = False) -> Path:
    """Write the BERT preprocessor for ``vocab_file`` as a SavedModel (atomically).

    The saved object is ``tfapp.data.text.bert_preprocess.BertPreprocessor``: after
    ``hub.load`` it is callable on a batch of strings and has ``tokenize`` and
    ``bert_pack_inputs(segments, seq_length=N)`` like the official preprocessors; the
    vocabulary travels as a SavedModel asset.
    """
    export_dir = Path(export_dir)
    with atomic_directory(export_dir, overwrite=overwrite) as tmp:
        # Read the vocab from a private copy named vocab.txt: the asset keeps the basename,
        # and the caller's file may be a temporary that disappears.
        with tempfile.TemporaryDirectory() as vocab_tmp:
            vocab_copy = Path(vocab_tmp) / "vocab.txt"
            shutil.copyfile(vocab_file, vocab_copy)
            pre = BertPreprocessor(str(vocab_copy), lower_case=lower_case,
                                   seq_length=default_seq_length)
            _save(pre, tmp)
    return export_dir


def check_out_dir(out_dir: str | os.PathLike, overwrite: bool) -> None:
    """Whether a module pair may be written to ``out_dir``: a new folder, or with
    ``overwrite`` a module pair tfapp wrote (its tfapp_hub.json) or an empty folder, never a
    folder of other files. Commands call it before their slow work, and the export again."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not overwrite:
        raise ConfigError(f"{out_dir} already exists; choose another --out or pass --overwrite")
    if out_dir.exists() and not (out_dir / HUB_METADATA_FILE).is_file() \
            and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ConfigError(f"--overwrite: {out_dir} is not a tfapp module directory (no "
                          f"{HUB_METADATA_FILE}) and is not empty; nothing was replaced; "
                          "choose another --out")


def _export_sentencepiece_preprocessor(model_file: Path, export_dir: Path,
                                       default_seq_length: int) -> int:
    """XLM-R's SentencePiece preprocessor at ``export_dir``; returns its vocabulary size."""
    from tfapp.data.text.sentencepiece_preprocess import SentencepiecePreprocessor

    pre = SentencepiecePreprocessor(model_file, seq_length=default_seq_length)
    _save(pre, export_dir)
    return pre.vocab_size


def export_bert_modules(encoder: BertEncoder, vocab_file: str | os.PathLike,
                        out_dir: str | os.PathLike, *, lower_case: bool,
                        default_seq_length: int = 128, overwrite: bool = False,
                        extra_metadata: dict[str, Any] | None = None,
                        sentencepiece: bool = False) -> Path:
    """Write OUT/encoder, OUT/preprocessor, OUT/vocab.txt and OUT/tfapp_hub.json.

    ``sentencepiece``: ``vocab_file`` is an XLM-R SentencePiece model instead, copied to
    OUT/sentencepiece.bpe.model, and the preprocessor is
    ``tfapp.data.text.sentencepiece_preprocess.SentencepiecePreprocessor`` (same interface).
    The whole OUT directory appears at once (atomic rename), so a concurrent reader
    sees either nothing or the complete pair of modules.
    """
    out_dir = Path(out_dir)
    check_out_dir(out_dir, overwrite)
    with atomic_directory(out_dir, overwrite=overwrite) as tmp:
        if sentencepiece:
            tokenizer = {"tokenizer": "sentencepiece",
                         "sentencepiece_model": "sentencepiece.bpe.model"}
            shutil.copyfile(vocab_file, tmp / "sentencepiece.bpe.model")
            export_encoder(encoder, tmp / "encoder", lower_case=lower_case)
            vocab_size = _export_sentencepiece_preprocessor(
                tmp / "sentencepiece.bpe.model", tmp / "preprocessor", default_seq_length)
        else:
            tokenizer = {"vocab_file": "vocab.txt"}
            shutil.copyfile(vocab_file, tmp / "vocab.txt")
            export_encoder(encoder, tmp / "encoder", vocab_file=str(tmp / "vocab.txt"),
                           lower_case=lower_case)
            export_preprocessor(tmp / "vocab.txt", tmp / "preprocessor", lower_case=lower_case,
                                default_seq_length=default_seq_length)
            vocab_size = sum(1 for _ in open(tmp / "vocab.txt", encoding="utf-8"))
        metadata = {
            "format": METADATA_FORMAT,
            "kind": "bert",
            "encoder": "encoder",
            "preprocessor": "preprocessor",
            **tokenizer,
            "vocab_size": vocab_size,
            "lower_case": bool(lower_case),
            "default_seq_length": int(default_seq_length),
            "bert_config": encoder.cfg.to_dict(),
            "num_parameters": encoder.cfg.num_parameters(),
            **(extra_metadata or {}),
        }
        (tmp / HUB_METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True)
                                              + "\n", encoding="utf-8")
    return out_dir


def read_metadata(hub_dir: str | os.PathLike) -> dict[str, Any]:
    """The ``tfapp_hub.json`` of a module directory written by ``export_bert_modules``."""
    path = Path(hub_dir) / HUB_METADATA_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path} not found: not a tfapp Hub directory (expected "
                          f"encoder/, preprocessor/ and {HUB_METADATA_FILE})") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path} is not valid JSON ({err}); rebuild it with "
                          "`python -m tfapp.hub build-bert`") from None
    return meta
