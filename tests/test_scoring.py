"""The streaming parts of ``predict --data``, without a model: input rows read in order with
their file:line (``tfapp.data.input.input_rows``), cut into batches that never straddle a part
(``tfapp.scoring.Batches``), and part files written whole, joined, resumed and refused
(``tfapp.parts``). The command end to end, with a trained classifier, is in
test_classifier.py."""

from __future__ import annotations

import csv
import json

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.data.input.input_rows import InputRows
from tfapp.errors import ConfigError, DataError
from tfapp.parts import MARKER, SUCCESS, Output, RowParts
from tfapp.progress import Progress
from tfapp.scoring import Batches, parse_shard

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


def _csv(path, rows, header=("id", "text")):
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_rows_of_every_format_in_order_with_kept_columns_and_bad_rows(tmp_path):
    a = _csv(tmp_path / "a.csv", [(1, "one"), (2, ""), (3, "three")])
    b = tmp_path / "b.jsonl"
    b.write_text('{"id": 4, "text": "four"}\n{"id": 5, "text": null}\nnot json\n'
                 '{"id": 6, "text": "six", "other": 1}\n')
    c = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": [7, 8], "text": ["seven", "eight"], "x": [0.5, 1.5]}), c)
    rows = list(InputRows(f"{a},{b},{c}", ["text"], ["id"]))
    assert [(r.values, r.kept) for r in rows if r.problem is None] == [
        (("one",), {"id": "1"}), (("",), {"id": "2"}), (("three",), {"id": "3"}),
        (("four",), {"id": 4}), (("six",), {"id": 6}),
        (("seven",), {"id": 7}), (("eight",), {"id": 8})]
    bad = [f"{r.file}:{r.line}: {r.problem}" for r in rows if r.problem is not None]
    assert bad == [f"{b}:2: column 'text' is null",
                   f"{b}:3: not valid JSON (Expecting value at column 1)"]
    text = tmp_path / "t.txt"
    text.write_text("first line\n\n second \n")
    assert [r.values for r in InputRows(str(text), ["text"], [])] == [("first line",),
                                                                      (" second ",)]
    with pytest.raises(DataError, match="plain text lines, which have no columns to keep"):
        InputRows(str(text), ["text"], ["id"])
    with pytest.raises(DataError, match=r"no column 'body' in the Parquet schema \(has: id, "
                                        "text, x\\)"):
        list(InputRows(str(c), ["body"], []))
    with pytest.raises(DataError, match="no column 'body' in the header row"):
        list(InputRows(str(a), ["body"], []))


def test_batches_stay_in_one_part_and_shards_split_every_record_once(tmp_path):
    path = _csv(tmp_path / "in.csv", [(i, f"t{i}") for i in range(23)])
    rows = InputRows(str(path), ["text"], ["id"])
    cut = Batches(rows, batch_size=4, part_rows=10, skip=set())
    got = list(cut)
    assert cut.records == 23
    assert [(b.part, len(b.kept), b.last) for b in got] == [
        (0, 4, False), (0, 4, False), (0, 2, True), (1, 4, False), (1, 4, False),
        (1, 2, True), (2, 3, True)]
    assert [k["id"] for b in got for k in b.kept] == [str(i) for i in range(23)]
    # A finished part is skipped; two shards take every other part, each record once.
    assert [b.part for b in Batches(rows, batch_size=4, part_rows=10, skip={1})] == [0, 0, 0,
                                                                                      2]
    seen = []
    for index in range(2):
        for b in Batches(rows, batch_size=4, part_rows=10, skip=set(), shard=(index, 2)):
            assert b.part % 2 == index
            seen += [k["id"] for k in b.kept]
    assert sorted(seen, key=int) == [str(i) for i in range(23)]


def test_a_part_of_bad_rows_only_still_ends(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "a"}\n{"text": null}\n{"text": null}\n{"text": "d"}\n')
    got = list(Batches(InputRows(str(path), ["text"], []), batch_size=8, part_rows=2,
                       skip=set()))
    assert [(b.part, len(b.kept), len(b.bad), b.last) for b in got] == [
        (0, 1, 1, True), (1, 1, 1, True)]


JOB = {"model": "/m", "input": {"files": [["/in.csv", 10, 1]]}, "part_rows": 2}
ROWS = [[{"id": 1, "label": "a", "probabilities": {"a": 0.75, "b": 0.25}},
         {"id": 2, "label": "b", "probabilities": {"a": 0.5, "b": 0.5}}],
        [{"id": 3, "label": "a", "probabilities": {"a": 1.0, "b": 0.0}}]]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_parts_join_into_one_file_in_order(tmp_path, suffix):
    target = tmp_path / f"preds{suffix}"
    out = Output(str(target), JOB)
    assert out.open(sole_writer=True) == set()
    out.write(1, ROWS[1])
    assert not out.finish(2) and not target.exists()  # part 0 is missing
    out.write(0, ROWS[0])
    assert out.finish(2)
    assert target.is_file() and not out.folder.exists()
    if suffix == ".jsonl":
        got = [json.loads(line) for line in target.read_text().splitlines()]
        assert got == ROWS[0] + ROWS[1]
    elif suffix == ".csv":
        assert target.read_text() == ("id,label,probabilities.a,probabilities.b\n"
                                      "1,a,0.75,0.25\n2,b,0.5,0.5\n3,a,1.0,0.0\n")
    else:
        assert pq.read_table(target).to_pylist() == ROWS[0] + ROWS[1]
    # Killed after the join, before the parts were removed: a rerun finds it complete.
    out.folder.mkdir()
    (out.folder / MARKER).write_text(json.dumps({"job": JOB, "joined": True}))
    again = Output(str(target), JOB)
    again.precheck()
    assert again.open(sole_writer=True) == set() and again.complete
    assert not out.folder.exists() and target.is_file()
    # The same command again finds the file it wrote: refused, nothing touched.
    before = target.read_bytes()
    with pytest.raises(ConfigError, match="the file exists; nothing was written or "
                                          "overwritten"):
        Output(str(target), JOB).open(sole_writer=True)
    assert target.read_bytes() == before


