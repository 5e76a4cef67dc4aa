"""A native tf.keras BERT encoder with the TF-Hub BERT interface.

Why a native encoder when tfapp fine-tunes TF-Hub modules: a restored Hub graph is
fixed in float32, so a ``mixed_bfloat16``/``mixed_float16`` policy cannot reach
inside it (docs/hub.md, "The native encoder"). This encoder is what tfapp exports as its
own Hub modules (``tfapp.hub.export``) and what a module's weights are read back into
when mixed precision matters.

Interface (the one every TF-Hub BERT encoder has)::

    inputs  = {"input_word_ids", "input_mask", "input_type_ids"}   # int32 [batch, seq]
    outputs = {"pooled_output":   [batch, hidden],
               "sequence_output": [batch, seq, hidden],
               "encoder_outputs": [[batch, seq, hidden]] * num_layers}

Weights follow the original BERT / Hugging Face ``BertModel`` layout one to one
(Dense kernels are the transpose of PyTorch ``Linear.weight``), and each has a
stable name independent of the Keras instance name (``named_weights()``), e.g.
``embeddings/word_embeddings``, ``layer_0/attention/query/kernel``,
``layer_0/attention_output/kernel``, ``layer_0/intermediate/kernel``,
``pooler/kernel``. ``hf_weight_name`` gives the Hugging Face name of each.
With ``BertConfig.embedding_size`` set (ELECTRA), the embeddings are that wide and a
dense ``embeddings/projection`` maps them to hidden_size (ELECTRA's ``embeddings_project``).

Mixed precision: layers compute in the policy's compute dtype; the attention
softmax and LayerNorm statistics run in float32 so bfloat16/float16 stay stable.
"""

from __future__ import annotations

import math
import re
from typing import Any

from tfapp import compat
from tfapp.models.bert_config import ACTIVATIONS, BertConfig

import tensorflow as tf

__all__ = [
    "ACTIVATIONS",
    "BertConfig",
    "BertEncoder",
    "BertEmbeddings",
    "BertSelfAttention",
    "TransformerLayer",
    "dummy_inputs",
    "hf_weight_name",
]

INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")

class _Initializers:
    """Hands out one truncated-normal initializer per weight.

    A fresh instance per weight matters: tf-keras gives an unseeded initializer instance
    the same values on every call, so a shared one would make query == key == value.
    With a seed, weight k gets seed + k: the same seed builds the same encoder without
    touching the process-wide random state (a build must not reseed the caller).
    """

    def __init__(self, stddev: float, seed: int | None):
        self.stddev = stddev
        self.seed = seed
        self.count = 0

    def __call__(self) -> tf.keras.initializers.Initializer:
        seed = None if self.seed is None else self.seed + self.count
        self.count += 1
        return tf.keras.initializers.TruncatedNormal(stddev=self.stddev, seed=seed)


_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@tf.custom_gradient
def gelu_exact(x: tf.Tensor):
    """GELU, erf form (BERT's), with a hand-written gradient.

    Same values as ``tf.nn.gelu(x, approximate=False)``; the gradient
    ``cdf(x) + x * pdf(x)`` reuses the forward's cdf, which halves the element-wise
    passes autodiff makes over the [tokens, intermediate] tensor (on a CPU that
    was as slow as the FFN matmul it follows; docs/performance.md).
    """
    cdf = 0.5 * (1.0 + tf.math.erf(x * tf.cast(_SQRT_HALF, x.dtype)))

    def grad(dy: tf.Tensor) -> tf.Tensor:
        pdf = tf.exp(-0.5 * tf.square(x)) * tf.cast(_INV_SQRT_2PI, x.dtype)
        return dy * (cdf + x * pdf)

    return x * cdf, grad


def _transposed(a: tf.Tensor) -> tf.Tensor:
    """``a`` [rows, cols] transposed into new memory. Written as a rank-3 transpose so
    grappler does not fold it back into the next matmul's ``transpose_a``."""
    return tf.reshape(tf.transpose(a[None], [2, 0, 1]), [tf.shape(a)[1], -1])


@tf.custom_gradient
def ffn_matmul(x: tf.Tensor, kernel: tf.Tensor):
    """``x @ kernel`` ([tokens, in] x [in, out]) whose weight gradient suits oneDNN.

    The weight gradient ``x^T @ dy`` contracts over all tokens (4096 here). oneDNN's
    matmul runs that shape with ``transpose_a`` at ~80 GFLOP/s on this AVX2 CPU, against
    ~135 when the wider operand is transposed into memory first and the product is laid
    out [max(in, out), min(in, out)] (16 vs 26-28 ms per FFN matrix, transposes
    included; scripts in docs/performance.md). Same product, so the same values.
    """
    def grad(dy: tf.Tensor):
        dx = tf.matmul(dy, kernel, transpose_b=True)
        if kernel.shape[1] > kernel.shape[0]:
            dkernel = tf.transpose(tf.matmul(_transposed(dy), x))
        else:
            dkernel = tf.matmul(_transposed(x), dy)
        return dx, dkernel

    return tf.matmul(x, kernel), grad


