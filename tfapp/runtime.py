"""Runtime: distribution strategy, precision policy, seeds and batch arithmetic.

``setup(cfg.runtime, ...)`` is called once per process, before any model or dataset
is built, and returns a ``Runtime`` whose ``strategy.scope()`` everything is built
in. The choice is logged in one line that says what was picked and why.

Batch arithmetic: ``data.batch_size`` is the batch *per replica*; each step the
strategy consumes ``global_batch_size = batch_size * num_replicas`` examples, split
evenly over the replicas. Losses are averaged over the global batch, so gradients
summed across replicas equal the single-device gradient of the global batch. With
a larger global batch the linear scaling rule multiplies the learning rate by the
replica count (``optimizer.scale_lr_by_replicas``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import compat
from tfapp.config import ConfigError, RuntimeConfig
from tfapp.tpu_vm import on_tpu_vm, tpu_hint

log = logging.getLogger("tfapp")

@dataclass(frozen=True)
class TFConfig:
    """``TF_CONFIG``, parsed in one place: the cluster (job -> addresses) and this task."""

    cluster: dict[str, list[str]]
    task_type: str | None = None
    task_index: int | None = None

    @property
    def num_workers(self) -> int:
        return sum(len(v) for k, v in self.cluster.items() if k in ("chief", "worker"))


TF_CONFIG_EXAMPLE = ('{"cluster": {"worker": ["host0:12345", "host1:12345"]}, '
                     '"task": {"type": "worker", "index": 0}}')


class TFConfigError(ConfigError):
    """A malformed ``TF_CONFIG``: ``problem`` says what is wrong, ``fix`` what to do (doctor
    lists the two apart; a command prints them as one line)."""

    def __init__(self, problem: str):
        self.problem = f"TF_CONFIG {problem}"
        self.fix = (f"set TF_CONFIG to JSON like {TF_CONFIG_EXAMPLE} (docs/scale_out.md, "
                    "'Several workers'), or unset it to train on this machine alone")
        super().__init__(f"{self.problem}; {self.fix}")


def read_tf_config(env: Mapping[str, str] | None = None) -> TFConfig:
    """``TF_CONFIG`` of ``env`` (``os.environ``); empty when unset, a ``TFConfigError``
    naming what is wrong when it is not the JSON TensorFlow expects. Checked whole here:
    TensorFlow's own reading fails late, in a traceback, or (one worker) not at all."""
    raw = (os.environ if env is None else env).get("TF_CONFIG", "")
    if not raw:
        return TFConfig(cluster={})
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as err:
        raise TFConfigError(f"is not valid JSON ({err.msg} at character {err.pos})") from None
    if not isinstance(config, dict):
        raise TFConfigError(f"is a JSON {type(config).__name__}, not an object with 'cluster' "
                            "and 'task'")
    cluster = config.get("cluster")
    if not isinstance(cluster, dict) or not cluster:
        raise TFConfigError("'cluster' must map each job (worker, chief) to its list of "
                            f"host:port addresses, got {json.dumps(cluster)}")
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise TFConfigError(f"cluster job '{job}' must be a list of host:port strings, "
                                f"got {json.dumps(addresses)}")
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise TFConfigError("'task' must say which of the cluster's tasks this process is, "
                            f"as {{\"type\": JOB, \"index\": N}}, got {json.dumps(task)}")
    task_type, index = task["type"], task["index"]
    if task_type not in cluster:
        raise TFConfigError(f"task type {json.dumps(task_type)} is not a job of the cluster "
                            f"(it has: {', '.join(cluster)})")
    try:
        task_index = int(index)
    except (TypeError, ValueError):
        raise TFConfigError(f"task index {json.dumps(index)} is not a number") from None
    if not 0 <= task_index < len(cluster[task_type]):
        raise TFConfigError(f"task index {task_index} is out of range: job '{task_type}' lists "
                            f"{len(cluster[task_type])} address(es), so 0 to "
                            f"{len(cluster[task_type]) - 1}")
    return TFConfig(cluster=dict(cluster), task_type=task_type, task_index=task_index)