def test_a_rerun_resumes_its_own_folder_and_refuses_anything_else(tmp_path):
    folder = tmp_path / "preds.jsonl"
    out = Output(f"{folder}/", JOB)
    out.open(sole_writer=True)
    out.write(0, ROWS[0])
    (folder / ".part-000001.jsonl.x1.tmp").write_text("half a part")  # a kill mid-write
    again = Output(f"{folder}/", JOB)
    assert again.open(sole_writer=True) == {0}
    assert not (folder / ".part-000001.jsonl.x1.tmp").exists()
    again.write(1, ROWS[1])
    assert again.finish(2) and json.loads((folder / SUCCESS).read_text()) == {"parts": 2}
    assert sorted(p.name for p in folder.iterdir()) == [
        SUCCESS, MARKER, "part-000000.jsonl", "part-000001.jsonl"]
    with pytest.raises(ConfigError, match="holds the output of another job \\(its part_rows "
                                          "differ"):
        Output(f"{folder}/", {**JOB, "part_rows": 3}).open(sole_writer=True)
    stranger = tmp_path / "mine.csv"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="holds files that tfapp did not write"):
        Output(f"{stranger}/", JOB).open(sole_writer=True)
    assert (stranger / "notes.txt").read_text() == "keep me"
    with pytest.raises(ConfigError, match=r"give a local path ending in \.jsonl, \.csv, "
                                          r"\.parquet"):
        Output(str(tmp_path / "preds.txt"), JOB)


def test_row_parts_cut_rows_as_they_come_and_a_rerun_keeps_the_parts_there(tmp_path):
    """evaluate --output's writer: batches of any size become parts of part_rows rows, in
    order; a rerun of the same job (after a kill before the last part) writes only the
    missing part, the others keep their files (same inode), and the join is the same."""
    rows = [{"id": i, "label": "ab"[i % 2]} for i in range(7)]
    whole = RowParts(Output(str(tmp_path / "whole.jsonl"), JOB), 3)
    for batch in (rows[:2], rows[2:6], rows[6:]):
        whole.add(batch)
    assert whole.close() and whole.parts == 3 and whole.rows == 7
    assert [json.loads(line) for line in (tmp_path / "whole.jsonl").read_text().splitlines()
            ] == rows
    # Opened at the first part: a command refused before it (a flag its model does not
    # take) leaves no folder whose job a corrected rerun would not match.
    RowParts(Output(str(tmp_path / "refused.jsonl/"), JOB), 3)
    assert not (tmp_path / "refused.jsonl").exists()
    folder = tmp_path / "rerun.jsonl"
    first = RowParts(Output(f"{folder}/", JOB), 3)
    first.add(rows[:6])  # parts 0 and 1 written; then a kill: no close
    inodes = {p.name: p.stat().st_ino for p in folder.glob("part-*")}
    assert sorted(inodes) == ["part-000000.jsonl", "part-000001.jsonl"]
    again = RowParts(Output(f"{folder}/", JOB), 3)
    again.add(rows)
    assert again.done == {0, 1}
    assert again.close()
    assert {p.name: p.stat().st_ino for p in folder.glob("part-*") if p.name in inodes} == \
        inodes
    assert b"".join(p.read_bytes() for p in sorted(folder.glob("part-*"))) == \
        (tmp_path / "whole.jsonl").read_bytes()


def test_shard_flag_and_progress_line(tmp_path):
    assert parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "x", "-1/2"):
        with pytest.raises(ConfigError, match=f"--shard {bad}: give I/N"):
            parse_shard(bad)
    import io

    stream = io.StringIO()
    progress = Progress("predict", 200, stream=stream, terminal=False, every=0.0)
    progress.update(50, 100)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("predict: 50 rows  ")
    assert "rows/s  50%  ETA " in lines[0]


def test_rows_of_a_prepared_folder_carry_text_and_id(tmp_path):
    """A folder written by ``tfapp prepare`` is read shard by shard; its ids are plain
    ints (JSON can hold them)."""
    from tfapp.config import ClassifierDataConfig
    from tfapp.data.prepare.builder import prepare
    from tfapp.data.rows.spec import RowSpec

    source = _csv(tmp_path / "in.csv", [(f"t{i}", "pos" if i % 2 else "neg") for i in range(5)],
                  header=("text", "label"))
    prepare([str(source)], str(tmp_path / "prep"), RowSpec.from_config(
        "labelled", ClassifierDataConfig()))
    rows = list(InputRows(str(tmp_path / "prep"), ["text"], ["id"]))
    assert sorted(r.values[0] for r in rows) == [f"t{i}" for i in range(5)]
    assert all(type(r.kept["id"]) is int for r in rows)
    json.dumps([r.kept for r in rows])
    with pytest.raises(DataError, match="a prepared folder's rows hold only text, text_pair "
                                        "and id"):
        InputRows(str(tmp_path / "prep"), ["text"], ["label"])
