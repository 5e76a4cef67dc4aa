"""The manifest of prepared data: which shards, how many rows each, and what they hold.

A prepared folder (``tfapp.data.prepare.builder``) holds TFRecord shards of ``tf.train.Example``
rows and ``tfapp_manifest.json``. The manifest is what lets every later step work without
a pass over the data, as TFDS's dataset info does:

* per shard: its file, the source it came from, its row count and a histogram of its rows
  over ``BUCKETS`` hash buckets, so the rows of any held-out split (``SplitSelector``) are
  counted by addition, and a resumed run skips whole shards;
* the label vocabulary with class counts (class weights use them), and where each label
  was first seen (a validation label that training never saw is named with its file);
* the sources' identities (path, size, modification time), the settings that decided the
  rows (columns, format, tag scheme...), and the bad rows skipped.

Held-out splits: every row carries ``bucket``, a hash of its source name and row number
in ``[0, BUCKETS)``. A run's ``runtime.seed`` rotates the buckets (``(bucket + r) %
BUCKETS``), and ``data.test_split`` / ``data.validation_split`` take consecutive ranges of
the rotated buckets: deterministic, streaming, and the same on every worker.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import zlib
from dataclasses import dataclass, field
from typing import Any

from tfapp.errors import DataError

import numpy as np
import tensorflow as tf

__all__ = ["BUCKETS", "MANIFEST", "FORMAT_VERSION", "Manifest", "ShardInfo", "SourceInfo",
           "SplitSelector", "row_buckets", "read_manifest", "find_manifest", "damaged_shard",
           "file_checksum"]

MANIFEST = "tfapp_manifest.json"
#: bump when the records or the manifest change meaning (old prepared folders are refused,
#: cached ones rebuilt). 2: tagged rows read in each file's own tag scheme (format 1 read
#: them as data.tag_scheme said and lost entities of another scheme), sources' entities.
FORMAT_VERSION = 3
#: hash buckets of held-out splits: fractions are taken in steps of 1 / BUCKETS
BUCKETS = 1000
#: a folder of at most this many bytes has every shard's checksum checked when opened
CHECKSUM_LIMIT = 256 << 20


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a well-mixed 64-bit hash of each uint64."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _name_salt(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def row_buckets(source_name: str, rows: np.ndarray) -> np.ndarray:
    """The bucket in ``[0, BUCKETS)`` of each row number of the source named
    ``source_name`` (its base name: the split stays when the data moves)."""
    salt = np.uint64(_name_salt(os.path.basename(source_name)))
    return (_splitmix64(np.asarray(rows, np.uint64) ^ salt) % np.uint64(BUCKETS)).astype(
        np.int64)


@dataclass
class SourceInfo:
    """One input file: where it was, its identity when prepared, what it gave."""

    path: str
    size: int
    mtime_ns: int
    rows: int = 0
    bad_rows: int = 0
    #: tagged rows: the file's entity counts (``tfapp.data.text.tags.EntityCounts``)
    entities: dict[str, Any] = field(default_factory=dict)

    @property
    def identity(self) -> tuple[str, int, int]:
        return (self.path, self.size, self.mtime_ns)


@dataclass
class ShardInfo:
    """One TFRecord shard: its file (relative to the manifest), the source index it came
    from, its rows, its rows per bucket, and its size and checksum."""

    file: str
    source: int
    count: int
    buckets: list[int] = field(default_factory=list)
    #: the file's size in bytes and its CRC-32 (``file_checksum``), checked when a run
    #: opens the folder
    bytes: int = 0
    crc32: int = 0
    #: the split whose rows it holds ("": every split's; see ``RowSpec.held_out``)
    split: str = ""


@dataclass
class SplitSelector:
    """The rows of one split: rotated buckets in ``[low, high)`` (all rows: 0, BUCKETS)."""

    low: int = 0
    high: int = BUCKETS
    rotation: int = 0

    @property
    def everything(self) -> bool:
        return self.low == 0 and self.high == BUCKETS

    def mask(self) -> np.ndarray:
        """Which original buckets belong to the split, ``[BUCKETS]`` booleans."""
        rotated = (np.arange(BUCKETS) + self.rotation) % BUCKETS
        return (rotated >= self.low) & (rotated < self.high)

    def count(self, shard: ShardInfo) -> int:
        if self.everything:
            return shard.count
        return int(np.asarray(shard.buckets, np.int64)[self.mask()].sum())


def held_out_selectors(seed: int, validation: float, test: float
                       ) -> dict[str, SplitSelector]:
    """Selectors of train / validation / test for fractions of one set of files: test
    takes ``test`` of the buckets first, validation ``validation`` of the rest (the same
    arithmetic as a split of the rows: validation never sees test)."""
    rotation = int(_splitmix64(np.array([seed], np.uint64))[0] % np.uint64(BUCKETS))
    n_test = int(round(test * BUCKETS))
    n_val = int(round(validation * (BUCKETS - n_test)))
    return {"test": SplitSelector(0, n_test, rotation),
            "validation": SplitSelector(n_test, n_test + n_val, rotation),
            "train": SplitSelector(n_test + n_val, BUCKETS, rotation)}


@dataclass
class Manifest:
    """A prepared folder's description (see the module docstring).

    Attributes:
      root: the folder (local path or URL); not stored in the file.
      kind: what each row holds: labelled (text[, text_pair], labels), texts (text),
        pairs (source, target) or tagged (words, tags).
      settings: the reading settings that decided the rows (columns, format, ...).
      sources: the input files, in order.
      shards: the TFRecord shards, in source order.
      labels: label -> rows carrying it (labelled), tag -> words carrying it (tagged).
      first_seen: label -> "file:line" where it first appeared.
      bad_rows: the bad rows skipped (``BadRowReport.to_dict()``), with the first one
        that stops a run under ``data.on_bad_rows=fail``.
    """

    root: str
    kind: str
    settings: dict[str, Any]
    sources: list[SourceInfo]
    shards: list[ShardInfo]
    labels: dict[str, int] = field(default_factory=dict)
    first_seen: dict[str, str] = field(default_factory=dict)
    bad_rows: dict[str, Any] = field(default_factory=dict)
    version: int = FORMAT_VERSION

    @property
    def rows(self) -> int:
        return sum(s.count for s in self.shards)

    def files(self) -> list[str]:
        return [_join(self.root, s.file) for s in self.shards]

    def counts(self, selector: SplitSelector | None = None) -> list[int]:
        """Rows of the split ``selector`` picks (all rows: None) in each shard."""
        return [(selector or SplitSelector()).count(s) for s in self.shards]

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data.pop("root")
        data = {"format": "tfapp-prepared", **data}
        return json.dumps(data, indent=1, ensure_ascii=False, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str, root: str) -> Manifest:
        data = json.loads(text)
        if data.get("format") != "tfapp-prepared":
            raise ValueError("not a tfapp manifest")
        version = data.get("version")
        if version != FORMAT_VERSION:
            raise DataError(f"{_join(root, MANIFEST)}: prepared by another tfapp (format "
                            f"{version}, this one reads {FORMAT_VERSION}); prepare the data "
                            "again (python -m tfapp.prepare)")
        data.pop("format")
        data["sources"] = [SourceInfo(**s) for s in data["sources"]]
        data["shards"] = [ShardInfo(**s) for s in data["shards"]]
        return cls(root=root, **data)


def _join(root: str, name: str) -> str:
    return name if "://" in name or os.path.isabs(name) else root.rstrip("/") + "/" + name


def find_manifest(spec: str) -> str | None:
    """The manifest file a data spec names (the file itself or a folder holding one);
    None when it names raw files."""
    spec = spec.strip()
    if "," in spec or any(ch in spec for ch in "*?["):
        return None
    if spec.endswith(MANIFEST):
        return spec
    candidate = spec.rstrip("/") + "/" + MANIFEST
    try:
        return candidate if tf.io.gfile.exists(candidate) else None
    except Exception:  # an unreachable URL: the reader names the problem
        return None


def read_manifest(path: str) -> Manifest:
    """The manifest at ``path`` (a ``tfapp_manifest.json``); one DataError line if it
    cannot be read."""
    root = os.path.dirname(path) if "://" not in path else path.rsplit("/", 1)[0]
    try:
        with tf.io.gfile.GFile(path, "rb") as fh:
            text = fh.read().decode("utf-8")
        return Manifest.from_json(text, root)
    except DataError:
        raise
    except (tf.errors.OpError, OSError, ValueError, KeyError, TypeError) as err:
        first = str(getattr(err, "message", err)).splitlines()[0] if str(err) else \
            type(err).__name__
        raise DataError(f"{path}: not a readable tfapp manifest ({first}); prepare the data "
                        "again (python -m tfapp.prepare)") from None


def file_checksum(path: str, chunk: int = 8 << 20) -> tuple[int, int]:
    """Size in bytes and CRC-32 of a file (any file system TensorFlow reads)."""
    crc, size = 0, 0
    with tf.io.gfile.GFile(path, "rb") as fh:
        while block := fh.read(chunk):
            crc = zlib.crc32(block, crc)
            size += len(block)
    return size, crc


def damaged_shard(manifest: Manifest, checksum_limit: int = CHECKSUM_LIMIT) -> str | None:
    """What is wrong with the first shard of ``manifest`` that is not as prepared (gone,
    another size, another checksum), None when all are whole. Sizes are always checked
    (one stat per shard); checksums when the folder holds at most ``checksum_limit``
    bytes (larger folders rely on TFRecord's own per-record CRC, checked as it is read)."""
    checksums = sum(s.bytes for s in manifest.shards) <= checksum_limit
    for shard, path in zip(manifest.shards, manifest.files(), strict=True):
        try:
            size = tf.io.gfile.stat(path).length
        except tf.errors.NotFoundError:
            return f"shard {path} is missing"
        if size != shard.bytes:
            return f"shard {path} has {size} bytes, the manifest says {shard.bytes}"
        if checksums and file_checksum(path) != (shard.bytes, shard.crc32):
            return f"shard {path} does not match its checksum (the file was changed)"
    return None


def origin_order(origin: str) -> tuple[str, int]:
    """Sort key of a ``first_seen`` origin (``file:line``): by file, then line as a number."""
    where, _, line = origin.rpartition(":")
    return where, int(line) if line.isdigit() else 0
