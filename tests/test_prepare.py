"""Preparing files into TFRecord shards + a manifest: the rows, their lines, the counts.

The CSV fast path (pyarrow, column-wise checks) must give what Python's csv reader gives,
row for row and message for message: a generated-file property test compares them.
"""

from __future__ import annotations

import json
import os
import shutil

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.data.formats.files import Fallback
from tfapp.data.prepare import builder as P
from tfapp.data.prepare.manifest import BUCKETS, MANIFEST, held_out_selectors, read_manifest
from tfapp.data.rows.bad_rows import SourceLog
from tfapp.data.rows.columnar import BytesList, fast_rows
from tfapp.data.rows.read import python_rows
from tfapp.data.rows.spec import RowSpec
from tfapp.errors import DataError

import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LABELLED = RowSpec(kind="labelled")


def read_rows(manifest) -> list[dict]:
    """Every record of a prepared folder, in shard order, as Python values."""
    spec = {"text": tf.io.FixedLenFeature([], tf.string, default_value=""),
            "labels": tf.io.RaggedFeature(tf.string), "id": tf.io.FixedLenFeature([], tf.int64),
            "bucket": tf.io.FixedLenFeature([], tf.int64)}
    out = []
    for batch in tf.data.TFRecordDataset(manifest.files()).batch(64).map(
            lambda r: tf.io.parse_example(r, spec)).as_numpy_iterator():
        for i in range(len(batch["id"])):
            out.append({"text": batch["text"][i].decode(), "id": int(batch["id"][i]),
                        "labels": [x.decode() for x in batch["labels"][i]],
                        "bucket": int(batch["bucket"][i])})
    return out


def row_tuples(rows_iter) -> list[tuple]:
    """(line, {column: value}) of each row of a reader's row batches (``fast_rows``,
    ``python_rows``): what the two readers are compared by."""
    out = []
    for r in rows_iter:
        cols = {}
        for k, v in r.columns.items():
            if isinstance(v, BytesList):
                vals = v.values.to_pylist()
                cols[k] = [vals[v.offsets[i]:v.offsets[i + 1]] for i in range(len(v))]
            else:
                cols[k] = v.to_pylist()
        out += [(int(r.lines[i]), {k: cols[k][i] for k in cols}) for i in range(len(r))]
    return out


def _read_both(path: str, spec: RowSpec):
    """(fast, csv) readings of ``path``: rows with their lines, bad rows, label counts;
    fast is None when pyarrow hands the file to csv."""
    out = []
    for fast in (True, False):
        log = SourceLog(path, "skip", "train", "data.on_bad_rows=skip")
        try:
            rows = row_tuples(fast_rows(path, "csv", spec, log) if fast else
                              python_rows(path, "csv", spec, log))
        except Fallback:
            out.append(None)
            continue
        except DataError as err:
            out.append(("error", str(err)))
            continue
        out.append((rows, [str(b) for b in log.report.examples], log.report.count,
                    log.labels, log.first_seen))
    return out


FIELD = st.lists(st.sampled_from(["a", "b", " ", ",", '"', "\n", "\r\n", "\r", "é",
                                  "\udcff", "x|y", "1.0", "\t", "7"]), max_size=5).map("".join)


