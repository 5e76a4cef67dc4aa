"""The config groups every task shares, and ``ExperimentConfig``, the base of the task classes.

The schema is a tree of dataclasses in the style of TF Model Garden's
``config_definitions.py``: every field is documented in its class's ``Attributes:`` section
(``--help`` and the config reference are generated from these docstrings). Each task's class
(``tfapp/config/<task>.py``) subclasses ``ExperimentConfig`` with its own data and model
groups, so a key the task does not read is not in its schema at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfapp.config.data_model import DataConfig, ModelConfig
from tfapp.config.fields import FREE, LONGER, MATCH, NEVER, bounded, choices, setting
from tfapp.errors import ConfigError

STRATEGIES = ("auto", "tpu", "mirrored", "multi_worker", "one_device", "cpu")
PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")


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

    strategy: str = choices(*STRATEGIES, default="auto", resume=MATCH)
    tpu: str = setting("", resume=FREE)
    cpu_devices: int = bounded(0, min=0, max=64, resume=MATCH)
    precision: str = choices(*PRECISIONS, default="auto", resume=MATCH)
    seed: int = setting(42, resume=MATCH)
    deterministic: bool = setting(False, resume=MATCH)


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

    name: str = choices("adamw", "adam", "sgd", default="adamw", resume=NEVER)
    # A number or the string "auto"; validate() turns numbers (and numeric strings such as
    # PyYAML's "1e-3") into floats, so code past load_config sees a float or "auto".
    learning_rate: float | int | str = setting(5e-4, gt=0.0, type_name="float|auto", resume=MATCH)
    scale_lr_by_replicas: bool = setting(False, resume=MATCH)
    weight_decay: float = bounded(0.01, min=0.0, resume=MATCH)
    schedule: str = choices("linear", "one_cycle", "constant", default="linear", resume=MATCH)
    warmup_ratio: float = bounded(0.1, min=0.0, max=1.0, resume=MATCH)
    clipnorm: float = bounded(1.0, min=0.0, resume=MATCH)
    ema_decay: float = bounded(0.0, min=0.0, max=0.99999, resume=NEVER)
    lr_find_steps: int = bounded(100, min=5, resume=MATCH)
    lr_find_min: float = bounded(1e-7, gt=0.0, resume=MATCH)
    lr_find_max: float = bounded(1.0, gt=0.0, resume=MATCH)


@dataclass
class TrainerConfig:
    """The training loop (the keys every task reads).

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
      steps_per_execution: batches run per tf.function call: fewer host round trips, but
        callbacks run once per call (step log lines, the NaN stop, the SIGTERM backup and
        exact-resume point come at the end of a call, up to this many batches late); null =
        auto (50 on TPU, 8 on GPU, 1 on CPU, where more compiled 1-5 s longer for a few
        ms a step; capped at log_every_steps and at one epoch). The LR range test runs 1.
      jit_compile: compile the train step with XLA; null = auto (on for TPU, and for GPU
        except for a TF-Hub encoder or the rnn baseline, which XLA recompiles every step;
        off on CPU, where BERT training measured 1.27x slower with XLA).
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

    # 2 epochs take the default run (tiny BERT, 20,000 demo reviews) to ~0.91 test accuracy
    # and 0.96 on tests/fixtures/plain/reviews.csv in ~2 CPU-minutes.
    epochs: int = bounded(2, min=1, resume=LONGER)
    steps_per_epoch: int = bounded(0, min=0, resume=MATCH)
    max_steps: int = bounded(0, min=0, resume=LONGER)
    eval_every_steps: int = bounded(0, min=0, resume=MATCH)
    log_every_steps: int = bounded(0, min=0, resume=FREE)
    steps_per_execution: int | None = setting(None, min=1, type_name="int|null", resume=MATCH)
    jit_compile: bool | None = setting(None, resume=MATCH)
    monitor_mode: str = choices("auto", "max", "min", default="auto", resume=MATCH)
    early_stopping_patience: int = bounded(0, min=0, resume=MATCH)
    profile_steps: str = setting("", resume=FREE)
    profiler_port: int = bounded(0, min=0, max=65535, resume=FREE)
    profiler_listen_all: bool = setting(False, resume=FREE)
    export: bool = setting(True, resume=MATCH)


@dataclass
class SupervisedTrainerConfig(TrainerConfig):
    """The training loop of a task with a validation metric and a Keras-compiled loss.

    Attributes:
      gradient_accumulation_steps: accumulate gradients over this many batches per update
        (effective batch = global batch x this, under every strategy; one all-reduce per
        update).
      monitor: validation metric that picks the best checkpoint and drives early stopping
        ("" = the task's own: val_accuracy for classifier, val_loss for generator,
        val_entity_f1 for ner).
    """

    gradient_accumulation_steps: int = bounded(1, min=1, resume=NEVER)
    monitor: str = setting("", resume=MATCH)


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

    enabled: bool = setting(False, resume=FREE)
    project: str = setting("", resume=FREE)
    entity: str = setting("", resume=FREE)
    mode: str = choices("auto", "online", "offline", "disabled", default="auto", resume=FREE)
    tags: list[str] = setting(factory=list, resume=FREE)
    sync_tensorboard: bool = setting(True, resume=FREE)


@dataclass
class TrackingConfig:
    """Experiment tracking.

    Attributes:
      tensorboard: write TensorBoard logs under RUN_DIR/logs.
      wandb: Weights & Biases settings.
    """

    tensorboard: bool = setting(True, resume=FREE)
    wandb: WandbConfig = field(default_factory=WandbConfig)

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

    type: str = choices("float", "int", "choice", "boolean", default="float", resume=MATCH)
    min: float | None = setting(None, resume=MATCH)
    max: float | None = setting(None, resume=MATCH)
    step: float | None = setting(None, resume=MATCH)
    sampling: str = choices("linear", "log", "reverse_log", default="linear", resume=MATCH)
    values: list[Any] = setting(factory=list, resume=MATCH)


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

    tuner: str = choices("random", "bayesian", "hyperband", "grid", default="random", resume=MATCH)
    objective: str = setting("", resume=MATCH)
    direction: str = choices("auto", "max", "min", default="auto", resume=MATCH)
    max_trials: int = bounded(10, min=1, resume=MATCH)
    executions_per_trial: int = bounded(1, min=1, resume=MATCH)
    epochs: int = bounded(0, min=0, resume=MATCH)
    early_stopping_patience: int = bounded(0, min=0, resume=MATCH)
    hyperband_factor: int = bounded(3, min=2, resume=MATCH)
    seed: int = setting(0, resume=MATCH)
    worker_timeout_s: float = bounded(120.0, min=2.0, resume=MATCH)
    space: dict[str, HyperParamConfig] = setting(factory=dict, resume=MATCH)


@dataclass
class ExperimentConfig:
    """One experiment: the groups every task shares. Each task subclasses it (registered by
    name in ``tfapp.config.registry``) with its own ``data`` and ``model`` groups, and its
    own groups such as ``generation``; ``validate`` runs its ``check``.

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
      tune: hyperparameter search (python -m tfapp.tune).
    """

    task: str = setting("", resume=NEVER)
    name: str = setting("", resume=FREE)
    output_dir: str = setting("runs", resume=FREE)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name

    def check(self) -> None:
        """The task's own cross-field rules (raise ``ConfigError``); run by ``validate``
        after the generic checks. Here: no task but ner reads CoNLL files."""
        if self.data.format == "conll":
            raise ConfigError(f"data.format: conll is read by task ner only; task "
                              f"'{self.task}' reads csv, tsv, jsonl, parquet, text, tfrecord "
                              "or tfds")
