"""The learning-rate range test (Smith 2017, "Cyclical Learning Rates", section 3.3).

Train the real model on the real pipeline while the learning rate grows exponentially
from ``optimizer.lr_find_min`` to ``optimizer.lr_find_max`` over at most
``optimizer.lr_find_steps`` optimizer steps; record the loss of every step; stop once the
loss diverges. The suggestion is where the smoothed loss falls fastest per unit
log(lr), before its minimum (Smith; fastai's "steep"). The model's weights are put back
afterwards.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfapp.atomic import write_text
from tfapp.config import ConfigError
from tfapp.training import fit
from tfapp.training.optimizers import ExponentialSweep, build_optimizer

import numpy as np
import tensorflow as tf

if TYPE_CHECKING:
    from tfapp.training.context import RunContext

log = logging.getLogger("tfapp")

# Stop once the loss (mean of the last 3 steps) exceeds this multiple of its best value.
DIVERGENCE_FACTOR = 4.0


@dataclass
class LRFindResult:
    """One sweep: learning rate, raw and smoothed loss per optimizer step, the suggestion."""

    lrs: list[float]
    losses: list[float]
    smoothed: list[float]
    suggestion: float
    min_loss_lr: float
    lr_min: float
    lr_max: float
    max_steps: int
    diverged: bool
    loss_fell: bool = True

    def check_usable(self) -> None:
        """ConfigError unless the sweep saw the loss fall clearly (beyond its noise)."""
        if not self.loss_fell:
            raise ConfigError(
                f"LR range test: the loss did not fall clearly over {len(self.lrs)} steps "
                f"from {self.lr_min:.3g} to {self.lr_max:.3g} (smoothed {self.smoothed[0]:.4g} "
                f"-> lowest {min(self.smoothed):.4g}); raise optimizer.lr_find_steps, widen "
                "optimizer.lr_find_min/lr_find_max, or set optimizer.learning_rate")

    def save_json(self, path: str | Path) -> Path:
        return write_text(path, json.dumps(asdict(self), indent=1))

    def describe(self) -> str:
        why = "stopped when the loss diverged" if self.diverged else "full sweep"
        if not self.loss_fell:
            why += "; WARNING: the loss did not fall clearly, the suggestion is unreliable"
        return (f"suggested learning rate: {self.suggestion:.3g} (loss lowest at "
                f"{self.min_loss_lr:.3g}; swept {self.lr_min:.3g} .. {self.lr_max:.3g}, "
                f"{len(self.lrs)} of {self.max_steps} steps, {why})")


def smooth(losses: list[float]) -> list[float]:
    """Centred moving average over ~1/10 of the sweep (at least 3 steps). Centred, unlike
    the usual causal EMA, so the curve does not lag behind the learning rate: the sweep is
    short and the suggestion is read off after it."""
    values = np.asarray(losses, dtype=np.float64)
    half = max(1, len(values) // 20)
    return [float(values[max(0, i - half):i + half + 1].mean()) for i in range(len(values))]


def suggest(lrs: list[float], smoothed: list[float]) -> int:
    """Index of the steepest fall of the smoothed loss per unit log(lr), looked for before
    the loss minimum (past it the loss only rises): Smith's "where the loss falls fastest".
    """
    best = int(np.argmin(smoothed))
    if best < 2:  # the loss never fell: the sweep started too high; take its start
        return 0
    slope = np.gradient(np.asarray(smoothed[:best + 1]), np.log(np.asarray(lrs[:best + 1])))
    return int(np.argmin(slope))


class _SweepRecorder(tf.keras.callbacks.Callback):
    """Per-batch loss under the sweep (metrics reset after every batch so Keras's logged
    ``loss`` is that batch's, not the running mean), grouped by optimizer step."""

    def __init__(self, schedule: ExponentialSweep):
        super().__init__()
        self.schedule = schedule
        self.by_step: dict[int, list[float]] = {}
        self.diverged = False
        self._step = 0

    def on_train_batch_begin(self, batch, logs=None):
        self._step = int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        loss = float((logs or {}).get("loss", math.nan))
        self.model.reset_metrics()
        if not math.isfinite(loss):
            self.diverged = True
            self.model.stop_training = True
            return
        self.by_step.setdefault(self._step, []).append(loss)
        losses = np.array([np.mean(v) for v in self.by_step.values()])
        if len(losses) < 6:
            return
        recent = np.convolve(losses, np.ones(3) / 3, mode="valid")
        if recent[-1] > DIVERGENCE_FACTOR * recent.min():
            self.diverged = True
            self.model.stop_training = True


def find_lr(ctx: RunContext, model: tf.keras.Model, dataset: Any, *, loss: Any
            ) -> LRFindResult:
    """Run the range test on ``model`` (built by ``fit.build_model``) over ``dataset`` (a
    repeated training stream, as fit gets it) and restore the model's weights afterwards.

    The model is compiled here with the sweep optimizer (``optimizer``'s kind, weight
    decay and clipping; its learning rate the sweep); compile it again before training.
    ``steps_per_execution`` is 1 so every batch's loss is seen.
    """
    o = ctx.cfg.optimizer
    steps = o.lr_find_steps
    schedule = ExponentialSweep(o.lr_find_min, o.lr_find_max, steps)
    saved = {v.ref(): v.numpy() for v in model.weights}
    recorder = _SweepRecorder(schedule)
    with ctx.runtime.strategy.scope():
        optimizer = build_optimizer(o, schedule=schedule)
    fit.compile_model(ctx, model, optimizer=optimizer, loss=loss, steps_per_execution=1)
    try:
        fit.fit(ctx, model, dataset, epochs=1,
                steps_per_epoch=steps * ctx.cfg.trainer.gradient_accumulation_steps,
                callbacks=[recorder], quiet=True)
    finally:
        # Put the weights back; variables the sweep created (gradient accumulators, built
        # at the first train step) start from zero, as they would have.
        for v in model.weights:
            if v.ref() in saved:
                v.assign(saved[v.ref()])
            else:
                v.assign(tf.zeros_like(v))
    lrs = [schedule.value(s) for s in recorder.by_step]
    losses = [float(np.mean(v)) for v in recorder.by_step.values()]
    if not losses:
        raise ConfigError(f"LR range finder: the loss was not finite even at "
                          f"optimizer.lr_find_min={o.lr_find_min}; lower it")
    sm = smooth(losses)
    best = int(np.argmin(sm))
    # "Fell" = the smoothed minimum lies clearly (2 noise widths) below the start, where
    # noise is the spread of the raw losses around the smoothed curve up to the minimum.
    noise = float(np.std(np.asarray(losses[:best + 1]) - np.asarray(sm[:best + 1])))
    fell = best >= 2 and sm[0] - sm[best] > 2 * noise
    return LRFindResult(lrs=lrs, losses=losses, smoothed=sm, suggestion=lrs[suggest(lrs, sm)],
                        min_loss_lr=lrs[best], lr_min=o.lr_find_min, lr_max=o.lr_find_max,
                        max_steps=steps, diverged=recorder.diverged, loss_fell=bool(fell))


def plot_lr_find(result: LRFindResult, out_png: str | Path, title: str = "") -> Path:
    """Loss vs learning rate (log scale), raw and smoothed, the suggestion marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(result.lrs, result.losses, ".", alpha=0.35, color="tab:blue", label="loss")
    ax.plot(result.lrs, result.smoothed, "-", color="tab:blue", label="smoothed")
    i = result.lrs.index(result.suggestion)
    ax.axvline(result.suggestion, color="tab:red", ls="--", lw=1)
    ax.plot([result.suggestion], [result.smoothed[i]], "o", color="tab:red", ms=8,
            label=f"suggestion {result.suggestion:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("training loss")
    # Keep the divergence tail from squashing the interesting part of the curve.
    top = max(result.smoothed[0], min(result.smoothed)) * 1.5
    low = min(min(result.losses), min(result.smoothed))
    ax.set_ylim(low - 0.05 * abs(low), max(top, low + 1e-6))
    ax.set_title(title or "learning-rate range test")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out_png = Path(out_png)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png

