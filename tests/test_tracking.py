"""What a run leaves for TensorBoard (scalars, graph, HParams, confusion matrix), for W&B
(an offline run, read back from its own log file) and the share report built from both."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import run_python, run_tfapp, subprocess_env

FAKE_KEY = "0123456789abcdef-not-a-real-wandb-key"


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory) -> Path:
    """One tiny classifier run (2 epochs x 8 steps) tracked to W&B offline, with an API key
    in the environment that must not leak anywhere."""
    out = tmp_path_factory.mktemp("runs")
    # conftest disables W&B (WANDB_MODE); here the config decides.
    env = {"WANDB_API_KEY": FAKE_KEY, "WANDB_MODE": None}
    started = time.perf_counter()
    proc = run_tfapp("tfapp.train", ["--config", "configs/classifier_local.yaml",
                                     f"output_dir={out}", "name=tracked",
                                     "tracking.wandb.enabled=true", "tracking.wandb.mode=offline",
                                     "tracking.wandb.tags=[smoke,ci]", "trainer.profile_steps=2,6"],
                     env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = out / "tracked"
    (run / "train_stdout.txt").write_text(proc.stdout + proc.stderr)
    (run / "wall_seconds.txt").write_text(str(time.perf_counter() - started))
    return run


def _events(logdir: Path):
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.TENSORS: 0, ea.IMAGES: 0})
    acc.Reload()
    return acc


def _scalars(acc, tag: str) -> list[float]:
    import tensorflow as tf

    return [float(tf.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)]


def test_tensorboard_scalars_graph_hparams_and_confusion_matrix(classifier_run):
    logs = classifier_run / "logs"
    train, validation = _events(logs / "train"), _events(logs / "validation")
    train_tags = train.Tags()["tensors"]
    for tag in ("epoch_loss", "epoch_accuracy", "epoch_examples_per_second",
                "epoch_step_time_ms"):
        assert len(_scalars(train, tag)) == 2, (tag, train_tags)
    assert "learning_rate" in train_tags or "epoch_learning_rate" in train_tags
    assert all(v > 0 for v in _scalars(train, "epoch_examples_per_second"))
    # The 7 timed steps of an epoch (8 minus the first call) took less than the whole
    # train command did (a step time in the wrong unit, or summed over steps, would not).
    wall = float((classifier_run / "wall_seconds.txt").read_text())
    assert all(0 < 7 * ms / 1000.0 < wall for ms in _scalars(train, "epoch_step_time_ms"))
    assert len(_scalars(validation, "epoch_loss")) == 2
    assert train.Graph() is not None and len(train.Graph().node) > 10  # the model graph

    # HParams: one session in the logs root, holding the config's scalar values.
    from tensorboard.plugins.hparams import plugin_data_pb2

    root = _events(logs)
    (start,) = [e for e in root.Tensors("_hparams_/session_start_info")]
    data = plugin_data_pb2.HParamsPluginData.FromString(
        root.summary_metadata["_hparams_/session_start_info"].plugin_data.content)
    hp = data.session_start_info.hparams
    # No trial id: the session's group is named after its hyperparameter values alone, so a
    # repeat that differs only in runtime.seed (a tuner's executions) joins the same group.
    import hashlib

    from tfapp.config import load_config
    from tfapp.training.tb_logging import hparams

    reseeded = hparams(load_config(classifier_run / "params.yaml", ["runtime.seed=12345"]))
    assert start.step == 0 and data.session_start_info.group_name == hashlib.sha256(
        json.dumps(reseeded, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert hp["optimizer.learning_rate"].number_value == pytest.approx(1e-3)
    assert hp["data.batch_size"].number_value == 16
    assert hp["model.kind"].string_value == "bert" and hp["task"].string_value == "classifier"
    # only the classifier's keys: no other task's group or key to compare runs by
    assert "data.label_column" in hp and "data.tag_column" not in hp
    assert not [k for k in hp if k.startswith(("generation.", "mlm.", "model.attention"))]

    # Confusion matrix: one image per epoch, decodable, also saved for the share report.
    import tensorflow as tf

    images = [e for e in validation.Tensors("confusion_matrix")]
    assert [e.step for e in images] == [0, 1]
    png = tf.make_ndarray(images[-1].tensor_proto)[2]  # [width, height, png bytes]
    assert tf.image.decode_png(png).shape[-1] == 4
    assert (classifier_run / "confusion_matrix.png").read_bytes()[:4] == b"\x89PNG"

    # The export's test metrics overlay the train and validation curves: Keras's tag
    # names, run logs/test, at the epoch the exported weights are from.
    test = _events(logs / "test")
    best = json.loads((classifier_run / "checkpoints" / "best.json").read_text())
    report = json.loads((classifier_run / "test_report.json").read_text())
    for name in ("accuracy", "auc", "macro_f1"):
        assert f"epoch_{name}" in validation.Tags()["tensors"]
        (point,) = test.Tensors(f"epoch_{name}")
        assert point.step == best["epoch"] - 1
        assert float(tf.make_ndarray(point.tensor_proto)) == pytest.approx(report[name])


def test_confusion_matrices_are_the_exported_models_and_agree_with_the_reports(
        classifier_run):
    for split, png in (("validation", "confusion_matrix.png"),
                       ("test", "confusion_matrix_test.png")):
        report = json.loads((classifier_run / f"{split}_report.json").read_text())
        matrix = report["confusion_matrix"]
        supports = [c["support"] for c in report["per_class"].values()]
        assert [sum(row) for row in matrix] == supports
        correct = sum(matrix[i][i] for i in range(len(matrix)))
        assert correct / report["examples"] == pytest.approx(report["accuracy"])
        recalls = [c["recall"] for c in report["per_class"].values()]
        assert [matrix[i][i] / max(1, sum(matrix[i])) for i in range(len(matrix))] == \
            pytest.approx(recalls)
        assert (classifier_run / png).read_bytes()[:4] == b"\x89PNG"


def test_the_end_of_a_run_says_where_the_profile_is_and_why_its_precision(classifier_run):
    printed = (classifier_run / "train_stdout.txt").read_text()
    from tfapp.tracking import profiler

    session = profiler.find_sessions(classifier_run)[-1]
    assert f"profile:         {session}" in printed
    assert f"summary: python -m tfapp.profile summary {classifier_run}" in printed
    header = json.loads((classifier_run / "run_header.json").read_text())
    from tfapp.runtime import precision_choice

    # auto's reason on this CPU (the suite sets TFAPP_CPU_BFLOAT16=0: "keeps float32").
    reason = precision_choice("auto", "CPU", None)[1]
    assert header["precision_reason"] == reason and reason.startswith("auto: ")
    assert f"{'precision:':21} {header['precision']} ({reason})" in printed
    assert "val_report_auc, test_auc: the exact ROC AUC" in printed  # which AUC is which


@pytest.mark.parametrize("task", ["classifier", "generator", "ner", "mlm"])
def test_hparams_hold_the_keys_of_the_run_task_only(task):
    from tfapp.config import load_config
    from tfapp.training.tb_logging import hparams

    keys = set(hparams(load_config(None, [f"task={task}"])))
    assert ("data.tag_column" in keys) == (task == "ner")
    assert ("data.label_column" in keys) == (task == "classifier")
    assert ("data.context_words" in keys) == (task == "generator")
    assert ("trainer.monitor" in keys) == (task != "mlm")
    assert not [k for k in keys if k.startswith(("generation.", "mlm.", "tune."))]
    assert {"task", "data.batch_size", "model.kind", "optimizer.learning_rate"} <= keys


def test_throughput_times_the_steps_after_the_first_call(tmp_path, monkeypatch):
    """Examples/s and step time from a scripted clock: the epoch's first call (tracing)
    is left out, batch indices count steps (steps_per_execution), and an epoch of one call
    is timed from the epoch's start."""
    from tfapp.training import tb_logging

    import tensorflow as tf

    now = [0.0]
    monkeypatch.setattr(tb_logging, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    cb = tb_logging.Throughput(tmp_path / "train", per_replica_batch=16)
    cb.set_model(tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)]))

    def epoch(epoch: int, calls: list[tuple[int, float]]) -> dict:
        now[0] = 100.0 * epoch
        cb.on_epoch_begin(epoch)
        for batch, t in calls:
            now[0] = 100.0 * epoch + t
            cb.on_train_batch_end(batch)
        cb.on_epoch_end(epoch)
        return cb.history[-1]

    # First call 5 s (tracing), then 0.5 s per step: 500 ms, 16 / 0.5 = 32 examples/s.
    assert epoch(0, [(0, 5.0), (1, 5.5), (2, 6.0), (3, 6.5)]) == pytest.approx(
        {"step_time_ms": 500.0, "examples_per_second": 32.0})
    # steps_per_execution=4: calls end at batches 3, 7, 11 -> 8 steps in 2 s.
    assert epoch(1, [(3, 5.0), (7, 6.0), (11, 7.0)]) == pytest.approx(
        {"step_time_ms": 250.0, "examples_per_second": 64.0})
    # One call per epoch (8 steps in 4 s, tracing included: nothing else to time).
    assert epoch(2, [(7, 4.0)]) == pytest.approx(
        {"step_time_ms": 500.0, "examples_per_second": 32.0})
    assert _scalars(_events(tmp_path / "train"), "epoch_step_time_ms") == pytest.approx(
        [500.0, 250.0, 500.0])


