"""``python -m tfapp.doctor``: what tfapp sees here and what it would do, on one screen.

Python and package versions, which TensorFlow build is installed (stock, CUDA, TPU),
devices, TPU hints and the PJRT environment, what ``runtime.strategy: auto`` would pick
and why with its precision and ``jit_compile`` defaults, oneDNN, the Hub caches, W&B. It
never initialises a TPU system and trains nothing. Problems that would stop a run are
named with their fix, and make the exit code 1; ``--json`` prints the same for scripts.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace

import tfapp
from tfapp import cli, compat, tpu_vm
from tfapp.cachedir import cache_dir, cache_problem, unwritable_reason
from tfapp.compat import TESTED_VERSIONS, parse_version
from tfapp.runtime import (
    Runtime,
    TFConfigError,
    choose_strategy,
    default_steps_per_execution,
    precision_choice,
    read_tf_config,
)

import click

EXIT_PROBLEM = 1
PACKAGES = ("tensorflow", "tensorflow-tpu", "tensorflow-cpu", "tf-keras", "tensorflow-text",
            "tensorflow-hub", "keras", "keras-tuner", "tensorboard",
            "tensorboard-plugin-profile", "wandb", "libtpu")
SUPPORTED_TF = TESTED_VERSIONS["tensorflow"]
# The newest libtpu that exports every Tpu* function TensorFlow 2.20 looks up (0.0.35
# misses one, 0.0.52 misses 130; docs/tpu.md).
LIBTPU_NEWEST_FOR_TF_2_20 = (0, 0, 30)
TPU_RECIPE = "docs/tpu.md"


@dataclass
class Report:
    """Everything doctor prints; ``problems`` are (what is wrong, how to fix it)."""

    python: str
    platform: str
    tfapp: str
    packages: dict[str, str | None]
    tensorflow: dict = field(default_factory=dict)
    devices: dict = field(default_factory=dict)
    tpu: dict = field(default_factory=dict)
    plan: dict = field(default_factory=dict)
    caches: dict = field(default_factory=dict)
    wandb: dict = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)


def installed_packages() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = None
    return found


def tensorflow_distributions() -> list[str]:
    """Installed distributions that ship the ``tensorflow`` module (normalised names)."""
    providers = md.packages_distributions().get("tensorflow", [])
    return sorted({p.lower().replace("_", "-") for p in providers})


def tensorflow_build(distributions: Sequence[str], build_info: Mapping | None) -> str:
    """tpu (Google's TPU build), cuda (stock, CUDA-capable) or cpu."""
    if "tensorflow-tpu" in distributions:
        return "tpu"
    if build_info and build_info.get("is_cuda_build"):
        return "cuda"
    return "cpu"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:4])


def writable(path: str) -> bool | None:
    """Whether ``path`` (or, if missing, its nearest existing parent) can be written;
    None for remote paths, which are not checked."""

    if "://" in path:
        return None
    return unwritable_reason(path) is None


def package_problems(packages: Mapping[str, str | None], distributions: Sequence[str],
                     tf_version: str | None, tpu_hint: str | None) -> list[tuple[str, str]]:
    """The install problems that stop a run, each with its fix (pure: testable anywhere)."""
    problems = []
    recipe = f"follow the TPU recipe in {TPU_RECIPE}" if tpu_hint else \
        "pip install -e '.[cpu]' (or '.[gpu]')"
    if len(distributions) > 1:
        problems.append((f"several distributions install the same 'tensorflow' module "
                         f"({', '.join(distributions)}); whichever was installed last won",
                         f"pip uninstall -y {' '.join(distributions)}, then {recipe}"))
    if tpu_hint and distributions and "tensorflow-tpu" not in distributions:
        problems.append((f"this is a TPU VM ({tpu_hint}) but TensorFlow is the stock build "
                         f"({', '.join(distributions)}), which cannot drive the TPU",
                         f"pip uninstall -y {' '.join(distributions)}, then follow the TPU "
                         f"recipe in {TPU_RECIPE}"))
    if tf_version is None:
        problems.append(("TensorFlow is not installed (or does not import)", recipe))
        return problems
    minor = parse_version(tf_version)
    if minor not in SUPPORTED_TF:
        shown = " and ".join(".".join(map(str, v)) for v in SUPPORTED_TF)
        problems.append((f"TensorFlow {tf_version} is outside the supported {shown}",
                         f"install TensorFlow {shown} ({recipe})"))
    for name, pin in (("tf-keras", "~="), ("tensorflow-text", "~=")):
        version = packages.get(name)
        wanted = f"{name}{pin}{minor[0]}.{minor[1]}.0" if minor else name
        if version is None:
            problems.append((f"{name} is not installed",
                             f"pip install --no-deps '{wanted}'" if tpu_hint or
                             "tensorflow-tpu" in distributions else recipe))
        elif minor and parse_version(version) != minor:
            problems.append((f"{name} {version} does not match TensorFlow {tf_version}",
                             f"pip install --no-deps '{wanted}'"))
    libtpu = packages.get("libtpu")
    if "tensorflow-tpu" in distributions and libtpu and minor == (2, 20) \
            and _release(libtpu) > LIBTPU_NEWEST_FOR_TF_2_20:
        problems.append((f"libtpu {libtpu} is too new for TensorFlow 2.20's TPU build (it no "
                         "longer exports the TPU functions TensorFlow calls)",
                         "pip install 'libtpu==0.0.20' (what tfapp's [tpu] extra pins)"))
    if packages.get("tensorflow-hub") is None:
        problems.append(("tensorflow-hub is not installed",
                         "pip install --no-deps 'tensorflow-hub~=0.16.1'"))
    return problems


