"""A tagged (NER) dataset's prepared splits and its tag vocabulary.

``load_ner_splits`` prepares (or reuses) the train / validation / test sentences that
``tfapp.data.rows.read`` reads, settles the tag vocabulary and leaves out (or refuses) the
sentences holding a tag outside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfapp.config import NerDataConfig
from tfapp.data.prepare import RowSpec
from tfapp.data.rows.bad_rows import BadRowReport
from tfapp.data.rows.names import KnownNames, read_tag_vocab, write_tag_vocab
from tfapp.data.rows.read import log_entity_counts
from tfapp.data.splits import prepared_splits
from tfapp.data.text.tags import OUTSIDE, split_tag, tag_names
from tfapp.demo import DEMO_DIR
from tfapp.errors import DataError

__all__ = ["NerSplits", "load_ner_splits"]


@dataclass
class NerSplits:
    """The prepared splits of a tagged dataset and its tag vocabulary (IOB2, from the
    training data).

    Attributes:
      prepared: the prepared train / validation / test splits (``tfapp.data.splits``).
      tag_names: the model's labels in id order: O, then B-/I- of each entity type.
      report: sentences dropped with on_bad_rows=skip.
      unknown: split -> tags of its data that are not in ``tag_names`` (its sentences
        with one are left out).
    """

    prepared: Any
    tag_names: list[str]
    report: BadRowReport = field(default_factory=BadRowReport)
    unknown: dict[str, list[str]] = field(default_factory=dict)

    @property
    def entity_types(self) -> list[str]:
        return sorted({split_tag(t)[1] for t in self.tag_names if t != OUTSIDE})


def demo_ner_file(split: str) -> str:
    """Path of the NER demo CoNLL file shipped inside the package (train/validation/test)."""
    return str(DEMO_DIR / f"ner_{split}.conll")


def load_ner_splits(data_cfg: NerDataConfig, seed: int, tag_vocab_path: Path | str | None = None,
                    *, keep_vocab: bool = True) -> NerSplits:
    """Prepare (or reuse) the train/validation/test sentences and settle the tags.

    ``train_files: demo`` reads the shipped demo (and its validation and test files when
    none are given). The tag vocabulary is read from ``tag_vocab_path`` when it exists and
    ``keep_vocab`` (a resumed run), else built from the training tags and written there.
    A sentence holding a tag outside it is a bad row (under fail: one line naming its
    file and line; under skip: left out). Without validation (test) files a seeded
    fraction of train is held out, as for the classifier.
    """
    train_spec, val_spec, test_spec = (data_cfg.train_files, data_cfg.validation_files,
                                       data_cfg.test_files)
    if train_spec.strip() == "demo":
        train_spec = demo_ner_file("train")
        val_spec = val_spec or demo_ner_file("validation")
        test_spec = test_spec or demo_ner_file("test")
    prepared = prepared_splits(train_spec, val_spec, test_spec,
                               RowSpec.from_config("tagged", data_cfg), data_cfg, seed=seed)
    path = Path(tag_vocab_path) if tag_vocab_path else None
    if path is not None and keep_vocab and path.exists():
        names, known_from = read_tag_vocab(path), str(path)
    else:
        types = [split_tag(t)[1] for t in prepared.train.manifest.labels if t != OUTSIDE]
        if not types:
            raise DataError(f"data.train_files: '{train_spec}' tags no entity at all (every "
                            f"tag is O); check data.tag_column and data.tag_scheme")
        names, known_from = tag_names(types), "the training data"
        if path is not None:
            write_tag_vocab(names, path)
    # every run, prepared now or read from the cache: what the data it trains on holds
    for manifest in {id(s.manifest): s.manifest for s in prepared.splits()}.values():
        for source in manifest.sources:
            if source.entities:
                log_entity_counts(source.path, source.entities, data_cfg.tag_scheme)
    prepared.check_held_out(data_cfg, "sentences")
    out = NerSplits(prepared, names, prepared.report)
    known = KnownNames(tuple(names), known_from, tags=True)
    for split in prepared.splits():
        unknown, bad = split.unknown_names(known, data_cfg.on_bad_rows)
        if unknown:
            out.unknown[split.name] = unknown
            out.report.add(split.name, bad, 0)  # its sentences are counted with the windows
    return out
