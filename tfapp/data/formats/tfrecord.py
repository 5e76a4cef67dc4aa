"""TFRecord files of ``tf.train.Example`` (features as columns), and TFDS datasets
(``NAME[:SPLIT]``, when tensorflow-datasets is installed). Rows are ``record N``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tfapp.data.formats.files import Hint, Parsed, missing_column, python_value
from tfapp.errors import DataError

import tensorflow as tf

__all__ = ["rows", "tfds_rows"]


def _feature_value(feature: tf.train.Feature) -> Any:
    kind = feature.WhichOneof("kind")
    values = python_value(list(getattr(feature, kind).value)) if kind else []
    return values[0] if len(values) == 1 else values


def rows(path: str, columns: list[str], hint: Hint) -> Iterator[Parsed]:
    """Every record of the file with ``columns`` among its features (the first record
    decides: a feature it lacks is a wrong column name, not a bad row)."""
    compression = "GZIP" if path.endswith(".gz") else ""
    dataset = tf.data.TFRecordDataset(path, compression_type=compression)
    number = 0
    try:
        for number, raw in enumerate(dataset.as_numpy_iterator(), start=1):
            try:
                example = tf.train.Example.FromString(raw)
            except Exception:  # protobuf DecodeError
                yield f"record {number}", None, "not a tf.train.Example"
                continue
            feats = example.features.feature
            missing = [c for c in columns if c not in feats]
            if missing:
                if number == 1:
                    raise missing_column(path, missing[0], sorted(feats), "first record",
                                         hint)
                yield f"record {number}", None, f"no feature '{missing[0]}'"
                continue
            yield f"record {number}", {c: _feature_value(feats[c]) for c in columns}, None
    except tf.errors.OpError as err:
        raise DataError(f"{path}: record {number + 1}: not a readable TFRecord file "
                        f"({err.message.splitlines()[0]})") from None
    if number == 0:
        yield "record 1", None, "empty file (no records)"


def tfds_rows(spec: str, default_split: str, columns: list[str], hint: Hint
              ) -> Iterator[Parsed]:
    """Every element of the TFDS dataset ``spec`` (``NAME[:SPLIT]``)."""
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DataError("data.format=tfds needs tensorflow-datasets; pip install "
                        "'tfapp[datasets]' (or tensorflow-datasets) or use local files"
                        ) from None
    name, _, split = spec.partition(":")
    try:
        dataset = tfds.load(name, split=split or default_split)
    except Exception as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DataError(f"cannot load TFDS dataset '{spec}' ({first[:200]})") from None
    for number, element in enumerate(tfds.as_numpy(dataset), start=1):
        missing = [c for c in columns if c not in element]
        if missing:
            raise missing_column(spec, missing[0], sorted(element), "dataset features",
                                 hint)
        yield f"record {number}", {c: python_value(element[c]) for c in columns}, None
