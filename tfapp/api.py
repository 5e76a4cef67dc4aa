"""The Python API, for notebooks: what the commands do, as calls that return values.

    import tfapp

    cfg = tfapp.load_config("configs/classifier.yaml", trainer={"epochs": 2})
    result = tfapp.train(cfg, callbacks=[my_keras_callback])
    result.metrics["test_accuracy"], result.run_dir, result.model

    model = tfapp.load(result.run_dir)          # or the export/ directory itself
    model.predict(["a fine film"])              # [{"label": ..., "probabilities": ...}]
    model.evaluate("data/test.csv")             # the same report as `tfapp.evaluate`
    model.evaluate("data/test.csv", output="rows.parquet")  # and each row's prediction
    tfapp.load("runs/gen").generate(["once upon"], method="beam")
    tfapp.load("runs/gen").generate("prompts.csv", keep=["id"])  # an iterator of rows

Overrides are keyword arguments: a group's keys as a dict (``trainer={"epochs": 2}``) or
dotted names (``**{"trainer.epochs": 2}``); they go through the same checks as the
command line's ``key=value``. Errors are ``tfapp.errors.ConfigError`` / ``DataError`` with
the one-line messages the commands print.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tfapp.config import ExperimentConfig
from tfapp.errors import ConfigError
from tfapp.generate import Continuations, generate
from tfapp.generate import settings as checked_settings
from tfapp.run_layout import RunLayout
from tfapp.serving import BATCH, EVALUATE, GENERATE, PREDICT, ExportedModel, find_export
from tfapp.tasks import export_formats
from tfapp.tasks.generator.serving import SETTINGS
from tfapp.train import config_from
from tfapp.train import run as train

__all__ = ["Predictor", "load", "load_config", "train"]


def load_config(config: str | os.PathLike | ExperimentConfig | None = None,
                **overrides: Any) -> ExperimentConfig:
    """A checked config: the defaults (``None``), a YAML file or a config object, with
    ``overrides`` applied as the command line's ``key=value`` would be."""
    return config_from(config, overrides)


