"""The ``data`` and ``model`` groups' shared parts: a base every task's group extends, and
mixins holding the keys that some tasks read and others do not.

A task's group is a dataclass that inherits the base and the mixins it reads (e.g.
``class NerDataConfig(StoredDataConfig, TokenizedDataConfig, HeldOutDataConfig,
DataConfig)``); each class documents its own fields in its ``Attributes:`` section and
``field_docs`` gathers them along the inheritance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tfapp.config.fields import FREE, MATCH, NEVER, bounded, choices, setting


@dataclass
class DataServiceConfig:
    """Optional tf.data service that runs preprocessing on remote workers.

    Attributes:
      address: dispatcher address, e.g. grpc://localhost:5050; empty disables the service.
      processing_mode: how the workers share the input (tf.data's sharding policies):
        distributed_epoch or dynamic (the dispatcher hands out shard files on request: each
        example once per epoch across the workers), parallel_epochs or off (every worker a
        full epoch), file (each worker a fixed set of shard files; needs a dispatcher started
        with its workers' addresses, as python -m tfapp.data_service does).
      job_name: shared job name so several consumers read one job; empty = one job per run.
    """

    address: str = setting("", resume=FREE)
    processing_mode: str = choices("distributed_epoch", "parallel_epochs", "dynamic", "off",
                                   "file", default="distributed_epoch", resume=FREE)
    job_name: str = setting("", resume=FREE)


@dataclass
class DataConfig:
    """Input files and the tf.data pipeline (the keys every task reads).

    Attributes:
      train_files: path or glob of the training data (local or gs://), several joined with
        commas, or a folder written by python -m tfapp.prepare. "demo" uses the dataset
        shipped with tfapp for the task.
      format: auto (from the extension), csv, tsv, jsonl, parquet (.parquet/.pq, read a
        batch of rows at a time), text, tfrecord or tfds; for task ner, conll or jsonl
        (auto: jsonl for .jsonl/.json/.ndjson files, else conll).
      batch_size: batch size per replica; the global batch is this times the replica count.
      shuffle_buffer: shuffle buffer size in examples (0 disables shuffling).
      prefetch: prefetch batches with tf.data.AUTOTUNE.
      deterministic: under the tf.data service, read shard files in a fixed order (else
        in whatever order they come; the service does not resume mid-pass anyway).
        Without the service the stream's order is always fixed: exact resume rests on it.
      on_bad_rows: fail stops at the first malformed row naming file and line; skip drops such
        rows and reports their count and first examples.
    """

    train_files: str = setting("demo", resume=MATCH)
    format: str = choices("auto", "csv", "tsv", "jsonl", "parquet", "text", "tfrecord", "tfds",
                          "conll", default="auto", resume=MATCH)
    batch_size: int = bounded(32, min=1, resume=MATCH)
    shuffle_buffer: int = bounded(10000, min=0, resume=MATCH)
    prefetch: bool = setting(True, resume=FREE)
    deterministic: bool = setting(False, resume=MATCH)
    on_bad_rows: str = choices("fail", "skip", default="fail", resume=MATCH)


@dataclass
class HeldOutDataConfig:
    """Validation and test data, given or split off the training files.

    Attributes:
      validation_files: path or glob of validation data; empty = split off validation_split.
      test_files: path or glob of test data (optional); the exported model is scored on
        it at the end of training (test_report.json).
      test_split: fraction of train_files held out as the test split when test_files is
        empty (seeded by runtime.seed; 0 = none).
      validation_split: fraction of train_files held out for validation when
        validation_files is empty (seeded by runtime.seed).
    """

    validation_files: str = setting("", resume=MATCH)
    test_files: str = setting("", resume=MATCH)
    test_split: float = bounded(0.0, min=0.0, max=0.9, resume=MATCH)
    validation_split: float = bounded(0.2, min=0.0, max=0.9, resume=MATCH)


@dataclass
class StoredDataConfig:
    """Where the preprocessed examples are kept or served from.

    Attributes:
      cache: "" (off), "memory" (the preprocessed examples kept in RAM for the run), or a
        path prefix (stored there, as data.snapshot).
      snapshot: directory where the preprocessed examples are stored per shard file as the
        first pass reads them and replayed afterwards ("" = off); keyed by the prepared
        data and the preprocessing, so any change stores anew.
      service: tf.data service settings.
    """

    cache: str = setting("", resume=FREE)
    snapshot: str = setting("", resume=FREE)
    service: DataServiceConfig = field(default_factory=DataServiceConfig)


@dataclass
class TextDataConfig:
    """A text column.

    Attributes:
      text_column: column holding the text.
    """

    text_column: str = setting("text", resume=MATCH)


@dataclass
class TokenizedDataConfig:
    """A fixed token length (BERT inputs).

    Attributes:
      seq_length: fixed token length; longer texts are truncated, shorter padded.
    """

    seq_length: int = bounded(128, min=4, max=8192, resume=MATCH)


@dataclass
class LengthBucketsConfig:
    """Batches padded to their examples' lengths, not to seq_length (target_words).

    Attributes:
      length_buckets: number of padded lengths (buckets) batches are grouped into, placed
        at quantiles of the training examples' lengths (rounded to 8; 128 on TPU; the
        last is seq_length): token lengths of texts (classifier) or word-piece windows
        (ner), target lengths of windows (generator: decoder inputs and labels, up to
        target_words). Batches keep batch_size examples, so steps per epoch do not
        change; under XLA the step compiles once per bucket. 0 or 1 pads every batch to
        seq_length (generator: target_words).
    """

    length_buckets: int = bounded(8, min=0, max=64, resume=MATCH)


@dataclass
class ModelConfig:
    """The network (the keys every task reads).

    Attributes:
      kind: bert (TF-Hub encoder + head), cnn or rnn (embedding baselines on the same
        pipeline), seq2seq (the generator's encoder-decoder).
      dropout: dropout rate before the output layer.
    """

    kind: str = choices("bert", "cnn", "rnn", "seq2seq", default="bert", resume=NEVER)
    dropout: float = bounded(0.1, min=0.0, max=0.95, resume=MATCH)


@dataclass
class BertModelConfig:
    """A TF-Hub BERT encoder.

    Attributes:
      hub_handle: TF-Hub BERT encoder: a tfhub.dev/Kaggle URL, a local directory, a gs://
        path, or "builtin:tiny" (a tiny BERT tfapp builds from the demo corpus and caches).
      trainable: fine-tune the encoder weights (false trains the head only).
    """

    hub_handle: str = setting("builtin:tiny", resume=NEVER)
    trainable: bool = setting(True, resume=MATCH)


@dataclass
class BertPreprocessorConfig:
    """The BERT encoder's preprocessor.

    Attributes:
      hub_preprocessor: matching preprocessor SavedModel; empty = the one next to a builtin or
        converted encoder, else data uses a vocab file.
    """

    hub_preprocessor: str = setting("", resume=NEVER)


@dataclass
class EmbeddingModelConfig:
    """An embedding network trained from scratch.

    Attributes:
      embedding_dim: embedding width for cnn/rnn/seq2seq models.
      units: hidden width of cnn filters / rnn or LSTM units.
      bidirectional: bidirectional recurrent encoder (rnn, seq2seq).
    """

    embedding_dim: int = bounded(64, min=1, resume=MATCH)
    units: int = bounded(64, min=1, resume=MATCH)
    bidirectional: bool = setting(False, resume=MATCH)
