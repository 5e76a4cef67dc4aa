"""The BERT classifier end to end: train -> export -> reload elsewhere -> predict/evaluate,
under the default strategy and two real MultiWorkerMirrored processes."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import load_config
from tfapp.demo import DEMO_DIR
from tfapp.errors import ConfigError

import numpy as np
import pytest
import tf_keras
from conftest import (
    REPO,
    run_python,
    run_tfapp,
    run_two_workers,
    saved_variables,
    subprocess_env,
    training_state,
)

LOCAL = ["--config", "configs/classifier_local.yaml"]
TEXTS = ["an absolutely wonderful film, I loved it", "terrible plot and awful acting",
         "not bad at all"]


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> Path:
    """The demo splits with each review ending in words that give its label away, as in
    test_ergonomics: 16 steps learn to rank by those (on the plain reviews they learn
    nothing measurable: test accuracy 0.48-0.52 and validation AUC ~0.46-0.49)."""
    d = tmp_path_factory.mktemp("labelled")
    for split in ("train", "validation", "test"):
        with (DEMO_DIR / f"reviews_{split}.csv").open() as fh:
            rows = list(csv.DictReader(fh))
        for row in rows:
            row["text"] += " great great" if row["label"] == "positive" else " awful awful"
        with (d / f"{split}.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows(rows)
    return d


class EpochRecorder(tf_keras.callbacks.Callback):
    """A user's own Keras callback, handed to tfapp.train."""

    def __init__(self):
        super().__init__()
        self.epochs: list[tuple[int, dict]] = []
        self.trained_model = None

    def on_train_begin(self, logs=None):
        self.trained_model = self.model

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append((epoch, dict(logs or {})))


@pytest.fixture(scope="module")
def recorder() -> EpochRecorder:
    return EpochRecorder()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, labelled, recorder):
    """One short in-process training run shared by the tests below, through the Python
    API (tfapp.train) with a user callback."""
    import tfapp

    out = tmp_path_factory.mktemp("runs")
    return tfapp.train(REPO / "configs/classifier_local.yaml", callbacks=[recorder],
                       output_dir=str(out), data={"train_files": str(labelled / "train.csv"),
                                                  "validation_files": str(
                                                      labelled / "validation.csv")})


def test_python_api_train_runs_the_users_callback_and_returns_the_run(trained, recorder):
    epochs = int(load_config(trained.paths["params"]).trainer.epochs)
    assert [e for e, _ in recorder.epochs] == list(range(epochs))
    # The user's callback runs after tfapp's: it sees their validation metrics in the logs.
    assert {"loss", "val_loss", "val_accuracy"} <= set(recorder.epochs[-1][1])
    assert recorder.trained_model is trained.model
    history = trained.history["val_loss"]
    assert history == pytest.approx([logs["val_loss"] for _, logs in recorder.epochs])
    assert trained.run_dir == Path(trained.paths["params"]).parent
    assert 0.0 <= trained.metrics["val_accuracy"] <= 1.0


def test_run_directory_holds_everything(trained):
    run = trained.run_dir
    for name in ("params.yaml", "labels.json", "history.csv", "curves.png",
                 "validation_report.json", "export/saved_model.pb", "status.json"):
        assert (run / name).exists(), name
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    assert list((run / "logs" / "train").glob("events.out.tfevents.*"))
    assert list((run / "checkpoints").glob("best*"))
    assert not (run / "backup").exists()  # BackupAndRestore cleans up after a finished run
    assert not list(run.glob(".export*"))  # no temp export left behind
    report = json.loads((run / "validation_report.json").read_text())
    assert set(report["per_class"]) == {"negative", "positive"}


