"""What a row of a user file is (``RowSpec``), one row as every command reads it (``Row``),
and the checks that make a parsed row's fields its values, or a bad row (``convert``).

Rows are checked in Python: that is what lets a bad row be reported as ``file:line:
problem`` instead of an opaque TensorFlow error from deep inside tf.data. The column-wise
checks of ``prepare``'s fast path (``tfapp.data.rows.columnar``) give the same values and
messages, and defer to these where a row is out of the ordinary.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from tfapp.errors import Setting
from tfapp.textio import has_undecodable

__all__ = ["Row", "RowSpec", "clean_labels", "clean_text", "convert", "kept_value", "show"]

# How the classifier names its columns; other kinds name their own settings.
COLUMNS_HINT = ("set ", Setting("data.text_column"), " / ", Setting("data.text_pair_column"),
                " / ", Setting("data.label_column"))


@dataclass(frozen=True)
class RowSpec:
    """What a row is and how it is read: the settings that decide the prepared records.

    ``kind``: labelled (text[, text_pair], labels: the classifier), texts (one text: the
    generator's corpus, masked-LM corpora), pairs (source, target: the generator's pairs),
    tagged (words, tags in IOB2: NER), or inputs (text[, text_pair] as given, a blank one
    too: the rows a model scores).
    """

    kind: str
    format: str = "auto"
    text_column: str = "text"
    text_pair_column: str = ""
    label_column: str = "label"
    multi_label: bool = False
    label_separator: str = "|"
    source_column: str = "source"
    target_column: str = "target"
    tag_column: int = -1
    tag_scheme: str = "iob2"
    #: how a missing column's message says to fix it ("": the config keys of the kind)
    column_hint: str = dataclasses.field(default="", compare=False)
    #: (seed, validation fraction, test fraction) when held-out splits are taken from
    #: these rows: each split's rows then go to shards of their own
    #: (``manifest.held_out_selectors``), so a held-out split reads only its own rows
    held_out: tuple = ()

    _KEYS = {"labelled": ("text_column", "text_pair_column", "label_column", "multi_label",
                          "label_separator"),
             "texts": ("text_column",), "pairs": ("source_column", "target_column"),
             "tagged": ("tag_column", "tag_scheme"),
             "inputs": ("text_column", "text_pair_column")}

    @classmethod
    def from_config(cls, kind: str, data_cfg: Any, **changes: Any) -> RowSpec:
        """The spec of ``kind`` with the reading settings of a task's data config (which
        holds only the keys its task reads: the others keep the defaults here)."""
        names = [f.name for f in dataclasses.fields(cls) if f.name not in (
            "kind", "column_hint", "held_out")]
        return cls(kind=kind, **{**{n: getattr(data_cfg, n) for n in names
                                    if hasattr(data_cfg, n)}, **changes})

    def settings(self) -> dict[str, Any]:
        return {"kind": self.kind, "format": self.format,
                **{k: getattr(self, k) for k in self._KEYS[self.kind]},
                **({"held_out": list(self.held_out)} if self.held_out else {})}

    def with_held_out(self, seed: int, validation: float, test: float) -> RowSpec:
        """This spec preparing the shards of held-out fractions apart (none: as it is)."""
        if not (validation or test):
            return self
        return dataclasses.replace(self, held_out=(int(seed), float(validation), float(test)))

    @property
    def texts(self) -> list[str]:
        """The columns of a row's texts, in order."""
        if self.kind in ("labelled", "inputs"):
            return [c for c in (self.text_column, self.text_pair_column) if c]
        if self.kind == "pairs":
            return [self.source_column, self.target_column]
        return [self.text_column]

    @property
    def columns(self) -> list[str]:
        """The columns (or JSON keys, TFRecord features) a row must have."""
        label = [self.label_column] if self.kind == "labelled" and self.label_column else []
        return self.texts + label

    @property
    def hint(self) -> str | tuple:
        return self.column_hint or {
            "labelled": COLUMNS_HINT, "texts": "set data.text_column",
            "pairs": "set data.source_column / data.target_column",
            "tagged": "set data.tag_column", "inputs": "set --text-column / --keep"}[self.kind]

    def features(self) -> list[str]:
        """The values of this kind's rows, in order (a prepared record's features besides
        ``id`` and ``bucket``)."""
        pair = ["text_pair"] if self.text_pair_column else []
        return {"labelled": ["text", *pair, "labels"], "inputs": ["text", *pair],
                "texts": ["text"], "pairs": ["source", "target"],
                "tagged": ["words", "tags"]}[self.kind]

    def text_lines(self) -> tuple[str | None, str | None, bool]:
        """How a plain text line reads as a row of this kind: (the column its text is
        (None: a line cannot hold these rows), the column of its fastText labels (None:
        it has none), whether it is the text exactly as written)."""
        one = self.kind == "texts" or (self.kind in ("labelled", "inputs")
                                       and not self.text_pair_column)
        labelled = self.kind == "labelled"
        return (self.text_column if one else None, self.label_column if labelled else None,
                not labelled)



