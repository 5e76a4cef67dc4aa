"""Sources: every format, labels (string/int/multi-label), splits and each bad-data case."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import sys
from pathlib import Path

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import ClassifierDataConfig, ConfigError
from tfapp.data.examples.classification import demo_files, load_classification_splits, raw_batches
from tfapp.errors import DataError

import numpy as np
import pytest
import tensorflow as tf

ROWS = [("a great movie", "pos"), ("dull and slow", "neg"), ("fine acting", "pos"),
        ("i hated it", "neg"), ("superb, really", "pos"), ("boring, boring", "neg")]


def cfg(**kw) -> ClassifierDataConfig:
    kw.setdefault("validation_split", 0.0)
    return dataclasses.replace(ClassifierDataConfig(), **kw)


def write_csv(path: Path, rows, header=("text", "label"), delimiter=",") -> str:
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, delimiter=delimiter, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    return str(path)


def write_tfrecord(path: Path, rows, label_as_int=False) -> str:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for text, label in rows:
            feats = {"text": tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[text.encode()]))}
            if label_as_int:
                feats["label"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
            else:
                feats["label"] = tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[label.encode()]))
            ex = tf.train.Example(features=tf.train.Features(feature=feats))
            writer.write(ex.SerializeToString())
    return str(path)


def load(tmp_path, **kw):
    return load_classification_splits(cfg(**kw), seed=1, label_vocab_path=tmp_path / "labels.json")


@dataclasses.dataclass
class Rows:
    """A split's examples as the input pipeline reads them (texts, pairs, label ids)."""

    texts: list[str]
    text_pairs: list[str] | None
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.texts)


def rows(splits, name: str = "train") -> Rows:
    """A split's rows in the sources' order (prepared shards hold them permuted; each row
    carries its source and line in ``id``)."""
    batches = list(raw_batches(splits, getattr(splits, name)))
    order = np.argsort(np.concatenate([b["id"] for b in batches])) if batches else []
    texts = [t.decode() for b in batches for t in b["text"]]
    texts = [texts[i] for i in order]
    pairs = ([t.decode() for b in batches for t in b["text_pair"]]
             if batches and "text_pair" in batches[0] else None)
    pairs = [pairs[i] for i in order] if pairs is not None else None
    labels = np.concatenate([b["label"] for b in batches])[order] if batches else np.zeros(0)
    return Rows(texts, pairs, labels)


# ------------------------------------------------------------------------------ formats
@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "text", "tfrecord", "csv.gz"])
def test_every_format_reads_the_same_examples(tmp_path, fmt):
    path = tmp_path / f"train.{fmt}"
    if fmt == "csv":
        write_csv(path, ROWS)
    elif fmt == "tsv":
        write_csv(path, ROWS, delimiter="\t")
    elif fmt == "csv.gz":
        path.write_bytes(gzip.compress(("text,label\n" + "".join(
            f'"{t}",{lab}\n' for t, lab in ROWS)).encode()))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps({"text": t, "label": lab, "id": i}) + "\n"
                                for i, (t, lab) in enumerate(ROWS)))
    elif fmt == "text":
        path.write_text("".join(f"__label__{lab} {t}\n" for t, lab in ROWS))
    else:
        write_tfrecord(path, ROWS)
    splits = load(tmp_path, train_files=str(path))
    assert splits.label_names == ["neg", "pos"]
    assert rows(splits, "train").texts == [t for t, _ in ROWS]
    np.testing.assert_array_equal(rows(splits, "train").labels, [1, 0, 1, 0, 1, 0])
    assert rows(splits, "train").labels.dtype == np.int32
    assert json.loads((tmp_path / "labels.json").read_text())["labels"] == ["neg", "pos"]
    assert splits.validation is None and splits.report.count == 0


def test_globs_comma_lists_pairs_and_integer_labels(tmp_path):
    (tmp_path / "d").mkdir()
    write_csv(tmp_path / "d" / "a.csv", [("q1", "why", 2), ("q2", "how", 10)],
              header=("premise", "hypothesis", "y"))
    write_csv(tmp_path / "d" / "b.csv", [("q3", "what", 2), ("q4", "who", 1)],
              header=("premise", "hypothesis", "y"))
    splits = load(tmp_path, train_files=f"{tmp_path}/d/*.csv", text_column="premise",
                  text_pair_column="hypothesis", label_column="y")
    assert rows(splits, "train").texts == ["q1", "q2", "q3", "q4"]
    assert rows(splits, "train").text_pairs == ["why", "how", "what", "who"]
    assert splits.label_names == ["1", "2", "10"]  # numeric order, not string order
    np.testing.assert_array_equal(rows(splits, "train").labels, [1, 2, 1, 0])
    tfrec = write_tfrecord(tmp_path / "ints.tfrecord", [("x", 0), ("y", 3)], label_as_int=True)
    both = load(tmp_path / "t2", train_files=f"{tfrec}, {tfrec}")
    assert both.label_names == ["0", "3"] and both.size(both.train) == 4


