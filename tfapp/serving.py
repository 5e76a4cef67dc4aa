"""Exported models: the one export finder and the one classifier ``predict``.

``find_export`` turns ``--model`` (a run directory or its export/) into the SavedModel
directory for every command (predict, evaluate, generate), and ``load_export`` loads it:
a damaged export (truncated, files deleted, its metadata unreadable) is one line.
``predict_in_batches`` is how probabilities come out of a classifier's serving functions,
whether the module was just trained (the validation report at the end of a run) or loaded
from disk (predict, evaluate).
"""

from __future__ import annotations

import json
import os
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


def _damaged(model: str | os.PathLike, export: Path, kind: str, what: str) -> ConfigError:
    return ConfigError(f"--model {model}: the {kind} export {export} is damaged ({what}); "
                       f"export it again ({_TRAIN_HINT[kind]}), or copy the whole export/ "
                       "folder again if it was copied")


def load_export(model: str | os.PathLike, kind: str) -> tuple[Path, Any, dict]:
    """(export directory, ``tf.saved_model.load`` of it, its metadata file's JSON) for
    ``--model``; one ConfigError naming the export when it cannot be loaded."""
    import tensorflow as tf

    export = find_export(model, kind)
    marker = export / EXPORT_MARKERS[kind]
    try:
        metadata = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _damaged(model, export, kind, f"{marker.name} is unreadable: "
                       f"{getattr(err, 'msg', None) or err}") from None
    if not isinstance(metadata, dict):
        raise _damaged(model, export, kind, f"{marker.name} holds no JSON object")
    # Named here rather than left to TensorFlow, whose errors for these say nothing of the
    # export ("Read less bytes than requested", "not an sstable", a device hint).
    variables = export / "variables"
    if not (variables / "variables.index").is_file():
        raise _damaged(model, export, kind, "variables/variables.index is missing")
    if not list(variables.glob("variables.data-*")):
        raise _damaged(model, export, kind, "variables/variables.data-* is missing")
    if (export / "saved_model.pb").stat().st_size == 0:
        raise _damaged(model, export, kind, "saved_model.pb is empty")
    try:
        if (export / "fingerprint.pb").is_file():  # else TF logs a traceback and loads on
            tf.saved_model.experimental.read_fingerprint(str(export))
        module = tf.saved_model.load(str(export))
    except Exception as err:  # noqa: BLE001  TensorFlow raises many kinds for a bad file
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise _damaged(model, export, kind, f"{type(err).__name__}: {first}") from None
    return export, module, metadata


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
        import tensorflow_text  # noqa: F401  (registers the tokenizer ops the model uses)

        self.path, self.module, self.metadata = load_export(model, "classifier")
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