@dataclass
class Runtime:
    """What ``setup`` chose. Build models and datasets inside ``strategy.scope()``."""

    strategy: object
    kind: str  # tpu | mirrored | multi_worker | one_device | cpu
    reason: str
    num_replicas: int
    precision: str
    device_kind: str  # TPU | GPU | CPU
    is_chief: bool = True
    task_type: str | None = None
    task_id: int | None = None
    config: RuntimeConfig | None = None  # what setup() was given
    input_pipelines: int = 1  # input pipelines distribute_datasets_from_function builds
    precision_reason: str = ""  # why ``precision`` (precision_choice)

    def global_batch_size(self, per_replica: int) -> int:
        return per_replica * self.num_replicas

    def scaled_learning_rate(self, lr: float, scale: bool) -> float:
        return lr * self.num_replicas if scale else lr

    def default_jit_compile(self, configured: bool | None, *,
                            recompiles_under_xla: bool = False) -> bool:
        """XLA pays on GPU/TPU; on a CPU, BERT training measured 1.27x slower with it
        (docs/performance.md), and its CPU backend binds to one device, so it is off on
        CPUs.

        Fine-tuning a restored TF-Hub module, and tf-keras's fused ``LSTM`` layer, made XLA
        recompile the train step at every step (measured on CPU: 2-16 s per step; see
        docs/hub.md and docs/generator.md), so ``auto`` leaves XLA off for such models
        (``recompiles_under_xla``) on GPU too. TPUs compile everything regardless.
        """
        return self.jit_compile_choice(configured, recompiles_under_xla=recompiles_under_xla)[0]

    def jit_compile_choice(self, configured: bool | None, *,
                           recompiles_under_xla: bool = False) -> tuple[bool, str]:
        """(``default_jit_compile``'s answer, why), the why for the run header and logs."""
        if configured is not None:
            return configured, "set by trainer.jit_compile"
        if self.device_kind == "TPU":
            return True, "auto: a TPU compiles everything"
        if self.device_kind != "GPU":
            return False, (f"auto: off on {self.device_kind} (XLA measured slower there, "
                           "and its CPU backend binds one device)")
        if recompiles_under_xla:
            return False, ("auto: off on GPU, the model's train step would recompile every "
                           "step (a restored TF-Hub encoder or the fused LSTM)")
        return True, "auto: on GPU, the model compiles once"

    def describe(self, per_replica_batch: int | None = None) -> str:
        parts = [f"strategy={self.kind}", f"replicas={self.num_replicas}",
                 f"device={self.device_kind}", f"precision={self.precision}"]
        if per_replica_batch is not None:
            parts.append(f"batch={per_replica_batch}/replica "
                         f"global={self.global_batch_size(per_replica_batch)}")
        if self.task_type:
            parts.append(f"task={self.task_type}:{self.task_id}")
        if self.device_kind == "CPU":
            onednn = compat.onednn_enabled()
            parts.append("onednn=" + {True: "on", False: "off", None: "unknown"}[onednn])
        return " ".join(parts) + f" ({self.reason})"




# trainer.steps_per_execution null (auto): batches per tf.function call, per device kind.
# Every execution ends on the host (Keras's batch callbacks, the SIGTERM check): more
# batches per call, fewer round trips.
# * TPU: 50, the value TensorFlow's TPU guide compiles its Keras example with ("anything
#   between 2 and steps_per_epoch could help here", tensorflow.org/guide/tpu): a TPU waits
#   for the host at every call, and Keras's own advice for TPUs is many steps per call.
# * GPU: 8. Keras documents the gain for "TPUs or small models with a large Python
#   overhead" (Model.compile); a GPU queues kernels while the host moves on, so only the
#   per-call overhead (~ms) is saved: a few steps per call take most of it, with less loss
#   of callback granularity than a TPU's 50. Not measured here (no GPU).
# * CPU: 1, measured with scripts/bench_train.py (docs/performance.md#steps-per-execution):
#   8-32 steps per call saved 2-7 ms a step on a 30-50 ms step but compiled 1-5 s longer:
#   break-even at ~250-1,700 steps, and the default demo runs ~280.
AUTO_STEPS_PER_EXECUTION = {"TPU": 50, "GPU": 8, "CPU": 1}


def default_steps_per_execution(device_kind: str) -> int:
    """What ``trainer.steps_per_execution: null`` (auto) runs on ``device_kind`` (TPU, GPU,
    CPU), before the plan caps it (``training.plan.resolve_steps_per_execution``)."""
    return AUTO_STEPS_PER_EXECUTION.get(device_kind, 1)


def choose_strategy(requested: str, *, env: Mapping[str, str], tpu_found: bool,
                    num_gpus: int, tpu_hint: str | None = None) -> tuple[str, str]:
    """Pure selection logic: (strategy kind, reason) for ``runtime.strategy=requested``.

    ``tpu_found`` says whether a TPUClusterResolver resolved a TPU; it is only probed
    when something hints at one, so CPU/GPU machines never wait on the resolver.
    """
    if requested != "auto":
        if requested == "multi_worker" and not env.get("TF_CONFIG"):
            raise ConfigError("runtime.strategy=multi_worker needs TF_CONFIG (JSON with "
                              "'cluster' and 'task'); see docs/scale_out.md, 'Several workers'")
        return requested, "requested by runtime.strategy"
    if tpu_found:
        return "tpu", f"auto: TPU cluster resolver found a TPU ({tpu_hint or 'resolver'})"
    workers = read_tf_config(env).num_workers
    if workers > 1:
        return "multi_worker", f"auto: TF_CONFIG lists {workers} workers"
    if num_gpus > 1:
        return "mirrored", f"auto: {num_gpus} GPUs"
    if num_gpus == 1:
        return "one_device", "auto: one GPU"
    return "cpu", "auto: no TPU or GPU found"