class Predictor:
    """A loaded export: ``predict`` (classifier, NER), ``evaluate`` (labelled files),
    ``generate`` (generator), each as its command does it. ``task`` says which it is."""

    def __init__(self, path: Path, exported: ExportedModel, task: str, serves: frozenset[str]):
        self.path, self.model, self.task, self._serves = path, exported, task, serves

    def __repr__(self) -> str:
        return f"Predictor(task={self.task!r}, path='{self.path}')"

    def _check(self, command: str) -> None:
        if command not in self._serves:
            raise ConfigError(f"{self.path} is a {self.task} export; it does not {command} "
                              f"(it serves: {', '.join(sorted(self._serves))})")

    def predict(self, texts: Sequence[str] | str | os.PathLike | Any,
                pairs: Sequence[str] | None = None, *, text_column: str | None = None,
                text_pair_column: str | None = None, keep: Sequence[str] = (),
                format: str = "auto", on_bad_rows: str = "fail",
                batch_size: int = BATCH) -> list[dict] | Iterator[dict]:
        """Predictions of ``texts``, without a JSON round trip:

        * a list of strings (``pairs``: their second texts): a list of dicts, one per
          text, as ``predict --json`` prints them (``text`` and the prediction);
        * a file, glob, comma-joined files or a prepared folder (``str`` or path): an
          iterator of dicts, one per row, in order: the ``keep`` columns and the
          prediction, as ``predict --data --output`` writes them, read and scored a batch
          at a time (the columns as the command's flags; bad rows per ``on_bad_rows``);
        * a ``tf.data.Dataset`` of strings (one per element, or batches; ``(text, pair)``
          for a pair model): an iterator of prediction dicts, one per string.
        """
        self._check(PREDICT)
        if isinstance(texts, str | os.PathLike):
            return self._predict_files(os.fspath(texts), text_column, text_pair_column,
                                       list(keep), format, on_bad_rows, batch_size)
        if _is_dataset(texts):
            return self._predict_dataset(texts, batch_size)
        texts = list(texts)
        pairs = None if pairs is None else list(pairs)
        out = []
        for start in range(0, len(texts), batch_size):
            part = texts[start:start + batch_size]
            found = self.model.predict_rows(
                part, None if pairs is None else pairs[start:start + batch_size])
            out += [{"text": t, **p} for t, p in zip(part, found, strict=True)]
        return out

    def _predict_files(self, spec: str, text_column: str | None,
                       text_pair_column: str | None, keep: list[str], fmt: str,
                       on_bad_rows: str, batch_size: int) -> Iterator[dict]:
        from tfapp.data.input.input_rows import InputRows
        from tfapp.scoring import predictions

        params = RunLayout(self.path).params
        data = load_config(params).data if params.is_file() else None
        columns = [text_column or getattr(data, "text_column", "text")]
        if self.model.text_pair:
            columns.append(text_pair_column or getattr(data, "text_pair_column", "")
                           or "text_pair")
        rows = InputRows(spec, columns, keep, fmt=fmt, what="predict(data)")
        return predictions(self.model, rows, batch_size=batch_size, mode=on_bad_rows)

    def _predict_dataset(self, dataset: Any, batch_size: int) -> Iterator[dict]:
        spec = dataset.element_spec
        first = spec[0] if isinstance(spec, tuple) else spec
        if first.shape.rank == 0:
            dataset = dataset.batch(batch_size)
        for element in dataset.prefetch(2):
            if isinstance(element, tuple):
                yield from self.model.predict_rows(element[0], element[1])
            else:
                yield from self.model.predict_rows(element)

    def evaluate(self, data: str | os.PathLike, *, output: str | os.PathLike | None = None,
                 part_rows: int | None = None, keep: Sequence[str] = (),
                 **flags: Any) -> dict:
        """The scores on labelled ``data`` (a file, comma-separated files or a glob), as
        ``evaluate --json`` prints them, read and counted a batch at a time (the command's
        own code); ``flags``: text_column, label_column, format, ... ``output``: also
        write each row's prediction and gold label there, as ``evaluate --output`` (in
        parts of ``part_rows`` rows, its default when None), led by the ``keep`` input
        columns (an id)."""
        from tfapp.scoring import PART_ROWS, evaluate_to

        self._check(EVALUATE)
        return evaluate_to(self.model, os.fspath(data), RunLayout(self.path).params, flags,
                           None if output is None else os.fspath(output),
                           part_rows=part_rows or PART_ROWS, keep=keep).result

    def generate(self, prompts: Sequence[str] | str | os.PathLike, *,
                 text_column: str | None = None, keep: Sequence[str] = (),
                 format: str = "auto", on_bad_rows: str = "fail", batch_size: int = BATCH,
                 **settings: Any) -> list[str] | Iterator[dict]:
        """Continuations of ``prompts``; ``settings`` as the generate flags (method,
        max_length, temperature, top_k, top_p, num_beams, length_penalty, seed,
        no_repeat_ngram_size, repetition_penalty).

        * a list of strings: a list of continuations, one per prompt;
        * a file, glob, comma-joined files (``str`` or path): an iterator of dicts, one per
          row, in order: the ``keep`` columns, ``prompt`` and ``continuation``, as
          ``generate --data --output`` writes them (the prompts' column ``text_column``,
          by default the run's; bad rows per ``on_bad_rows``).
        """
        self._check(GENERATE)

        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise ConfigError(f"generate: unknown setting(s) {', '.join(unknown)}; expected "
                              f"{', '.join(SETTINGS)}")
        s = checked_settings(SimpleNamespace(num_samples=1, **settings), self.model.metadata)
        if isinstance(prompts, str | os.PathLike):
            from tfapp.data.input.input_rows import InputRows
            from tfapp.scoring import predictions, run_data

            data = run_data(str(self.path))
            pairs = self.model.metadata.get("example_shape") == "pairs"
            column = text_column or (getattr(data, "source_column", "source") if pairs
                                     else getattr(data, "text_column", "text"))
            rows = InputRows(os.fspath(prompts), [column], list(keep), fmt=format,
                             what="generate(data)")
            return predictions(Continuations(self.model, s), rows, batch_size=batch_size,
                               mode=on_bad_rows)
        return generate(self.model, list(prompts), s)


def _is_dataset(value: Any) -> bool:
    """Whether ``value`` is a ``tf.data.Dataset`` (without importing TensorFlow for a
    list)."""
    import sys

    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(value, tf.data.Dataset)


def load(path: str | os.PathLike) -> Predictor:
    """The export of a run directory (or an export directory itself), loaded by its own
    format."""
    _, fmt = find_export(path, export_formats())  # by the marker in the export
    return Predictor(Path(path), fmt.load(path), fmt.task, fmt.serves)
