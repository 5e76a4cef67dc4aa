"""tfapp.atomic: a file is replaced whole or left as it was; writers never collide."""

from __future__ import annotations

from tfapp.atomic import atomic_directory, atomic_open, remove_leftovers, write_text

import pytest


def test_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "state.json"
    write_text(target, '{"a": 1}')
    write_text(target, '{"a": 2}')
    assert target.read_text() == '{"a": 2}'
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.json"]


def test_written_files_and_folders_get_the_modes_of_the_umask(tmp_path):
    """Not mkstemp's private 0600 / mkdtemp's 0700: a report or an export is meant to be
    read by the user's other tools and colleagues, like any file they write."""
    import os

    old = os.umask(0o027)
    try:
        write_text(tmp_path / "report.json", "{}")
        with atomic_directory(tmp_path / "export") as d:
            (d / "x").write_text("x")
    finally:
        os.umask(old)
    assert (tmp_path / "report.json").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "export").stat().st_mode & 0o777 == 0o750


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
    from tfapp.run_status import read_status
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


def test_remove_leftovers_takes_only_the_temporaries_of_cut_short_writes(tmp_path):
    keep = ["status.json", ".lock", ".workers", "export", "notes.tmp", ".hidden"]
    for name in keep:
        (tmp_path / name).write_text("mine")
    # What atomic_open and atomic_directory leave when killed before their rename.
    with pytest.raises(KeyboardInterrupt), atomic_open(tmp_path / "status.json") as fh:
        fh.write("half")
        temp_file = next(tmp_path.glob(".status.json.*.tmp"))
        raise KeyboardInterrupt  # (the real kill leaves it; here the file is restored below)
    temp_file.write_text("half")
    with pytest.raises(KeyboardInterrupt), atomic_directory(tmp_path / "export2") as tmp:
        temp_dir = tmp
        raise KeyboardInterrupt
    temp_dir.mkdir()
    (temp_dir / "saved_model.pb").write_text("half")
    (tmp_path / ".export.old-1a2b3c4d").mkdir()

    removed = remove_leftovers(tmp_path)

    assert sorted(removed) == sorted([temp_file.name, temp_dir.name, ".export.old-1a2b3c4d"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)
