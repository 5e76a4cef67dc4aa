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


def test_a_truncated_or_foreign_state_file_reads_as_missing_with_one_warning(tmp_path, caplog):
    from tfapp.atomic import read_state
    from tfapp.training.status import read_status
    from tfapp.tuning.tuner import read_record

    run = tmp_path / "run"
    write_text(run / "status.json", '{"state": "finished", "metr')  # killed mid-write
    (tmp_path / "trial_3").mkdir()
    (tmp_path / "trial_3" / "tfapp_trial.json").write_bytes(b"\xff\xfe not utf-8")
    write_text(tmp_path / "list.json", "[1, 2]")
    with caplog.at_level("WARNING", logger="tfapp"):
        assert read_status(run) == {}
        assert read_record(tmp_path, "3") == {}
        assert read_state(tmp_path / "list.json", "report") is None
    assert read_state(tmp_path / "absent.json", "report") is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3 and "run status" in warnings[0] and "treating it as missing" \
        in warnings[0] and str(run / "status.json") in warnings[0]
    write_text(run / "status.json", '{"state": "finished"}')
    assert read_status(run)["state"] == "finished"