def gather(env: Mapping[str, str] | None = None, dev_dir: str = "/dev") -> Report:
    env = os.environ if env is None else env
    packages = installed_packages()
    distributions = tensorflow_distributions()
    hint = tpu_vm.tpu_hint(env, dev_dir)
    report = Report(python=platform.python_version(),
                    platform=f"{platform.system()} {platform.machine()}",
                    tfapp=tfapp.__version__, packages=packages)
    report.tpu = {"hint": hint, "libtpu": tpu_vm.libtpu_library_path(),
                  "environment": {k: env.get(k) for k in tpu_vm.START_VARIABLES},
                  "set_by_tfapp": dict(tpu_vm.APPLIED)}

    tf_version = None
    try:
        _without_libtpu()
        import tensorflow as tf
        tf_version = tf.__version__
    except Exception as err:  # a broken install raises all sorts of errors  # noqa: BLE001
        report.tensorflow = {"error": f"{type(err).__name__}: {str(err).splitlines()[0]}"}
    if tf_version:
        _describe_tensorflow(report, tf, distributions, hint, env)

    report.caches = _caches(env)
    report.wandb = _wandb(env)
    report.problems = package_problems(packages, distributions, tf_version, hint)
    report.problems += environment_problems(env)
    return report


def environment_problems(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """What in the environment stops a run, each with its fix: a cache that cannot be
    written (HOME or TFAPP_CACHE_DIR a file, unwritable, read-only), a malformed TF_CONFIG.
    The messages are the ones the commands stop with (tfapp.cachedir, tfapp.runtime)."""

    problems = []
    cache = cache_problem(env)
    if cache:
        problems.append(cache)
    hub = env.get("TFHUB_CACHE_DIR", "")  # unset: inside the tfapp cache, checked above
    reason = unwritable_reason(hub) if hub and "://" not in hub else None
    if reason:
        problems.append((f"the TF-Hub cache {hub} (TFHUB_CACHE_DIR) is unusable: {reason}",
                         "set TFHUB_CACHE_DIR to a writable folder"))
    try:
        read_tf_config(env)
    except TFConfigError as err:
        problems.append((err.problem, err.fix))
    return problems


def _without_libtpu() -> None:
    """Keep this process's TensorFlow off libtpu: loading it takes the TPU (one process per
    host), which may be a running job's, and doctor must not initialise it. The report
    shows the environment a run gets, read before this."""
    if "tensorflow" not in sys.modules:
        os.environ.pop("TF_PLUGGABLE_DEVICE_LIBRARY_PATH", None)
        os.environ["TPU_LOAD_LIBRARY"] = "0"


def _describe_tensorflow(report: Report, tf, distributions: list[str], hint: str | None,
                         env: Mapping[str, str]) -> None:

    try:
        build_info = dict(tf.sysconfig.get_build_info())
    except Exception:  # noqa: BLE001  (older or unusual builds)
        build_info = {}
    report.tensorflow = {"version": tf.__version__, "distributions": distributions,
                         "build": tensorflow_build(distributions, build_info),
                         "keras": "tf-keras" if os.environ.get("TF_USE_LEGACY_KERAS") == "1"
                         else "keras 3"}
    gpus = tf.config.list_physical_devices("GPU")
    capability = None
    gpu_names = []
    for gpu in gpus:
        details = tf.config.experimental.get_device_details(gpu)
        gpu_names.append(details.get("device_name", gpu.name))
        capability = capability or details.get("compute_capability")
    report.devices = {"cpu_cores": os.cpu_count(), "gpus": gpu_names,
                      "onednn": compat.onednn_enabled(),
                      "tpu_chips": "not listed (doctor does not load libtpu)"}
    # The TPU is not connected here (that would initialise it): a hint stands for "found".
    try:
        kind, reason = choose_strategy("auto", env=env, tpu_found=hint is not None,
                                       num_gpus=len(gpus), tpu_hint=hint)
    except TFConfigError:  # listed with its fix among the problems; the plan goes without it
        kind, reason = choose_strategy("auto", env={k: v for k, v in env.items()
                                                    if k != "TF_CONFIG"},
                                       tpu_found=hint is not None, num_gpus=len(gpus),
                                       tpu_hint=hint)
        reason += " (TF_CONFIG left out: it is malformed)"
    device_kind = "TPU" if kind == "tpu" else "GPU" if gpus else "CPU"
    precision, precision_reason = precision_choice("auto", device_kind, capability)
    rt = Runtime(strategy=None, kind=kind, reason=reason, num_replicas=0,
                 precision=precision, device_kind=device_kind)
    report.plan = {"strategy": kind, "why": reason + (
                       " -- if the TPU cluster resolver connects; doctor does not initialise "
                       "the TPU" if kind == "tpu" else ""),
                   "device": device_kind, "precision": precision,
                   "precision_reason": precision_reason,
                   "jit_compile": rt.default_jit_compile(None),
                   "jit_compile_hub_finetune": rt.default_jit_compile(
                       None, recompiles_under_xla=True),
                   **_bert_encoder_plan(rt)}
    report.plan["steps_per_execution"] = default_steps_per_execution(device_kind)


def _bert_encoder_plan(rt: Runtime) -> dict:
    """Which BERT encoder a BERT task builds at this device's auto precision and why, with
    XLA's auto for it: the same choice the model build makes (``native_encoder_wanted``)
    and the same XLA decision (``Runtime.default_jit_compile``)."""
    try:
        from tfapp.models.hub_encoder import native_encoder_wanted  # loads tensorflow_hub
    except ImportError as err:  # listed among the packages; the rest of the plan stands
        return {"bert_encoder": "unknown", "bert_encoder_why": f"cannot tell ({err})"}
    compute = {"mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}.get(
        rt.precision, "float32")
    why = native_encoder_wanted(compute, deterministic_finetune=False)
    if why:
        return {"bert_encoder": "native", "bert_encoder_why": (
                    f"{why}; for modules in tfapp's format (builtin:, tfapp.hub build-bert "
                    "or convert); any other Hub SavedModel runs as restored"),
                "jit_compile_native_bert": rt.default_jit_compile(None)}
    return {"bert_encoder": "hub", "bert_encoder_why": (
                "float32 compute: the module as restored (runtime.deterministic=true "
                "fine-tuning reads a tfapp-format module into the native encoder)"),
            "jit_compile_native_bert": rt.default_jit_compile(None)}


def _caches(env: Mapping[str, str]) -> dict:

    tfapp_cache = str(cache_dir(env))
    # What tfapp gives tensorflow_hub when TFHUB_CACHE_DIR is unset (hub.handles).
    hub_cache = env.get("TFHUB_CACHE_DIR") or os.path.join(tfapp_cache, "tfhub_modules")
    return {name: {"path": path, "variable": var, "writable": writable(path)}
            for name, path, var in (("tfapp", tfapp_cache, "TFAPP_CACHE_DIR"),
                                    ("TF-Hub", hub_cache, "TFHUB_CACHE_DIR"))}


def _wandb(env: Mapping[str, str]) -> dict:
    try:
        from tfapp.tracking.wandb_run import has_api_key
        key = has_api_key()
    except ImportError:
        key = bool(env.get("WANDB_API_KEY"))
    mode = (f"{env['WANDB_MODE']} (WANDB_MODE; a tracking.wandb.mode in the config wins)"
            if env.get("WANDB_MODE") else "tracking.wandb.mode (auto: WANDB_MODE, else offline)")
    return {"mode": mode, "api_key_set": key,
            "online_possible": key and env.get("WANDB_MODE") not in ("offline", "disabled")}


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) or "none"
    return str(value)