def test_multi_label_gives_multi_hot_rows(tmp_path):
    path = write_csv(tmp_path / "m.csv", [("x", "sports|news"), ("y", "news"), ("z", ""),
                                          ("w", "tech | sports")])
    splits = load(tmp_path, train_files=path, multi_label=True)
    assert splits.label_names == ["news", "sports", "tech"] and splits.multi_label
    np.testing.assert_array_equal(rows(splits, "train").labels, [[1, 1, 0], [1, 0, 0], [0, 0, 0],
                                                        [0, 1, 1]])
    assert rows(splits, "train").labels.dtype == np.float32
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text('{"text": "a", "label": ["b", "c"]}\n{"text": "d", "label": "c"}\n')
    splits = load(tmp_path / "j", train_files=str(jsonl), multi_label=True)
    np.testing.assert_array_equal(rows(splits, "train").labels, [[1, 1], [0, 1]])


def test_seeded_validation_split_and_separate_files(tmp_path):
    rows_ = [(f"text number {i}", "pos" if i % 3 else "neg") for i in range(2000)]
    path = write_csv(tmp_path / "t.csv", rows_)
    a = load(tmp_path / "a", train_files=path, validation_split=0.2)
    b = load(tmp_path / "b", train_files=path, validation_split=0.2)
    # Each row goes by a seeded hash of its place: about the fraction, never a row twice.
    assert a.size(a.train) + a.size(a.validation) == 2000
    assert 0.17 < a.size(a.validation) / 2000 < 0.23
    assert rows(a, "validation").texts == rows(b, "validation").texts  # same seed, same split
    assert not set(rows(a, "train").texts) & set(rows(a, "validation").texts)
    other = load_classification_splits(cfg(train_files=path, validation_split=0.2), seed=2)
    assert rows(other, "validation").texts != rows(a, "validation").texts
    val = write_csv(tmp_path / "v.csv", rows_[:5])
    test = write_csv(tmp_path / "test.csv", rows_[5:8])
    c = load(tmp_path / "c", train_files=path, validation_files=val, test_files=test,
             validation_split=0.2)
    assert (c.size(c.train), c.size(c.validation), c.size(c.test)) == (2000, 5, 3)


def test_seeded_test_split_is_carved_before_validation(tmp_path):
    rows_ = [(f"text number {i}", "pos" if i % 3 else "neg") for i in range(2000)]
    path = write_csv(tmp_path / "t.csv", rows_)
    a = load(tmp_path / "a", train_files=path, validation_split=0.2, test_split=0.1)
    b = load(tmp_path / "b", train_files=path, validation_split=0.2, test_split=0.1)
    sizes = [a.size(a.train), a.size(a.validation), a.size(a.test)]
    assert sum(sizes) == 2000 and 0.07 < sizes[2] / 2000 < 0.13
    assert 0.15 < sizes[1] / 2000 < 0.21  # 0.2 of what test left
    assert rows(a, "test").texts == rows(b, "test").texts  # seeded
    splits = [set(rows(a, n).texts) for n in ("train", "validation", "test")]
    assert sum(map(len, splits)) == len(set().union(*splits)) == 2000  # disjoint, all kept
    given = write_csv(tmp_path / "test.csv", rows_[:3])  # test files win over test_split
    c = load(tmp_path / "c", train_files=path, test_files=given, test_split=0.1)
    assert (c.size(c.train), c.size(c.test)) == (2000, 3)
    small = write_csv(tmp_path / "s.csv", rows_[:50])
    with pytest.raises(DataError, match=r"data.test_split=0.001 of 50 .* data.test_files"):
        load(tmp_path / "d", train_files=small, test_split=0.001)


def test_demo_resolves_to_shipped_files(tmp_path):
    train, val, test = demo_files(ClassifierDataConfig())
    assert all(Path(p).is_file() for p in (train, val, test))
    splits = load_classification_splits(ClassifierDataConfig(), seed=42)
    assert [splits.size(s) for s in (splits.train, splits.validation, splits.test)] == [
        20000, 500, 500]
    assert splits.label_names == ["negative", "positive"]
    share = rows(splits, "train").labels.mean()
    assert 0.4 < share < 0.6


def test_label_vocab_is_reused_from_the_run(tmp_path):
    path = write_csv(tmp_path / "t.csv", ROWS)
    (tmp_path / "labels.json").write_text(json.dumps({"labels": ["pos", "neg", "meh"],
                                                       "multi_label": False}))
    splits = load(tmp_path, train_files=path)
    assert splits.label_names == ["pos", "neg", "meh"]
    np.testing.assert_array_equal(rows(splits, "train").labels, [0, 1, 0, 1, 0, 1])


