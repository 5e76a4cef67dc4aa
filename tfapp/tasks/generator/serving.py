"""The generator's export behind ``tfapp.serving.ExportFormat``: its marker
(``generator.json``: the decoding settings it allows and defaults to), loading (the
SavedModel's ``generate``/``greedy``/``sample``/``beam_search``, which ``tfapp.generate``
calls, and ``score``, which ``evaluate`` calls) and the facts its model card shows. No
TensorFlow at import.

``score_in_batches`` is how per-text score sums come out of an export's ``score``
function, and ``score_split`` how a split's texts are scored a batch at a time into
``ScoreSums``: at the end of training (the test report) and in ``evaluate`` alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tfapp.config import ConfigError, load_config
from tfapp.errors import DataError
from tfapp.serving import (
    BATCH,
    EVALUATE,
    GENERATE,
    Evaluation,
    ExportedModel,
    ExportFormat,
    load_export,
)
from tfapp.tasks.generator.scores import ScoreSums, format_generator_report

import numpy as np

#: the decoding settings of an export's functions, recorded as its defaults in
#: ``generator.json``; ``REPETITION``'s came later: an export without them decodes without
#: repetition control, and its functions do not take them
SETTINGS = ("method", "temperature", "top_k", "top_p", "num_beams", "length_penalty",
            "max_length", "seed", "no_repeat_ngram_size", "repetition_penalty")
REPETITION = {"no_repeat_ngram_size": 0, "repetition_penalty": 1.0}  # their "off" values


def takes_repetition(metadata: dict) -> bool:
    """Whether the export of ``metadata`` (its ``generator.json``) takes ``REPETITION``."""
    return set(REPETITION) <= set(metadata.get("defaults") or {})


def score_in_batches(score: Callable, texts: list[str], targets: list[str] | None = None
                     ) -> dict[str, np.ndarray]:
    """Per-text sums (``cross_entropy``, ``tokens``, ``correct``, ``examples``) of
    ``score(texts)`` or, for pairs, ``score(texts, targets)``, ``BATCH`` texts per call."""
    import tensorflow as tf

    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, len(texts), BATCH):
        args = [tf.constant(texts[start:start + BATCH], tf.string)]
        if targets is not None:
            args.append(tf.constant(targets[start:start + BATCH], tf.string))
        for name, value in score(*args).items():
            parts.setdefault(name, []).append(value.numpy())
    return {name: np.concatenate(values) for name, values in parts.items()}


def score_split(score: Callable, split: Any, data: Any,
                rows: Callable[[list[dict]], None] | None = None) -> ScoreSums:
    """The sums of every text of ``split`` (a ``SplitData`` read as ``data`` says) scored
    by ``score``, a batch of texts at a time
    (``tfapp.data.examples.generator.iter_split_texts``): nothing is kept but the sums.
    ``rows`` gets each batch's texts (``text``, or ``source`` and ``target``) with their
    own sums."""
    from tfapp.data.examples.generator import iter_split_texts

    sums = ScoreSums()
    for texts, targets in iter_split_texts(split, data):
        scored = score_in_batches(score, texts, targets)
        sums.update(scored)
        if rows is not None:
            given = ({"text": texts} if targets is None
                     else {"source": texts, "target": targets})
            rows([{**{k: v[i] for k, v in given.items()},
                   **{k: float(v[i]) for k, v in scored.items()}} for i in range(len(texts))])
    return sums


class LoadedGenerator(ExportedModel):
    """An exported generator: ``module`` decodes, ``metadata`` is its ``generator.json``."""

    def __init__(self, model: str | os.PathLike):
        super().__init__(*load_export(model, FORMAT))

    def evaluate(self, files: str, params: Path, flags: dict[str, Any],
                 rows: Callable[[list[dict]], None] | None = None,
                 keep: Sequence[str] = ()) -> Evaluation:
        """Perplexity and token accuracy on text ``files`` (lines, or source/target pairs
        as the run read them: its columns, format and data.drop_regex; ``flags`` may set
        the text column, the format and the bad-row mode), scored by the export's
        ``score`` as the run's test report was, streamed (``score_split``). ``rows`` gets
        each text's own sums (``evaluate --output``)."""
        from tfapp.data.examples.generator import generator_rows
        from tfapp.data.input.splits import prepared_splits

        self.refuse_keep(keep, "a generator evaluates the texts left by the run's cleaning "
                               "(data.drop_regex)")
        if "score" not in self.module.signatures:
            raise ConfigError(f"--model {self.path}: this generator export has no score "
                              "signature (exported before generators were evaluated); "
                              f"export it again ({FORMAT.train_hint})")
        data = (load_config(params) if params.is_file()
                else load_config(None, [f"task={FORMAT.task}"])).data
        data.example_shape = self.metadata.get("example_shape", data.example_shape)
        pairs = data.example_shape == "pairs"
        refused = {"text_pair_column": "--text-pair-column", "label_column": "--label-column"}
        if pairs:
            refused["text_column"] = "--text-column"
        for key, flag in refused.items():
            if flags.get(key) is not None:
                raise ConfigError(f"{flag}: a generator export reads "
                                  + ("source/target pairs (the run's data.source_column and "
                                     "data.target_column)" if pairs else "text lines "
                                     "(--text-column for a column of CSV/JSONL rows)")
                                  + "; leave it out")
        if flags.get("format") == "conll":
            raise ConfigError("--format conll: CoNLL files hold tagged words (an NER "
                              "export's input); a generator reads text, csv, tsv, jsonl or "
                              "tfrecord files")
        for key in ("text_column", "format", "on_bad_rows"):
            if flags.get(key) is not None:
                setattr(data, key, flags[key])
        # All of --data is scored: no held-out fractions carved from it.
        data.validation_files = data.test_files = ""
        data.validation_split = data.test_split = 0.0
        prepared = prepared_splits(files, "", "", generator_rows(data), data, seed=0,
                                   what="--data")
        score = self.module.score_pairs if pairs else self.module.score_lines
        sums = score_split(score, prepared.train, data, rows)
        if not sums.texts:
            raise DataError(f"--data: no text left in '{files}' after cleaning (the run's "
                            "data.drop_regex and columns)")
        return Evaluation(sums.report(), prepared.report, format_generator_report)


class GeneratorExport(ExportFormat):
    task = "generator"
    marker = "generator.json"
    train_hint = "train with task=generator and trainer.export=true"
    serves = frozenset({GENERATE, EVALUATE})

    def load(self, model: str | os.PathLike) -> LoadedGenerator:
        return LoadedGenerator(model)

    def describe(self, metadata: dict) -> dict[str, str]:
        """How the export decodes unless told otherwise (the card's limits say the prompt
        and length bounds)."""
        facts = {}
        defaults = metadata.get("defaults") or {}
        if defaults.get("method"):
            facts["decoding"] = (f"`{defaults['method']}` by default; greedy, sample, top_k, "
                                 f"top_p or beam search ({metadata.get('num_beams')} beams) "
                                 "on request")
        if takes_repetition(metadata):
            facts["repetition control"] = (
                f"`no_repeat_ngram_size` {defaults['no_repeat_ngram_size']}, "
                f"`repetition_penalty` {defaults['repetition_penalty']:g} by default "
                "(0 and 1: off), as Hugging Face's; every method")
        return facts


FORMAT = GeneratorExport()