class FeedForwardDense(tf.keras.layers.Dense):
    """``Dense`` on [batch, seq, in] whose float32 weight gradient goes through
    ``ffn_matmul`` when TensorFlow runs oneDNN kernels (tfapp turns them on for x86);
    otherwise plain ``Dense`` (Eigen's kernel is faster with ``transpose_a``). Same
    weights and names as ``Dense``, so checkpoints and Hub modules are unchanged."""

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        if self.compute_dtype != "float32" or inputs.shape.rank != 3 \
                or not compat.onednn_enabled():
            return super().call(inputs)
        kernel = tf.convert_to_tensor(self.kernel)
        x = tf.reshape(inputs, [-1, kernel.shape[0]])
        y = ffn_matmul(x, kernel)
        if self.bias is not None:
            y = tf.nn.bias_add(y, self.bias)
        if self.activation is not None:
            y = self.activation(y)
        y = tf.reshape(y, tf.concat([tf.shape(inputs)[:-1], [self.units]], 0))
        y.set_shape(inputs.shape[:-1].concatenate([self.units]))
        return y


def activation(name: str):
    if name == "gelu":
        return gelu_exact
    if name == "gelu_approx":
        return lambda x: tf.nn.gelu(x, approximate=True)
    return tf.nn.relu


class BertEmbeddings(tf.keras.layers.Layer):
    """word + position + token-type embeddings, then LayerNorm and dropout (and, with
    ``cfg.embedding_size`` set, a dense projection to hidden_size)."""

    def __init__(self, cfg: BertConfig, init: _Initializers | None = None, **kwargs):
        super().__init__(**kwargs)
        self.cfg = cfg
        self._init = init or _Initializers(cfg.initializer_range, None)
        # tf-keras LayerNormalization computes its statistics in float32 under mixed
        # precision (float32 variables, inputs upcast) and returns the input dtype.
        self.layer_norm = tf.keras.layers.LayerNormalization(
            epsilon=cfg.layer_norm_epsilon, name="layer_norm")
        self.dropout = tf.keras.layers.Dropout(cfg.dropout, name="dropout")
        # Only when configured, so a BERT draws its initializer seeds exactly as before.
        self.projection = None if cfg.embedding_size is None else tf.keras.layers.Dense(
            cfg.hidden_size, kernel_initializer=self._init(), name="projection")

    def build(self, input_shape) -> None:
        cfg = self.cfg
        width = cfg.embedding_width
        self.word_embeddings = self.add_weight(
            "word_embeddings", shape=(cfg.vocab_size, width), initializer=self._init())
        self.position_embeddings = self.add_weight(
            "position_embeddings", shape=(cfg.max_position_embeddings, width),
            initializer=self._init())
        self.token_type_embeddings = self.add_weight(
            "token_type_embeddings", shape=(cfg.type_vocab_size, width),
            initializer=self._init())
        super().build(input_shape)

    def call(self, word_ids: tf.Tensor, type_ids: tf.Tensor, training=None) -> tf.Tensor:
        seq_len = tf.shape(word_ids)[1]
        # Gather from the read value, not the variable: a ResourceGather on the variable
        # switches it to copy-on-read, after which every read (each optimizer step's)
        # copies the whole (vocab x hidden) table. The gradient stays IndexedSlices;
        # tfapp's FusedAdamW applies it densely (training/optimizers.py).
        x = tf.gather(tf.convert_to_tensor(self.word_embeddings), word_ids)
        x += self.position_embeddings[tf.newaxis, :seq_len, :]
        # One-hot matmul instead of a gather: the type vocabulary is tiny, and this is
        # the TPU-friendly form (no dynamic gather on the hot path).
        if self.cfg.type_vocab_size == 1:
            # One segment type (RoBERTa, DistilBERT): every token gets its row, whatever
            # type id the packer gave a second segment -- as the model saw in training.
            x += tf.cast(self.token_type_embeddings, x.dtype)
        else:
            x += tf.matmul(tf.one_hot(type_ids, self.cfg.type_vocab_size, dtype=x.dtype),
                           tf.cast(self.token_type_embeddings, x.dtype))
        x = self.layer_norm(x)
        x = self.dropout(x, training=training)
        return x if self.projection is None else self.projection(x)


