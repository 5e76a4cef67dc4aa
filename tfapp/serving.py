"""Load an exported classifier (a run directory or its export/) for predict and evaluate."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tfapp.config import ConfigError
from tfapp.training.export import read_export_metadata

import numpy as np

BATCH = 256


def find_export(model: str | os.PathLike) -> Path:
    """The SavedModel directory for ``--model``: RUN_DIR/export, or the directory itself."""
    path = Path(model)
    for candidate in (path / "export", path):
        if (candidate / "saved_model.pb").is_file():
            return candidate
    if not path.exists():
        raise ConfigError(f"--model {model}: no such directory; give a run directory "
                          "(e.g. runs/classifier) or its export/ directory")
    raise ConfigError(f"--model {model}: no exported model there (expected "
                      f"{path / 'export' / 'saved_model.pb'}); train with trainer.export=true")


class LoadedClassifier:
    """An exported classifier and its metadata (label names, pair input, ...)."""

    def __init__(self, model: str | os.PathLike):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the tokenizer ops the model uses)

        self.path = find_export(model)
        self.metadata = read_export_metadata(self.path)
        self.module = tf.saved_model.load(str(self.path))
        self.label_names = [b.decode() for b in self.module.label_names.numpy()]
        self.text_pair = bool(self.metadata.get("text_pair"))

    def predict(self, texts: list[str], pairs: list[str] | None = None
                ) -> tuple[np.ndarray, list[str]]:
        """(probabilities [n, classes], predicted label strings) in batches."""
        import tensorflow as tf

        if self.text_pair and pairs is None:
            raise ConfigError("this model classifies sentence pairs; give the second texts "
                              "(--pair / the text_pair column)")
        probs, labels = [], []
        for start in range(0, len(texts), BATCH):
            batch = tf.constant(texts[start:start + BATCH])
            if self.text_pair:
                out: Any = self.module.serve_pair(batch, tf.constant(pairs[start:start + BATCH]))
            else:
                out = self.module.serve(batch)
            probs.append(out["probabilities"].numpy())
            labels.extend(b.decode() for b in out["label"].numpy())
        if not probs:
            return np.zeros((0, len(self.label_names))), []
        return np.concatenate(probs), labels