def test_the_arrow_reader_agrees_with_csv_row_for_row(tmp_path):
    """On 300 generated CSVs, the Arrow path reads what the csv module reads, row for row,
    wherever it reads the file itself; and it does read most of them (a fast path that
    handed every file to csv would compare nothing)."""
    ran = {True: 0, False: 0}  # did the Arrow path read the file?

    @settings(max_examples=300, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(header=st.sampled_from(["text,label", "text,label,extra", "label,text"]),
           lines=st.lists(FIELD, max_size=8), final_newline=st.booleans(),
           kind=st.sampled_from(["labelled", "multi", "texts", "pairs"]))
    def check(header, lines, final_newline, kind):
        spec = {"labelled": LABELLED, "multi": RowSpec(kind="labelled", multi_label=True),
                "texts": RowSpec(kind="texts"),
                "pairs": RowSpec(kind="pairs", source_column="text", target_column="label")
                }[kind]
        body = "\n".join([header, *lines]) + ("\n" if final_newline else "")
        path = tmp_path / f"f{abs(hash((header, tuple(lines), final_newline, kind)))}.csv"
        path.write_bytes(body.encode("utf-8", "surrogateescape"))
        fast, slow = _read_both(str(path), spec)
        ran[fast is not None] += 1
        if fast is not None:
            assert fast == slow

    check()
    print("Arrow path read / handed to csv:", ran)
    assert ran[True] >= 100, ran  # 158 of the 300 here


def test_a_field_longer_than_the_csv_modules_default_limit_is_text(tmp_path):
    # Python's csv refuses fields over 128 KiB unless told otherwise; long documents are
    # valid input on both readers.
    text = "word " * 60_000
    path = tmp_path / "long.csv"
    path.write_text(f'text,label\n"{text}",a\nshort,b\n')
    fast, slow = _read_both(str(path), LABELLED)
    rows, bad = slow[0], slow[2]
    assert bad == 0 and [line for line, _ in rows] == [2, 3]
    assert len(rows[0][1]["text"]) == len(text) and rows[1][1]["text"] == b"short"
    assert fast is None or fast == slow


def test_lines_are_counted_across_quoted_line_breaks(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text('text,label\n"two\nlines",pos\n\n"a\r\nb",neg\nbad,row,x\n,pos\nok,neg\n',
                    newline="")
    fast, slow = _read_both(str(path), LABELLED)
    assert fast == slow
    rows, bad, count, labels, first = fast
    assert [(line, r["text"]) for line, r in rows] == [(2, b"two\nlines"), (5, b"a\r\nb"),
                                                       (9, b"ok")]
    assert bad == [f"{path}:7: has 3 field(s) but the header has 2 (quote fields that "
                   "contain ',')", f"{path}:8: empty text in column 'text'"]
    assert labels == {"pos": 1, "neg": 2} and first["neg"] == f"{path}:5"


def write_csv(path, n: int, start: int = 0, bad_at: tuple[int, ...] = ()):
    lines = ["text,label"]
    for i in range(start, start + n):
        lines.append(f"w{i},{'' if i in bad_at else ('pos' if i % 2 else 'neg')}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_manifest_counts_every_shard_bucket_and_label(tmp_path):
    files = [write_csv(tmp_path / f"p{k}.csv", 3000, 3000 * k) for k in range(2)]
    manifest = P.prepare(files, str(tmp_path / "out"), LABELLED, shard_bytes=20_000)
    assert len(manifest.shards) > 2 and {s.source for s in manifest.shards} == {0, 1}
    assert manifest.rows == 6000 == sum(sum(s.buckets) for s in manifest.shards)
    assert manifest.labels == {"neg": 3000, "pos": 3000}
    rows = read_rows(manifest)
    assert sorted(int(r["text"][1:]) for r in rows) == list(range(6000))
    for shard, path in zip(manifest.shards, manifest.files(), strict=True):
        assert sum(1 for _ in tf.data.TFRecordDataset(path)) == shard.count
    # Held-out buckets: counts by addition match the rows, and the fractions hold.
    selectors = held_out_selectors(7, 0.2, 0.1)
    for selector in selectors.values():
        mask = selector.mask()
        assert sum(manifest.counts(selector)) == sum(mask[r["bucket"]] for r in rows)
    assert 0.07 < sum(manifest.counts(selectors["test"])) / 6000 < 0.13
    assert 0.15 < sum(manifest.counts(selectors["validation"])) / 6000 < 0.21
    assert len({r["id"] for r in rows}) == 6000
    assert all(0 <= r["bucket"] < BUCKETS for r in rows)
    again = P.prepare(files, str(tmp_path / "again"), LABELLED, shard_bytes=20_000)
    assert [r["bucket"] for r in read_rows(again)] == [r["bucket"] for r in rows]


def test_bad_rows_fail_with_file_line_or_are_skipped_and_counted(tmp_path):
    path = write_csv(tmp_path / "b.csv", 50, bad_at=(7, 30))
    with pytest.raises(DataError, match=r"b.csv:9: empty label in column 'label'"):
        P.prepare([path], str(tmp_path / "fail"), LABELLED)
    assert not os.path.exists(tmp_path / "fail" / MANIFEST)
    manifest = P.prepare([path], str(tmp_path / "skip"), LABELLED, mode="skip")
    assert manifest.rows == 48 and manifest.bad_rows["count"] == 2
    assert manifest.bad_rows["first"].startswith(f"{path}:9: empty label")
    # A cached folder that recorded skipped rows fails a run that does not skip them.
    cache = str(tmp_path / "cache")
    assert P.prepared([path], LABELLED, cache=cache, mode="skip", split="train").prepared_now
    with pytest.raises(DataError, match=r"b.csv:9: empty label .*set data.on_bad_rows=skip"):
        P.prepared([path], LABELLED, cache=cache, mode="fail", split="train")


def test_a_run_prepares_raw_files_once_and_says_which_it_did(tmp_path, monkeypatch, caplog):
    import logging

    from tfapp.config import ClassifierDataConfig
    from tfapp.data.input.splits import prepared_splits

    monkeypatch.setenv("TFAPP_CACHE_DIR", str(tmp_path / "cache"))
    path = write_csv(tmp_path / "t.csv", 40)
    said = []
    for _ in range(2):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="tfapp.data"):
            splits = prepared_splits(path, "", "", LABELLED, ClassifierDataConfig(), seed=0)
        said += [r.getMessage() for r in caplog.records if r.getMessage().startswith("data:")]
    assert splits.train.manifest.rows == 40
    assert len(said) == 2, said
    assert said[0].startswith("data: prepared 40 rows of 1 file(s) into ") and \
        str(tmp_path / "cache" / "prepared") in said[0]
    assert said[1].startswith("data: reading 40 rows of 1 file(s) prepared earlier in ")


def test_a_damaged_cache_entry_is_prepared_again(tmp_path, caplog):
    import logging
    from pathlib import Path

    path = write_csv(tmp_path / "t.csv", 40)
    cache = str(tmp_path / "cache")
    first = P.prepared([path], LABELLED, cache=cache, mode="fail", split="train")
    shard = Path(first.manifest.files()[0])
    whole = shard.read_bytes()
    shard.write_bytes(whole[:len(whole) // 2])
    with caplog.at_level(logging.WARNING, logger="tfapp.data"):
        again = P.prepared([path], LABELLED, cache=cache, mode="fail", split="train")
    assert again.prepared_now and again.manifest.rows == 40
    assert shard.read_bytes() == whole  # the same shard, written again whole
    assert any("is damaged" in r.getMessage() and str(shard) in r.getMessage()
               for r in caplog.records)


def test_a_rerun_resumes_the_sources_left_and_refuses_a_changed_one(tmp_path):
    files = [write_csv(tmp_path / f"p{k}.csv", 200, 200 * k) for k in range(3)]
    out = str(tmp_path / "out")
    P.prepare(files, out, LABELLED)
    part = tmp_path / "out" / P.PARTS / "source-00001.json"
    shard = tmp_path / "out" / "00001-0000.tfrecord"
    os.remove(part)  # as if killed while source 1 was prepared
    kept = (tmp_path / "out" / "00000-0000.tfrecord").stat().st_ino
    manifest = P.prepare(files, out, LABELLED)
    assert manifest.rows == 600 and part.exists() and shard.exists()
    # a rewrite lands as a new file (written aside, renamed in): a new inode
    assert (tmp_path / "out" / "00000-0000.tfrecord").stat().st_ino == kept
    write_csv(tmp_path / "p2.csv", 201, 400)
    with pytest.raises(DataError, match=r"p2.csv changed since it was prepared"):
        P.prepare(files, out, LABELLED)


def test_hosts_prepare_their_share_and_the_last_writes_the_manifest(tmp_path):
    files = [write_csv(tmp_path / f"p{k}.csv", 100, 100 * k) for k in range(5)]
    out = str(tmp_path / "out")
    assert P.prepare(files, out, LABELLED, shard=(1, 2)) is None
    assert not os.path.exists(os.path.join(out, MANIFEST))
    parts = sorted(os.listdir(os.path.join(out, P.PARTS)))
    assert parts == ["source-00001.json", "source-00003.json"]
    manifest = P.prepare(files, out, LABELLED, shard=(0, 2))
    assert manifest.rows == 500 and [s.source for s in manifest.shards] == [0, 1, 2, 3, 4]
    assert read_manifest(os.path.join(out, MANIFEST)).rows == 500


def test_remote_file_systems_read_and_write_through_tensorflow(tmp_path):
    src = "ram://prepare-test/in.csv.gz"
    import gzip

    with tf.io.gfile.GFile(src, "wb") as fh:
        fh.write(gzip.compress(b"text,label\nhello,a\nworld,b\n"))
    manifest = P.prepare([src], "ram://prepare-test/out", LABELLED)
    assert [r["text"] for r in read_rows(manifest)] == ["hello", "world"]
    assert manifest.sources[0].path == src and tf.io.gfile.exists(
        "ram://prepare-test/out/" + MANIFEST)


def test_every_kind_and_format_prepares(tmp_path):
    (tmp_path / "c.txt").write_text("one line\n\n  two  \n")
    (tmp_path / "p.jsonl").write_text('{"source": "a b", "target": "c"}\n')
    (tmp_path / "t.conll").write_text("Anna B-PER\nlives O\n\nParis B-LOC\n")
    (tmp_path / "l.txt").write_text("__label__x __label__y some text\n")
    cases = [
        (RowSpec(kind="texts"), "c.txt", 2),
        (RowSpec(kind="pairs"), "p.jsonl", 1),
        (RowSpec(kind="tagged", format="conll"), "t.conll", 2),
        (RowSpec(kind="labelled", multi_label=True), "l.txt", 1),
    ]
    for spec, name, rows in cases:
        manifest = P.prepare([str(tmp_path / name)], str(tmp_path / f"o-{name}"), spec)
        assert manifest.rows == rows, name
    tagged = read_manifest(str(tmp_path / "o-t.conll" / MANIFEST))
    assert tagged.labels == {"B-LOC": 1, "B-PER": 1, "O": 1}
    assert json.loads((tmp_path / "o-l.txt" / MANIFEST).read_text())["labels"] == {
        "x": 1, "y": 1}
    shutil.rmtree(tmp_path / "o-c.txt")