def test_exported_model_reloads_without_tfapp_and_matches_keras(trained, tmp_path):
    """The serving SavedModel on raw strings == the Keras model on preprocessed features."""
    from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn
    from tfapp.hub.handles import resolve_hub_handle

    import tensorflow as tf

    _, pre = resolve_hub_handle("builtin:tiny")
    features = make_bert_preprocess_fn(hub_preprocessor=pre, seq_length=32)(tf.constant(TEXTS))
    expected = trained.model.predict(features, verbose=0)[:, 0]  # P(positive), sigmoid

    code = (
        "import json, sys, tensorflow as tf, tensorflow_text\n"
        "assert 'tfapp' not in sys.modules\n"
        f"m = tf.saved_model.load({str(trained.run_dir / 'export')!r})\n"
        f"out = m.signatures['serving_default'](text=tf.constant({TEXTS!r}))\n"
        "print(json.dumps({'p': out['probabilities'].numpy().tolist(),"
        " 'label': [s.decode() for s in out['label'].numpy()]}))\n")
    env = subprocess_env()
    env.pop("PYTHONPATH")
    proc = run_python(["-c", code], env=env, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    probs = np.array(got["p"])
    np.testing.assert_allclose(probs[:, 1], expected, atol=1e-5)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    assert got["label"] == [["negative", "positive"][int(p > 0.5)] for p in probs[:, 1]]


def test_export_holds_the_weights_and_no_training_state(trained):
    """The export's checkpoint: the model's weights (every one, nothing more), the label
    names and the tokenizer's state; no optimizer slots, counters or metrics."""
    export = trained.run_dir / "export"
    variables = saved_variables(export)
    assert training_state(export) == []
    assert {k.split("/")[0] for k in variables} == {"model_variables", "label_names",
                                                    "preprocessor"}
    params = trained.model.count_params()
    assert sum(n for k, n in variables.items() if k.startswith("model_variables/")) == params
    data = sum(f.stat().st_size for f in (export / "variables").glob("variables.data-*"))
    assert data <= 1.05 * 4 * params  # float32 weights, with a little room for the rest


def _keras_model_export(trained, out: Path) -> Path:
    """The run's model written as exports were before they held only what serving needs:
    the serving module tracking the trained Keras model (its optimizer and compiled
    metrics with it) and the whole Hub preprocessor, saved with TensorFlow's defaults."""
    import shutil

    from tfapp.hub.handles import resolve_hub_handle
    from tfapp.tasks.classifier.export import ClassifierServing

    import tensorflow as tf
    import tensorflow_hub as hub

    class KerasModelServing(ClassifierServing):
        def __init__(self, model, preprocessor, **kwargs):
            super().__init__(model, preprocessor, **kwargs)
            del self.model_variables
            self.model, self.preprocessor = model, preprocessor

    export = trained.run_dir / "export"
    metadata = json.loads((export / "tfapp_export.json").read_text())
    serving = KerasModelServing(trained.model, hub.load(resolve_hub_handle("builtin:tiny")[1]),
                                seq_length=metadata["seq_length"],
                                label_names=metadata["label_names"], mode="binary",
                                text_pair=False)
    tf.saved_model.save(serving, str(out), signatures={"serving_default": serving.serve})
    shutil.copy(export / "tfapp_export.json", out)
    return out


def test_an_export_holding_the_keras_model_still_predicts_and_exports_the_same(
        trained, tmp_path):
    """An export written before exports left training state out loads, predicts the
    probabilities of today's export of the same weights (within 1e-6), and export-hf
    writes the same checkpoint from either."""
    import shutil

    from tfapp.export_hf import main as export_hf
    from tfapp.serving import PREDICT
    from tfapp.tasks import load_export

    from safetensors.numpy import load_file

    old_run = tmp_path / "old_run"
    shutil.copytree(trained.run_dir, old_run, ignore=shutil.ignore_patterns(
        "export", "logs", "checkpoints"))
    old = _keras_model_export(trained, old_run / "export")
    assert any(k.startswith("model/optimizer/") for k in saved_variables(old))  # the old layout
    p_old, l_old = load_export(old_run, PREDICT).predict(TEXTS)
    p_new, l_new = load_export(trained.run_dir, PREDICT).predict(TEXTS)
    np.testing.assert_allclose(p_new, p_old, atol=1e-6, rtol=0)
    assert l_new == l_old and np.ptp(p_new[:, 1]) > 1e-3  # texts differ: a real comparison
    for run in (old_run, trained.run_dir):
        assert export_hf([str(run), "--out", str(tmp_path / run.name / "hf")]) == 0
    want = load_file(str(tmp_path / trained.run_dir.name / "hf" / "model.safetensors"))
    got = load_file(str(tmp_path / "old_run" / "hf" / "model.safetensors"))
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


#: what a process that prints one prediction has no use for
TRAINING_STACK = ("tf_keras", "keras", "tensorflow_hub", "tensorflow_text", "matplotlib",
                  "PIL", "wandb", "keras_tuner", "pyarrow", "pandas", "sklearn",
                  "tfapp.training", "tfapp.tuning", "tfapp.tracking",
                  # the training input path (serving shares only data.rows: its row checks)
                  "tfapp.data.input", "tfapp.data.prepare", "tfapp.data.examples",
                  "tfapp.data.formats")


@pytest.mark.slow
def test_one_sentence_predict_imports_no_training_stack(trained):
    """A fresh ``tfapp predict TEXT`` process imports TensorFlow and what the export's
    graph needs: not Keras (tf-keras's own import in TensorFlow's __init__ left out), not
    tensorflow_text (its tokenizer ops' libraries loaded alone), nor anything of training
    (tests/test_compat.py runs the public paths, which import both); it prints what
    predict prints in this process, which imported them all."""
    code = ("import json, sys\n"
            "from tfapp import predict\n"
            f"code = predict.main(['--model', {str(trained.run_dir)!r}, '--json', *{TEXTS!r}])\n"
            "print(json.dumps({'code': code, 'modules': sorted(sys.modules)}))\n")
    proc = run_python(["-c", code], timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    *lines, last = proc.stdout.strip().splitlines()
    result = json.loads(last)
    assert result["code"] == 0 and "tensorflow" in result["modules"]
    assert [m for m in TRAINING_STACK
            if any(x == m or x.startswith(m + ".") for x in result["modules"])] == []
    rows, want = [json.loads(line) for line in lines], _predict_json(trained.run_dir)
    assert [(r["text"], r["label"]) for r in rows] == [(r["text"], r["label"]) for r in want]
    np.testing.assert_allclose([list(r["probabilities"].values()) for r in rows],
                               [list(r["probabilities"].values()) for r in want], atol=1e-6)


@pytest.mark.slow
def test_startup_bench_runs_tfapp_alone_end_to_end(trained, tmp_path):
    """scripts/bench_startup.py --tfapp-only (CI has no transformers) on this module's run:
    its whole-process jobs run, the table prints, the export it measures holds no
    training state, and tfapp's answers are the export's own predictions."""
    from tfapp.serving import PREDICT
    from tfapp.tasks import load_export

    proc = run_python([str(REPO / "scripts" / "bench_startup.py"), "--model",
                       str(trained.run_dir), "--tfapp-only", "--rows", "5", "--rounds", "1",
                       "--text", "reviews", "--work", str(tmp_path), "--json",
                       str(tmp_path / "result.json")], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| 1 sentence |" in proc.stdout and "| 5 rows |" in proc.stdout
    result = json.loads((tmp_path / "result.json").read_text())
    sizes = result["export_bytes"]
    assert sizes["training_state"] == 0 and sizes["weights"] == 4 * trained.model.count_params()
    assert sizes["export"] < 2 * sizes["weights"]
    one, rows = result["jobs"]["1"], result["jobs"]["5"]
    assert one["tfapp"]["peak_rss_mib"]["median"] > 100 and one["tfapp"]["cpu_s"]["median"] > 0
    with (tmp_path / "in-reviews-5.csv").open(newline="") as fh:
        texts = [r["text"] for r in csv.DictReader(fh)]
    model = load_export(trained.run_dir, PREDICT)
    probs, labels = model.predict([result["sentence"], *texts])
    [answer] = one["tfapp_answers"]
    assert answer["text"] == result["sentence"] and answer["label"] == labels[0]
    assert abs(answer["probabilities"][labels[0]] - probs[0].max()) < 1e-5
    assert [label for label, _ in rows["tfapp_answers"]] == labels[1:]
    np.testing.assert_allclose([p for _, p in rows["tfapp_answers"]], probs[1:].max(axis=1),
                               atol=1e-5)


@pytest.mark.slow
def test_first_prediction_bench_gives_each_phase(trained, tmp_path):
    """scripts/bench_first_prediction.py on this module's run: one fresh process, its four
    phases' CPU and memory, and the prediction ``tfapp predict`` prints."""
    from tfapp.serving import PREDICT
    from tfapp.tasks import load_export

    proc = run_python([str(REPO / "scripts" / "bench_first_prediction.py"), "--model",
                       str(trained.run_dir), "--rounds", "1", "--sentence", TEXTS[1],
                       "--json", str(tmp_path / "phases.json")], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1].startswith("| **total** | ")
    [[run]] = json.loads((tmp_path / "phases.json").read_text())["runs"].values()
    marks = run["marks"]
    assert len(marks) == 4 and all(m["cpu_s"] > 0 for m in marks)
    assert marks[1]["rss_mib"] > 100  # TensorFlow's libraries, mapped at its import
    probs, labels = load_export(trained.run_dir, PREDICT).predict([TEXTS[1]])
    assert run["prediction"]["text"] == TEXTS[1] and run["prediction"]["label"] == labels[0]
    np.testing.assert_allclose(list(run["prediction"]["probabilities"].values()), probs[0],
                               atol=1e-6)


def test_first_calls_skip_graph_rewrites_for_one_call_only_and_restore_them():
    from tfapp.serving import BATCH, first_calls

    import tensorflow as tf

    def rewrites_off() -> bool:
        return tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer",
                                                                   False)

    assert not rewrites_off()
    with first_calls(BATCH):
        assert rewrites_off()
    assert not rewrites_off()
    with first_calls(BATCH + 1):
        assert not rewrites_off()


def test_predict_and_evaluate_commands(trained, labelled, tmp_path):
    proc = run_tfapp("tfapp.predict", ["--model", str(trained.run_dir), "--json", *TEXTS])
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.strip().splitlines()]
    assert [r["text"] for r in rows] == TEXTS
    assert all(set(r["probabilities"]) == {"negative", "positive"} for r in rows)
    # The Python API's predictor answers as the command does.
    predictor = tfapp.load(trained.run_dir)
    assert predictor.task == "classifier"
    api_rows = predictor.predict(TEXTS)
    assert [r["label"] for r in api_rows] == [r["label"] for r in rows]
    for got, want in zip(api_rows, rows, strict=True):
        assert got["probabilities"] == pytest.approx(want["probabilities"], abs=1e-6)

    data = tmp_path / "test.csv"
    data.write_text("text,label\n" + "".join(f"\"{t}\",{lab}\n" for t, lab in zip(
        TEXTS, ["positive", "negative", "positive"], strict=True)))
    proc = run_tfapp("tfapp.evaluate", ["--model", str(trained.run_dir), "--data",
                                        str(data), "--json"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["examples"] == 3

    # The held-out split. The model ranks it far better than chance (AUC 0.5); 16 steps
    # do not reliably move its 0.5 threshold, so accuracy is checked against predict's
    # labels, not against a bar. Measured over 3 runs: AUC 1.0 each, accuracy 0.52, 0.56,
    # 0.52 (at 10x the learning rate, 3 runs: AUC 0.97-1.0, accuracy 0.48-0.99).
    with (labelled / "test.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    proc = run_tfapp("tfapp.evaluate", ["--model", str(trained.run_dir), "--data",
                                        str(labelled / "test.csv"), "--json"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["examples"] == len(rows) and report["auc"] >= 0.9, report
    api_report = predictor.evaluate(labelled / "test.csv")
    assert api_report["accuracy"] == report["accuracy"] and api_report["auc"] == report["auc"]
    with pytest.raises(ConfigError, match="does not generate"):
        predictor.generate(["a prompt"])
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(row["text"] + "\n" for row in rows))
    proc = run_tfapp("tfapp.predict", ["--model", str(trained.run_dir), "--input",
                                       str(texts), "--json"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    predicted = [json.loads(line)["label"] for line in proc.stdout.strip().splitlines()]
    right = sum(p == row["label"] for p, row in zip(predicted, rows, strict=True))
    assert report["accuracy"] == pytest.approx(right / len(rows))
    majority = max(Counter(row["label"] for row in rows).values()) / len(rows)
    assert report["accuracy"] >= majority - 0.05  # never worse than one class throughout

    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nfine movie,positive\nodd one,sideways\n")
    proc = run_tfapp("tfapp.evaluate", ["--model", str(trained.run_dir), "--data",
                                        str(bad)])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("tfapp: error:")
    assert "bad.csv" in proc.stderr and "sideways" in proc.stderr and "Traceback" not in proc.stderr


# Run first in a fresh interpreter: tfapp is installed in the venv (an editable install
# that `python -I` still finds), so a finder refusing it makes the process one without
# tfapp; the assertion proves it.
NO_TFAPP = """import sys
class _NoTfapp:
    def find_spec(self, name, path=None, target=None):
        if name == "tfapp" or name.startswith("tfapp."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, _NoTfapp())
try:
    import tfapp
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("tfapp is importable")
"""
SERVING_DOC = REPO / "docs" / "serving.md"


def _doc_block(fence: str, after: str) -> str:
    """The first ``fence`` code block of docs/serving.md after the heading ``after``."""
    return SERVING_DOC.read_text().split(after, 1)[1].split(f"```{fence}\n", 1)[1].split(
        "```", 1)[0]


def _for_run(block: str, run_dir: Path) -> str:
    """A doc block pointed at this run's export and at TEXTS."""
    for doc, here in (("runs/classifier/export", str(run_dir / "export")),
                      ('["a fine film", "dull and far too long"]', json.dumps(TEXTS))):
        assert doc in block, doc
        block = block.replace(doc, here)
    return block


def _predict_json(run_dir: Path) -> list[dict]:
    proc = run_tfapp("tfapp.predict", ["--model", str(run_dir), "--json", *TEXTS])
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.strip().splitlines()]


@pytest.mark.slow
def test_serving_doc_python_runs_without_tfapp_and_matches_predict(trained, tmp_path):
    """docs/serving.md's Python block, in a process where tfapp cannot be imported, gives
    what `tfapp predict` gives; the signature is the one the doc's REST section states."""
    code = NO_TFAPP + _for_run(_doc_block("python", "## From Python"), trained.run_dir) + (
        "sig = serve.structured_input_signature[1]\n"
        "import json\n"
        "print(json.dumps({'labels': labels, 'p': probabilities.tolist(),"
        " 'names': label_names, 'modules': sorted(m for m in sys.modules"
        " if m == 'tfapp' or m.startswith('tfapp.')),"
        " 'inputs': {k: [v.dtype.name, v.shape.as_list()] for k, v in sig.items()},"
        " 'outputs': {k: [v.dtype.name, v.shape.as_list()]"
        " for k, v in serve.structured_outputs.items()}}))\n")
    env = subprocess_env()
    env.pop("PYTHONPATH")
    proc = run_python(["-I", "-c", code], env=env, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["modules"] == []
    assert got["inputs"] == {"text": ["string", [None]]}
    assert got["outputs"] == {"label": ["string", [None]],
                              "probabilities": ["float32", [None, 2]]}
    # The TensorFlow Text ops the doc names are in the graph (why the import is needed).
    graph = (trained.run_dir / "export" / "saved_model.pb").read_bytes()
    for op in ("CaseFoldUTF8", "NormalizeUTF8", "RegexSplitWithOffsets",
               "WordpieceTokenizeWithOffsets", "TFText>RoundRobinTrim"):
        assert f"`{op}`" in SERVING_DOC.read_text() and op.encode() in graph, op
    rows = _predict_json(trained.run_dir)
    assert got["labels"] == [r["label"] for r in rows]
    np.testing.assert_allclose(got["p"], [[r["probabilities"][n] for n in got["names"]]
                                          for r in rows], atol=1e-6)


@pytest.mark.slow
def test_saved_model_cli_needs_tensorflow_text_and_the_doc_wrapper_works(trained, tmp_path):
    import shutil
    import subprocess
    import sys

    export = str(trained.run_dir / "export")
    cli = Path(sys.executable).parent / "saved_model_cli"
    plain = subprocess.run([str(cli if cli.exists() else shutil.which("saved_model_cli")),
                            "run", "--dir", export, "--tag_set", "serve", "--signature_def",
                            "serving_default", "--input_exprs", 'text=["x"]'],
                           capture_output=True, text=True, timeout=300, env=subprocess_env(),
                           cwd=tmp_path)
    assert plain.returncode != 0
    assert "Op type not registered 'CaseFoldUTF8'" in plain.stderr, plain.stderr[-2000:]
    command = _for_run(_doc_block("bash", "## `saved_model_cli run`"), trained.run_dir)
    assert command.startswith("python -c ")
    wrapped = subprocess.run(command.replace("python -c ", f"{sys.executable} -c ", 1),
                             shell=True, capture_output=True, text=True, timeout=300,
                             env=subprocess_env(), cwd=tmp_path)
    assert wrapped.returncode == 0, wrapped.stderr[-2000:]
    printed = wrapped.stdout.split("Result for output key label:")[1].split("Result")[0]
    labels = [part.split("'")[0] for part in printed.split("b'")[1:]]  # [b'x' b'y']
    assert labels == [r["label"] for r in _predict_json(trained.run_dir)]


@pytest.mark.parametrize("override,fragment", [
    ("model.hub_handle=/no/such/encoder", "/no/such/encoder"),
    ("data.label_column=stars", "stars"),
    ("data.train_files=/no/such/file.csv", "/no/such/file.csv"),
])
def test_bad_inputs_are_one_line(tmp_path, override, fragment):
    proc = run_tfapp("tfapp.train", [*LOCAL, f"output_dir={tmp_path}", override])
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tfapp: error:") and fragment in last
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "classifier_local" / "export").exists()


def test_predict_without_export_is_one_line(tmp_path):
    proc = run_tfapp("tfapp.predict", ["--model", str(tmp_path), "hello"])
    assert proc.returncode == 2 and "no exported classifier" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_streamed_evaluate_equals_the_in_memory_report(trained, labelled):
    """evaluate counts batch by batch; on a small file its report is scikit-learn's on all
    the rows at once (the AUC within its bins)."""
    from tfapp.training.metrics import classification_report

    predictor = tfapp.load(trained.run_dir)
    got = predictor.evaluate(labelled / "test.csv")
    with (labelled / "test.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    names = predictor.model.label_names
    probs, _ = predictor.model.predict([r["text"] for r in rows])
    want = classification_report(np.array([names.index(r["label"]) for r in rows]),
                                 probs[:, 1:], names, False)
    assert got["examples"] == want["examples"] == len(rows)
    assert got["confusion_matrix"] == want["confusion_matrix"]
    assert got["accuracy"] == pytest.approx(want["accuracy"], abs=1e-12)
    assert got["macro_f1"] == pytest.approx(want["macro_f1"], abs=1e-12)
    assert got["auc"] == pytest.approx(want["auc"], abs=1e-3)
    assert got["per_class"]["positive"]["f1"] == pytest.approx(
        want["per_class"]["positive"]["f1"], abs=1e-12)


def _scored_input(labelled: Path, tmp_path: Path) -> tuple[Path, list[dict]]:
    """300 held-out reviews with an id column, as a Kaggle test file has one."""
    with (labelled / "test.csv").open() as fh:
        rows = [{"id": f"r{i}", "text": r["text"]} for i, r in enumerate(csv.DictReader(fh))
                if i < 300]
    path = tmp_path / "in.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["id", "text"])
        writer.writeheader()
        writer.writerows(rows)
    return path, rows


def _predict_data(run_dir: Path, data: Path, output: str, *extra: str):
    return run_tfapp("tfapp.predict", ["--model", str(run_dir), "--data", str(data), "--keep",
                                       "id", "--output", output, "--part-rows", "64",
                                       "--batch-size", "24", "-q", *extra])


def test_predict_data_writes_every_row_in_order_with_its_id(trained, labelled, tmp_path):
    """predict --data: one output row per input row, in order, with the kept id and the
    labels and probabilities the Python API gives for the same texts; CSV and Parquet."""
    import pyarrow.parquet as pq

    data, rows = _scored_input(labelled, tmp_path)
    proc = _predict_data(trained.run_dir, data, str(tmp_path / "preds.csv"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{len(rows):,} rows in 5 part(s)" in proc.stderr  # 300 rows, 64 per part
    with (tmp_path / "preds.csv").open() as fh:
        got = list(csv.DictReader(fh))
    assert [g["id"] for g in got] == [r["id"] for r in rows]
    assert list(got[0]) == ["id", "label", "probabilities.negative", "probabilities.positive"]
    predictor = tfapp.load(trained.run_dir)
    want = predictor.predict([r["text"] for r in rows])
    assert [g["label"] for g in got] == [w["label"] for w in want]
    np.testing.assert_allclose([float(g["probabilities.positive"]) for g in got],
                               [w["probabilities"]["positive"] for w in want], atol=1e-6)
    # The Python API reads the same file as an iterator (no list, no JSON), and a
    # tf.data.Dataset of the texts, with the same predictions.
    streamed = predictor.predict(data, keep=["id"], batch_size=50)
    assert not isinstance(streamed, list)
    streamed = list(streamed)
    assert [s["id"] for s in streamed] == [r["id"] for r in rows]
    assert [s["label"] for s in streamed] == [w["label"] for w in want]
    import tensorflow as tf

    from_dataset = list(predictor.predict(tf.data.Dataset.from_tensor_slices(
        [r["text"] for r in rows])))
    assert [d["label"] for d in from_dataset] == [w["label"] for w in want]
    np.testing.assert_allclose([d["probabilities"]["positive"] for d in from_dataset],
                               [w["probabilities"]["positive"] for w in want], atol=1e-6)
    assert not (tmp_path / "preds.csv.parts").exists()

    proc = _predict_data(trained.run_dir, data, str(tmp_path / "preds.parquet"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = pq.read_table(tmp_path / "preds.parquet").to_pylist()
    assert [t["id"] for t in table] == [r["id"] for r in rows]
    assert [t["label"] for t in table] == [w["label"] for w in want]

    # The output is there now: the same command again is refused, the file untouched.
    before = (tmp_path / "preds.csv").read_bytes()
    proc = _predict_data(trained.run_dir, data, str(tmp_path / "preds.csv"))
    assert proc.returncode == 2 and "the file exists; nothing was written" in proc.stderr
    assert (tmp_path / "preds.csv").read_bytes() == before
    proc = _predict_data(trained.run_dir, data, str(tmp_path / "x.jsonl"), "--keep", "label")
    assert proc.returncode == 2
    assert "'label' is a column of the prediction" in proc.stderr.strip().splitlines()[-1]


def test_evaluate_output_keeps_an_id_column_in_input_order(trained, labelled, tmp_path,
                                                         capsys):
    """evaluate --keep id --output: each written row starts with its own input row's id
    (an int64 Parquet column, in an order unlike the rows'), also past a skipped bad row
    and across parts; the Python API keeps it the same way. --keep that takes a column
    evaluate writes, or without --output, is one line and exit 2."""
    from tfapp import evaluate

    import pyarrow as pa
    import pyarrow.parquet as pq

    with (labelled / "test.csv").open() as fh:
        rows = [{"id": (i * 37) % 1000 + 5000, **r} for i, r in enumerate(csv.DictReader(fh))]
    rows[5]["text"] = " "  # a bad row (empty text): skipped, its id not written
    data = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data)
    want = [r for i, r in enumerate(rows) if i != 5]
    out = tmp_path / "rows.csv"
    code = evaluate.main(["--model", str(trained.run_dir), "--data", str(data), "--keep", "id",
                          "--output", str(out), "--part-rows", "7", "--on-bad-rows", "skip",
                          "--json"])
    assert code == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert report["examples"] == len(want) and report["bad_rows"]["count"] == 1
    with out.open() as fh:
        written = list(csv.DictReader(fh))
    assert list(written[0])[:2] == ["id", "text"]
    assert [int(w["id"]) for w in written] == [r["id"] for r in want]
    assert [w["text"] for w in written] == [r["text"] for r in want]
    assert [w["gold_label"] for w in written] == [r["label"] for r in want]

    got = tfapp.load(trained.run_dir).evaluate(data, output=tmp_path / "rows.jsonl",
                                               keep=["id"], on_bad_rows="skip")
    assert got["accuracy"] == report["accuracy"]
    lines = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == [r["id"] for r in want]  # ints stay ints

    for extra, message in ((["--keep", "label", "--output", str(tmp_path / "x.jsonl")],
                            "--keep label: 'label' is a column that evaluate writes"),
                           (["--keep", "id"], "--keep id: kept columns go into the per-row "
                                              "output; give --output OUT too")):
        code = evaluate.main(["--model", str(trained.run_dir), "--data", str(data), *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and message in err[-1]
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "x.jsonl.parts").exists()


def test_predict_data_resumes_after_an_interruption_with_the_same_output(
        trained, labelled, tmp_path, monkeypatch):
    """Stopped while writing its third part, a rerun writes the parts that are missing and
    the output equals an uninterrupted run's, byte for byte."""
    from tfapp import parts

    data, rows = _scored_input(labelled, tmp_path)
    proc = _predict_data(trained.run_dir, data, str(tmp_path / "whole.jsonl"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = []
    real_write = parts.Output.write

    def write(self, index, part_rows):
        if len(written) == 2:
            raise KeyboardInterrupt  # the third part is never written
        written.append(index)
        real_write(self, index, part_rows)

    monkeypatch.setattr(parts.Output, "write", write)
    proc = _predict_data(trained.run_dir, data, str(tmp_path / "resumed.jsonl"))
    assert proc.returncode == 130 and "interrupted" in proc.stderr
    assert not (tmp_path / "resumed.jsonl").exists()
    assert sorted(p.name for p in (tmp_path / "resumed.jsonl.parts").glob("part-*")) == [
        "part-000000.jsonl", "part-000001.jsonl"]
    monkeypatch.setattr(parts.Output, "write", real_write)
    proc = _predict_data(trained.run_dir, data, str(tmp_path / "resumed.jsonl"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "3 part(s) -> " in proc.stderr and "(2 part(s) were already written)" in proc.stderr
    assert (tmp_path / "resumed.jsonl").read_bytes() == (tmp_path / "whole.jsonl").read_bytes()
    assert len((tmp_path / "whole.jsonl").read_text().splitlines()) == len(rows)


@pytest.mark.slow
def test_predict_data_killed_midway_then_rerun_gives_the_same_output(trained, labelled,
                                                                     tmp_path):
    """SIGKILL (tfapp.killpoints) as the third of five parts is about to be written: the
    rerun writes the rest, and every row equals an uninterrupted run's."""
    data, rows = _scored_input(labelled, tmp_path)
    proc = _predict_data(trained.run_dir, data, str(tmp_path / "whole.csv"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    argv = ["-m", "tfapp.predict", "--model", str(trained.run_dir), "--data", str(data),
            "--keep", "id", "--output", str(tmp_path / "killed.csv"), "--part-rows", "64"]
    proc = run_python(argv, env=subprocess_env(TFAPP_KILL_AT="predict-part@3"))
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert len(list((tmp_path / "killed.csv.parts").glob("part-*.csv"))) == 2
    proc = _predict_data(trained.run_dir, data, str(tmp_path / "killed.csv"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "(2 part(s) were already written)" in proc.stderr
    # Three processes computed these rows: ids, labels and columns must be equal, the
    # probabilities equal to float32 rounding (a busy CPU has shown a last-digit
    # difference between two processes scoring the same batch).
    killed, whole = (list(csv.DictReader((tmp_path / n).open(newline="")))
                     for n in ("killed.csv", "whole.csv"))
    assert len(whole) == len(rows)
    assert [(r["id"], r["label"]) for r in killed] == [(r["id"], r["label"]) for r in whole]
    assert list(killed[0]) == list(whole[0])
    probs = [k for k in whole[0] if k.startswith("probabilities.")]
    assert max(abs(float(a[k]) - float(b[k])) for a, b in zip(killed, whole, strict=True)
               for k in probs) < 1e-6


def test_predict_data_shards_write_every_row_once(trained, labelled, tmp_path):
    data, rows = _scored_input(labelled, tmp_path)
    out = tmp_path / "preds.jsonl"
    for index in range(2):
        proc = _predict_data(trained.run_dir, data, f"{out}/", "--shard", f"{index}/2")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert (out / "_SUCCESS").exists() == (index == 1)
    ids = [json.loads(line)["id"] for part in sorted(out.glob("part-*.jsonl"))
           for line in part.read_text().splitlines()]
    assert ids == [r["id"] for r in rows]
    proc = _predict_data(trained.run_dir, data, str(tmp_path / "one.jsonl"), "--shard", "0/2")
    assert proc.returncode == 2 and "give --output" in proc.stderr


def test_predict_data_bad_rows_name_file_and_line(trained, tmp_path):
    data = tmp_path / "in.csv"
    data.write_text("id,text\na,fine film\nb,two,fields too many\nc,dull\n")
    proc = _predict_data(trained.run_dir, data, str(tmp_path / "p.jsonl"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"tfapp: error: {data}:3: has 3 field(s) but the header has 2")
    assert "--on-bad-rows skip" in last
    proc = _predict_data(trained.run_dir, data, str(tmp_path / "q.jsonl"), "--on-bad-rows",
                         "skip")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [json.loads(line)["id"] for line in (tmp_path / "q.jsonl").open()] == ["a", "c"]
    assert "1 bad row(s) skipped" in proc.stderr


@pytest.mark.slow
def test_two_worker_processes_train_the_classifier_and_agree(tmp_path):
    args = ["runtime.strategy=multi_worker", f"output_dir={tmp_path / 'runs'}",
            # 64 of the demo's validation and test reviews, not 300 of each: both workers
            # validate every epoch and score both splits at the end, and nothing here
            # reads those scores (nor the TensorBoard extras).
            f"data.validation_files={REPO / 'tests/fixtures/reviews_validation_64.csv'}",
            f"data.test_files={REPO / 'tests/fixtures/reviews_test_64.csv'}",
            "tracking.tensorboard=false",
            # 3 epochs x 8 steps at 5e-3: the epoch loss falls by >0.1 for every seed tried
            # (2 x 6 steps at 1e-3 moved it by <0.02, within noise).
            "data.seq_length=32", "data.batch_size=16", "trainer.epochs=3",
            "trainer.steps_per_epoch=8", "trainer.steps_per_execution=2",
            "optimizer.learning_rate=5e-3"]
    w0, w1 = (np.load(p) for p in run_two_workers("tests/workers/classifier_fit.py", args,
                                                  tmp_path, timeout=420))
    assert int(w0["replicas"]) == 2
    for k in (k for k in w0.files if k.startswith("arr_")):
        np.testing.assert_allclose(w0[k], w1[k], atol=1e-6)
    run = tmp_path / "runs" / "classifier"
    assert (run / "export" / "saved_model.pb").exists()  # the chief exported
    assert not (tmp_path / "runs" / ".workers").exists()  # the other worker cleaned up
    assert w0["losses"][-1] < w0["losses"][0]


def test_evaluate_output_writes_each_row_as_the_report_counted_it(trained, labelled, tmp_path,
                                                                  capsys):
    """evaluate --output: one row per input row, in order, with the gold label; accuracy
    and the confusion matrix recomputed from the file are the report's. The Python API
    writes the same rows (another format, the same code)."""
    from tfapp import evaluate

    import pyarrow.parquet as pq

    with (labelled / "test.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    out = tmp_path / "rows.csv"
    code = evaluate.main(["--model", str(trained.run_dir), "--data", str(labelled / "test.csv"),
                          "--output", str(out), "--part-rows", "7", "--json"])
    assert code == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    with out.open() as fh:
        written = list(csv.DictReader(fh))
    assert len(written) == len(rows) == report["examples"]
    assert [w["text"] for w in written] == [r["text"] for r in rows]
    assert [w["gold_label"] for w in written] == [r["label"] for r in rows]
    names = list(report["per_class"])
    assert set(written[0]) == {"text", "label", "gold_label",
                               *(f"probabilities.{n}" for n in names)}
    right = sum(w["label"] == w["gold_label"] for w in written)
    assert right / len(written) == pytest.approx(report["accuracy"], abs=1e-12)
    confusion = [[sum(w["gold_label"] == t and w["label"] == p for w in written)
                  for p in names] for t in names]
    assert confusion == report["confusion_matrix"]
    # The file is there now: the same command again is refused, the file untouched.
    before = out.read_bytes()
    assert evaluate.main(["--model", str(trained.run_dir), "--data",
                          str(labelled / "test.csv"), "--output", str(out)]) == 2
    assert "the file exists; nothing was written" in capsys.readouterr().err
    assert out.read_bytes() == before

    got = tfapp.load(trained.run_dir).evaluate(labelled / "test.csv",
                                               output=tmp_path / "rows.parquet")
    assert got["accuracy"] == report["accuracy"]
    table = pq.read_table(tmp_path / "rows.parquet").to_pylist()
    assert [t["label"] for t in table] == [w["label"] for w in written]
    assert [t["probabilities"]["positive"] for t in table] == pytest.approx(
        [float(w["probabilities.positive"]) for w in written], abs=1e-6)
