"""Exported models: the one export finder and the one classifier ``predict``.

``find_export`` turns ``--model`` (a run directory or its export/) into the SavedModel
directory for every command (predict, evaluate, generate). ``predict_in_batches`` is how
probabilities come out of a classifier's serving functions, whether the module was just
trained (the validation report at the end of a run) or loaded from disk (predict,
evaluate).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfapp.config import ConfigError
from tfapp.run_layout import RunLayout

import numpy as np

BATCH = 256

#: metadata file each kind of export carries next to its saved_model.pb
EXPORT_MARKERS = {"classifier": "tfapp_export.json", "generator": "generator.json",
                  "ner": "ner_export.json"}
_TRAIN_HINT = {"classifier": "train with trainer.export=true",
               "generator": "train with task=generator and trainer.export=true",
               "ner": "train with task=ner and trainer.export=true"}


def export_kind(model: str | os.PathLike) -> str | None:
    """The kind of tfapp export at ``--model`` (a run directory or its export/), by its
    metadata file; None when there is none (``find_export`` then says what is wrong)."""
    path = Path(model)
    for candidate in (path, RunLayout(path).export):
        for kind, marker in EXPORT_MARKERS.items():
            if (candidate / marker).is_file() and (candidate / "saved_model.pb").is_file():
                return kind
    return None


def find_export(model: str | os.PathLike, kind: str = "classifier") -> Path:
    """The SavedModel directory of ``--model``: the directory itself or RUN_DIR/export; a
    one-line ConfigError when there is none or it holds another kind of model."""
    path = Path(model)
    if not path.exists():
        raise ConfigError(f"--model {model}: no such directory; give a {kind} run directory "
                          "(output_dir/name) or its export/ directory")
    marker = EXPORT_MARKERS[kind]
    for candidate in (path, RunLayout(path).export):
        if (candidate / "saved_model.pb").is_file():
            if not (candidate / marker).is_file():
                raise ConfigError(f"--model {model}: '{candidate}' is a SavedModel but not a "
                                  f"tfapp {kind} export (no {marker}); {_TRAIN_HINT[kind]}")
            return candidate
    raise ConfigError(f"--model {model}: no exported {kind} there (expected "
                      f"{RunLayout(path).export / 'saved_model.pb'}); {_TRAIN_HINT[kind]}")


def load_saved_export(path: Path, read_metadata: Callable[[Path], Any]) -> tuple[Any, dict]:
    """(the SavedModel, its metadata) of the export at ``path`` (from ``find_export``).

    A damaged or incomplete export -- a file cut short by a failed copy, a flipped bit, a
    file missing -- makes TensorFlow, protobuf or json raise any of a dozen exceptions;
    each becomes one ConfigError line naming the export, never a traceback."""
    import tensorflow as tf

    try:
        metadata = read_metadata(path)
        if not isinstance(metadata, dict):
            raise ValueError(f"metadata is {type(metadata).__name__}, not an object")
        if (path / "fingerprint.pb").is_file():  # else TF logs a traceback and loads on
            tf.saved_model.experimental.read_fingerprint(str(path))
        module = tf.saved_model.load(str(path))
    except (tf.errors.OpError, OSError, ValueError, KeyError, IndexError, RuntimeError) as err:
        # (json's JSONDecodeError and UnicodeDecodeError are ValueErrors)
        why = getattr(err, "message", None) or str(err) or type(err).__name__
        raise ConfigError(f"{path}: not a loadable export, damaged or incomplete "
                          f"({' '.join(why.split())[:300]}); export it again or copy it "
                          "whole") from None
    return module, metadata


def predict_in_batches(module: Any, texts: list[str], pairs: list[str] | None = None,
                       *, num_labels: int) -> tuple[np.ndarray, list[str]]:
    """(probabilities [n, num_labels], predicted label strings) through ``module.serve`` or,
    for sentence pairs, ``module.serve_pair``, ``BATCH`` texts per call."""
    import tensorflow as tf

    probs, labels = [], []
    for start in range(0, len(texts), BATCH):
        batch = tf.constant(texts[start:start + BATCH])
        if pairs is not None:
            out = module.serve_pair(batch, tf.constant(pairs[start:start + BATCH]))
        else:
            out = module.serve(batch)
        probs.append(out["probabilities"].numpy())
        labels.extend(b.decode() for b in out["label"].numpy())
    if not probs:
        return np.zeros((0, num_labels)), []
    return np.concatenate(probs), labels


class LoadedClassifier:
    """An exported classifier and its metadata (label names, pair input, ...)."""

    def __init__(self, model: str | os.PathLike):
        from tfapp.tasks.classifier.export import read_export_metadata

        import tensorflow_text  # noqa: F401  (registers the tokenizer ops the model uses)

        self.path = find_export(model, "classifier")
        self.module, self.metadata = load_saved_export(self.path, read_export_metadata)
        self.label_names = [b.decode() for b in self.module.label_names.numpy()]
        self.text_pair = bool(self.metadata.get("text_pair"))

    def predict(self, texts: list[str], pairs: list[str] | None = None
                ) -> tuple[np.ndarray, list[str]]:
        """(probabilities [n, classes], predicted label strings) in batches."""
        if self.text_pair and pairs is None:
            raise ConfigError("this model classifies sentence pairs; give the second texts "
                              "(--pair / the text_pair column)")
        return predict_in_batches(self.module, texts, pairs if self.text_pair else None,
                                  num_labels=len(self.label_names))