#: /proc/cpuinfo flags of CPUs that run bfloat16 matmuls natively (oneDNN uses them):
#: AVX512-BF16 (Cooper Lake, Zen 4 and later) and AMX (Sapphire Rapids and later).
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
#: set to 0, precision auto keeps float32 on a CPU even where it has native bfloat16
CPU_BF16_ENV = "TFAPP_CPU_BFLOAT16"


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags as the kernel lists them (empty where there is no
    /proc/cpuinfo, e.g. macOS: auto then keeps float32)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def precision_choice(requested: str, device_kind: str, gpu_compute_capability: tuple | None,
                     flags: frozenset[str] | None = None) -> tuple[str, str]:
    """(policy, why) for ``runtime.precision=requested``.

    On a CPU, ``auto`` picks mixed_bfloat16 only where the CPU has native bfloat16 matmuls
    (``BF16_CPU_FLAGS``): elsewhere bfloat16 is emulated and slower than float32.
    ``flags`` (the CPU's, ``cpu_flags``) defaults to this machine's.
    """
    if requested != "auto":
        return requested, "set by runtime.precision"
    if device_kind == "TPU":
        return "mixed_bfloat16", "auto: TPU"
    if device_kind == "GPU":
        # Ampere (8.0) and newer run bfloat16 natively and need no loss scaling.
        if gpu_compute_capability and gpu_compute_capability[0] >= 8:
            return "mixed_bfloat16", (f"auto: GPU compute capability "
                                      f"{'.'.join(map(str, gpu_compute_capability))} >= 8.0")
        return "mixed_float16", "auto: GPU older than compute capability 8.0"
    if flags is None and os.environ.get(CPU_BF16_ENV, "").strip() == "0":
        # One config, one numeric result on every CPU of a fleet (and the test suite's
        # float32 comparisons), whichever CPUs have native bfloat16.
        return "float32", f"auto: {CPU_BF16_ENV}=0 keeps float32 on this CPU"
    flags = cpu_flags() if flags is None else flags
    native = [f for f in BF16_CPU_FLAGS if f in flags]
    if native:
        return "mixed_bfloat16", (f"auto: the CPU has native bfloat16 ({', '.join(native)}); "
                                  "runtime.precision=float32 to keep float32")
    return "float32", ("auto: the CPU has no native bfloat16 (no avx512_bf16 or amx_bf16 "
                       "flag), where float32 is faster")


def choose_precision(requested: str, device_kind: str, gpu_compute_capability: tuple | None,
                     flags: frozenset[str] | None = None) -> str:
    return precision_choice(requested, device_kind, gpu_compute_capability, flags)[0]


def _split_cpu(tf, n: int) -> None:
    cpus = tf.config.list_physical_devices("CPU")
    current = tf.config.get_logical_device_configuration(cpus[0])
    if current and len(current) == n:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n)])
    except RuntimeError as err:  # TensorFlow already initialised its devices
        raise ConfigError(f"runtime.cpu_devices={n}: TensorFlow devices are already "
                          f"initialised in this process ({err}); set it before anything "
                          "runs TensorFlow") from None


def tpu_address(configured: str, env: Mapping[str, str], dev_dir: str = "/dev") -> str | None:
    """What to give ``TPUClusterResolver(tpu=...)``: ``runtime.tpu`` if set; "local" on a
    TPU VM (the chips are on this host: no gRPC, no Cloud TPU API; what Google's TPU VM
    recipes pass); else None (TPU_NAME, Colab's COLAB_TPU_ADDR, the metadata server)."""
    if configured:
        return configured
    return "local" if on_tpu_vm(env, dev_dir) else None


def _connect_tpu(tf, tpu: str, env: Mapping[str, str]):
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address(tpu, env))
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, tf.errors.OpError, RuntimeError) as err:
        raise ConfigError(f"runtime.strategy=tpu: no TPU reachable (tpu='{tpu}'): "
                          f"{str(err).splitlines()[0]}") from None
    return resolver