def _wandb_records(run_dir: Path) -> list:
    """The records of an offline run's ``run-ID.wandb`` file: wandb's LevelDB-log format
    (32 KiB blocks; 7-byte file header, 7-byte record headers, records split across
    blocks as FIRST/MIDDLE/LAST), each a ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pos, block, parts = [], 7, 32768, b""
    while pos + 7 <= len(data):
        room = block - pos % block
        if room < 7:  # a block's tail too short for a header is padding
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            pos += room
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):  # FULL or LAST: a whole record
            records.append(pb.Record.FromString(parts))
    return records


def test_wandb_offline_run_holds_config_metrics_summary_and_model(classifier_run):
    records = _wandb_records(classifier_run)
    by_kind: dict[str, list] = {}
    for r in records:
        by_kind.setdefault(r.WhichOneof("record_type"), []).append(r)

    (run,) = by_kind["run"]
    assert run.run.display_name == classifier_run.name
    assert list(run.run.tags) == ["smoke", "ci"]
    config = {i.key: json.loads(i.value_json) for i in run.run.config.update}
    assert config["optimizer"]["learning_rate"] == pytest.approx(1e-3)
    assert config["task"] == "classifier"

    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in r.history.item} for r in by_kind["history"]]
    steps = [h for h in history if "batch/loss" in h]
    assert [h["optimizer_step"] for h in steps] == list(range(1, 17))  # every step
    assert all(h["batch/loss"] > 0 for h in steps)
    lrs = [h["batch/learning_rate"] for h in steps]  # the linear schedule's decay
    assert lrs[0] == pytest.approx(1e-3) and lrs == sorted(lrs, reverse=True) and lrs[-1] < 1e-4
    epochs = [h for h in history if "epoch/loss" in h]
    assert [h["epoch"] for h in epochs] == [1, 2]
    assert all("epoch/val_loss" in h and "epoch/val_accuracy" in h for h in epochs)

    summary = {}
    for r in by_kind["summary"]:
        summary.update({i.key or "/".join(i.nested_key): i.value_json
                        for i in r.summary.update})
    # The summary describes the exported model: the best epoch's numbers and its test report.
    best = json.loads((classifier_run / "checkpoints" / "best.json").read_text())
    assert float(summary["val_accuracy"]) == pytest.approx(
        epochs[best["epoch"] - 1]["epoch/val_accuracy"])
    test = json.loads((classifier_run / "test_report.json").read_text())
    assert float(summary["test_accuracy"]) == pytest.approx(test["accuracy"])
    # One value per metric: no curve's last point under another name (epoch/val_accuracy,
    # validation/epoch_accuracy: the last epoch's, not the exported model's).
    accuracy_keys = sorted(k for k in summary if "accuracy" in k)
    assert accuracy_keys == ["accuracy", "test_accuracy", "val_accuracy", "val_report_accuracy"]

    (artifact,) = by_kind["artifact"]
    assert artifact.artifact.type == "model"
    assert artifact.artifact.name == f"{classifier_run.name}-model"
    files = {e.path for e in artifact.artifact.manifest.contents}
    assert "saved_model.pb" in files

    printed = (classifier_run / "train_stdout.txt").read_text()
    assert "W&B (offline):" in printed and "wandb sync" in printed


def test_api_key_is_never_written(classifier_run):
    leaks = [p for p in classifier_run.rglob("*") if p.is_file()
             and FAKE_KEY.encode() in p.read_bytes()]
    assert leaks == []


def test_online_without_a_key_runs_offline_and_never_prompts(tmp_path, monkeypatch):
    from tfapp.config import load_config
    from tfapp.tracking import wandb_run

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = load_config(None, ["tracking.wandb.enabled=true", "tracking.wandb.mode=online",
                             f"output_dir={tmp_path}", "name=nokey"])
    assert not wandb_run.has_api_key()
    tracker = wandb_run.start(cfg, tmp_path / "nokey")
    try:
        assert tracker is not None and tracker.mode == "offline"
        assert tracker.directory.name.startswith("offline-run-")
    finally:
        lines = tracker.finish() if tracker else []
    assert "wandb sync" in lines[0]

    off = load_config(None, ["tracking.wandb.enabled=true", "tracking.wandb.mode=disabled"])
    assert wandb_run.start(off, tmp_path) is None
    assert wandb_run.start(cfg, tmp_path, is_chief=False) is None


def _run_record(records: list):
    (run,) = [r for r in records if r.WhichOneof("record_type") == "run"]
    return run.run


def test_wandb_honours_the_wandb_environment_variables(tmp_path):
    """WANDB_PROJECT, _ENTITY, _RUN_GROUP, _TAGS, _NAME, _DIR, _MODE are read (by wandb
    itself) where the config does not set the key; a key set in the config wins."""
    from tfapp.config import load_config
    from tfapp.tracking import wandb_run

    # A fresh process: wandb reads its variables once, at its first setup in a process.
    elsewhere = tmp_path / "wandb_dir"
    elsewhere.mkdir()
    env = subprocess_env(WANDB_PROJECT="env-project", WANDB_ENTITY="env-team",
                         WANDB_RUN_GROUP="env-group", WANDB_TAGS="nightly,gpu",
                         WANDB_NAME="env-name", WANDB_DIR=str(elsewhere),
                         WANDB_MODE="offline", NETRC=str(tmp_path / "no-netrc"))
    env.pop("WANDB_API_KEY", None)
    script = ("import sys; from pathlib import Path; from tfapp.config import load_config; "
              "from tfapp.tracking import wandb_run; "
              "cfg = load_config(None, ['tracking.wandb.enabled=true', "
              "'tracking.wandb.tags=[mine]', 'output_dir=' + sys.argv[1], 'name=envrun']); "
              "t = wandb_run.start(cfg, Path(sys.argv[1]) / 'envrun'); print(t.mode); "
              "t.finish()")
    proc = run_python(["-c", script, str(tmp_path)], env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["offline"]  # from WANDB_MODE
    run = _run_record(_wandb_records(elsewhere))  # WANDB_DIR, not the run directory
    assert (run.project, run.entity, run.run_group, run.display_name) == (
        "env-project", "env-team", "env-group", "env-name")
    assert list(run.tags) == ["mine", "nightly", "gpu"]
    assert not (tmp_path / "envrun" / "wandb").exists()

    # Config keys beat the variables; without either, tfapp's defaults.
    env = {"WANDB_MODE": "disabled", "WANDB_PROJECT": "env-project"}
    cfg = load_config(None, ["tracking.wandb.enabled=true", "tracking.wandb.mode=offline",
                             "tracking.wandb.project=cfg-project", f"output_dir={tmp_path}",
                             "name=cfgrun"])
    args = wandb_run.init_args(cfg, tmp_path / "cfgrun", env=env)
    assert (args["project"], args["mode"]) == ("cfg-project", "offline")
    assert wandb_run.init_args(cfg, tmp_path, env={})["dir"] == str(tmp_path)
    bare = load_config(None, ["tracking.wandb.enabled=true", "name=bare"])
    assert {k: v for k, v in wandb_run.init_args(bare, tmp_path, env={}).items()} == {
        "project": "tfapp", "entity": None, "name": "bare", "group": None, "tags": None,
        "dir": str(tmp_path), "mode": "offline"}
    assert wandb_run.init_args(bare, tmp_path, env=env)["mode"] == "disabled"
    assert wandb_run.start(bare, tmp_path) is None  # conftest's WANDB_MODE=disabled, auto


def test_wandb_names_a_search_trial_after_the_trial(tmp_path):
    from tfapp.config import load_config
    from tfapp.tracking import wandb_run

    trial = load_config(None, ["tracking.wandb.enabled=true",
                               "tracking.wandb.tags=[search:lr]",
                               f"output_dir={tmp_path}/lr/trial_03", "name=run_0"])
    args = wandb_run.init_args(trial, tmp_path, env={})
    assert (args["name"], args["group"]) == ("trial_03", "lr")
    repeat = load_config(None, ["tracking.wandb.enabled=true", "tracking.wandb.tags=[search:lr]",
                                f"output_dir={tmp_path}/lr/trial_03", "name=run_1"])
    assert wandb_run.init_args(repeat, tmp_path, env={})["name"] == "trial_03/run_1"


def test_share_report_is_self_contained_and_renders(classifier_run, tmp_path):
    """Two runs (the tracked one and a copy) -> one HTML file: comparison, curves, confusion
    matrix, profile summary, configs; nothing fetched from anywhere; a headless Chromium
    draws it (a screenshot with the charts' colours in it)."""
    other = tmp_path / "copy_of_run"
    shutil.copytree(classifier_run, other)
    out = tmp_path / "report.html"
    proc = run_tfapp("tfapp.share", [str(classifier_run), str(other), "--out", str(out)],
                     env={"WANDB_API_KEY": None})
    assert proc.returncode == 0, proc.stderr[-2000:]
    (offline,) = classifier_run.glob("wandb/offline-run-*")
    assert f"upload with: wandb sync {offline}" in proc.stdout  # no key: the exact command
    assert f"report (2 runs): {out}" in proc.stdout

    page = out.read_text()
    # Self-contained: no scripts, no external stylesheets/images, no URL but SVG's namespace.
    assert "<script" not in page and "<link" not in page
    # The only URLs are SVG's namespace names (identifiers, never fetched).
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg",
                                                              "http://www.w3.org/1999/xlink"}
    assert all(src.startswith("data:") for src in re.findall(r"src='([^']*)'", page))
    assert "<h2>Comparison</h2>" in page and page.count("<svg") >= 8
    charts = page.split("<svg")[1:]
    assert all(_ticks_are_round(chart) for chart in charts)
    assert any('aria-label="learning rate"' in c for c in charts)
    # each run's confusion matrices, validation and test: the exported model's
    assert page.count("data:image/png;base64,") == 4
    assert "Confusion matrices (exported model, as in the reports)" in page
    assert "Test report (exported model)" in page and "auc: exact ROC AUC" in page
    assert "test (exported model)" in page  # the test point on the metric charts
    assert "waiting on input:" in page and "top ops by self time" in page
    assert "learning_rate: 0.001" in page  # the resolved config
    assert FAKE_KEY not in page
    _assert_titles_whole_and_captions_with_their_figures(out, tmp_path)

    # Tall enough for the first run's own curves (train blue, validation red): in the
    # comparison charts the copy's red line covers the original's blue one.
    pixels = _rendered_pixels(out, tmp_path / "shot.png", height=2600)
    import numpy as np

    assert len(np.unique(pixels, axis=0)) > 50  # text, tables, charts -- not a blank page
    for colour in ((0x1F, 0x77, 0xB4), (0xD6, 0x27, 0x28)):  # the curves' colours
        assert (pixels == colour).all(axis=1).sum() > 200


