"""The exported model is the best evaluation on ``trainer.monitor``, not the last epoch's,
and ``final metrics`` describe it (issue: "every task exports its best evaluation")."""

from __future__ import annotations

import csv
import json

from tfapp.config import load_config
from tfapp.tasks import get_task
from tfapp.training.driver import train

import pytest
from conftest import REPO

# The deterministic CNN classifier (as in test_resilience.py); the monitor is chosen so the
# best evaluation is the first: the highest validation loss (the loss falls as it trains).
OVERRIDES = ["model.kind=cnn", "runtime.deterministic=true", "runtime.seed=7",
             "trainer.epochs=3", "trainer.steps_per_epoch=30", "optimizer.learning_rate=3e-3",
             "trainer.monitor=val_loss",
             "trainer.monitor_mode=max"]


@pytest.mark.slow
def test_the_export_and_final_metrics_are_the_best_epochs(tmp_path):
    cfg = load_config(REPO / "configs/classifier_local.yaml",
                      [f"output_dir={tmp_path}", *OVERRIDES])
    result = train(cfg, task=get_task(cfg.task))
    run = result.run_dir
    with (run / "history.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    losses = [float(r["val_loss"]) for r in rows]
    best = losses.index(max(losses))
    assert best < len(rows) - 1, losses  # otherwise this test proves nothing
    record = json.loads((run / "checkpoints" / "best.json").read_text())
    assert record["epoch"] == best + 1
    # final metrics: the best epoch's row, and the line says which epoch it is.
    assert result.metrics["val_loss"] == pytest.approx(losses[best], abs=1e-6)
    assert result.metrics["loss"] == pytest.approx(float(rows[best]["loss"]), abs=1e-6)
    assert f"epoch {best + 1} of 3" in result.summary()
    # The validation report scores the restored (exported) model on the validation set:
    # the same predictions Keras scored at that epoch.
    report = json.loads((run / "validation_report.json").read_text())
    assert report["macro_f1"] == pytest.approx(float(rows[best]["val_macro_f1"]), abs=1e-5)
    assert report["macro_f1"] != pytest.approx(float(rows[-1]["val_macro_f1"]), abs=1e-5)
    # The test split (the demo's test file) is scored with the same exported model.
    test = json.loads((run / "test_report.json").read_text())
    assert test["examples"] == 500
    assert result.metrics["test_accuracy"] == pytest.approx(test["accuracy"])
    assert "test report:" in result.summary()
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


    # Training the finished run again (same config: allowed) starts over, and an earlier
    # attempt's best is not its best: here an unbeatable record would otherwise win.
    record["value"] = 1e9
    (run / "checkpoints" / "best.json").write_text(json.dumps(record))
    again = train(cfg, task=get_task(cfg.task))
    assert json.loads((run / "checkpoints" / "best.json").read_text())["value"] < 1e9
    assert again.metrics["val_loss"] == pytest.approx(result.metrics["val_loss"], abs=1e-5)


def test_vocabulary_scripts_counts_writing_systems():
    from tfapp.model_card import vocabulary_scripts

    vocab = ["[PAD]", "[CLS]", "the", "##ing", "caf\u00e9", "\u03b1\u03bb\u03c6\u03b1",
             "\u4e2d", "\u6587", "1999", "!"]
    assert vocabulary_scripts(vocab) == "Latin 50%, CJK 33%, Greek 17%"
    assert vocabulary_scripts(["[PAD]", "123"]) == "no letters"
