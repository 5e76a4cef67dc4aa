"""Serving export of a trained classifier: raw strings in, probabilities and labels out.

The SavedModel carries its preprocessing (the BERT tokenizer and packer, with the vocab
as an asset) and the label names, so it reloads in a fresh process with only
``tensorflow`` and ``tensorflow_text`` (for the tokenizer ops) imported:

    import tensorflow as tf, tensorflow_text  # noqa
    m = tf.saved_model.load("runs/classifier/export")
    out = m.serve(tf.constant(["great value"]))   # {"probabilities", "label"}

Writes are atomic (``atomic.atomic_directory``): a crash never leaves a half-written
export that looks complete.
"""

from __future__ import annotations

import os
from pathlib import Path

from tfapp.data.input.lengths import trim_to_longest
from tfapp.model_card import CARD_FILE
from tfapp.models.serving_module import ServingModule
from tfapp.tasks.classifier.serving import FORMAT
from tfapp.training.metrics import BINARY, MULTILABEL

import tensorflow as tf


class ClassifierServing(ServingModule):
    """``serve(text)`` (and ``serve_pair(text, text_pair)`` for sentence-pair models)."""

    def __init__(self, model: tf.keras.Model, preprocessor: tf.Module, *, seq_length: int,
                 label_names: list[str], mode: str, text_pair: bool):
        super().__init__(model, preprocessor, name="classifier_serving")
        # A variable (not a constant) so it is saved and readable after tf.saved_model.load.
        self.label_names = tf.Variable(label_names, trainable=False, name="label_names")
        self._seq_length = int(seq_length)
        self._mode = mode
        if text_pair:  # only pair models have (and export) serve_pair
            self.serve_pair = tf.function(
                lambda text, text_pair: self._outputs([text, text_pair]),
                input_signature=[tf.TensorSpec([None], tf.string),
                                 tf.TensorSpec([None], tf.string)])

    def _outputs(self, segments: list) -> dict[str, tf.Tensor]:
        features = self.tokenizer.bert_pack_inputs(
            [self.tokenizer.tokenize(s) for s in segments], seq_length=self._seq_length)
        # The model reads [batch, None]: a call computes only as far as its longest text.
        features = trim_to_longest({k: tf.cast(v, tf.int32) for k, v in features.items()},
                                   self._seq_length)
        probs = tf.cast(self.model(features), tf.float32)
        if self._mode == BINARY:  # one sigmoid -> [P(class 0), P(class 1)]
            probs = tf.concat([1.0 - probs, probs], axis=-1)
        if self._mode == MULTILABEL:
            chosen = tf.ragged.boolean_mask(
                tf.broadcast_to(self.label_names, tf.shape(probs)), probs >= 0.5)
            label = tf.strings.reduce_join(chosen, axis=-1, separator="|")
        else:
            label = tf.gather(self.label_names, tf.argmax(probs, axis=-1))
        return {"probabilities": probs, "label": label}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._outputs([text])


def export_classifier(serving: ClassifierServing, export_dir: str | os.PathLike, *,
                      metadata: dict, card: str = "") -> Path:
    """The serving SavedModel, its metadata and its model card (``README.md``)."""
    # The tf.functions, not their concrete functions: save traces them itself (in its save
    # context, which keys the trace cache), so one traced before saving is traced again.
    signatures = {"serving_default": serving.serve}
    if hasattr(serving, "serve_pair"):
        signatures["serve_pair"] = serving.serve_pair
    return FORMAT.write(serving, export_dir, signatures=signatures, metadata=metadata,
                        files={CARD_FILE: card} if card else None)