def _chromium() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        # .ci/run installs it and sets CI: there a missing browser is a failure, not a skip.
        message = "no chromium here (apt-get install chromium) for the rendering check"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must have it (.ci/run installs it)")
        pytest.skip(message)
    return chromium


#: Measures the laid-out page once it has loaded (images decoded) and leaves the numbers
#: on <body> for --dump-dom: per figure, the gap from its image down to its caption's
#: words and how far the words' centre is from the image's; every chart text that lies
#: outside its chart (a cut title).
_LAYOUT_JS = """<script>addEventListener('load', () => {
  const box = e => e.getBoundingClientRect();
  const figures = [...document.querySelectorAll('figure')].map(f => {
    const img = f.querySelector('img'), words = document.createRange();
    words.selectNodeContents(f.querySelector('figcaption'));  // the words, not the block
    const i = box(img), c = words.getBoundingClientRect();
    return {caption: words.toString(), gap: c.top - i.bottom,
            offset: (c.left + c.right - i.left - i.right) / 2,
            scaled: img.naturalWidth - i.width};
  });
  const cut = [...document.querySelectorAll('svg.chart')].flatMap(svg => {
    const s = box(svg);
    return [...svg.querySelectorAll('text')].filter(t => {
      const b = box(t);
      return b.left < s.left || b.right > s.right || b.top < s.top || b.bottom > s.bottom;
    }).map(t => t.textContent);
  });
  document.body.setAttribute('data-layout', JSON.stringify({figures, cut}));
});</script>"""


