"""Typed experiment configuration: defaults -> YAML -> dotted overrides -> validation.

The schema is a tree of dataclasses in the style of TF Model Garden: every field
is documented in its class's ``Attributes:`` section (the README's config
reference and ``--help`` are generated from these docstrings). OmegaConf's
structured configs do the merging and type checking; ``validate`` adds the value
checks (choices, ranges, cross-field rules). Every mistake becomes one
``ConfigError`` line that names the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfapp.atomic import write_text
from tfapp.errors import ConfigError
from tfapp.run_layout import RunLayout
from tfapp.textio import decode_strict

import yaml
from omegaconf import OmegaConf
from omegaconf import errors as oc_errors

__all__ = [
    "ConfigError",
    "ExperimentConfig",
    "load_config",
    "save_params",
    "field_docs",
    "config_reference",
]

STRATEGIES = ("auto", "tpu", "mirrored", "multi_worker", "one_device", "cpu")
PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
TASKS = ("classifier", "generator", "mlm", "ner")


def choices(*values: str, default: str) -> Any:
    """A string field restricted to ``values`` (checked by ``validate``)."""
    return field(default=default, metadata={"choices": values})


def bounded(default: Any, *, min: float | None = None, max: float | None = None,
            gt: float | None = None) -> Any:
    """A numeric field with bounds: ``min``/``max`` inclusive, ``gt`` exclusive."""
    return field(default=default, metadata={"min": min, "max": max, "gt": gt})


# --------------------------------------------------------------------------- schema


@dataclass
class RuntimeConfig:
    """Where the job runs: distribution strategy, precision, seeds.

    Attributes:
      strategy: auto picks TPU if a TPU cluster resolver finds one, else Mirrored over all GPUs
        when there are several, else OneDevice on the single GPU, else the default CPU strategy.
        tpu|mirrored|multi_worker|one_device|cpu force one (multi_worker reads TF_CONFIG).
      tpu: TPU name or grpc:// address for the TPU cluster resolver; empty uses the
        environment (TPU_NAME, COLAB_TPU_ADDR, or the local TPU VM).
      cpu_devices: split the host CPU into this many logical devices before TensorFlow starts
        (0 = leave as is). With strategy=mirrored it simulates several replicas on one CPU.
      precision: Keras mixed-precision policy. auto = mixed_bfloat16 on TPU, mixed_float16 on
        GPUs older than Ampere and mixed_bfloat16 on newer ones; on a CPU mixed_bfloat16
        where it has native bfloat16 (avx512_bf16 or amx_bf16 flag), else float32. The run
        header and doctor say why; float32 keeps float32 everywhere.
      seed: seed for Python, NumPy and TensorFlow (keras.utils.set_random_seed).
      deterministic: enable TensorFlow op determinism (slower; reproducible runs). A
        fine-tuned Hub BERT then runs as tfapp's native encoder (builtin: and tfapp-exported
        modules); others keep their unseeded dropout, which TensorFlow refuses.
    """

    strategy: str = choices(*STRATEGIES, default="auto")
    tpu: str = ""
    cpu_devices: int = bounded(0, min=0, max=64)
    precision: str = choices(*PRECISIONS, default="auto")
    seed: int = 42
    deterministic: bool = False


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

    address: str = ""
    processing_mode: str = choices("distributed_epoch", "parallel_epochs", "dynamic", "off",
                                   "file", default="distributed_epoch")
    job_name: str = ""


@dataclass
class DataConfig:
    """Input files and the tf.data pipeline.

    Attributes:
      train_files: path or glob of the training data (local or gs://), several joined with
        commas, or a folder written by python -m tfapp.prepare. "demo" uses the dataset
        shipped with tfapp for the task.
      validation_files: path or glob of validation data; empty = split off validation_split.
      test_files: path or glob of test data (optional); the exported model is scored on
        it at the end of training (test_report.json).
      test_split: fraction of train_files held out as the test split when test_files is
        empty (seeded by runtime.seed; 0 = none).
      format: auto (from the extension), csv, tsv, jsonl, text, tfrecord or tfds; for task
        ner, conll or jsonl (auto: jsonl for .jsonl/.json/.ndjson files, else conll).
      text_column: column holding the text.
      text_pair_column: second text column for sentence-pair tasks; empty for single texts.
      label_column: column holding the label (string or integer; for multi-label, labels
        joined by label_separator).
      labels: the label names in id order (empty = every label of the training data, sorted;
        integers in numeric order). Rows with other labels are bad rows.
      multi_label: each example may carry several labels (sigmoid per class).
      label_separator: separator between labels of one example when multi_label is true.
      validation_split: fraction of train_files held out for validation when
        validation_files is empty (seeded by runtime.seed).
      class_weight: weight of each label in the loss: none, balanced (from the training
        label counts: n / (labels x count) for single-label, negatives / positives per
        label for multi-label) or a mapping {label: weight} (unlisted labels weigh 1).
      seq_length: fixed token length; longer texts are truncated, shorter padded.
      batch_size: batch size per replica; the global batch is this times the replica count.
      shuffle_buffer: shuffle buffer size in examples (0 disables shuffling).
      cache: "" (off), "memory" (the preprocessed examples kept in RAM for the run), or a
        path prefix (stored there, as data.snapshot).
      snapshot: directory where the preprocessed examples are stored per shard file as the
        first pass reads them and replayed afterwards ("" = off); keyed by the prepared
        data and the preprocessing, so any change stores anew.
      prefetch: prefetch batches with tf.data.AUTOTUNE.
      deterministic: under the tf.data service, read shard files in a fixed order (else
        in whatever order they come; the service does not resume mid-pass anyway).
        Without the service the stream's order is always fixed: exact resume rests on it.
      on_bad_rows: fail stops at the first malformed row naming file and line; skip drops such
        rows and reports their count and first examples.
      service: tf.data service settings.
      drop_regex: generator corpus filter: drop lines matching this Python regular expression
        ("" keeps all), e.g. "^(chapter|contents)\\b" for headings.
      strip_punctuation: generator: remove punctuation (apostrophes inside words stay) from
        corpus lines and prompts; lowercasing always applies.
      vocab_size: generator: most frequent words kept by TextVectorization, including the
        padding, [UNK], [START] and [END] tokens; rarer words become [UNK].
      example_shape: generator examples: continuation (the last context_words words of a line
        -> its next target_words words) or pairs (source_column -> target_column rows of a
        TSV/JSONL file).
      context_words: generator encoder length: context words per example, [START] included
        (pairs: source tokens kept).
      target_words: generator decoder length: target words per example, [END] included
        (pairs: target tokens kept).
      source_column: generator pairs: column (TSV header or JSONL key) holding the source text.
      target_column: generator pairs: column holding the target text.
      tag_column: ner CoNLL files: the whitespace-separated column holding each word's tag,
        counted from 0 (the word itself) or, negative, from the end (-1 = the last column,
        as in CoNLL-2003's "word POS chunk tag" lines).
        JSONL rows hold the lists "tokens" and "tags".
      tag_scheme: ner: the data's tag scheme, iob2 (B- begins every entity), iob1 (B- only
        between adjacent entities of one type) or bioes (B- I- E- S-). Each file is read
        in the scheme its tags are written in and converted to IOB2; entities this
        setting would have lost are counted as converted in the log (docs/ner.md).
    """

    train_files: str = "demo"
    validation_files: str = ""
    test_files: str = ""
    test_split: float = bounded(0.0, min=0.0, max=0.9)
    format: str = choices("auto", "csv", "tsv", "jsonl", "text", "tfrecord", "tfds", "conll",
                          default="auto")
    text_column: str = "text"
    text_pair_column: str = ""
    label_column: str = "label"
    labels: list[str] = field(default_factory=list)
    multi_label: bool = False
    label_separator: str = "|"
    validation_split: float = bounded(0.2, min=0.0, max=0.9)
    class_weight: Any = "none"  # "none" | "balanced" | {label: weight}; see _check_class_weight
    seq_length: int = bounded(128, min=4, max=8192)
    batch_size: int = bounded(32, min=1)
    shuffle_buffer: int = bounded(10000, min=0)
    cache: str = ""
    snapshot: str = ""
    prefetch: bool = True
    deterministic: bool = False
    on_bad_rows: str = choices("fail", "skip", default="fail")
    service: DataServiceConfig = field(default_factory=DataServiceConfig)
    drop_regex: str = ""
    strip_punctuation: bool = True
    vocab_size: int = bounded(5000, min=8)
    example_shape: str = choices("continuation", "pairs", default="continuation")
    context_words: int = bounded(8, min=1, max=1024)
    target_words: int = bounded(12, min=1, max=1024)
    source_column: str = "source"
    target_column: str = "target"
    tag_column: int = bounded(-1, min=-64, max=64)
    tag_scheme: str = choices("iob2", "iob1", "bioes", default="iob2")


@dataclass
class ModelConfig:
    """The network.

    Attributes:
      kind: bert (TF-Hub encoder + head), cnn or rnn (embedding baselines on the same
        pipeline), seq2seq (the generator's encoder-decoder).
      hub_handle: TF-Hub BERT encoder: a tfhub.dev/Kaggle URL, a local directory, a gs://
        path, or "builtin:tiny" (a tiny BERT tfapp builds from the demo corpus and caches).
      hub_preprocessor: matching preprocessor SavedModel; empty = the one next to a builtin or
        converted encoder, else data uses a vocab file.
      trainable: fine-tune the encoder weights (false trains the head only).
      pooling: pooled (BERT pooled_output) or mean_max (mean and max of sequence_output).
      dropout: dropout rate before the output layer.
      label_smoothing: classifier loss: move this much of each target's probability
        mass evenly onto all labels (0 = off; 0.1 is common).
      embedding_dim: embedding width for cnn/rnn/seq2seq models.
      units: hidden width of cnn filters / rnn or LSTM units.
      bidirectional: bidirectional recurrent encoder (rnn, seq2seq).
      attention: seq2seq attention: bahdanau (additive) or luong (dot).
    """

    kind: str = choices("bert", "cnn", "rnn", "seq2seq", default="bert")
    hub_handle: str = "builtin:tiny"
    hub_preprocessor: str = ""
    trainable: bool = True
    pooling: str = choices("pooled", "mean_max", default="pooled")
    dropout: float = bounded(0.1, min=0.0, max=0.95)
    label_smoothing: float = bounded(0.0, min=0.0, max=0.5)
    embedding_dim: int = bounded(64, min=1)
    units: int = bounded(64, min=1)
    bidirectional: bool = False
    attention: str = choices("bahdanau", "luong", default="bahdanau")


@dataclass
class OptimizerConfig:
    """Optimizer and learning-rate schedule.

    Attributes:
      name: adamw (weight decay skips biases and LayerNorm), adam or sgd.
      learning_rate: peak learning rate, or auto: run the LR range finder (python -m
        tfapp.lr_find) on the model and data first and use its suggestion.
      scale_lr_by_replicas: multiply learning_rate by the number of replicas (linear scaling
        rule for a larger global batch).
      weight_decay: decoupled weight decay for adamw.
      schedule: linear (warmup then linear decay to 0), one_cycle, or constant.
      warmup_ratio: fraction of the optimizer steps spent warming up.
      clipnorm: clip gradients to this global norm (0 = off).
      ema_decay: keep an exponential moving average of the weights with this decay per
        optimizer step (0 = off; 0.999 is common): validation, the best checkpoint and
        the export use the averaged weights.
      lr_find_steps: LR range finder: most optimizer steps of the exponential sweep (it stops
        earlier once the loss diverges).
      lr_find_min: LR range finder: learning rate the sweep starts at.
      lr_find_max: LR range finder: learning rate the sweep ends at.
    """

    name: str = choices("adamw", "adam", "sgd", default="adamw")
    # A number or the string "auto"; validate() turns numbers (and numeric strings such as
    # PyYAML's "1e-3") into floats, so code past load_config sees a float or "auto".
    learning_rate: float | int | str = field(
        default=5e-4, metadata={"gt": 0.0, "type_name": "float|auto"})
    scale_lr_by_replicas: bool = False
    weight_decay: float = bounded(0.01, min=0.0)
    schedule: str = choices("linear", "one_cycle", "constant", default="linear")
    warmup_ratio: float = bounded(0.1, min=0.0, max=1.0)
    clipnorm: float = bounded(1.0, min=0.0)
    ema_decay: float = bounded(0.0, min=0.0, max=0.99999)
    lr_find_steps: int = bounded(100, min=5)
    lr_find_min: float = bounded(1e-7, gt=0.0)
    lr_find_max: float = bounded(1.0, gt=0.0)


@dataclass
class TrainerConfig:
    """The training loop.

    Attributes:
      epochs: passes over the training data (ignored when max_steps is set).
      steps_per_epoch: batches per epoch (0 = one full pass of the data).
      max_steps: train exactly this many optimizer steps, repeating the data as needed
        (0 = epochs decide). With gradient accumulation one step is that many batches.
      eval_every_steps: evaluate every this many optimizer steps instead of at epoch ends;
        the best checkpoint and early stopping then count evaluations (0 = at epoch ends,
        or once at max_steps). The total steps must be a multiple of it.
      log_every_steps: log the training loss, metrics and learning rate every this many
        optimizer steps, to the console and TensorBoard (0 = only at evaluations).
      steps_per_execution: batches run per tf.function call (fewer host round trips;
        large values pay on TPU).
      jit_compile: compile the train step with XLA; null = auto (on for TPU, and for GPU
        except for a TF-Hub encoder or the rnn baseline, which XLA recompiles every step;
        off on CPU, where XLA measured 2x slower).
      gradient_accumulation_steps: accumulate gradients over this many batches per update
        (effective batch = global batch x this, under every strategy; one all-reduce per
        update).
      monitor: validation metric that picks the best checkpoint and drives early stopping
        ("" = the task's own: val_accuracy for classifier, val_loss for generator,
        val_entity_f1 for ner).
      monitor_mode: max or min for monitor; auto = min for losses, max otherwise.
      early_stopping_patience: evaluations (epochs, or eval_every_steps intervals) without
        improvement before stopping (0 = off).
      profile_steps: steps to capture with the TensorBoard profiler, e.g. "10,12" ("" = off).
      profiler_port: start a profiler server on this port for on-demand capture (0 = off).
        Needs trainer.profiler_listen_all=true.
      profiler_listen_all: acknowledge that TensorFlow's profiler server listens on every
        interface ([::]:port; it has no bind address) with no authentication: anyone who
        reaches the port can capture this job's traces. Set it where a firewall keeps the
        port closed to other hosts; trainer.profiler_port is refused without it.
      export: write the serving SavedModel at the end of training.
    """

    # 6 epochs take the default run (tiny BERT, demo reviews) to ~0.86 validation accuracy
    # in ~1.5 minutes on 2 CPU cores; 3 stopped at ~0.75.
    epochs: int = bounded(6, min=1)
    steps_per_epoch: int = bounded(0, min=0)
    max_steps: int = bounded(0, min=0)
    eval_every_steps: int = bounded(0, min=0)
    log_every_steps: int = bounded(0, min=0)
    steps_per_execution: int = bounded(1, min=1)
    jit_compile: bool | None = None
    gradient_accumulation_steps: int = bounded(1, min=1)
    monitor: str = ""
    monitor_mode: str = choices("auto", "max", "min", default="auto")
    early_stopping_patience: int = bounded(0, min=0)
    profile_steps: str = ""
    profiler_port: int = bounded(0, min=0, max=65535)
    profiler_listen_all: bool = False
    export: bool = True


@dataclass
class WandbConfig:
    """Weights & Biases tracking.

    Attributes:
      enabled: log this run to W&B.
      project: W&B project name ("" = WANDB_PROJECT, else tfapp).
      entity: W&B team or user ("" = WANDB_ENTITY, else the key's default).
      mode: online needs WANDB_API_KEY; offline writes locally for `wandb sync`; disabled;
        auto = WANDB_MODE, else offline. Without a key an online request falls back to
        offline (never prompts).
      tags: tags attached to the run (WANDB_TAGS adds to them).
      sync_tensorboard: also upload the TensorBoard event files.
    """

    enabled: bool = False
    project: str = ""
    entity: str = ""
    mode: str = choices("auto", "online", "offline", "disabled", default="auto")
    tags: list[str] = field(default_factory=list)
    sync_tensorboard: bool = True


@dataclass
class TrackingConfig:
    """Experiment tracking.

    Attributes:
      tensorboard: write TensorBoard logs under RUN_DIR/logs.
      wandb: Weights & Biases settings.
    """

    tensorboard: bool = True
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class GenerationConfig:
    """How the generator writes text (training samples, export defaults, the generate CLI).

    Attributes:
      method: greedy (argmax), sample (temperature sampling), top_k, top_p (nucleus) or beam.
      temperature: divides the logits before sampling (sample, top_k, top_p); < 1 is safer.
      top_k: top_k method: sample among the k most likely words.
      top_p: top_p method: sample among the most likely words whose probabilities sum to p.
      num_beams: beam method: hypotheses kept per prompt (fixed in the exported beam_search).
      length_penalty: beam method: GNMT length-normalisation exponent alpha (0 = raw
        log-probability; larger favours longer texts).
      max_length: most words generated per prompt ([END] stops earlier); also the longest
        request the export accepts.
      seed: seed of the stateless random ops used by sampling (same seed -> same text).
    """

    method: str = choices("greedy", "sample", "top_k", "top_p", "beam", default="top_k")
    temperature: float = bounded(0.8, gt=0.0)
    top_k: int = bounded(5, min=1)
    top_p: float = bounded(0.9, gt=0.0, max=1.0)
    num_beams: int = bounded(4, min=1, max=64)
    length_penalty: float = bounded(0.6, min=0.0)
    max_length: int = bounded(30, min=1, max=1024)
    seed: int = 0


@dataclass
class MlmConfig:
    """Masked-LM pretraining of a BERT module (task=mlm, python -m tfapp.pretrain).

    Attributes:
      mask_rate: share of tokens chosen for prediction (BERT: 0.15), 80/10/10
        [MASK]/random/kept.
      whole_word: choose whole words (all their ## pieces) instead of single WordPieces.
      max_predictions: most predicted tokens per sequence; 0 = enough for nearly all.
      output: directory of the adapted module pair ("" = the run's export/); use it as
        model.hub_handle.
      overwrite: replace an existing output directory.
    """

    mask_rate: float = bounded(0.15, gt=0.0, max=0.99)
    whole_word: bool = False
    max_predictions: int = bounded(0, min=0)
    output: str = ""
    overwrite: bool = False


@dataclass
class HyperParamConfig:
    """One hyperparameter of a search space: the value of one ``tune.space`` entry.

    Attributes:
      type: float or int (both need min and max), choice (needs values) or boolean.
      min: float/int: smallest value (inclusive).
      max: float/int: largest value (inclusive).
      step: int: distance between values (null = 1); float: optional grid step (null =
        continuous). With log sampling the step multiplies instead of adds.
      sampling: float/int: linear, log (min > 0; even over orders of magnitude) or reverse_log.
      values: choice: the values to pick from, each valid for the config key.
    """

    type: str = choices("float", "int", "choice", "boolean", default="float")
    min: float | None = None
    max: float | None = None
    step: float | None = None
    sampling: str = choices("linear", "log", "reverse_log", default="linear")
    values: list[Any] = field(default_factory=list)


@dataclass
class TuneConfig:
    """Hyperparameter search with KerasTuner (python -m tfapp.tune; train ignores it).

    Attributes:
      tuner: random, bayesian (Gaussian process), hyperband (successive halving over epochs)
        or grid (every combination in order; a float without a step gives 10 values).
      objective: logged metric to optimise, e.g. val_accuracy or val_loss ("" = the
        trainer's monitor, else the task's own).
      direction: max or min for objective; auto = min for losses, max otherwise.
      max_trials: most hyperparameter combinations to try (hyperband sizes itself from
        epochs and hyperband_factor instead).
      executions_per_trial: training runs per combination (seeds runtime.seed + i), averaged.
      epochs: epochs per trial (0 = trainer.epochs); hyperband: most epochs one model gets.
      early_stopping_patience: stop a trial after this many epochs without improvement of
        the objective (0 = trainer.early_stopping_patience).
      hyperband_factor: hyperband: reduction factor of models and epochs between rounds.
      seed: seed of the search algorithm (0 = runtime.seed).
      worker_timeout_s: distributed search: a worker that sends the chief no heartbeat (one
        every worker_timeout_s / 6) for this long is taken as gone (killed or hung), and its
        trial goes to the next worker, which resumes it from the trial's checkpoint.
      space: the search space: dotted config key -> hyperparameter with type, min, max, step,
        sampling, values (see docs/tuning.md), e.g. optimizer.learning_rate: {type: float,
        min: 1.0e-4, max: 1.0e-2, sampling: log}.
    """

    tuner: str = choices("random", "bayesian", "hyperband", "grid", default="random")
    objective: str = ""
    direction: str = choices("auto", "max", "min", default="auto")
    max_trials: int = bounded(10, min=1)
    executions_per_trial: int = bounded(1, min=1)
    epochs: int = bounded(0, min=0)
    early_stopping_patience: int = bounded(0, min=0)
    hyperband_factor: int = bounded(3, min=2)
    seed: int = 0
    worker_timeout_s: float = bounded(120.0, min=2.0)
    space: dict[str, HyperParamConfig] = field(default_factory=dict)


@dataclass
class ExperimentConfig:
    """One experiment.

    Attributes:
      task: classifier (BERT or baseline text classification), generator (seq2seq text),
        mlm (masked-LM pretraining of a BERT module on unlabelled text) or ner (token
        classification: a BERT tags named entities in CoNLL/JSONL data).
      name: run name; the run directory is output_dir/name ("" = the config file's stem,
        or the task name). Re-running the same name resumes an interrupted run.
      output_dir: parent directory of run directories.
      runtime: strategy, precision and seeds.
      data: input files and pipeline.
      model: the network.
      optimizer: optimizer and learning-rate schedule.
      trainer: the training loop.
      tracking: TensorBoard and W&B.
      generation: how the generator writes text (task=generator).
      mlm: masked-LM pretraining (task=mlm).
      tune: hyperparameter search (python -m tfapp.tune).
    """

    task: str = choices(*TASKS, default="classifier")
    name: str = ""
    output_dir: str = "runs"
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    mlm: MlmConfig = field(default_factory=MlmConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


# --------------------------------------------------------------------------- docs


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> description, parsed from the class's ``Attributes:`` docstring."""
    doc = inspect.getdoc(cls) or ""
    docs: dict[str, str] = {}
    section = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
    current = None
    for line in section.splitlines():
        m = re.match(r"^  (\w+): (.*)$", line)
        if m:
            current = m.group(1)
            docs[current] = m.group(2).strip()
        elif current and line.startswith("    "):
            docs[current] += " " + line.strip()
    return docs


def _type_name(f: dataclasses.Field) -> str:
    if f.metadata.get("type_name"):
        return f.metadata["type_name"]
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return t.replace("bool | None", "bool|null")


def config_reference(cls: type = ExperimentConfig, prefix: str = ""
                     ) -> list[tuple[str, str, str, str]]:
    """Rows (dotted key, type, default, description) for every leaf field."""
    rows = []
    docs = field_docs(cls)
    hints = {f.name: f for f in dataclasses.fields(cls)}
    for name, f in hints.items():
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            rows.extend(config_reference(type(default), f"{prefix}{name}."))
            continue
        allowed = f.metadata.get("choices")
        type_name = "|".join(allowed) if allowed else _type_name(f)
        rows.append((f"{prefix}{name}", type_name, repr(default), docs.get(name, "")))
    return rows


def group_docs() -> dict[str, str]:
    """Top-level group name -> first docstring line of its dataclass."""
    out = {}
    for f in dataclasses.fields(ExperimentConfig):
        if f.default_factory is not dataclasses.MISSING:
            out[f.name] = (inspect.getdoc(f.default_factory) or "").splitlines()[0]
    return out


# --------------------------------------------------------------------------- loading


def _keys_at(node: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node) else []


def _node_for(path: str) -> Any:
    """The dataclass instance owning the dotted ``path`` in a default config, if any."""
    node: Any = ExperimentConfig()
    for part in path.split(".")[:-1]:
        if not dataclasses.is_dataclass(node) or not hasattr(node, part):
            return None
        node = getattr(node, part)
    return node


def _unknown_key_message(full_key: str, source: str) -> str:
    node = _node_for(full_key)
    keys = _keys_at(node)
    leaf = full_key.split(".")[-1]
    parent = full_key.rsplit(".", 1)[0] if "." in full_key else ""
    where = f" in '{parent}'" if parent else ""
    hint = ""
    close = difflib.get_close_matches(leaf, keys, n=1)
    if close:
        hint = f"; did you mean '{(parent + '.') if parent else ''}{close[0]}'?"
    allowed = f" Allowed keys{where}: {', '.join(keys)}." if keys else ""
    # repr: a key may hold a "\r" or "\n" (a CRLF file) that would break the line
    return f"unknown config key {full_key!r} ({source}){hint}{allowed}"


def _translate(err: Exception, source: str) -> ConfigError:
    full_key = getattr(err, "full_key", "") or ""
    if isinstance(err, oc_errors.ConfigKeyError | oc_errors.ConfigAttributeError):
        m = re.search(r"Key '([^']+)' not in", str(err))
        key = full_key or (m.group(1) if m else "?")
        return ConfigError(_unknown_key_message(key, source))
    if isinstance(err, oc_errors.ValidationError):
        node = _node_for(full_key) if full_key else None
        expected = ""
        if node is not None:
            f = {f.name: f for f in dataclasses.fields(node)}.get(full_key.split(".")[-1])
            if f is not None:
                expected = f" expected {_type_name(f)}"
        value = getattr(err, "value", None)
        return ConfigError(f"{full_key or 'config'}: wrong type ({source}):{expected}, "
                           f"got {value!r}")
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return ConfigError(f"{source}: {first}")


def _parse_overrides(overrides: list[str]) -> Any:
    for item in overrides:
        if "=" not in item or item.startswith("="):
            # repr: an override may hold a "\r" (a script saved with CRLF endings) that
            # would overwrite the printed line
            raise ConfigError(f"override {item!r} is not of the form key=value "
                              "(e.g. trainer.epochs=3)")
    # "key=" sets the empty string (YAML reads an empty value as null).
    overrides = [f"{item}''" if item.endswith("=") else item for item in overrides]
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except Exception as err:  # malformed YAML value in an override
        raise ConfigError(f"cannot parse overrides {overrides}: "
                          f"{str(err).splitlines()[0]}") from None


def _check_groups(node: Any, source: str, schema: Any = None, prefix: str = "") -> None:
    """Each config group (``trainer``, ``data.service`` ...) given a mapping. OmegaConf's own
    error for ``trainer: 3`` or ``trainer=[1, 2]`` names neither the group nor what it takes
    ("config: wrong type ..., got None"), so this is checked before it merges."""
    schema = ExperimentConfig() if schema is None else schema
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        group = getattr(schema, str(key), None) if isinstance(key, str) else None
        if not dataclasses.is_dataclass(group):
            continue  # a plain key (or an unknown one: the merge names it)
        where = f"{prefix}{key}"
        if not isinstance(value, dict):
            shown = "an empty value" if value is None else repr(value)
            raise ConfigError(f"{where}: a config group takes a mapping of its keys, not "
                              f"{shown} ({source}); set its keys, e.g. "
                              f"{where}.{_keys_at(group)[0]}=... (in YAML: indented under "
                              f"'{key}:')")
        _check_groups(value, source, group, where + ".")


# Half a surrogate pair: a "\ud800" YAML escape, or undecodable bytes of an argument.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_bad_strings(node: Any, prefix: str = "") -> None:
    """No ``${...}``: OmegaConf would resolve ``${oc.env:VAR}`` and so copy any environment
    variable (a token, say) of whoever runs a shared config into params.yaml, W&B and the
    HTML report. No lone surrogate either: params.yaml is UTF-8, which cannot hold one
    (writing it failed with UnicodeEncodeError when the run started)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) else ()
    for key, value in items:
        where = f"{prefix}{key}"
        if isinstance(value, dict | list):
            _refuse_bad_strings(value, where + ".")
        elif isinstance(value, str) and "${" in value:
            raise ConfigError(f"{where}: {value!r} is an interpolation; tfapp configs take "
                              "plain values (write the value itself)")
        elif isinstance(value, str) and _SURROGATE.search(value):
            raise ConfigError(f"{where}: {value!r} is not UTF-8 text (undecodable bytes or a "
                              "\\ud800-style escape); write it as UTF-8")


def load_config(path: str | os.PathLike | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Defaults, then the YAML file at ``path``, then ``key=value`` overrides; validated."""
    cfg = OmegaConf.structured(ExperimentConfig)
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {path} "
                              "(give a YAML file such as configs/classifier.yaml)")
        try:
            loaded = yaml.safe_load(decode_strict(p.read_bytes(), str(path))) or {}
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark else ""
            # A ReaderError (a NUL or other control character) has no ``problem`` and
            # its str() spans lines: the message must stay one line.
            problem = " ".join(str(getattr(err, "problem", None) or err).split())
            raise ConfigError(f"{path}:{where} is not valid YAML ({problem})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of config groups at the top level")
        _check_groups(loaded, str(path))
        try:
            cfg = OmegaConf.merge(cfg, loaded)
        except oc_errors.OmegaConfBaseException as err:
            raise _translate(err, str(path)) from None
        except RecursionError:  # a YAML alias inside what it names: {epochs: *a} under &a
            raise ConfigError(f"{path}: a YAML alias (*name) refers to a mapping or list "
                              "that contains it; write the values out") from None
        if not loaded.get("name"):
            cfg.name = p.stem
    if overrides:
        parsed = _parse_overrides(list(overrides))
        _check_groups(OmegaConf.to_container(parsed, resolve=False), "command-line override")
        try:
            cfg = OmegaConf.merge(cfg, parsed)
        except oc_errors.OmegaConfBaseException as err:
            raise _translate(err, "command-line override") from None
    _refuse_bad_strings(OmegaConf.to_container(cfg, resolve=False))
    try:
        obj: ExperimentConfig = OmegaConf.to_object(cfg)
    except oc_errors.OmegaConfBaseException as err:
        raise _translate(err, "config") from None
    if not obj.name:
        obj.name = obj.task
    validate(obj)
    return obj


# --------------------------------------------------------------------------- validation


def _check_fields(node: Any, prefix: str) -> None:
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            _check_fields(value, key + ".")
            continue
        allowed = f.metadata.get("choices")
        if allowed and value not in allowed:
            raise ConfigError(f"{key}: '{value}' is not allowed; choose one of: "
                              f"{', '.join(allowed)}")
        lo, hi, gt = f.metadata.get("min"), f.metadata.get("max"), f.metadata.get("gt")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if lo is not None and value < lo:
                raise ConfigError(f"{key}: {value} is too small; must be >= {lo}")
            if hi is not None and value > hi:
                raise ConfigError(f"{key}: {value} is too large; must be <= {hi}")
            if gt is not None and value <= gt:
                raise ConfigError(f"{key}: {value} must be > {gt}")


def _check_class_weight(d: DataConfig) -> None:
    """data.class_weight: "none"/"balanced" (any case), or {label: weight > 0}."""
    value = d.class_weight
    if isinstance(value, str) and value.strip().lower() in ("none", "balanced", ""):
        d.class_weight = value.strip().lower() or "none"
        return
    if isinstance(value, dict) and value:
        weights = {}
        for label, weight in value.items():
            if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
                raise ConfigError(f"data.class_weight: the weight of '{label}' must be a "
                                  f"number > 0, not {weight!r}")
            weights[str(label)] = float(weight)
        d.class_weight = weights
        return
    raise ConfigError(f"data.class_weight: {value!r} is not allowed; give none, balanced or "
                      "a mapping {label: weight}, e.g. data.class_weight={spam: 5}")


def _normalize_learning_rate(o: OptimizerConfig) -> None:
    """optimizer.learning_rate: numbers and numeric strings -> float; "auto" stays."""
    value = o.learning_rate
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            o.learning_rate = "auto"
            return
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"optimizer.learning_rate: '{o.learning_rate}' is not a number; "
                              "give one such as 1e-3, or auto to run the LR range "
                              "finder") from None
    o.learning_rate = float(value)


_PROFILE_STEPS = re.compile(r"^\s*(\d+)\s*(,\s*(\d+)\s*)?$")


def validate(cfg: ExperimentConfig) -> None:
    """Value checks beyond types; raises ConfigError naming the first bad key."""
    _normalize_learning_rate(cfg.optimizer)
    _check_class_weight(cfg.data)
    if cfg.data.service.processing_mode in ("False", "false"):  # YAML 1.1 reads off as false
        cfg.data.service.processing_mode = "off"
    _check_fields(cfg, "")
    # The run directory is output_dir/name: a name is one plain folder name, never a path
    # (".." would put the run, or tune --overwrite's deletion, outside output_dir).
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", cfg.name) or cfg.name in (".", ".."):
        raise ConfigError(f"name: '{cfg.name}' must be a folder name of ASCII letters, digits, "
                          "'_', '-' and '.' (not '.' or '..')")
    if cfg.trainer.profile_steps:
        m = _PROFILE_STEPS.match(cfg.trainer.profile_steps)
        if not m or (m.group(3) and int(m.group(3)) < int(m.group(1))):
            raise ConfigError(f"trainer.profile_steps: '{cfg.trainer.profile_steps}' must be "
                              "'START,STOP' with START <= STOP (or one step, or '' for off)")
    if cfg.trainer.profiler_port and not cfg.trainer.profiler_listen_all:
        port = cfg.trainer.profiler_port
        raise ConfigError(f"trainer.profiler_port={port} starts TensorFlow's profiler server, "
                          "which listens on every network interface with no authentication "
                          "(it has no bind address); set trainer.profiler_listen_all=true to "
                          f"start it where a firewall keeps port {port} closed to other "
                          "hosts, or trainer.profiler_port=0")
    if cfg.data.format == "conll" and cfg.task != "ner":
        raise ConfigError(f"data.format: conll is read by task ner only; task '{cfg.task}' "
                          "reads csv, tsv, jsonl, text, tfrecord or tfds")
    if cfg.data.text_pair_column and cfg.data.text_pair_column == cfg.data.text_column:
        raise ConfigError("data.text_pair_column: must differ from data.text_column")
    o, t = cfg.optimizer, cfg.trainer
    if o.lr_find_min >= o.lr_find_max:
        raise ConfigError(f"optimizer.lr_find_min ({o.lr_find_min}) must be below "
                          f"optimizer.lr_find_max ({o.lr_find_max})")
    if t.max_steps and t.eval_every_steps and t.max_steps % t.eval_every_steps:
        # Each evaluation ends one Keras epoch of eval_every_steps steps (see driver).
        lower = t.max_steps // t.eval_every_steps * t.eval_every_steps
        upper = lower + t.eval_every_steps
        raise ConfigError(f"trainer.max_steps={t.max_steps} is not a multiple of "
                          f"trainer.eval_every_steps={t.eval_every_steps}; set "
                          f"trainer.max_steps={upper}" + (f" or {lower}" if lower else ""))
    _validate_for_task(cfg)
    if cfg.tune.space:
        _validate_space(cfg)


def _changed_leaves(cfg: ExperimentConfig, key: str) -> list[tuple[str, Any]]:
    """(dotted key, value) of each leaf at or under ``key`` that differs from its default."""
    value, unset = cfg, ExperimentConfig()
    for part in key.split("."):
        value, unset = getattr(value, part), getattr(unset, part)
    if not dataclasses.is_dataclass(value):
        return [] if value == unset else [(key, value)]
    changed: list[tuple[str, Any]] = []
    for f in dataclasses.fields(value):
        changed += _changed_leaves(cfg, f"{key}.{f.name}")
    return changed


def _task_rules(task: str) -> Any:
    import importlib

    return importlib.import_module(f"tfapp.tasks.{task}.config")


def task_uses(task: str, key: str) -> bool:
    """Whether ``task`` honours config ``key`` (not listed among its unused keys)."""
    return not any(key == k or key.startswith(k + ".") for k in _task_rules(task).UNUSED)


def _validate_for_task(cfg: ExperimentConfig) -> None:
    """The chosen task's model kinds, and no key set that the task cannot honour
    (``tfapp/tasks/<task>/config.py`` lists them): one line naming the key."""
    rules = _task_rules(cfg.task)
    if cfg.model.kind not in rules.MODEL_KINDS:
        raise ConfigError(f"model.kind: task '{cfg.task}' needs model.kind="
                          f"{' or '.join(rules.MODEL_KINDS)}, got '{cfg.model.kind}'")
    for key in rules.UNUSED:
        for leaf, value in _changed_leaves(cfg, key):
            raise ConfigError(f"{leaf}: task '{cfg.task}' does not use it (set to {value!r}); "
                              f"remove it, or choose the task it belongs to")
    for check in getattr(rules, "CHECKS", ()):
        check(cfg)


# --------------------------------------------------------------------------- search spaces

# Keys a search must not vary: they name the run or the task, not a model/training choice.
_NOT_TUNABLE = ("task", "name", "output_dir")
# hyperparameter type -> the config field types it can set
_HP_FIELD_TYPES = {"float": ("float",), "int": ("int",), "boolean": ("bool",)}


def with_values(cfg: ExperimentConfig, values: dict[str, Any],
                source: str = "tune.space") -> ExperimentConfig:
    """A copy of ``cfg`` with dotted ``key: value`` pairs set, type-checked and validated."""
    conf = OmegaConf.structured(cfg)
    try:
        for key, value in values.items():
            OmegaConf.update(conf, key, value, merge=False)
        obj: ExperimentConfig = OmegaConf.to_object(conf)
    except oc_errors.OmegaConfBaseException as err:
        raise _translate(err, source) from None
    validate(obj)
    return obj


def _validate_space(cfg: ExperimentConfig) -> None:
    """Each ``tune.space`` key is a real leaf config key whose type the hyperparameter fits,
    with a consistent range, and every value it can take passes the key's own checks."""
    # Values are tried on a copy without the space, so validate() does not recurse.
    base = dataclasses.replace(cfg, tune=dataclasses.replace(cfg.tune, space={}))
    for key, hp in cfg.tune.space.items():
        where = f"tune.space.{key}"
        node, leaf = _node_for(key), key.split(".")[-1]
        spec = {f.name: f for f in dataclasses.fields(node)}.get(leaf) \
            if dataclasses.is_dataclass(node) else None
        if spec is not None and dataclasses.is_dataclass(getattr(node, leaf)):
            raise ConfigError(f"{where}: '{key}' is a config group; name one of its keys: "
                              f"{', '.join(_keys_at(getattr(node, leaf)))}")
        if spec is None or key.split(".")[0] == "tune":
            raise ConfigError(_unknown_key_message(key, "tune.space"))
        if key in _NOT_TUNABLE:
            raise ConfigError(f"{where}: '{key}' names the run, it cannot be tuned")
        if key.startswith("runtime.") and key != "runtime.seed":
            raise ConfigError(f"{where}: '{key}' is set up once per process (strategy, "
                              "precision, devices), it cannot change between trials")
        field_type = spec.type if isinstance(spec.type, str) else spec.type.__name__
        parts = {t.strip() for t in field_type.split("|")}  # e.g. "float | int | str"
        allowed = _HP_FIELD_TYPES.get(hp.type)
        if allowed and not parts & set(allowed):
            fits = [t for t, types in _HP_FIELD_TYPES.items() if parts & set(types)]
            raise ConfigError(f"{where}: type {hp.type} does not fit {key} ({field_type}); "
                              f"use type {fits[0] if fits else 'choice'}")
        if hp.type in ("float", "int"):
            if hp.min is None or hp.max is None:
                raise ConfigError(f"{where}: type {hp.type} needs min and max")
            if hp.min > hp.max:
                raise ConfigError(f"{where}: min {hp.min:g} > max {hp.max:g}")
            if hp.sampling != "linear" and hp.min <= 0:
                raise ConfigError(f"{where}: {hp.sampling} sampling needs min > 0, "
                                  f"got {hp.min:g}")
            if hp.step is not None and hp.step <= 0:
                raise ConfigError(f"{where}: step must be > 0, got {hp.step:g}")
            if hp.type == "int" and any(v is not None and v != int(v)
                                        for v in (hp.min, hp.max, hp.step)):
                raise ConfigError(f"{where}: type int needs whole min, max and step")
            candidates = [int(v) if hp.type == "int" else v for v in (hp.min, hp.max)]
        elif hp.type == "choice":
            if not hp.values:
                raise ConfigError(f"{where}: type choice needs a non-empty values list")
            candidates = list(hp.values)
        else:
            candidates = [False, True]
        for value in candidates:
            try:
                with_values(base, {key: value}, source=where)
            except ConfigError as err:
                raise ConfigError(f"{where}: value {value!r} is not valid here ({err})") from None


# --------------------------------------------------------------------------- saving


def to_yaml(cfg: ExperimentConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def save_params(cfg: ExperimentConfig, run_dir: str | os.PathLike, *,
                path: str | os.PathLike | None = None,
                note: str = "Resolved tfapp config; rerun with") -> Path:
    """Write the resolved config to ``run_dir/params.yaml`` (or ``path``) atomically (temp +
    rename), under a comment ``note`` ending in the command that reruns it."""
    target = Path(path) if path is not None else RunLayout(run_dir).params
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_text(target, f"# {note}: python -m tfapp.train --config {target}\n"
                      + to_yaml(cfg))
