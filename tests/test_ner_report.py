"""The share report of an NER run shows its entity reports (per type and totals)."""

from __future__ import annotations

import json

from tfapp.tasks.ner.scores import entity_report


def test_share_report_shows_entity_report(tmp_path):
    from tfapp.config import load_config, save_params
    from tfapp.tracking import report

    run = tmp_path / "ner"
    save_params(load_config(None, ["task=ner"]), run)
    (run / "status.json").write_text(json.dumps({"state": "finished",
                                                 "metrics": {"val_entity_f1": 0.5}}))
    scores = entity_report([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "O"]])
    (run / "test_report.json").write_text(json.dumps(scores))
    page = report.write_report([run], tmp_path / "r.html", with_profile=False).read_text()
    section = page.split("<h3>Test report (exported model)</h3>")[1]
    assert section.startswith("<p>precision 1.0000, recall 0.5000, f1 0.6667, "
                              "token_accuracy 0.7500 (1 sentences)<br><span class='muted'>"
                              "entities: seqeval strict IOB2; seqeval's default mode (Hugging "
                              "Face run_ner's): f1 0.6667</span></p>")
    assert "<th>entity</th>" in section
    assert ("<tr><td>LOC</td><td>0.0000</td><td>0.0000</td><td>0.0000</td><td>1</td></tr>"
            "<tr><td>PER</td><td>1.0000</td><td>1.0000</td><td>1.0000</td><td>1</td></tr>"
            ) in section