def _assert_titles_whole_and_captions_with_their_figures(page: Path, tmp_path: Path) -> None:
    """The report as a browser lays it out (headless chromium's --dump-dom of a copy with
    a measuring script; the report itself has none): no chart text cut at the chart's
    edge, each confusion matrix (a PNG with its title drawn in) shown at its own size with
    its title clear of the image's edges, and each caption centred right under its image.
    The matrices' titles used to run off the PNG ("validation, exported model (epoch")
    and the captions sat at the left, away from their matrices."""
    import base64
    import html
    import io

    import numpy as np
    from PIL import Image

    probe = tmp_path / "layout_probe.html"
    probe.write_text(page.read_text().replace("</body>", _LAYOUT_JS + "</body>"))
    dom = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-dev-shm-usage", "--window-size=1400,2000", "--dump-dom",
                          probe.as_uri()], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    layout = json.loads(html.unescape(re.search(r'data-layout="([^"]*)"', dom).group(1)))
    assert layout["cut"] == []
    figures = layout["figures"]
    assert sorted(f["caption"] for f in figures) == ["test", "test", "validation",
                                                     "validation"]
    for f in figures:
        assert f["scaled"] == 0, f  # shown at its own size: nothing squeezed or cropped
        assert 0 <= f["gap"] <= 5 and abs(f["offset"]) <= 2, f
    for png in re.findall(r"data:image/png;base64,([^']*)", page.read_text()):
        pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(png))).convert("L"))
        edges = np.concatenate([pixels[:, :2].ravel(), pixels[:, -2:].ravel(),
                                pixels[:2].ravel(), pixels[-2:].ravel()])
        assert (edges == 255).all(), "a confusion matrix's drawing runs off its PNG"


