"""tfapp.atomic: a file is replaced whole or left as it was; writers never collide."""

from __future__ import annotations

from tfapp.atomic import atomic_open, write_text

import pytest


def test_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "state.json"
    write_text(target, '{"a": 1}')
    write_text(target, '{"a": 2}')
    assert target.read_text() == '{"a": 2}'
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.json"]


def test_an_error_while_writing_keeps_the_old_file(tmp_path):
    target = write_text(tmp_path / "params.yaml", "old: 1\n")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_open(target) as fh:
            fh.write("new: half")
            raise RuntimeError("disk full")
    assert target.read_text() == "old: 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["params.yaml"]


def test_two_writers_of_one_file_do_not_share_a_temporary(tmp_path):
    target = tmp_path / "status.json"
    with atomic_open(target) as first, atomic_open(target) as second:
        # Two temporaries side by side (a fixed temporary name would give one, shared).
        assert len([p for p in tmp_path.iterdir() if p.name.startswith(".status.json.")]) == 2
        first.write("first")
        second.write("second")
    # The inner block ends first, then the outer: the last rename wins, whole.
    assert target.read_text() == "first"
