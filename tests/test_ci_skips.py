"""The skip allowlist beside .ci/run: each entry names a test that exists and says why CI
cannot run it, and the verdict tells an unlisted skip and a stale entry apart."""

from __future__ import annotations

import re

from conftest import REPO, allowed_skips, skip_verdict


def test_every_allowlist_entry_names_an_existing_test_and_a_reason():
    allowed = allowed_skips()
    assert allowed
    for nodeid, reason in allowed.items():
        path, _, name = nodeid.partition("::")
        source = (REPO / path).read_text()
        assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", source, re.M), nodeid
        assert len(reason.split()) >= 4, (nodeid, reason)  # a reason, not a word


def test_the_verdict_names_unlisted_skips_and_stale_entries_only():
    allowed = {"tests/a.py::t1": "needs torch", "tests/a.py::t2": "needs torch"}
    skipped = {"tests/a.py::t1": "no torch", "tests/b.py::t3": "no chromium"}
    verdict = skip_verdict(skipped, {"tests/a.py::t2", "tests/b.py::t4"}, allowed)
    assert verdict == [
        "skipped, not in skips.txt: tests/b.py::t3 (no chromium)",
        "in skips.txt but ran and passed (remove the entry): tests/a.py::t2"]
    assert skip_verdict({"tests/a.py::t1": "no torch"}, set(), allowed) == []