def _rendered_pixels(page: Path, shot: Path, *, height: int):
    """The RGB pixels ([n, 3]) of ``page`` rendered 1200 wide by headless chromium."""
    subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", f"--window-size=1200,{height}",
                    f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)


def _ticks(svg: str) -> dict[str, list[float]]:
    """The tick labels of a matplotlib SVG chart, per axis, as numbers."""
    found = re.findall(r'<g id="([xy])tick_\d+">.*?<text[^>]*>([^<]*)</text>', svg, re.S)
    ticks: dict[str, list[float]] = {"x": [], "y": []}
    for axis, label in found:
        ticks[axis].append(float(label.replace("\u2212", "-")))
    return ticks


def _ticks_are_round(svg: str) -> bool:
    """Every axis has >= 2 ticks, evenly spaced by 1, 2, 2.5 or 5 x 10^k, each a whole
    multiple of that step (0.4, 0.6, 0.8 -- not 0.4637, 0.6783)."""
    import math

    for values in _ticks(svg).values():
        if len(values) < 2:
            return False
        step = values[1] - values[0]
        mantissa = step / 10 ** math.floor(math.log10(step))
        if not any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 2.5, 5, 10)):
            return False
        for v in values:
            if not math.isclose(v / step, round(v / step), abs_tol=1e-6):
                return False
        if not all(math.isclose(b - a, step, rel_tol=1e-6)
                   for a, b in zip(values, values[1:], strict=False)):
            return False
    return True


