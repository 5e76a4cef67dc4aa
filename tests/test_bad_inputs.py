"""The bad-input matrix: every kind of mistake a user can make gives one line naming it.

Each row runs a real entry point's ``main(argv)`` in this process (TensorFlow loads once for
the whole table) and checks what a user relies on: a non-zero exit (2 for a user mistake),
the last stderr line ``<prog>: error: ...`` naming the offending value, no traceback, and
nothing half-written: no export, checkpoint or backup, and a run directory, if one was
started, that says ``failed``. docs/errors.md lists these messages.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from conftest import REPO

GOOD_CSV = "text,label\n" + "".join(
    f"review number {i} was {'great' if i % 2 else 'awful'},{'pos' if i % 2 else 'neg'}\n"
    for i in range(40))


def _files(tmp: Path) -> dict[str, str]:
    """Bad inputs written into ``tmp``; rows refer to them as {name}."""
    tmp.mkdir()
    (tmp / "good.csv").write_text(GOOD_CSV)
    (tmp / "empty.csv").write_text("")
    (tmp / "no_label.csv").write_text("text,stars\nfine,5\n")
    (tmp / "blank_label.csv").write_text(GOOD_CSV + "a review with no label,\n")
    (tmp / "one_class.csv").write_text("text,label\n" + "same label\tx,pos\n" * 20)
    (tmp / "unseen_label.csv").write_text("text,label\nsomething,sideways\n")
    (tmp / "binary.csv").write_bytes(b"text,label\n\xff\xfe\x00bad,pos\n")
    (tmp / "bad.yaml").write_text("trainer: {epochs: 3\n")
    (tmp / "unknown_key.yaml").write_text("trainer:\n  epochz: 3\n")
    (tmp / "list.yaml").write_text("- just\n- a list\n")
    (tmp / "not_a_model").mkdir()
    (tmp / "not_a_model" / "saved_model.pb").write_bytes(b"not a protobuf")
    (tmp / "a_file").write_text("x")
    return {p.name.split(".")[0]: str(p) for p in tmp.iterdir()}


# (id, module, argv, text the error line must contain). {out} is the output directory.
TRAIN = ["--config", "configs/classifier_local.yaml", "output_dir={out}"]
ROWS = [
    # config files
    ("config-missing", "tfapp.train", ["--config", "/no/such.yaml"], "/no/such.yaml"),
    ("config-bad-yaml", "tfapp.train", ["--config", "{bad}"], "bad.yaml"),
    ("config-unknown-key", "tfapp.train", ["--config", "{unknown_key}"], "epochz"),
    ("config-not-a-mapping", "tfapp.train", ["--config", "{list}"], "list.yaml"),
    # overrides
    ("override-unknown-key", "tfapp.train", [*TRAIN, "trainer.epochz=3"], "epochz"),
    ("override-not-key-value", "tfapp.train", [*TRAIN, "epochs"], "epochs"),
    ("override-bad-type", "tfapp.train", [*TRAIN, "trainer.epochs=many"], "trainer.epochs"),
    ("override-out-of-range", "tfapp.train", [*TRAIN, "data.batch_size=0"], "data.batch_size"),
    ("override-bad-choice", "tfapp.train", [*TRAIN, "runtime.strategy=gpu9"], "gpu9"),
    ("multi-worker-without-tf-config", "tfapp.train",
     [*TRAIN, "runtime.strategy=multi_worker"], "TF_CONFIG"),
    # output directory
    ("output-dir-unwritable", "tfapp.train",
     ["--config", "configs/classifier_local.yaml", "output_dir={a_file}/runs"], "a_file"),
    # data files and labels
    ("data-missing", "tfapp.train", [*TRAIN, "data.train_files=/no/such/file.csv"],
     "/no/such/file.csv"),
    ("data-empty", "tfapp.train", [*TRAIN, "data.train_files={empty}"], "empty.csv"),
    ("data-not-utf8", "tfapp.train", [*TRAIN, "data.train_files={binary}"], "binary.csv"),
    ("data-no-label-column", "tfapp.train", [*TRAIN, "data.train_files={no_label}"], "label"),
    ("data-blank-label", "tfapp.train", [*TRAIN, "data.train_files={blank_label}"],
     "blank_label.csv"),
    ("data-one-class", "tfapp.train", [*TRAIN, "data.train_files={one_class}"],
     "only one label"),
    ("data-unseen-validation-label", "tfapp.train",
     [*TRAIN, "data.train_files={good}", "data.validation_files={unseen_label}"], "sideways"),
    ("batch-larger-than-data", "tfapp.train",
     [*TRAIN, "data.train_files={good}", "data.batch_size=4096", "trainer.steps_per_epoch=0"],
     "data.batch_size"),
    # hub handles
    ("hub-missing-path", "tfapp.train", [*TRAIN, "model.hub_handle=/no/such/encoder"],
     "/no/such/encoder"),
    ("hub-dir-without-preprocessor", "tfapp.train",
     [*TRAIN, "model.hub_handle={not_a_model}"], "model.hub_preprocessor"),
    ("hub-unknown-builtin", "tfapp.train", [*TRAIN, "model.hub_handle=builtin:huge"],
     "builtin:huge"),
    # model directories
    ("predict-no-export", "tfapp.predict", ["--model", "{out}", "hello"], "no exported classifier"),
    ("predict-missing-input", "tfapp.predict", ["--model", "{out}", "--input", "/no/in.txt"],
     "/no/in.txt"),
    ("evaluate-missing-model", "tfapp.evaluate", ["--model", "/no/run", "--data", "{good}"],
     "/no/run"),
    ("generate-missing-model", "tfapp.generate", ["--model", "/no/run", "hello"], "/no/run"),
    # prompts
    ("generate-no-prompt", "tfapp.generate", ["--model", "{out}"], "prompt"),
    ("generate-missing-prompts-file", "tfapp.generate",
     ["--model", "{out}", "--prompts-file", "/no/prompts.txt"], "/no/prompts.txt"),
    # command-line arguments
    ("cli-unknown-command", "tfapp.cli", ["trian"], "trian"),
    ("cli-unknown-flag", "tfapp.train", ["--epochs", "3"], "--epochs"),
    ("cli-missing-required", "tfapp.predict", ["hello"], "--model"),
    ("cli-bad-number", "tfapp.generate", ["--model", "{out}", "--top-k", "many", "hi"],
     "--top-k"),
]


@pytest.mark.parametrize("module,argv,fragment", [r[1:] for r in ROWS],
                         ids=[r[0] for r in ROWS])
def test_bad_input_is_one_line_and_leaves_nothing(module, argv, fragment, tmp_path, capsys,
                                                  monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    names = _files(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(out=out, **names) for a in argv]
    try:
        code = importlib.import_module(module).main(argv)
    except SystemExit as stop:  # argparse reports its own errors this way
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert ": error: " in last and fragment in last, last
    assert last.startswith("tfapp: error:") or "usage:" in err  # argparse: usage + error
    # Nothing half-written: no model, checkpoint or backup; a started run says "failed".
    for bad in ("export", "checkpoints", "backup", ".export.tmp"):
        assert not list(out.rglob(bad)), bad
    for status in out.rglob("status.json"):
        assert json.loads(status.read_text())["state"] == "failed"


def test_a_run_that_starts_over_takes_its_data_labels_not_an_old_labels_json(tmp_path):
    """labels.json keeps a resumed run's label ids; a run that starts over (no backup, or
    --overwrite) must not refuse its data's labels because an earlier run left that file."""
    from tfapp.config import DataConfig
    from tfapp.data.classification import load_classification_splits
    from tfapp.data.errors import DataError

    (tmp_path / "labels.json").write_text('{"labels": ["neg", "pos"], "multi_label": false}')
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(
        f"text {i},{('meh', 'neg', 'pos')[i % 3]}\n" for i in range(30)))
    data = DataConfig(train_files=str(tmp_path / "train.csv"))
    with pytest.raises(DataError, match="unknown label 'meh'"):  # resuming: ids must not move
        load_classification_splits(data, 0, tmp_path / "labels.json", keep_vocab=True)
    splits = load_classification_splits(data, 0, tmp_path / "labels.json", keep_vocab=False)
    assert splits.label_names == ["meh", "neg", "pos"]
    assert json.loads((tmp_path / "labels.json").read_text())["labels"] == ["meh", "neg", "pos"]
