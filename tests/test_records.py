"""Column-wise tf.train.Example encoding: the bytes protobuf itself would write."""

from __future__ import annotations

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.data.prepare.records import encode_examples
from tfapp.data.rows.columnar import BytesList

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROWS = st.integers(1, 12)


@st.composite
def columns(draw):
    n = draw(ROWS)
    blob = st.binary(max_size=300)
    texts = draw(st.lists(blob, min_size=n, max_size=n))
    lists = draw(st.lists(st.lists(st.binary(max_size=40), max_size=5), min_size=n, max_size=n))
    ints = draw(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=n, max_size=n))
    return texts, lists, ints


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(columns())
def test_protobuf_reads_back_every_value(cols):
    texts, lists, ints = cols
    records = encode_examples({"text": pa.array(texts, pa.large_binary()),
                               "tags": BytesList.from_lists(lists),
                               "id": np.array(ints, np.int64)})
    for i, record in enumerate(records.to_pylist()):
        feature = tf.train.Example.FromString(record).features.feature
        assert list(feature["text"].bytes_list.value) == [texts[i]]
        assert list(feature["tags"].bytes_list.value) == lists[i]
        assert list(feature["id"].int64_list.value) == [ints[i]]


def test_tf_data_parses_the_records_in_batches():
    texts = ["a", "", "é" * 200]
    records = encode_examples({"text": pa.array(texts), "id": np.arange(3),
                               "labels": BytesList.from_lists([[b"x"], [], [b"y", b"z"]])})
    parsed = tf.io.parse_example(tf.constant(records.to_pylist()), {
        "text": tf.io.FixedLenFeature([], tf.string),
        "id": tf.io.FixedLenFeature([], tf.int64),
        "labels": tf.io.RaggedFeature(tf.string)})
    assert [t.decode() for t in parsed["text"].numpy()] == texts
    assert parsed["id"].numpy().tolist() == [0, 1, 2]
    assert parsed["labels"].to_list() == [[b"x"], [], [b"y", b"z"]]


def test_a_list_column_keeps_the_rows_it_takes():
    lists = BytesList.from_lists([[b"a"], [b"b", b"c"], [], [b"d"]])
    taken = lists.take(np.array([3, 1, 2]))
    assert [taken.values.to_pylist()[taken.offsets[i]:taken.offsets[i + 1]]
            for i in range(3)] == [[b"d"], [b"b", b"c"], []]


def test_feature_names_must_fit_one_length_byte():
    with pytest.raises(ValueError, match="1-127 bytes"):
        encode_examples({"x" * 128: np.arange(2)})
