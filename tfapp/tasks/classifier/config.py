"""The classifier's config rules (read by ``tfapp.config.validate``; no TensorFlow)."""

MODEL_KINDS = ("bert", "cnn", "rnn")

#: keys of other tasks; setting one for a classifier run is refused
UNUSED = (
    "data.tag_column", "data.tag_scheme",
    "data.drop_regex", "data.strip_punctuation", "data.vocab_size", "data.example_shape",
    "data.context_words", "data.target_words", "data.source_column", "data.target_column",
    "generation", "mlm",
)