class BertSelfAttention(tf.keras.layers.Layer):
    """Multi-head self-attention with a padding mask (query/key/value Dense layers)."""

    def __init__(self, cfg: BertConfig, init: _Initializers | None = None, **kwargs):
        super().__init__(**kwargs)
        self.cfg = cfg
        init = init or _Initializers(cfg.initializer_range, None)
        self.query = tf.keras.layers.Dense(
            cfg.hidden_size, kernel_initializer=init(), name="query")
        self.key = tf.keras.layers.Dense(
            cfg.hidden_size, kernel_initializer=init(), name="key")
        self.value = tf.keras.layers.Dense(
            cfg.hidden_size, kernel_initializer=init(), name="value")
        self.dropout = tf.keras.layers.Dropout(cfg.attention_dropout, name="dropout")

    def _heads(self, x: tf.Tensor) -> tf.Tensor:
        b, s = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [b, s, self.cfg.num_heads, self.cfg.head_size])
        return tf.transpose(x, [0, 2, 1, 3])  # [b, heads, s, head_size]

    def call(self, x: tf.Tensor, mask_bias: tf.Tensor, training=None) -> tf.Tensor:
        q = self._heads(self.query(x))
        k = self._heads(self.key(x))
        v = self._heads(self.value(x))
        q *= tf.cast(1.0 / math.sqrt(self.cfg.head_size), q.dtype)
        scores = tf.matmul(q, k, transpose_b=True)  # [b, heads, s, s]
        # Softmax in float32: bfloat16 has 8 bits of mantissa, float16 overflows at 65504.
        probs = tf.nn.softmax(tf.cast(scores, tf.float32) + mask_bias, axis=-1)
        probs = self.dropout(tf.cast(probs, x.dtype), training=training)
        ctx = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])
        b, s = tf.shape(x)[0], tf.shape(x)[1]
        return tf.reshape(ctx, [b, s, self.cfg.hidden_size])


class TransformerLayer(tf.keras.layers.Layer):
    """Post-LN transformer block (original BERT): attention, add&norm, FFN, add&norm."""

    def __init__(self, cfg: BertConfig, init: _Initializers | None = None, **kwargs):
        super().__init__(**kwargs)
        self.cfg = cfg
        init = init or _Initializers(cfg.initializer_range, None)
        self.attention = BertSelfAttention(cfg, init, name="attention")
        self.attention_output = tf.keras.layers.Dense(
            cfg.hidden_size, kernel_initializer=init(), name="attention_output")
        self.attention_dropout = tf.keras.layers.Dropout(cfg.dropout, name="attention_dropout")
        self.attention_layer_norm = tf.keras.layers.LayerNormalization(
            epsilon=cfg.layer_norm_epsilon, name="attention_layer_norm")
        self.intermediate = FeedForwardDense(
            cfg.intermediate_size, activation=activation(cfg.activation),
            kernel_initializer=init(), name="intermediate")
        self.output_dense = FeedForwardDense(
            cfg.hidden_size, kernel_initializer=init(), name="output")
        self.output_dropout = tf.keras.layers.Dropout(cfg.dropout, name="output_dropout")
        self.output_layer_norm = tf.keras.layers.LayerNormalization(
            epsilon=cfg.layer_norm_epsilon, name="output_layer_norm")

    def call(self, x: tf.Tensor, mask_bias: tf.Tensor, training=None) -> tf.Tensor:
        h = self.attention(x, mask_bias, training=training)
        h = self.attention_dropout(self.attention_output(h), training=training)
        x = self.attention_layer_norm(x + h)
        h = self.output_dropout(self.output_dense(self.intermediate(x)), training=training)
        return self.output_layer_norm(x + h)


