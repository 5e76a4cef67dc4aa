"""The model card (``README.md``) every export carries: what produced the model, how well it
did, how to call it and where it stops working -- so an export copied elsewhere still says
what it is. Written into the export directory before it is renamed into place."""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from tfapp.config import ExperimentConfig, to_yaml

__all__ = ["ModelCard", "vocabulary_scripts"]

CARD_FILE = "README.md"


@dataclass
class ModelCard:
    """What a card says; ``render`` makes the Markdown.

    Attributes:
      title: one line, e.g. "Text classifier (BERT, 2 labels)".
      cfg: the run's config (shown whole, and its data files named).
      examples: examples per split (train, validation, test).
      files: where each split came from (file specs, or "0.2 of train").
      details: facts of the export (name -> Markdown), from its format's ``describe``
        (``tfapp.serving.ExportFormat``): the base encoder, the input, ...
      labels: the label names, in output order (classifiers).
      metrics: split -> metric -> value, of the exported weights.
      best: the best-checkpoint record the weights come from (epoch, monitor, value).
      usage: how to load and call the export (a shell and a Python snippet).
      limits: what the model cannot do (sequence length, vocabulary scripts, ...).
    """

    title: str
    cfg: ExperimentConfig
    examples: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    best: dict | None = None
    usage: str = ""
    limits: list[str] = field(default_factory=list)

    def render(self) -> str:
        c = self.cfg
        out = [f"# {self.title}", "",
               f"Trained by tfapp (`{c.task}` task), run `{c.name}`.", ""]
        out += ["## Model", "", f"* kind: `{c.model.kind}`"]
        out += [f"* {name}: {value}" for name, value in self.details.items()]
        if self.best:
            out.append(f"* weights: epoch {self.best['epoch']}, the best "
                       f"`{self.best['monitor']}` ({self.best['value']:.4g})")
        if self.labels:
            out.append(f"* labels ({len(self.labels)}): "
                       + ", ".join(f"`{name}`" for name in self.labels))
        out += ["", "## Data", "", "| split | files | examples |", "|---|---|---|"]
        for split, count in self.examples.items():
            out.append(f"| {split} | {self.files.get(split) or '-'} | {count} |")
        if self.metrics:
            names = sorted({k for values in self.metrics.values() for k in values})
            out += ["", "## Metrics (of these weights)", "",
                    "| split | " + " | ".join(names) + " |",
                    "|---|" + "---|" * len(names)]
            for split, values in self.metrics.items():
                cells = [f"{values[k]:.4f}" if k in values else "" for k in names]
                out.append(f"| {split} | " + " | ".join(cells) + " |")
        if self.usage:
            out += ["", "## How to use it", "", self.usage.strip()]
        if self.limits:
            out += ["", "## Limits", ""] + [f"* {line}" for line in self.limits]
        out += ["", "## Config", "", "```yaml", to_yaml(c).strip(), "```", ""]
        return "\n".join(out)


def vocabulary_scripts(tokens: Iterable[str], top: int = 4) -> str:
    """The writing systems of a vocabulary's word pieces by share, e.g. "Latin 96%, CJK 3%"
    (what a model can read at all: a Latin-only vocabulary maps Greek to [UNK])."""
    counts: Counter[str] = Counter()
    for token in tokens:
        if token.startswith("[") and token.endswith("]"):
            continue  # [PAD], [CLS], [unused0], ...
        letters = [ch for ch in token.removeprefix("##") if ch.isalpha()]
        if letters:
            name = unicodedata.name(letters[0], "")
            script = name.split(" ")[0] if name else "OTHER"
            counts[script if script == "CJK" else script.title()] += 1
    total = sum(counts.values())
    if not total:
        return "no letters"
    return ", ".join(f"{script} {100 * n / total:.0f}%" for script, n in counts.most_common(top))
