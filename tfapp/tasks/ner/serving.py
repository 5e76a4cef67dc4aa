"""The tagger's export behind ``tfapp.serving.ExportFormat``: its marker
(``ner_export.json``), loading (``LoadedTagger``: entities of raw texts, scores of tagged
files) and the facts its model card shows. No TensorFlow at import.

``LoadedTagger(model).entities(texts)`` calls the export's ``serving_default`` in
batches. ``word_tags`` turns its entities (character spans) back into one IOB2 tag per
word of a tagged sentence, so ``evaluate`` scores an export with the training scores
(``tfapp.tasks.ner.scores``) whatever way the export split the joined words.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tfapp.config import load_config
from tfapp.serving import (
    BATCH,
    EVALUATE,
    PREDICT,
    Evaluation,
    ExportedModel,
    ExportFormat,
    base_encoder_fact,
    load_export,
)
from tfapp.tasks.ner.scores import entity_report, format_entity_report


class LoadedTagger(ExportedModel):
    """An exported NER model and its metadata (tag names, entity types)."""

    def __init__(self, model: str | os.PathLike):
        import tensorflow_text  # noqa: F401  (registers the tokenizer ops the model uses)

        super().__init__(*load_export(model, FORMAT))
        self.tag_names = [b.decode() for b in self.module.tag_names.numpy()]

    def entities(self, texts: list[str]) -> list[list[dict]]:
        """Per text: its entities as {type, text, start, end, score} (character offsets)."""
        from tfapp.tasks.ner.export import entities

        import tensorflow as tf

        serve = self.module.signatures["serving_default"]
        out: list[list[dict]] = []
        for start in range(0, len(texts), BATCH):
            batch = texts[start:start + BATCH]
            result = {k: v.numpy() for k, v in serve(text=tf.constant(batch)).items()}
            out += [entities(result, i) for i in range(len(batch))]
        return out

    def predict_lines(self, texts: list[str], pairs: list[str] | None, *,
                      as_json: bool) -> list[str]:
        """Each text, then one line per entity: type, start-end (characters), score, text;
        or one JSON object per text. A tagger reads one text: ``pairs`` are not used."""
        lines = []
        for text, found in zip(texts, self.entities(texts), strict=True):
            if as_json:
                lines.append(json.dumps({"text": text, "entities": found}, ensure_ascii=False))
                continue
            lines.append(text)
            lines += [f"  {e['type']}\t{e['start']}-{e['end']}\t{e['score']:.3f}\t{e['text']}"
                      for e in found]
        return lines

    def evaluate(self, files: str, params: Path, flags: dict[str, Any]) -> Evaluation:
        """Entity scores on tagged CoNLL/JSONL ``files`` (the run's data.tag_column,
        data.tag_scheme and data.format; ``flags`` may set the format and bad-row mode)."""
        from tfapp.data.sources import BadRowReport
        from tfapp.data.tagged import keep_known_tags, read_tagged

        data = (load_config(params) if params.is_file()
                else load_config(None, [f"task={FORMAT.task}"])).data
        if flags.get("format") in ("auto", "jsonl"):  # the tagged formats evaluate names
            data.format = flags["format"]
        if flags.get("on_bad_rows") is not None:
            data.on_bad_rows = flags["on_bad_rows"]
        report = BadRowReport()
        raw = read_tagged(files, data, split="test", mode=data.on_bad_rows, report=report)
        sentences = keep_known_tags(raw, self.tag_names, split="test", mode=data.on_bad_rows,
                                    report=report, known_from="the model's")
        found = self.entities([" ".join(s.words) for s in sentences])
        result = entity_report([s.tags for s in sentences],
                               [word_tags(s.words, f)
                                for s, f in zip(sentences, found, strict=True)])
        return Evaluation(result, report, format_entity_report)


class NerExport(ExportFormat):
    task = "ner"
    marker = "ner_export.json"
    train_hint = "train with task=ner and trainer.export=true"
    serves = frozenset({PREDICT, EVALUATE})

    def load(self, model: str | os.PathLike) -> LoadedTagger:
        return LoadedTagger(model)

    def describe(self, metadata: dict) -> dict[str, str]:
        """The base encoder and the entity types (the card's limits say the window)."""
        facts = base_encoder_fact(metadata)
        if metadata.get("entity_types"):
            facts["entity types"] = ", ".join(f"`{t}`" for t in metadata["entity_types"])
        return facts


FORMAT = NerExport()


def word_tags(words: list[str], found: list[dict]) -> list[str]:
    """IOB2 tags of ``words`` (joined by single spaces when served) from the entities
    ``found`` in that text: a word starting where an entity starts is ``B-``, one starting
    inside it ``I-``, any other ``O``."""
    tags, position = [], 0
    for word in words:
        tag = "O"
        for e in found:
            if e["start"] <= position < e["end"]:
                tag = ("B-" if position == e["start"] else "I-") + e["type"]
                break
        tags.append(tag)
        position += len(word) + 1
    return tags