class BertEncoder(tf.keras.Model):
    """BERT encoder: dict of int32 ids in, pooled/sequence/per-layer outputs out."""

    def __init__(self, cfg: BertConfig, name: str = "bert_encoder", seed: int | None = None,
                 **kwargs):
        super().__init__(name=name, **kwargs)
        self.cfg = cfg
        init = _Initializers(cfg.initializer_range, seed)
        self.embeddings = BertEmbeddings(cfg, init, name="embeddings")
        self.transformer_layers = [TransformerLayer(cfg, init, name=f"layer_{i}")
                                   for i in range(cfg.num_layers)]
        self.pooler = tf.keras.layers.Dense(
            cfg.hidden_size, activation="tanh", kernel_initializer=init(),
            name="pooler")

    def call(self, inputs: dict[str, tf.Tensor], training=None) -> dict[str, Any]:
        missing = [k for k in INPUT_KEYS if k not in inputs]
        if missing:
            raise ValueError(f"BertEncoder inputs lack {missing}; expected a dict with keys "
                             f"{list(INPUT_KEYS)}")
        word_ids = tf.cast(inputs["input_word_ids"], tf.int32)
        mask = inputs["input_mask"]
        type_ids = tf.cast(inputs["input_type_ids"], tf.int32)

        # Additive attention bias [b, 1, 1, s]: 0 where attended, -1e9 on padding. Added to
        # float32 scores (see BertSelfAttention), so the large constant is safe in bf16/fp16.
        mask_bias = (1.0 - tf.cast(mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]) * -1e9

        x = self.embeddings(word_ids, type_ids, training=training)
        encoder_outputs = []
        for layer in self.transformer_layers:
            x = layer(x, mask_bias, training=training)
            encoder_outputs.append(x)
        pooled = self.pooler(x[:, 0, :])
        return {"pooled_output": pooled, "sequence_output": x,
                "encoder_outputs": encoder_outputs}

    def get_config(self) -> dict[str, Any]:
        return {"cfg": self.cfg.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BertEncoder:
        return cls(BertConfig.from_dict(config["cfg"]), name=config.get("name", "bert_encoder"))

    def build_weights(self) -> BertEncoder:
        """Create all variables by running a one-token batch (eagerly, no training)."""
        if not self.built:
            self(dummy_inputs(1, 2), training=False)
        return self

    def named_weights(self) -> dict[str, tf.Variable]:
        """Stable name -> variable, independent of this instance's Keras name.

        ``bert_encoder_3/layer_0/attention/query/kernel:0`` becomes
        ``layer_0/attention/query/kernel``. Checkpoint converters and the Hub exporter
        key weights by these names.
        """
        self.build_weights()
        return {stable_weight_name(v.name): v for v in self.weights}

    def assign_named_weights(self, values: dict[str, Any]) -> None:
        """Assign every weight from ``values`` (stable name -> array); all must be present
        with matching shapes, so a partial or mismatched checkpoint fails loudly."""
        own = self.named_weights()
        missing = sorted(set(own) - set(values))
        unexpected = sorted(set(values) - set(own))
        if missing or unexpected:
            raise ValueError(f"weights do not match this BertEncoder: missing {missing[:5]}"
                             f"{'...' if len(missing) > 5 else ''}, unexpected "
                             f"{unexpected[:5]}{'...' if len(unexpected) > 5 else ''}")
        for name, var in own.items():
            value = values[name]
            if tuple(value.shape) != tuple(var.shape):
                raise ValueError(f"weight {name}: shape {tuple(value.shape)} does not match "
                                 f"the encoder's {tuple(var.shape)}")
            var.assign(tf.cast(value, var.dtype))


def stable_weight_name(variable_name: str) -> str:
    """Strip the model instance scope and the ``:0`` suffix from a variable name."""
    name = variable_name.split(":")[0]
    parts = name.split("/")
    # The first component is the (uniquified) model name, e.g. bert_encoder_2.
    return "/".join(parts[1:]) if len(parts) > 1 else name


_HF_LAYER_MAP = {
    "attention/query": "attention.self.query",
    "attention/key": "attention.self.key",
    "attention/value": "attention.self.value",
    "attention_output": "attention.output.dense",
    "attention_layer_norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
    "output_layer_norm": "output.LayerNorm",
}
_HF_PARAM = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}


def hf_weight_name(stable_name: str) -> tuple[str, bool]:
    """(Hugging Face ``BertModel`` parameter name, transpose?) for a stable weight name.

    Dense kernels are [in, out] here and [out, in] in PyTorch, hence the transpose flag.
    """
    if stable_name.startswith("embeddings/projection/"):  # ELECTRA's embeddings_project
        param = stable_name.split("/")[2]
        return f"embeddings_project.{_HF_PARAM[param]}", param == "kernel"
    if stable_name.startswith("embeddings/"):
        rest = stable_name.split("/", 1)[1]
        if rest.startswith("layer_norm/"):
            return f"embeddings.LayerNorm.{_HF_PARAM[rest.split('/')[1]]}", False
        return f"embeddings.{rest}.weight", False
    if stable_name.startswith("pooler/"):
        param = stable_name.split("/")[1]
        return f"pooler.dense.{_HF_PARAM[param]}", param == "kernel"
    m = re.fullmatch(r"layer_(\d+)/(.+)/(kernel|bias|gamma|beta)", stable_name)
    if not m or m.group(2) not in _HF_LAYER_MAP:
        raise ValueError(f"'{stable_name}' is not a BertEncoder weight name")
    index, sub, param = m.groups()
    return (f"encoder.layer.{index}.{_HF_LAYER_MAP[sub]}.{_HF_PARAM[param]}",
            param == "kernel")


def dummy_inputs(batch: int, seq_length: int) -> dict[str, tf.Tensor]:
    """A batch of [CLS]-like ids with a full mask, for building variables."""
    shape = (batch, seq_length)
    return {"input_word_ids": tf.ones(shape, tf.int32), "input_mask": tf.ones(shape, tf.int32),
            "input_type_ids": tf.zeros(shape, tf.int32)}
