"""An exported tagger on the command line: entities of raw texts, scores of tagged files.

``LoadedTagger(model).entities(texts)`` calls the export's ``serving_default`` in
batches. ``word_tags`` turns its entities (character spans) back into one IOB2 tag per
word of a tagged sentence, so ``evaluate`` scores an export with the training scores
(``tfapp.tasks.ner.scores``) whatever way the export split the joined words.
"""

from __future__ import annotations

import os

from tfapp.serving import BATCH, find_export, load_saved_export


class LoadedTagger:
    """An exported NER model and its metadata (tag names, entity types)."""

    def __init__(self, model: str | os.PathLike):
        from tfapp.tasks.ner.export import read_export_metadata

        import tensorflow_text  # noqa: F401  (registers the tokenizer ops the model uses)

        self.path = find_export(model, "ner")
        self.module, self.metadata = load_saved_export(self.path, read_export_metadata)
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