@dataclass
class Row:
    """One row of a user file as every command reads it: its file and line (``record N``
    where a format has no lines), its values (in the order of ``RowSpec.features()``) and
    the columns carried through (``--keep``), or the problem that makes it a bad row."""

    file: str
    line: int | str
    values: tuple = ()
    kept: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None


def show(value: Any, limit: int = 60) -> str:
    """A short one-line rendering of a field value for messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 4] + "...'"


def kept_value(value: Any) -> Any:
    """A kept column's value as JSON can hold it (TFRecord/Parquet give bytes, lists):
    what ``--keep`` carries into predict's and evaluate's output."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if hasattr(value, "tolist"):  # a NumPy scalar or array (a prepared folder's id)
        return kept_value(value.tolist())
    if isinstance(value, list):
        return [kept_value(v) for v in value]
    return value


def clean_text(value: Any, column: str, allow_empty: bool = False
               ) -> tuple[str | None, str | None]:
    """(text, problem) for one text field; ``allow_empty`` returns a blank text as is."""
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else None
    if value is None:
        return None, f"column '{column}' is null"
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="surrogateescape")
    if not isinstance(value, str):
        value = str(value)
    if has_undecodable(value):
        return None, f"column '{column}' is not valid UTF-8 (re-save the file as UTF-8)"
    if not value.strip() and not allow_empty:
        return None, f"empty text in column '{column}'"
    return value, None


_INTEGRAL_DECIMAL = re.compile(r"^\s*([+-]?\d+)\.0+\s*$")


def clean_labels(value: Any, column: str, multi_label: bool,
                 separator: str) -> tuple[list[str] | None, str | None]:
    """(labels, problem) for one label field: one label, or several for multi-label
    (split at ``separator``, sorted, each once)."""
    if value is None:
        return None, f"column '{column}' (label) is null"
    if isinstance(value, bool):
        value = int(value)
    values = value if isinstance(value, list) else [value]
    labels: list[str] = []
    for v in values:
        v = str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)
        # "1.0" and 1 are one class (a CSV column written from floats, next to JSON ints).
        v = _INTEGRAL_DECIMAL.sub(r"\1", v)
        if has_undecodable(v):
            return None, f"label column '{column}' is not valid UTF-8"
        parts = v.split(separator) if multi_label and separator else [v]
        labels.extend(p.strip() for p in parts if p.strip())
    if not multi_label and len(labels) != 1:
        what = "empty label" if not labels else f"{len(labels)} labels"
        return None, (f"{what} in column '{column}' (a single-label task needs exactly "
                      "one; set data.multi_label=true for several)")
    return sorted(set(labels)) if multi_label else labels, None


def convert(fields: dict[str, Any], spec: RowSpec) -> tuple[str | None, tuple | None]:
    """(problem, values) of one parsed row: values in the order of ``spec.features()``,
    None with no problem for a row that is no example (a blank corpus text)."""
    labelled = spec.kind == "labelled"
    values: list[Any] = []
    for column in spec.texts:
        text, problem = clean_text(fields.get(column), column, allow_empty=not labelled)
        if problem:
            return problem, None
        values.append(text)
    if spec.kind == "texts" and not values[0].strip():
        return None, None
    if not labelled:
        return None, tuple(values)
    labels, problem = clean_labels(fields.get(spec.label_column), spec.label_column,
                                   spec.multi_label, spec.label_separator)
    if problem:
        return problem, None
    return None, (*values, labels)
