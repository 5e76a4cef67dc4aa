"""A task's splits as prepared data: which files, prepared where, which rows each split
takes.

Every task's inputs start here. ``resolve_demo`` maps ``demo`` to the files shipped with
the package, and ``prepared_splits`` turns ``data.train_files`` /
``validation_files`` / ``test_files`` (raw files, or folders written by ``python -m
tfapp.prepare``) into manifests (``tfapp.data.prepare.builder.prepared``: reused from tfapp's
cache, or prepared once now), and a missing validation or test split into a held-out
fraction of the training rows (``tfapp.data.prepare.manifest.held_out_selectors``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from tfapp.cachedir import usable_cache_dir
from tfapp.data.formats.files import resolve_files
from tfapp.data.input.plan import Source
from tfapp.data.prepare.builder import Prepared, prepared
from tfapp.data.prepare.manifest import (
    Manifest,
    SplitSelector,
    damaged_shard,
    find_manifest,
    held_out_selectors,
    origin_order,
    read_manifest,
)
from tfapp.data.rows.bad_rows import BadRow, BadRowPolicy, BadRowReport
from tfapp.data.rows.names import KnownNames
from tfapp.data.rows.spec import RowSpec
from tfapp.demo import DEMO_DIR
from tfapp.errors import DataError

__all__ = ["SplitCounts", "SplitData", "PreparedSplits", "prepared_splits", "resolve_demo"]

log = logging.getLogger("tfapp.data")
SPLITS = ("train", "validation", "test")


def resolve_demo(data_cfg: Any, demo: str, *, fill: bool = True) -> tuple[str, str, str]:
    """(train, validation, test) data specs of ``data_cfg``, ``demo`` mapped to the file
    shipped inside the package that ``demo`` names (``{split}``: the split's). With
    ``fill``, ``train_files: demo`` also fills empty validation and test specs with the
    demo's own, so the default run evaluates on held-out data."""
    specs = [getattr(data_cfg, f"{split}_files") for split in SPLITS]
    if fill and specs[0].strip() == "demo":
        specs = [spec or "demo" for spec in specs]
    train, validation, test = (str(DEMO_DIR / demo.format(split=split))
                               if spec.strip() == "demo" else spec
                               for split, spec in zip(SPLITS, specs, strict=True))
    return train, validation, test


@dataclass
class SplitData:
    """One split: the prepared data it reads and which of its rows.

    Attributes:
      name: train, validation or test.
      manifest: the prepared data.
      selector: the rows of it that belong to this split (all, or a held-out range).
      spec: the data setting it came from, for messages.
    """

    name: str
    manifest: Manifest
    selector: SplitSelector = field(default_factory=SplitSelector)
    spec: str = ""

    @property
    def rows(self) -> int:
        return sum(self.manifest.counts(self.selector))

    def shards(self) -> list[int]:
        """The manifest's shards that hold rows of this split, by index: a held-out split
        prepared into shards of its own (``tfapp.data.prepare.builder``) reads only those, and
        training skips them."""
        return [j for j, n in enumerate(self.manifest.counts(self.selector)) if n]

    def files(self) -> list[str]:
        """The paths of ``shards()``: the files this split's streams and counts read."""
        paths = self.manifest.files()
        return [paths[j] for j in self.shards()]

    def counts(self) -> list[int]:
        """Rows of this split in each of ``files()``."""
        counts = self.manifest.counts(self.selector)
        return [counts[j] for j in self.shards()]

    def source(self, counts: list[int] | None = None) -> Source:
        """The split as a stream reads it; ``counts``: examples per file of ``files()``
        when a row is not one example (windows), else its rows."""
        return Source(self.name, tuple(self.files()),
                      tuple(counts if counts is not None else self.counts()))

    def unknown_names(self, known: KnownNames, mode: str
                      ) -> tuple[list[str], BadRow | None]:
        """The labels (tags) of this split's rows that ``known`` lacks, and the first row
        holding one (by file and line), a bad row: under ``mode`` fail it stops the run;
        under skip the caller counts the rows left out (``BadRowReport.add``)."""
        unknown = [n for n in self.manifest.labels if n not in set(known.names)]
        if not unknown:
            return [], None
        first = min(unknown, key=lambda n: origin_order(self.manifest.first_seen[n]))
        where, _, line = self.manifest.first_seen[first].rpartition(":")
        if self.name != "train":  # another split's rows: against the training data's
            known = dataclasses.replace(known, source="the training data")
        bad = BadRow(where, line, known.problem(first))
        if mode == "fail":
            raise BadRowPolicy(mode, BadRowReport(), self.name).error(bad)
        return unknown, bad

    def chunks(self, chunk: int) -> list[int]:
        """Chunks of ``chunk`` rows in each of ``files()`` (what a store keeps per file)."""
        return [math.ceil(self.manifest.shards[j].count / chunk) for j in self.shards()]


class SplitCounts:
    """A task's prepared splits (``prepared``) and its examples of each split per shard
    file (``counts``: split name -> them), where a row is not one example (windows,
    packed sequences, rows left out), as the stream reads them (``source``)."""

    prepared: PreparedSplits
    counts: dict[str, list[int]]

    @property
    def train(self) -> SplitData:
        return self.prepared.train

    @property
    def validation(self) -> SplitData | None:
        return self.prepared.validation

    @property
    def test(self) -> SplitData | None:
        return self.prepared.test

    def size(self, split: SplitData | None) -> int:
        return sum(self.counts[split.name]) if split is not None else 0

    def source(self, split: SplitData) -> Source:
        return split.source(self.counts[split.name])


@dataclass
class PreparedSplits:
    """The train split and, when there are, validation and test (see ``SplitData``)."""

    train: SplitData
    validation: SplitData | None
    test: SplitData | None
    report: BadRowReport = field(default_factory=BadRowReport)

    def splits(self) -> list[SplitData]:
        return [s for s in (self.train, self.validation, self.test) if s is not None]

    def check_held_out(self, data_cfg, unit: str = "examples") -> None:
        """One DataError line when a held-out split is empty or leaves training empty
        (called by the task after its own checks of the data, which say more)."""
        for split in (self.validation, self.test):
            if split is None or split.selector.everything:
                continue
            if split.rows == 0 or self.train.rows == 0:
                fraction = getattr(data_cfg, f"{split.name}_split")
                raise DataError(f"data.{split.name}_split={fraction} of "
                                f"{self.train.manifest.rows} training {unit} leaves "
                                f"{split.rows} for {split.name} and {self.train.rows} for "
                                f"training; give data.{split.name}_files or change the "
                                "fraction")


def _manifest(spec: str, row: RowSpec, data_cfg, split: str, what: str
              ) -> tuple[Manifest, Prepared | None]:
    """The prepared data of one setting (``what``, in messages): a prepared folder as it
    is, raw files prepared (or found) in the cache."""
    named = find_manifest(spec) if data_cfg.format != "tfds" else None
    if named is not None:
        manifest = read_manifest(named)
        _check_prepared(manifest, row, what, spec)
        damage = damaged_shard(manifest)
        if damage:
            # prepare --out DIR writes DIR/train, DIR/validation and DIR/test.
            root = manifest.root.rstrip("/")
            head, _, tail = root.rpartition("/")
            out = head if head and tail in ("train", "validation", "test") else root
            raise DataError(f"{what}: {spec}: {damage}; prepare it again (python -m "
                            f"tfapp.prepare --config ... --out {out}) or restore the file")
        return manifest, None
    if data_cfg.format == "tfds":
        files = [spec]
    else:
        files = resolve_files(spec, what)
    # Runs prepare raw files in $TFAPP_CACHE_DIR/prepared.
    done = prepared(files, row, cache=str(usable_cache_dir() / "prepared"),
                    mode=data_cfg.on_bad_rows, split=split)
    return done.manifest, done


def _check_prepared(manifest: Manifest, row: RowSpec, what: str, spec: str) -> None:
    if manifest.kind != row.kind:
        raise DataError(f"{what}: {spec} holds prepared {manifest.kind} rows; this task reads "
                        f"{row.kind} rows (prepare with this task's config: python -m "
                        "tfapp.prepare --config ...)")
    wanted = row.settings()
    for key, value in manifest.settings.items():
        # held_out: how the rows were laid out in shards; any split of them still reads
        # right (rows are picked by their buckets), only faster when it matches.
        if key in ("kind", "format", "held_out"):
            continue
        if wanted.get(key) != value:
            raise DataError(f"{what}: {spec} was prepared with data.{key}={value!r}, the config "
                            f"says {wanted.get(key)!r}; prepare it again with this config or "
                            f"set data.{key}={value!r}")


def prepared_splits(train: str, validation: str, test: str, row: RowSpec, data_cfg, *,
                    seed: int, what: str = "data.train_files") -> PreparedSplits:
    """The splits of a task (specs already resolved from ``demo``; ``what`` names the
    training files in messages); see the module docstring. The task checks its held-out
    splits (``check_held_out``) once it has checked the data itself."""
    fractions = (0.0 if validation else data_cfg.validation_split,
                 0.0 if test else data_cfg.test_split)
    # Held-out fractions of the training files are prepared into shards of their own.
    train_m, done = _manifest(train, row.with_held_out(seed, *fractions), data_cfg, "train",
                              what)
    made = [done] if done else []
    selectors = held_out_selectors(seed, *fractions)
    out = PreparedSplits(SplitData("train", train_m, selectors["train"], train), None, None)
    for split, spec in (("validation", validation), ("test", test)):
        fraction = getattr(data_cfg, f"{split}_split")
        if spec:
            manifest, done = _manifest(spec, row, data_cfg, split, f"data.{split}_files")
            made += [done] if done else []
            setattr(out, split, SplitData(split, manifest, SplitSelector(), spec))
        elif fraction > 0:
            setattr(out, split, SplitData(split, train_m, selectors[split], train))
    for manifest_split in {id(s.manifest): s for s in out.splits()}.values():
        out.report.merge(manifest_split.manifest.bad_rows)
    for done in made:
        m = done.manifest
        if done.prepared_now:
            log.info("data: prepared %d rows of %d file(s) into %s in %.1fs (once: later "
                     "runs read it from there)", m.rows, len(m.sources), m.root, done.seconds)
        else:
            log.info("data: reading %d rows of %d file(s) prepared earlier in %s", m.rows,
                     len(m.sources), m.root)
    return out
