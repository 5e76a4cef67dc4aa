"""The generator's config rules (read by ``tfapp.config.validate``; no TensorFlow)."""

MODEL_KINDS = ("seq2seq",)

#: keys of the classifier and the masked-LM task; setting one for a generator run is refused
UNUSED = (
    "data.labels", "data.tag_column", "data.tag_scheme",
    "data.text_pair_column", "data.label_column", "data.multi_label", "data.label_separator",
    "data.seq_length", "model.hub_handle", "model.hub_preprocessor", "model.trainable",
    "model.pooling", "mlm", "data.class_weight",
    "model.label_smoothing",
)
