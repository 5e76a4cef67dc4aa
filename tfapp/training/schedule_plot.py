"""The learning-rate schedule as a picture, drawn before training starts.

The schedule is a pure function of the optimizer step (``tfapp.training.optimizers``), so
evaluating it on every step of the run shows exactly what the optimizer will use.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf


def schedule_values(schedule: tf.keras.optimizers.schedules.LearningRateSchedule,
                    total_steps: int) -> np.ndarray:
    """The learning rate at optimizer steps 0 .. total_steps - 1 (one vectorised call)."""
    return np.asarray(schedule(tf.range(max(int(total_steps), 1), dtype=tf.int64)),
                      dtype=np.float64)


def plot_schedule(schedule: tf.keras.optimizers.schedules.LearningRateSchedule,
                  total_steps: int, out_png: str | Path, *, warmup_steps: int = 0,
                  eval_steps: list[int] | None = None, title: str = "") -> Path:
    """Learning rate vs optimizer step into ``out_png``; warmup end and evaluations marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lrs = schedule_values(schedule, total_steps)
    steps = np.arange(len(lrs))
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    ax.plot(steps, lrs, "-", lw=1.6)
    if 0 < warmup_steps < len(lrs):
        ax.axvline(warmup_steps, color="grey", ls="--", lw=1,
                   label=f"end of warmup ({warmup_steps})")
    if eval_steps and len(eval_steps) <= 100:
        for i, s in enumerate(eval_steps):
            ax.axvline(s, color="tab:green", alpha=0.35, lw=0.8,
                       label="evaluation" if i == 0 else None)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.set_title(title or f"learning-rate schedule ({len(lrs)} steps, peak {lrs.max():.3g})")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    out_png = Path(out_png)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