def setup(cfg: RuntimeConfig, env: Mapping[str, str] | None = None) -> Runtime:
    """Seed, pick the strategy and precision policy, and log the choice."""
    import tensorflow as tf

    env = os.environ if env is None else env
    # A malformed TF_CONFIG stops every command that sets up a runtime, whatever the
    # strategy, before anything is written (TensorFlow and tfapp's callbacks read it later).
    read_tf_config(env)
    if cfg.cpu_devices > 1:
        _split_cpu(tf, cfg.cpu_devices)
    seed(cfg)
    if cfg.deterministic:
        compat.enable_op_determinism()

    gpus = tf.config.list_physical_devices("GPU")
    hint = tpu_hint(env) if cfg.strategy in ("auto", "tpu") else None
    resolver = None
    if cfg.strategy == "tpu" or (cfg.strategy == "auto" and hint):
        try:
            resolver = _connect_tpu(tf, cfg.tpu, env)
        except ConfigError:
            if cfg.strategy == "tpu":
                raise
            log.warning("A TPU was hinted (%s) but none could be reached; continuing", hint)
    kind, reason = choose_strategy(cfg.strategy, env=env, tpu_found=resolver is not None,
                                   num_gpus=len(gpus), tpu_hint=hint)

    task_type = task_id = None
    pipelines = 1  # one per worker (host): what distribute_datasets_from_function builds
    if kind == "tpu":
        strategy = tf.distribute.TPUStrategy(resolver)
        device_kind = "TPU"
        pipelines = int(getattr(strategy.extended, "num_hosts", 1) or 1)
    elif kind == "mirrored":
        devices = None
        if not gpus:  # Mirrored over logical CPUs: name them, or it picks CPU:0 only
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        strategy = tf.distribute.MirroredStrategy(devices=devices)
        device_kind = "GPU" if gpus else "CPU"
    elif kind == "multi_worker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        resolver_mw = strategy.cluster_resolver
        task_type, task_id = resolver_mw.task_type, resolver_mw.task_id
        device_kind = "GPU" if gpus else "CPU"
        pipelines = max(1, read_tf_config(env).num_workers)
    elif kind == "one_device":
        device = "/gpu:0" if gpus else "/cpu:0"
        strategy = tf.distribute.OneDeviceStrategy(device)
        device_kind = "GPU" if gpus else "CPU"
    else:
        strategy = tf.distribute.get_strategy()
        device_kind = "CPU"

    capability = None
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        capability = details.get("compute_capability")
    precision, precision_reason = precision_choice(cfg.precision, device_kind, capability)
    tf.keras.mixed_precision.set_global_policy(precision)

    rt = Runtime(strategy=strategy, kind=kind, reason=reason,
                 num_replicas=strategy.num_replicas_in_sync, precision=precision,
                 precision_reason=precision_reason,
                 device_kind=device_kind, is_chief=is_chief(task_type, task_id),
                 task_type=task_type, task_id=task_id, config=cfg,
                 input_pipelines=pipelines)
    log.debug("runtime: %s", rt.describe())
    return rt


def seed(cfg: RuntimeConfig) -> None:
    """Seed Python, NumPy and TensorFlow with ``runtime.seed`` (each run of a process)."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(cfg.seed)


# In the name of every tf.function tfapp compiles with XLA only where the host has XLA
# (``host_xla_available``): XLA names what it compiles after the function, so the tests'
# conftest can tell these (uncompiled on the TPU build) from a test's own XLA use.
HOST_XLA = "host_xla_optional"


@functools.cache
def host_xla_available() -> bool:
    """Whether XLA can compile for the host CPU in this process.

    TensorFlow's TPU build (``tensorflow-tpu``) has no XLA CPU backend: a ``jit_compile``
    function on the CPU fails there with "could not find registered transfer manager for
    platform Host" (measured with 2.20.0). Host-side functions that would compile with
    XLA (the generator's decoding loop) run uncompiled there instead.
    """
    import tensorflow as tf

    def host_xla_optional_probe(x):
        return x + 1

    assert HOST_XLA in host_xla_optional_probe.__name__
    try:
        with tf.device("/CPU:0"):
            tf.function(host_xla_optional_probe, jit_compile=True)(tf.constant(1))
    except (tf.errors.NotFoundError, tf.errors.UnimplementedError,
            tf.errors.InvalidArgumentError) as err:
        log.debug("runtime: no XLA for the host CPU here (%s)", str(err).splitlines()[0])
        return False
    return True


def is_chief(task_type: str | None, task_id: int | None) -> bool:
    """The chief writes checkpoints, logs and exports; other workers write to temp dirs.

    Without a cluster every process is the chief. In a cluster with a 'chief' task only
    that task is; with workers only, worker 0 is (the MultiWorkerMirrored convention).
    """
    if task_type is None:
        return True
    if task_type == "chief":
        return True
    if task_type == "worker":
        return "chief" not in read_tf_config().cluster and task_id == 0
    return False

