"""The run header: the numbers a user checks before waiting an hour.

Printed when training starts and saved as ``RUN_DIR/run_header.txt`` (as printed) and
``RUN_DIR/run_header.json`` (machine-readable, same keys).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tfapp.atomic import write_text
from tfapp.config import ExperimentConfig
from tfapp.run_layout import RunLayout
from tfapp.runtime import Runtime
from tfapp.training.plan import TrainingPlan

# key -> label, in print order.
LABELS = {
    "task": "task / model",
    "examples": "examples",
    "length": "length",
    "evaluation": "evaluation",
    "batch_per_replica": "batch per replica",
    "replicas": "replicas",
    "global_batch": "global batch",
    "gradient_accumulation_steps": "grad. accumulation",
    "effective_batch": "effective batch",
    "total_steps": "optimizer steps",
    "warmup_steps": "warmup steps",
    "schedule": "lr schedule",
    "precision": "precision",
    "jit_compile": "jit_compile",
    "encoder": "BERT encoder",
    "steps_per_execution": "steps/execution",
}


def build_header(cfg: ExperimentConfig, rt: Runtime, plan: TrainingPlan, *,
                 examples: dict[str, int], warmup: int, peak_lr: float,
                 lr_source: str, jit_compile: bool, jit_reason: str = "",
                 encoder: str = "",
                 steps_per_execution: tuple[int, str] | None = None) -> dict[str, Any]:
    """The header as a dict (the JSON file's content). ``jit_reason``: why XLA is on or
    off; ``encoder``: the BERT encoder the model holds and why (``BuiltEncoder.describe``;
    "" for a model without one); ``steps_per_execution``: the value compiled and where it
    came from (``plan.resolve_steps_per_execution``)."""
    t = cfg.trainer
    examples_seen = plan.total_steps * plan.effective_batch
    passes = examples_seen / examples["train"] if examples.get("train") else 0.0
    if t.max_steps:
        length = f"max_steps={t.max_steps} (epochs ignored)"
    else:
        length = f"{t.epochs} epochs x {plan.batches_per_pass} batches"
    length += f"; {examples_seen} examples = {passes:.2f} passes over train"
    if plan.step_mode:
        evaluation = (f"every {plan.eval_every_steps} optimizer steps "
                      f"({plan.fit_epochs} evaluations)")
    else:
        evaluation = f"at each epoch end ({plan.fit_epochs} evaluations)"
    if t.log_every_steps:
        evaluation += f"; train logs every {t.log_every_steps} steps"
    return {
        "task": f"{cfg.task} / {cfg.model.kind}",
        "examples": {k: int(v) for k, v in examples.items()},
        "epochs": 0 if t.max_steps else t.epochs,
        "max_steps": t.max_steps,
        "length": length,
        "evaluation": evaluation,
        "eval_every_steps": plan.eval_every_steps,
        "evaluations": plan.fit_epochs,
        "batches_per_pass": plan.batches_per_pass,
        "batch_per_replica": cfg.data.batch_size,
        "replicas": f"{rt.num_replicas} ({rt.kind} strategy on {rt.device_kind})",
        "num_replicas": rt.num_replicas,
        "strategy": rt.kind,
        "global_batch": plan.global_batch,
        "gradient_accumulation_steps": plan.accumulation,
        "effective_batch": plan.effective_batch,
        "total_steps": plan.total_steps,
        "warmup_steps": warmup,
        "schedule": f"{cfg.optimizer.schedule}, peak {peak_lr:.3g} ({lr_source})",
        "peak_learning_rate": peak_lr,
        "precision": rt.precision,
        "precision_reason": rt.precision_reason,
        "jit_compile": bool(jit_compile),
        "jit_compile_reason": jit_reason,
        "encoder": encoder or "none",
        "steps_per_execution": (steps_per_execution or (t.steps_per_execution, "config"))[0],
        "steps_per_execution_source": (steps_per_execution or (None, "config"))[1],
    }


def format_header(header: dict[str, Any]) -> str:
    lines = ["=" * 72, "run header"]
    for key, label in LABELS.items():
        value = header.get(key, "-")  # (a header saved before the key existed)
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        if key == "precision" and header.get("precision_reason"):
            value = f"{value} ({header['precision_reason']})"
        if key == "jit_compile" and header.get("jit_compile_reason"):
            value = f"{value} ({header['jit_compile_reason']})"
        if key == "steps_per_execution" and header.get("steps_per_execution_source"):
            value = f"{value} ({header['steps_per_execution_source']})"
        lines.append(f"  {label + ':':21} {value}")
    lines.append("=" * 72)
    return "\n".join(lines)


def save_header(header: dict[str, Any], layout: RunLayout) -> Path:
    """Write run_header.txt and run_header.json (each atomically: temp file + rename);
    returns the .txt."""
    write_text(layout.header_json, json.dumps(header, indent=1) + "\n")
    return write_text(layout.header_txt, format_header(header) + "\n")
