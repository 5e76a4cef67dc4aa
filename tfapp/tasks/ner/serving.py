"""The tagger's export behind ``tfapp.serving.ExportFormat``: its marker
(``ner_export.json``), loading (``LoadedTagger``: entities of raw texts, scores of tagged
files), the facts its model card shows and its Hugging Face form
(``BertForTokenClassification``, for ``tfapp export-hf``). No TensorFlow at import.

``LoadedTagger(model).entities(texts)`` calls the export's ``serving_default`` in
batches; ``evaluate`` calls its ``tag_words`` on the words of tagged files, so it scores
the export as the run's test report scored the model: the same words, the same raw tags,
the same scores (``tfapp.tasks.ner.scores``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tfapp.config import ConfigError, load_config
from tfapp.data.rows.bad_rows import BadRowPolicy, BadRowReport
from tfapp.data.rows.names import KnownNames
from tfapp.data.rows.spec import RowSpec
from tfapp.errors import DataError, Setting
from tfapp.hub.hf_checkpoint import TOKEN_CLASSIFICATION
from tfapp.serving import (
    BATCH,
    EVALUATE,
    PREDICT,
    Evaluation,
    ExportedModel,
    ExportFormat,
    HfForm,
    base_encoder_fact,
    load_export,
)
from tfapp.tasks.ner.scores import EntityTally, format_entity_report


def entities_of(outputs: dict, index: int) -> list[dict]:
    """The entities of string ``index`` from ``serve``'s numpy outputs, as dicts (here,
    not in ``export``: reading an export's outputs needs no TensorFlow, and ``export``
    imports this module for ``FORMAT``)."""
    count = int(outputs["num_entities"][index])
    return [{"type": outputs["entity_type"][index][j].decode(),
             "text": outputs["entity_text"][index][j].decode(),
             "start": int(outputs["entity_start"][index][j]),
             "end": int(outputs["entity_end"][index][j]),
             "score": float(outputs["entity_score"][index][j])} for j in range(count)]


class LoadedTagger(ExportedModel):
    """An exported NER model and its metadata (tag names, entity types)."""

    output_columns = ("entities",)

    def __init__(self, model: str | os.PathLike):
        super().__init__(*load_export(model, FORMAT))
        self.tag_names = [b.decode() for b in self.module.tag_names.numpy()]

    def entities(self, texts: list[str]) -> list[list[dict]]:
        """Per text: its entities as {type, text, start, end, score} (character offsets)."""
        import tensorflow as tf

        serve = self.module.signatures["serving_default"]
        out: list[list[dict]] = []
        for start in range(0, len(texts), BATCH):
            batch = texts[start:start + BATCH]
            result = {k: v.numpy() for k, v in serve(text=tf.constant(batch)).items()}
            out += [entities_of(result, i) for i in range(len(batch))]
        return out

    def predict_rows(self, texts: Any, pairs: Any | None = None) -> list[dict]:
        """Per text: ``{"entities": [{type, text, start, end, score}]}`` (character
        offsets) of one call of the export's ``serving_default`` on the batch."""
        import tensorflow as tf

        serve = self.module.signatures["serving_default"]
        result = {k: v.numpy() for k, v in serve(text=tf.convert_to_tensor(texts,
                                                                          tf.string)).items()}
        return [{"entities": entities_of(result, i)}
                for i in range(len(result["num_entities"]))]

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

    def tag_words(self, sentences: list[list[str]]) -> list[list[str]]:
        """Each word's raw tag (the export's ``tag_words``: what the training reports
        score), ``BATCH`` sentences per call."""
        import tensorflow as tf

        if "tag_words" not in self.module.signatures:
            raise ConfigError(f"--model {self.path}: this NER export has no tag_words "
                              "signature (exported before evaluate scored the words as "
                              f"training does); export it again ({FORMAT.train_hint})")
        tag = self.module.signatures["tag_words"]
        out: list[list[str]] = []
        for start in range(0, len(sentences), BATCH):
            batch = sentences[start:start + BATCH]
            width = max((len(s) for s in batch), default=0)
            words = tf.constant([s + [""] * (width - len(s)) for s in batch], tf.string,
                                shape=[len(batch), width])
            tags = tag(words=words, num_words=tf.constant([len(s) for s in batch],
                                                          tf.int32))["tag"].numpy()
            out += [[t.decode() for t in row[:len(s)]] for row, s in zip(tags, batch,
                                                                         strict=True)]
        return out

    def evaluate(self, files: str, params: Path, flags: dict[str, Any],
                 rows: Callable[[list[dict]], None] | None = None,
                 keep: Sequence[str] = ()) -> Evaluation:
        """Entity scores and token accuracy on tagged CoNLL/JSONL ``files`` (the run's
        data.tag_column, data.tag_scheme and data.format; ``flags`` may set the format and
        bad-row mode), counted as the run's test report counts them: the file's own words
        tagged by the model (``tag_words``), scored by ``tfapp.tasks.ner.scores``.
        ``rows`` gets each batch's sentences: ``words``, predicted ``tags`` and
        ``gold_tags``."""
        from tfapp.data.rows.read import file_formats, iter_rows

        self.refuse_keep(keep, "an NER export evaluates sentences of tagged words")
        for key, flag in (("text_column", "--text-column"),
                          ("text_pair_column", "--text-pair-column"),
                          ("label_column", "--label-column")):
            if flags.get(key) is not None:
                raise ConfigError(f"{flag}: an NER export reads words and tags, not columns "
                                  "(CoNLL: the run's data.tag_column; JSONL: the keys tokens "
                                  "and tags); leave it out")
        data = (load_config(params) if params.is_file()
                else load_config(None, [f"task={FORMAT.task}"])).data
        if flags.get("format") is not None:
            if flags["format"] not in TAGGED_FORMATS:
                raise ConfigError(f"--format {flags['format']}: an NER export reads tagged "
                                  f"files: {', '.join(TAGGED_FORMATS)}")
            data.format = flags["format"]
        if flags.get("on_bad_rows") is not None:
            data.on_bad_rows = flags["on_bad_rows"]
        report = BadRowReport()
        bad = BadRowPolicy(data.on_bad_rows, report, "test")
        known = KnownNames(tuple(self.tag_names), "the model", tags=True)
        spec = RowSpec.from_config("tagged", data)
        # Streamed: a batch of sentences at a time, tagged and counted (no list of them).
        tally, batch = EntityTally(), []

        def score() -> None:
            words = [list(w) for w, _ in batch]
            tags = self.tag_words(words)
            tally.update([gold for _, gold in batch], tags)
            if rows is not None:
                rows([{"words": w, "tags": t, "gold_tags": list(gold)}
                      for w, t, (_, gold) in zip(words, tags, batch, strict=True)])
            batch.clear()

        sentences = iter_rows(file_formats(files, spec, Setting("data.test_files")), spec,
                              split="test", known=known)
        for row in bad.good(sentences):
            batch.append(row.values)
            if len(batch) == BATCH:
                score()
        if batch:
            score()
        if not tally.sentences:
            raise DataError(Setting("data.test_files"), (
                f": no usable sentences left after dropping {report.count} bad row(s): "
                f"{report.summary()}" if report.count else f": no usable sentences in '{files}'"))
        return Evaluation(tally.report(), report, format_entity_report)