def test_round_ticks_check_refuses_the_old_hand_drawn_axes():
    """The check above can fail: evenly spaced but unround labels, as the report drew."""
    old = "".join(f'<g id="ytick_{i}"><text>{v}</text></g>'
                  for i, v in enumerate(["0.4637", "0.5710", "0.6783"]))
    old += '<g id="xtick_1"><text>1</text></g><g id="xtick_2"><text>2</text></g>'
    assert not _ticks_are_round(old)
    assert _ticks_are_round(old.replace("0.4637", "0.4").replace("0.5710", "0.5")
                            .replace("0.6783", "0.6"))


def test_learning_rate_chart_has_no_negative_tick():
    """A decaying learning rate (5e-4 down to 3e-5): round ticks, none below zero (the
    hand-drawn axis padded past 0 and showed -3.71e-05)."""
    from tfapp.tracking import report

    svg = report.svg_chart("learning rate", [("train", [(e, 5e-4 * (1 - e / 7))
                                                         for e in range(1, 7)])])
    ticks = _ticks(svg)
    assert _ticks_are_round(svg) and min(ticks["y"]) >= 0.0 and ticks["x"] == list(
        map(float, range(1, 7)))
    assert 'aria-label="learning rate"' in svg and not svg.startswith("<?xml")


def test_report_shows_generator_samples_and_curves_from_event_files(tmp_path):
    """A generator-shaped run written with tf.summary (as TextSamples and Keras write it)."""
    from tfapp.config import load_config, save_params
    from tfapp.tracking import report

    import tensorflow as tf

    run = tmp_path / "gen"
    save_params(load_config(None, ["task=generator", "model.kind=seq2seq"]), run)
    (run / "status.json").write_text(json.dumps({"state": "finished",
                                                 "metrics": {"val_loss": 3.5}}))
    for sub, losses in (("train", [5.0, 4.0, 3.0]), ("validation", [5.5, 4.5, 3.5])):
        with tf.summary.create_file_writer(str(run / "logs" / sub)).as_default():
            for step, loss in enumerate(losses):
                tf.summary.scalar("epoch_loss", loss, step=step)
    with tf.summary.create_file_writer(str(run / "logs" / "samples")).as_default():
        for step, text in ((0, "noise"), (3, "the river runs <home>")):
            tf.summary.text("generated_text", "| prompt | greedy continuation |\n|---|---|\n"
                            f"| in the | {text} |", step=step)
    page = report.write_report([run], tmp_path / "r.html", with_profile=False).read_text()

    assert "<h3>Generated samples (epoch 3)</h3>" in page
    assert "<td>in the</td><td>the river runs &lt;home&gt;</td>" in page  # escaped
    assert "noise" not in page  # the latest samples only
    (loss_chart,) = [c for c in page.split("<svg")[1:] if 'aria-label="loss"' in c]
    assert 'id="series-0"' in loss_chart and 'id="series-1"' in loss_chart  # train, validation
    assert ">train</text>" in loss_chart and ">validation</text>" in loss_chart  # the legend
    ticks = _ticks(loss_chart)
    assert ticks["x"] == [1.0, 2.0, 3.0]  # epochs, from 1
    assert _ticks_are_round(loss_chart) and min(ticks["y"]) <= 3.0 and max(ticks["y"]) >= 5.0
    assert "val_loss" in page and "task: generator" in page


