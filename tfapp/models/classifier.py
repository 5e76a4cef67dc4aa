"""Text classifiers on the BERT input dict: a TF-Hub BERT encoder + head, or a baseline.

Every kind takes the same inputs -- ``{input_word_ids, input_mask, input_type_ids}``,
int32 ``[batch, seq_length]`` -- so ``model.kind: bert|cnn|rnn`` switches models on
one pipeline (the BERT preprocessor's WordPiece ids feed the baselines too):

* ``bert``: ``hub.KerasLayer`` encoder (fine-tuned when ``model.trainable``) -- under a
  mixed-precision policy, the module's weights in the native ``BertEncoder`` instead,
  where the module is covered (``native_encoder_from_hub``) -- then
  ``pooled_output`` or masked mean+max pooling of ``sequence_output``
  (``model.pooling``), dropout, dense;
* ``cnn``: token (+ segment) embedding, Conv1D, global max pool over real tokens;
* ``rnn``: token (+ segment) embedding, LSTM (bidirectional optional) whose last
  output is taken at the last *real* token (the padding mask is passed to it).

Outputs are probabilities: sigmoid with 1 unit for binary, sigmoid with C units for
multi-label, softmax with C units for multi-class. The last Dense and its activation
run in float32, so a ``mixed_bfloat16``/``mixed_float16`` policy never rounds the
probabilities (the Keras mixed-precision rule for outputs).
"""

from __future__ import annotations

from typing import Any

from tfapp import compat
from tfapp.config import ClassifierModelConfig, ConfigError, ModelConfig
from tfapp.models.hub_encoder import (
    BERT_INPUT_KEYS,
    ENCODER_REASON_ATTR,
    load_hub_encoder,
    native_encoder_from_hub,
    native_encoder_wanted,
)

import tensorflow as tf

__all__ = ["CLASSIFIER_KINDS", "MaskedMeanMaxPooling", "bert_encoder_outputs", "build_classifier",
           "output_units"]

CLASSIFIER_KINDS = ("bert", "cnn", "rnn")
CNN_KERNEL_SIZE = 5


@tf.keras.utils.register_keras_serializable(package="tfapp")
class MaskedMeanMaxPooling(tf.keras.layers.Layer):
    """Mean and/or max over the time axis of [b, s, h], counting only mask==1 positions.

    Padding must not vote: an unmasked mean shrinks toward the pad embedding with
    length, and an unmasked max can pick a padding position.
    """

    def __init__(self, mode: str = "mean_max", **kwargs):
        super().__init__(**kwargs)
        if mode not in ("mean_max", "max", "mean"):
            raise ValueError(f"MaskedMeanMaxPooling mode '{mode}' is not mean_max, max or mean")
        self.mode = mode

    def call(self, sequence: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        mask = tf.cast(mask, sequence.dtype)[:, :, tf.newaxis]  # [b, s, 1]
        pooled = []
        if self.mode in ("mean_max", "mean"):
            count = tf.maximum(tf.reduce_sum(mask, axis=1), tf.cast(1.0, sequence.dtype))
            pooled.append(tf.reduce_sum(sequence * mask, axis=1) / count)
        if self.mode in ("mean_max", "max"):
            lowest = tf.cast(sequence.dtype.min, sequence.dtype)
            masked = tf.where(mask > 0, sequence, lowest)
            # An all-padding row would give dtype.min; give 0 instead (finite gradients).
            any_real = tf.reduce_max(mask, axis=1) > 0
            pooled.append(tf.where(any_real, tf.reduce_max(masked, axis=1),
                                   tf.zeros_like(masked[:, 0])))
        return tf.concat(pooled, axis=-1) if len(pooled) > 1 else pooled[0]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "mode": self.mode}