class NerExport(ExportFormat):
    task = "ner"
    marker = "ner_export.json"
    train_hint = "train with task=ner and trainer.export=true"
    serves = frozenset({PREDICT, EVALUATE})
    hf_architecture = TOKEN_CLASSIFICATION
    text_ops = True

    def load(self, model: str | os.PathLike) -> LoadedTagger:
        return LoadedTagger(model)

    def hf_form(self, module: Any, metadata: dict, kernel: Any, bias: Any,
                run_dir: Path) -> HfForm:
        """One logit per tag on every word piece (no pooler: BertForTokenClassification
        has none); the tags are the export's own ``tag_names``."""
        return HfForm(
            auto_class="AutoModelForTokenClassification", pipeline_tag="token-classification",
            kind="Named-entity tagger", labels=[b.decode() for b in module.tag_names.numpy()],
            kernel=kernel, bias=bias, pooler=False,
            notes=["tfapp reads each word's tag at its first word piece."],
            demo_data="tfapp demo (NER sentences)")

    def describe(self, metadata: dict) -> dict[str, str]:
        """The base encoder and the entity types (the card's limits say the window)."""
        facts = base_encoder_fact(metadata)
        if metadata.get("entity_types"):
            facts["entity types"] = ", ".join(f"`{t}`" for t in metadata["entity_types"])
        return facts


FORMAT = NerExport()

#: the ``--format`` values evaluate takes for a tagger (those ``data.format`` allows)
TAGGED_FORMATS = ("auto", "conll", "jsonl")

