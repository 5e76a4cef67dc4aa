"""The names a model's outputs carry: class labels and NER tags, each saved with a run as
its ``labels.json``, and the one rule for a row holding a name the model does not know
(``KnownNames``): it is a bad row, in the same words whichever command meets it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tfapp.atomic import write_text
from tfapp.data.rows.spec import show
from tfapp.data.text.tags import OUTSIDE, split_tag
from tfapp.errors import DataError

__all__ = ["KnownNames", "LabelVocab", "read_label_vocab", "read_tag_vocab",
           "write_label_vocab", "write_tag_vocab"]


@dataclass
class LabelVocab:
    """Label names in id order; saved with the run as ``labels.json``."""

    names: list[str]
    multi_label: bool


def write_label_vocab(vocab: LabelVocab, path: str | Path) -> Path:
    return write_text(path, json.dumps({"labels": vocab.names, "multi_label": vocab.multi_label},
                                       indent=2, ensure_ascii=False) + "\n")


def read_label_vocab(path: str | Path) -> LabelVocab:
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
        return LabelVocab([str(n) for n in obj["labels"]], bool(obj.get("multi_label")))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(f"{path}: not a readable labels.json ({err}); delete it to rebuild "
                        "the label vocabulary from the training data") from None


def write_tag_vocab(names: list[str], path: str | Path) -> Path:
    return write_text(path, json.dumps({"tags": names, "scheme": "iob2"}, indent=2,
                                       ensure_ascii=False) + "\n")


def read_tag_vocab(path: str | Path) -> list[str]:
    try:
        names = [str(n) for n in json.loads(Path(path).read_text(encoding="utf-8"))["tags"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(f"{path}: not a readable NER labels.json ({err}); delete it to "
                        "rebuild the tag vocabulary from the training data") from None
    return names


@dataclass(frozen=True)
class KnownNames:
    """The labels (``tags``: the IOB2 tags) a model knows and where they come from ("the
    training data", "data.labels", a labels.json, "the model"): a row holding another
    name is a bad row (``problem``)."""

    names: tuple[str, ...]
    source: str
    tags: bool = False

    def unknown(self, names: Iterable[str]) -> str | None:
        """The first of ``names`` that is not known, or None."""
        known = set(self.names)
        return next((name for name in names if name not in known), None)

    def problem(self, name: str) -> str:
        """What makes a row holding the unknown ``name`` a bad row."""
        if self.tags:
            types = ", ".join(sorted({split_tag(t)[1] for t in self.names if t != OUTSIDE}))
            return (f"tag '{name}' in this sentence: entity type '{split_tag(name)[1]}' is "
                    f"not among {self.source}'s ({types})")
        shown = ", ".join(self.names[:10]) + (" ..." if len(self.names) > 10 else "")
        return f"unknown label {show(name)} (not among the labels of {self.source}: {shown})"