def render(report: Report) -> str:
    lines = [f"tfapp {report.tfapp} on Python {report.python}, {report.platform}", ""]
    lines.append("packages:")
    for name, version in report.packages.items():
        if version or name in ("tensorflow", "tf-keras", "tensorflow-text", "tensorflow-hub"):
            lines.append(f"  {name:28s}{version or 'not installed'}")
    t = report.tensorflow
    lines.append("")
    if "version" in t:
        lines.append(f"TensorFlow {t['version']}: {t['build']} build (distribution: "
                     f"{_fmt(t['distributions'])}); tf.keras is {t['keras']}")
    else:
        lines.append(f"TensorFlow: cannot import ({t.get('error', 'not installed')})")
    d = report.devices
    if d:
        onednn = {True: "on", False: "off", None: "unknown"}[d["onednn"]]
        lines.append(f"devices: {d['cpu_cores']} CPU cores, GPUs: {_fmt(d['gpus'])}, "
                     f"oneDNN CPU kernels: {onednn}")
    tpu = report.tpu
    hint = tpu["hint"] or "no hint (no TPU_* variables, no /dev/accel* or /dev/vfio/<n>)"
    lines.append(f"TPU: {hint}; libtpu: {tpu['libtpu'] or 'not installed'}")
    if tpu["hint"]:
        lines.append("  (TPU chips are not listed: doctor does not load libtpu, which would "
                     "take the TPU from a running job)")
    if any(tpu["environment"].values()) or tpu["hint"]:
        for key, value in tpu["environment"].items():
            who = " (set by tfapp)" if key in tpu["set_by_tfapp"] else ""
            lines.append(f"  {key}={value or '(unset)'}{who}")
    p = report.plan
    if p:
        lines.append("")
        lines.append(f"runtime.strategy=auto -> {p['strategy']} ({p['why']})")
        lines.append(f"  on {p['device']}: precision auto -> {p['precision']}; jit_compile "
                     f"auto -> {_fmt(p['jit_compile'])} "
                     f"({_fmt(p['jit_compile_hub_finetune'])} when fine-tuning a restored "
                     "TF-Hub encoder)")
        lines.append(f"  precision: {p['precision_reason']}")
        if "bert_encoder" in p:
            lines.append(f"  BERT encoder: {p['bert_encoder']} ({p['bert_encoder_why']})"
                         + (f"; jit_compile auto -> {_fmt(p['jit_compile_native_bert'])} "
                            "with the native encoder" if p["bert_encoder"] == "native" else ""))
        lines.append(f"  steps_per_execution auto -> {p['steps_per_execution']} (capped at "
                     "log_every_steps and one epoch; docs/performance.md)")
    lines.append("")
    for name, info in report.caches.items():
        state = {True: "writable", False: "NOT writable", None: "remote, not checked"}[
            info["writable"]]
        lines.append(f"{name} cache: {info['path']} ({state}; ${info['variable']})")
    w = report.wandb
    lines.append(f"W&B: mode {w['mode']}; API key {'set' if w['api_key_set'] else 'not set'}"
                 f"{'' if w['online_possible'] else ' (runs stay offline)'}")
    lines.append("")
    if report.problems:
        lines.append(f"{len(report.problems)} problem(s) that stop a run:")
        for what, fix in report.problems:
            lines.append(f"  - {what}\n    fix: {fix}")
    else:
        lines.append("no problems found")
    return "\n".join(lines)


@cli.command(
    "doctor",
    """Say what tfapp sees here and what it would do, on one screen.

    Python and package versions, the TensorFlow build (stock, CUDA, TPU), devices, TPU
    hints and PJRT variables, caches and W&B; what runtime.strategy auto would pick and why,
    with its precision and XLA defaults. Never initialises a TPU, trains nothing. Exits 1
    when something would stop a run, naming the fix.""")
@click.option("--json", is_flag=True, help="Print the report as JSON.")
def command(args: SimpleNamespace) -> int:
    report = gather()
    if args.json:
        data = asdict(report)
        data["problems"] = [{"problem": w, "fix": f} for w, f in report.problems]
        print(json.dumps(data, indent=2, default=str))
    else:
        print(render(report))
    return EXIT_PROBLEM if report.problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.doctor")


if __name__ == "__main__":
    sys.exit(main())