def output_units(num_classes: int, multi_label: bool) -> tuple[int, str]:
    """(units, activation) of the output layer: 1 sigmoid for binary, C sigmoid for
    multi-label, C softmax for multi-class."""
    if multi_label:
        if num_classes < 1:
            raise ConfigError(f"multi-label classification needs at least 1 label, got "
                              f"{num_classes}")
        return num_classes, "sigmoid"
    if num_classes < 2:
        raise ConfigError(f"classification needs at least 2 classes, found {num_classes}; "
                          "check data.label_column")
    return (1, "sigmoid") if num_classes == 2 else (num_classes, "softmax")


def _inputs() -> dict[str, tf.Tensor]:
    # Any length up to seq_length: batches come padded to their length bucket
    # (tfapp.data.input.lengths), the serving export to seq_length.
    return {k: tf.keras.Input(shape=(None,), dtype=tf.int32, name=k)
            for k in BERT_INPUT_KEYS}


def bert_encoder_outputs(model_cfg: ModelConfig, inputs: dict[str, tf.Tensor],
                         hub_handle: str, encoder: tf.keras.layers.Layer | None = None
                         ) -> dict[str, tf.Tensor]:
    """The encoder's outputs (``pooled_output``, ``sequence_output``) on ``inputs``: the
    Hub layer, or the native encoder where precision or determinism need it (shared by
    the classifier and the token classifier). ``hub_encoder.built_encoder(model)`` says afterwards
    which one and why."""
    if encoder is not None:
        reason = "handed in by the caller"
    else:
        # A restored Hub graph stays float32 whatever the policy, and its dropout ops keep
        # the seed they were saved with (none, for most modules), which op determinism
        # refuses: read the module into the native encoder, so bfloat16/float16 reach the
        # encoder and its dropout is seeded from runtime.seed (None if not covered; the Hub
        # layer then checks its random ops).
        wanted = native_encoder_wanted(
            tf.keras.mixed_precision.global_policy().compute_dtype,
            model_cfg.trainable and compat.op_determinism_enabled())
        if wanted:
            encoder = native_encoder_from_hub(hub_handle)
            reason = (f"{wanted}; the module is tfapp's format" if encoder is not None else
                      f"{wanted}, but the module is not tfapp's format (no get_bert_config, "
                      "which builtin: and tfapp.hub build-bert/convert write), so it runs as "
                      "restored, in float32")
        else:
            reason = ("float32 compute: the module as restored (the native encoder is for "
                      "mixed precision or deterministic fine-tuning)")
    if encoder is None:
        encoder = load_hub_encoder(hub_handle, trainable=model_cfg.trainable)
    else:
        encoder.trainable = model_cfg.trainable
    setattr(encoder, ENCODER_REASON_ATTR, reason)
    return encoder(dict(inputs))


def _bert_features(model_cfg: ModelConfig, inputs: dict[str, tf.Tensor], hub_handle: str,
                   encoder: tf.keras.layers.Layer | None) -> tf.Tensor:
    outputs = bert_encoder_outputs(model_cfg, inputs, hub_handle, encoder)
    if model_cfg.pooling == "pooled":
        return outputs["pooled_output"]
    return MaskedMeanMaxPooling("mean_max", name="mean_max_pooling")(
        outputs["sequence_output"], inputs["input_mask"])


def _embed(model_cfg: ClassifierModelConfig, inputs: dict[str, tf.Tensor], vocab_size: int | None
           ) -> tf.Tensor:
    if not vocab_size:
        raise ConfigError(f"model.kind={model_cfg.kind} needs the vocabulary size (of the "
                          "preprocessor's vocab) to size its embedding")
    tokens = tf.keras.layers.Embedding(vocab_size, model_cfg.embedding_dim,
                                       name="token_embedding")(inputs["input_word_ids"])
    # Segment embedding: lets the baselines tell the two texts of a sentence pair apart.
    segments = tf.keras.layers.Embedding(2, model_cfg.embedding_dim,
                                         name="segment_embedding")(inputs["input_type_ids"])
    return tf.keras.layers.Add(name="embeddings")([tokens, segments])


