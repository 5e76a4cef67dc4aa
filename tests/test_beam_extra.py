"""``python -m tfapp.beam_predict`` where the [beam] extra is missing (CI's venv: apache-beam
cannot share it, see scripts/check_beam.sh): one line, exit 2, before anything loads.
The pipeline itself is tested in tests/beam, in the [beam] venv."""

from __future__ import annotations

import sys

from conftest import run_tfapp


def test_without_the_beam_extra_the_command_says_so_in_one_line(monkeypatch, tmp_path):
    # As if apache_beam were not installed, also in a venv that has it.
    monkeypatch.setitem(sys.modules, "apache_beam", None)
    monkeypatch.delitem(sys.modules, "tfapp.beam_inference", raising=False)
    data = tmp_path / "in.csv"
    data.write_text("text\nfine\n")
    proc = run_tfapp("tfapp.beam_predict", ["--model", str(tmp_path / "no-run"), "--data",
                                            str(data), "--output", str(tmp_path / "out"),
                                            "--runner", "DirectRunner"])
    assert proc.returncode == 2
    assert proc.stderr == ("tfapp: error: apache-beam is not installed: it is the [beam] "
                           "extra, in a venv of its own (pip install -e '.[cpu,beam]'; "
                           "docs/scale_out.md says why)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