def test_a_killed_run_reads_as_died_in_the_report(tmp_path):
    """status.json still says running after a SIGKILL: its writer's pid is gone."""
    from tfapp.config import load_config, save_params
    from tfapp.run_status import read_status, write_status
    from tfapp.tracking import report

    run = tmp_path / "killed"
    save_params(load_config(None, []), run)
    write_status(run, "running")
    assert read_status(run)["state"] == "running"  # this process wrote it and is alive
    gone = subprocess.Popen(["true"])
    gone.wait()
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**status, "pid": gone.pid}))
    assert read_status(run)["state"] == "died"
    assert f"process {gone.pid} ended without writing a final status" in read_status(run)["error"]
    elsewhere = {**status, "pid": gone.pid, "host": "another-host"}
    (run / "status.json").write_text(json.dumps(elsewhere))
    assert read_status(run)["state"] == "running"  # cannot tell from here
    (run / "status.json").write_text(json.dumps({**status, "pid": gone.pid}))
    page = report.write_report([run], tmp_path / "r.html", with_profile=False).read_text()
    assert "state died" in page and "rerun the same command to resume" in page
    assert read_status(tmp_path / "nothing") == {}


def test_share_out_an_existing_folder_writes_the_report_inside_it(tmp_path, capsys):
    """--out FOLDER used to end in IsADirectoryError (the report renamed over the folder);
    the report goes inside it and the folder's files stay as they were."""
    from tfapp import share
    from tfapp.config import load_config, save_params

    save_params(load_config(None, []), tmp_path / "run")
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    assert share.main([str(tmp_path / "run"), "--no-sync", "--no-profile",
                       "--out", str(folder)]) == 0
    assert f"report (1 run): {folder / 'tfapp_report.html'}" in capsys.readouterr().out
    assert "<html" in (folder / "tfapp_report.html").read_text()
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt", "tfapp_report.html"]
    assert (folder / "notes.txt").read_text() == "keep me"


def test_share_out_without_html_gets_it_added(tmp_path, capsys):
    """--out report wrote a file named 'report', which no browser opens as a page."""
    from tfapp import share
    from tfapp.config import load_config, save_params

    save_params(load_config(None, []), tmp_path / "run")
    for given, written in (("report", "report.html"), ("report.v2", "report.v2.html"),
                           ("mine.HTML", "mine.HTML"), ("old.htm", "old.htm")):
        assert share.main([str(tmp_path / "run"), "--no-sync", "--no-profile",
                           "--out", str(tmp_path / given)]) == 0
        assert f"report (1 run): {tmp_path / written}" in capsys.readouterr().out
        assert "<html" in (tmp_path / written).read_text()
    assert not (tmp_path / "report").exists()