def _cnn_features(model_cfg: ClassifierModelConfig, inputs: dict[str, tf.Tensor],
                  vocab_size: int | None) -> tf.Tensor:
    x = _embed(model_cfg, inputs, vocab_size)
    # Padded positions as zero vectors, like the convolution's own "same" padding: a
    # text's features then do not depend on how far its batch is padded (length buckets
    # in training, seq_length in the serving export).
    x = tf.keras.layers.Lambda(lambda t: t[0] * tf.cast(t[1], t[0].dtype)[:, :, None],
                               name="zero_padding")([x, inputs["input_mask"]])
    x = tf.keras.layers.Conv1D(model_cfg.units, CNN_KERNEL_SIZE, padding="same",
                               activation="relu", name="conv")(x)
    return MaskedMeanMaxPooling("max", name="global_max_pool")(x, inputs["input_mask"])


def _rnn_features(model_cfg: ClassifierModelConfig, inputs: dict[str, tf.Tensor],
                  vocab_size: int | None) -> tf.Tensor:
    x = _embed(model_cfg, inputs, vocab_size)
    mask = tf.keras.layers.Lambda(lambda m: tf.cast(m, tf.bool), name="padding_mask")(
        inputs["input_mask"])
    rnn = tf.keras.layers.LSTM(model_cfg.units, name="lstm")
    if model_cfg.bidirectional:
        rnn = tf.keras.layers.Bidirectional(rnn, name="bilstm")
    return rnn(x, mask=mask)


def build_classifier(model_cfg: ClassifierModelConfig, *, num_classes: int, multi_label: bool,
                     seq_length: int, vocab_size: int | None = None,
                     hub_handle: str | None = None,
                     encoder: tf.keras.layers.Layer | None = None) -> tf.keras.Model:
    """The classifier for ``model_cfg.kind`` (bert|cnn|rnn), uncompiled.

    Build it inside the strategy scope. Args:
      model_cfg: the ``model`` config group.
      num_classes: number of labels (2 for binary).
      multi_label: independent sigmoid per label.
      seq_length: the longest token length the inputs have (batches may be shorter).
      vocab_size: WordPiece vocab size; required for cnn/rnn.
      hub_handle: the *resolved* encoder handle (see ``tfapp.hub.handles``); default
        ``model_cfg.hub_handle``.
      encoder: a ready encoder layer to use instead of loading the handle (e.g. the
        native ``tfapp.models.bert.BertEncoder`` holding a module's weights, which runs
        under mixed precision); it must map the input dict to a dict with
        ``pooled_output``/``sequence_output``.

    The model carries ``model.hub_handle`` (the encoder handle; "" for baselines) and
    ``model.classifier_kind`` for the serving export.
    """
    kind = model_cfg.kind
    if kind not in CLASSIFIER_KINDS:
        raise ConfigError(f"model.kind={kind} is not a classifier; choose one of "
                          f"{', '.join(CLASSIFIER_KINDS)}")
    if model_cfg.pooling not in ("pooled", "mean_max"):
        raise ConfigError(f"model.pooling={model_cfg.pooling} is unknown; choose pooled or "
                          "mean_max")
    units, activation = output_units(num_classes, multi_label)
    handle = (hub_handle if hub_handle is not None else model_cfg.hub_handle) \
        if kind == "bert" else ""

    inputs = _inputs()
    if kind == "bert":
        features = _bert_features(model_cfg, inputs, handle, encoder)
    elif kind == "cnn":
        features = _cnn_features(model_cfg, inputs, vocab_size)
    else:
        features = _rnn_features(model_cfg, inputs, vocab_size)
    x = tf.keras.layers.Dropout(model_cfg.dropout, name="head_dropout")(features)
    # float32 output layer: probabilities must not be rounded to bfloat16/float16.
    logits = tf.keras.layers.Dense(units, dtype="float32", name="logits")(x)
    probs = tf.keras.layers.Activation(activation, dtype="float32", name="probabilities")(logits)
    model = tf.keras.Model(inputs=inputs, outputs=probs, name=f"{kind}_classifier")
    model.hub_handle = handle
    model.classifier_kind = kind
    return model