# ----------------------------------------------------------------------------- bad data
def _one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg and isinstance(err.value, ConfigError)
    return msg


def test_missing_file_and_glob(tmp_path):
    with pytest.raises(DataError) as err:
        load(tmp_path, train_files=str(tmp_path / "nope.csv"))
    assert "file not found" in _one_line(err) and "nope.csv" in str(err.value)
    with pytest.raises(DataError, match="no files match"):
        load(tmp_path, train_files=str(tmp_path / "*.csv"))


@pytest.mark.parametrize("content,problem", [
    ("", "empty file"),
    ("text,label\n", "a header row but no data rows"),
])
def test_empty_file(tmp_path, content, problem):
    path = tmp_path / "e.csv"
    path.write_text(content)
    with pytest.raises(DataError) as err:
        load(tmp_path, train_files=str(path))
    assert f"{path}:" in _one_line(err) and problem in str(err.value)


def test_missing_column_names_the_header_and_a_guess(tmp_path):
    path = write_csv(tmp_path / "c.csv", ROWS, header=("txt", "label"))
    with pytest.raises(DataError) as err:
        load(tmp_path, train_files=path)
    msg = _one_line(err)
    assert "no column 'text'" in msg and "has: txt, label" in msg and "did you mean 'txt'" in msg


BAD_CASES = {
    # name: (train file body, expected line, expected problem)
    "wrong_field_count": ('text,label\n"ok one",pos\ntoo,many,fields\n"ok two",neg\n', 3,
                          "has 3 field(s) but the header has 2"),
    "empty_text": ('text,label\n"ok one",pos\n"   ",neg\n"ok two",neg\n', 3, "empty text"),
    "empty_label": ('text,label\n"ok one",pos\n"fine",\n"ok two",neg\n', 3, "empty label"),
    "non_utf8": (b'text,label\n"ok one",pos\n"caf\xe9",neg\n"ok two",neg\n', 3,
                 "not valid UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_row_fails_with_file_line_and_problem(tmp_path, case):
    body, line, problem = BAD_CASES[case]
    path = tmp_path / "bad.csv"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    with pytest.raises(DataError) as err:
        load(tmp_path, train_files=str(path))
    msg = _one_line(err)
    assert msg.startswith(f"{path}:{line}: ") and problem in msg
    assert "data.on_bad_rows=skip" in msg


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_row_is_skipped_and_reported(tmp_path, case, caplog):
    body, line, problem = BAD_CASES[case]
    path = tmp_path / "bad.csv"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    with caplog.at_level("WARNING", logger="tfapp.data"):
        splits = load(tmp_path, train_files=str(path), on_bad_rows="skip")
    assert rows(splits, "train").texts == ["ok one", "ok two"]
    assert splits.report.count == 1 and splits.report.per_split == {"train": 1}
    bad = splits.report.examples[0]
    assert (bad.file, bad.line) == (str(path), line) and problem in bad.problem
    assert "skipped 1 bad row(s)" in caplog.text and f"{path}:{line}" in caplog.text


def test_unknown_label_in_validation(tmp_path):
    train = write_csv(tmp_path / "t.csv", ROWS)
    val = write_csv(tmp_path / "v.csv", [("good", "pos"), ("meh", "neutral"), ("bad", "neg")])
    with pytest.raises(DataError) as err:
        load(tmp_path, train_files=train, validation_files=val)
    msg = _one_line(err)
    assert msg.startswith(f"{val}:3: unknown label 'neutral'") and "neg, pos" in msg
    splits = load(tmp_path / "s", train_files=train, validation_files=val, on_bad_rows="skip")
    assert rows(splits, "validation").texts == ["good", "bad"]
    assert splits.report.per_split == {"validation": 1}


def test_skip_reports_count_and_first_examples_across_files(tmp_path):
    rows = "".join(f'"t{i}",{"x" if i % 2 else ""}\n' for i in range(20))
    path = tmp_path / "many.csv"
    path.write_text("text,label\n" + rows + '"last",y\n')
    splits = load(tmp_path, train_files=str(path), on_bad_rows="skip")
    assert splits.report.count == 10 and len(splits.report.examples) == 5
    assert [b.line for b in splits.report.examples] == [2, 4, 6, 8, 10]
    assert splits.report.to_dict()["count"] == 10
    assert splits.size(splits.train) == 11


def test_jsonl_and_tfrecord_bad_rows(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text('{"text": "a", "label": "x"}\n{not json}\n[1]\n{"text": "b"}\n'
                    '{"text": "c", "label": "y"}\n')
    with pytest.raises(DataError, match=rf"^{path}:2: not valid JSON"):
        load(tmp_path, train_files=str(path))
    splits = load(tmp_path, train_files=str(path), on_bad_rows="skip")
    assert [b.line for b in splits.report.examples] == [2, 3, 4]
    assert "no key 'label'" in splits.report.examples[2].problem
    rec = tmp_path / "r.tfrecord"
    rec.write_bytes(b"definitely not a tfrecord file at all")
    with pytest.raises(DataError) as err:
        load(tmp_path, train_files=str(rec))
    assert "not a readable TFRecord" in _one_line(err)


def test_format_errors(tmp_path, monkeypatch):
    odd = tmp_path / "data.xyz"
    odd.write_text("x")
    with pytest.raises(DataError, match="cannot tell the format"):
        load(tmp_path, train_files=str(odd))
    # Without tensorflow-datasets (a None entry makes its import fail, installed or not).
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(DataError, match=r"^data.format=tfds needs tensorflow-datasets; pip "
                                        r"install 'tfapp\[datasets\]'"):
        load(tmp_path, train_files="imdb_reviews", format="tfds")
    single = write_csv(tmp_path / "one.csv", [("a", "pos"), ("b", "pos")])
    with pytest.raises(DataError, match="only one label"):
        load(tmp_path / "o", train_files=single)


def test_integral_decimal_labels_are_one_class_with_integers(tmp_path):
    """A label column written from floats ("1.0") next to integer labels (1) is one class,
    not two; other decimals stay as written."""
    write_csv(tmp_path / "a.csv", [("x", "1.0"), ("y", "0"), ("z", "1"), ("w", "0.50")])
    (tmp_path / "b.jsonl").write_text('{"text": "v", "label": 1}\n{"text": "u", "label": 0.0}\n')
    splits = load(tmp_path, train_files=f"{tmp_path}/a.csv,{tmp_path}/b.jsonl")
    assert splits.label_names == ["0", "0.50", "1"]
    np.testing.assert_array_equal(rows(splits, "train").labels, [2, 0, 2, 1, 2, 0])


def test_a_duplicated_header_name_is_an_error_not_the_last_column(tmp_path):
    path = write_csv(tmp_path / "dup.csv", [("a", "b", "pos")], header=("text", "text", "label"))
    with pytest.raises(DataError, match="names column 'text' 2 times; rename all but one"):
        load(tmp_path, train_files=path)


def test_errors_name_a_commands_flags_without_rewriting_text(tmp_path):
    """A reader's message holds the config keys it names apart from its words: in config
    terms by default, and in a command's flag terms (``tfapp evaluate``) when the command
    maps the keys to its flags."""
    from tfapp.data.rows.bad_rows import BadRowPolicy, BadRowReport
    from tfapp.data.rows.names import KnownNames
    from tfapp.data.rows.read import file_formats, iter_rows
    from tfapp.data.rows.spec import RowSpec
    from tfapp.errors import Setting

    def evaluated(path, data, known=None):
        """The rows evaluate reads (its files, columns and bad-row policy)."""
        spec = RowSpec.from_config("labelled", data)
        rows = iter_rows(file_formats(path, spec, Setting("data.test_files")), spec,
                         split="test", known=known)
        return list(BadRowPolicy("fail", BadRowReport(), "test").good(rows))

    flags = {"data.test_files": "--data", "data.label_column": "--label-column",
             "data.text_column": "--text-column", "data.on_bad_rows": "--on-bad-rows"}
    path = write_csv(tmp_path / "t.csv", [("fine", "pos"), ("odd", "sideways")])
    with pytest.raises(DataError) as missing:
        evaluated(str(tmp_path / "none.csv"), cfg())
    assert str(missing.value).startswith("data.test_files: file not found:")
    assert str(missing.value.in_flag_terms(flags)).startswith("--data: file not found:")
    assert [s.key for s in missing.value.settings] == ["data.test_files"]

    with pytest.raises(DataError) as column:
        evaluated(path, cfg(label_column="stars"))
    assert str(column.value).endswith(
        "-- set data.text_column / data.text_pair_column / data.label_column")
    assert str(column.value.in_flag_terms(flags)).endswith(
        "-- set --text-column / data.text_pair_column / --label-column")

    with pytest.raises(DataError) as label:
        evaluated(path, cfg(), KnownNames(("neg", "pos"), "the model"))
    assert str(label.value).endswith("(fix the data, or set data.on_bad_rows=skip to drop "
                                     "such rows)")
    renamed = label.value.in_flag_terms(flags)
    assert type(renamed) is DataError
    assert str(renamed).endswith("(fix the data, or pass --on-bad-rows skip to drop such "
                                 "rows)")
    assert str(renamed).startswith(f"{path}:3: unknown label 'sideways'")