def _fake_search(root: Path) -> Path:
    """A finished tuner search folder as tfapp.tune leaves it (trials with their runs,
    results.json, search.yaml, best_params.yaml), without training anything: fixed numbers
    and a failed trial for the page's and the rendering's details. That share reads what
    tfapp.tune really writes is checked on a real search, in test_tune's
    test_killed_search_resumes_and_best_config_trains."""
    from tfapp.config import load_config, save_params, to_yaml
    from tfapp.run_status import write_status

    search = root / "lr_search"
    cfg = load_config(None, ["name=lr_search", f"output_dir={root}", "tune.tuner=bayesian",
                             "tune.objective=val_accuracy"])
    search.mkdir(parents=True)
    (search / "search.yaml").write_text(to_yaml(cfg))
    trials = [("0", 1e-4, "cnn", 0.61), ("1", 3e-3, "rnn", 0.74), ("2", 5e-2, "cnn", 0.55),
              ("3", 1e-3, "rnn", None)]
    rows = []
    for trial, lr, kind, score in trials:
        run = search / f"trial_{trial}" / "run_0"
        save_params(cfg, run)
        write_status(run, "finished" if score is not None else "failed",
                     metrics={"val_accuracy": score} if score is not None else None)
        rows.append({"trial": trial, "status": "COMPLETED" if score is not None else "FAILED",
                     "objective": score, "seconds": 12.0,
                     "values": {"optimizer.learning_rate": lr, "model.kind": kind}})
    # results.json lists them in KerasTuner's order, not sorted
    (search / "results.json").write_text(json.dumps(
        {"objective": "val_accuracy", "direction": "max", "trials": rows}))
    (search / "best_params.yaml").write_text("# best\n" + to_yaml(cfg))
    return search


def test_share_on_a_search_folder_describes_the_search_and_writes_into_it(tmp_path, monkeypatch):
    from tfapp import share

    search = _fake_search(tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    assert share.main([str(search), "--no-sync", "--no-profile"]) == 0
    assert not (tmp_path / "tfapp_report.html").exists()  # not into the current directory
    page = (search / "report.html").read_text()
    title = re.search(r"<h1>(.*?)</h1>", page).group(1)
    assert title == "tfapp search lr_search: bayesian, val_accuracy (max)"
    assert "run_0" not in title
    assert "tuner <b>bayesian</b>" in page and "objective <b>val_accuracy</b>" in page
    assert "higher is better" in page
    table = page[page.index("<table class='trials'>"):]
    table = table[:table.index("</table>")]
    header = re.findall(r"<th>(.*?)</th>", table)
    assert header[4:7] == ["val_accuracy (max)", "model.kind", "optimizer.learning_rate"]
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr[^>]*>(.*?)</tr>", table)]
    # ranked best first; the failed trial last; each trial's values beside its score
    assert [r[2] for r in rows[1:]] == ["trial_1", "trial_0", "trial_2", "trial_3"]
    assert rows[1][4:7] == ["0.7400", "rnn", "0.003"]
    assert rows[1][0] == "&#9733; best" and "<tr class='best'>" in table
    assert [r[0] for r in rows[2:]] == ["", "", ""]
    # score against each hyperparameter, the best ringed; the learning rate on log10
    for key in ("model.kind", "optimizer.learning_rate"):
        assert f'aria-label="val_accuracy vs {key}"' in page
    assert "log10(optimizer.learning_rate)" in page
    assert page.count('id="best"') == 2
    assert "<a href='best_params.yaml'>best_params.yaml</a>" in page

    pixels = _rendered_pixels(search / "report.html", tmp_path / "search.png", height=1400)
    assert (pixels == (0xFF, 0xF4, 0xD6)).all(axis=1).sum() > 500  # the best trial's row
    assert (pixels == (0x1F, 0x77, 0xB4)).all(axis=1).sum() > 60  # the trials' dots
    assert (pixels == (0xD6, 0x27, 0x28)).all(axis=1).sum() > 20  # the best one's ring


def test_a_chart_of_one_epoch_has_whole_number_ticks_around_its_point():
    from tfapp.tracking import report

    svg = report.svg_chart("accuracy", [("train", [(1, 0.6517)]), ("validation", [(1, 0.68)])])
    ticks = _ticks(svg)
    assert ticks["x"] == [0.0, 1.0, 2.0] and _ticks_are_round(svg)
