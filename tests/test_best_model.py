"""The exported model is the best evaluation on ``trainer.monitor``, not the last epoch's,
and ``final metrics`` describe it (issue: "every task exports its best evaluation")."""

from __future__ import annotations

import csv
import json
import shutil

from tfapp.config import load_config
from tfapp.tasks import get_task
from tfapp.training.driver import train

import pytest
from conftest import CNN_RUN, REPO, shared_run


@pytest.mark.slow
def test_the_export_and_final_metrics_are_the_best_epochs(tmp_path, tmp_path_factory):
    # The session's deterministic CNN run (test_resilience's reference too): its monitor,
    # the highest validation loss, makes the first epoch the best (the loss falls as it
    # trains). Read here, never written: it is trained again below in a copy.
    run = shared_run(tmp_path_factory, *CNN_RUN)
    with (run / "history.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    losses = [float(r["val_loss"]) for r in rows]
    best = losses.index(max(losses))
    assert best < len(rows) - 1, losses  # otherwise this test proves nothing
    record = json.loads((run / "checkpoints" / "best.json").read_text())
    assert record["epoch"] == best + 1
    # The validation report scores the restored (exported) model on the validation set:
    # the same predictions Keras scored at that epoch.
    report = json.loads((run / "validation_report.json").read_text())
    assert report["macro_f1"] == pytest.approx(float(rows[best]["val_macro_f1"]), abs=1e-5)
    assert report["macro_f1"] != pytest.approx(float(rows[-1]["val_macro_f1"]), abs=1e-5)
    # The test split (the demo's test file) is scored with the same exported model.
    test = json.loads((run / "test_report.json").read_text())
    assert test["examples"] == 500
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    events = ea.EventAccumulator(str(run / "logs" / "test"), size_guidance={ea.TENSORS: 0})
    events.Reload()
    (logged,) = events.Tensors("epoch_accuracy")  # Keras's tag: on the same chart
    assert float(tensor_util.make_ndarray(logged.tensor_proto)) == pytest.approx(
        test["accuracy"], abs=1e-6)
    assert logged.step == best  # the epoch (Keras's x axis) of the exported weights
    # The export's model card says what it is, and its Python snippet runs as written.
    card = (run / "export" / "README.md").read_text()
    assert f"* weights: epoch {best + 1}, the best `val_loss`" in card
    assert "* labels (2): `negative`, `positive`" in card
    assert "| test | the demo's | 500 |" in card
    assert f"| validation | {report['accuracy']:.4f} | {report['auc']:.4f} |" in card
    assert "cut to 32 word pieces" in card and "Latin 100%" in card
    snippet = card.split("```python\n")[1].split("```")[0]
    namespace: dict = {}
    exec(snippet.replace("PATH_TO_THIS_FOLDER", str(run / "export")), namespace)  # noqa: S102
    assert namespace["out"]["probabilities"].shape == (1, 2)
    assert namespace["out"]["label"].numpy()[0].decode() in ("negative", "positive")

    # Training the finished run again (same config: allowed, output_dir aside) starts over,
    # and an earlier attempt's best is not its best: here an unbeatable record would
    # otherwise win. Its final metrics are the best epoch's row, and the summary says which
    # epoch that is.
    again_dir = tmp_path / run.name
    shutil.copytree(run, again_dir)
    record["value"] = 1e9
    (again_dir / "checkpoints" / "best.json").write_text(json.dumps(record))
    cfg = load_config(REPO / CNN_RUN[0], [f"output_dir={tmp_path}", *CNN_RUN[1:]])
    again = train(cfg, task=get_task(cfg.task))
    assert again.run_dir == again_dir
    assert json.loads((again_dir / "checkpoints" / "best.json").read_text())["value"] < 1e9
    with (again_dir / "history.csv").open() as fh:
        again_rows = list(csv.DictReader(fh))
    assert again.metrics["val_loss"] == pytest.approx(float(again_rows[best]["val_loss"]),
                                                      abs=1e-6)
    assert again.metrics["loss"] == pytest.approx(float(again_rows[best]["loss"]), abs=1e-6)
    again_test = json.loads((again_dir / "test_report.json").read_text())
    assert again.metrics["test_accuracy"] == pytest.approx(again_test["accuracy"])
    # ... and, trained from the same seed, it is the shared run again.
    assert again.metrics["val_loss"] == pytest.approx(losses[best], abs=1e-5)
    assert f"epoch {best + 1} of 3" in again.summary()
    assert "test report:" in again.summary()


def test_vocabulary_scripts_counts_writing_systems():
    from tfapp.model_card import vocabulary_scripts

    vocab = ["[PAD]", "[CLS]", "the", "##ing", "caf\u00e9", "\u03b1\u03bb\u03c6\u03b1",
             "\u4e2d", "\u6587", "1999", "!"]
    assert vocabulary_scripts(vocab) == "Latin 50%, CJK 33%, Greek 17%"
    assert vocabulary_scripts(["[PAD]", "123"]) == "no letters"
