"""`tfapp export-hf`: a trained run written as a Hugging Face checkpoint.

The checkpoint is read back with tfapp's own converter (its names and config are the ones
``hub convert`` accepts), run through an independent numpy BERT (test_hub_convert's, from
the Hugging Face names) plus the head, and compared with what the run's export predicts.
With torch and transformers at hand (the peers venv: TFAPP_PEERS_PYTHON or .venv-peers),
transformers' own Auto classes load it too, and must agree.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp.config import load_config, to_yaml
from tfapp.export_hf import main as export_hf
from tfapp.hub.convert import read_hf_bert
from tfapp.tasks import get_task

import numpy as np
import pytest
from conftest import CLASSIFIER_RUN, NER_RUN, REPO, shared_run
from safetensors.numpy import load_file
from test_hub_convert import numpy_bert

TEXTS = ["an absolutely wonderful film, I loved it", "terrible plot and awful acting",
         "Zoë's café: not bad at all, really"]
NER_TEXTS = ["Anna Berg moved to Brindle on 3 May .", "Acme Bakery hired Zoë Müller in Falken ."]


def _train(tmp_path_factory, config: str, *overrides: str) -> Path:
    from tfapp.training.driver import train

    out = tmp_path_factory.mktemp("runs")
    cfg = load_config(REPO / config, [f"output_dir={out}", "tracking.tensorboard=false",
                                      *overrides])
    return train(cfg, task=get_task(cfg.task)).run_dir


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory) -> Path:
    # A high learning rate for 4 steps (1e-2 collapsed every text to one score on some
    # data orders): the pooler and head move far from their start,
    # so the probabilities differ from text to text (a wrong weight would show).
    return shared_run(tmp_path_factory, *CLASSIFIER_RUN)  # test_bad_inputs reads it too


def _features(out: Path, texts: list[str], seq_length: int, *, pooler: bool = True,
              pairs: list[str] | None = None):
    """Token ids of ``texts`` (and their second texts ``pairs``) from the exported vocab
    and casing (read by tfapp's converter, which also checks config.json and every encoder
    weight; only a tagger, which has no pooler, has the pooler initialised)."""
    from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn

    import tensorflow as tf

    cfg, weights, vocab, lower_case, initialised = read_hf_bert(out)
    assert initialised == ([] if pooler else ["pooler/bias", "pooler/kernel"])
    pre = make_bert_preprocess_fn(vocab_file=str(out / "vocab.txt"), lower_case=lower_case,
                                  seq_length=seq_length)
    segments = [tf.constant(texts)] + ([tf.constant(pairs)] if pairs is not None else [])
    feats = {k: v.numpy() for k, v in pre(*segments).items()}
    return cfg, weights, feats


def _hf_forward(out: Path, feats: dict) -> tuple[dict, dict, np.ndarray]:
    """(config.json, HF weights, logits) of the numpy BERT + head on ``feats``."""
    config = json.loads((out / "config.json").read_text())
    w = load_file(str(out / "model.safetensors"))
    enc = numpy_bert(w, config, feats["input_word_ids"], feats["input_mask"],
                     feats["input_type_ids"])
    x = enc["pooled_output"] if "bert.pooler.dense.weight" in w else enc["sequence_output"]
    return config, w, x @ w["classifier.weight"].T.astype(np.float64) + w["classifier.bias"]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _peers_python() -> str:
    """The python of an environment with torch + transformers, or skip."""
    candidates = [os.environ.get("TFAPP_PEERS_PYTHON", ""),
                  str(REPO / ".venv-peers/bin/python"),
                  str(REPO.parent / "main/.venv-peers/bin/python")]
    for python in filter(None, candidates):
        if Path(python).is_file() and subprocess.run(
                [python, "-c", "import torch, transformers"], capture_output=True,
                timeout=300).returncode == 0:
            return python
    pytest.skip("no python with torch and transformers (set TFAPP_PEERS_PYTHON; optional "
                "cross-check)")


def _transformers_predict(python: str, out: Path, texts: list[str],
                          pairs: list[str] | None = None) -> dict:
    second = ["--pairs", *pairs] if pairs is not None else []
    proc = subprocess.run([python, str(REPO / "scripts/hf_export_predict.py"), str(out), *texts,
                           *second], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(result))  # the report quotes it (pytest -s)
    assert result["missing_keys"] == [] and result["unexpected_keys"] == [], result
    return result


# ------------------------------------------------------------------ the classifier
@pytest.fixture(scope="module")
def classifier_export(classifier_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hf") / "clf"
    assert export_hf([str(classifier_run), "--out", str(out), "--license", "apache-2.0",
                      "--language", "en", "--dataset", "imdb", "--tag", "reviews"]) == 0
    return out


def test_classifier_checkpoint_predicts_as_tfapp(classifier_run, classifier_export):
    from tfapp.serving import PREDICT
    from tfapp.tasks import load_export

    out = classifier_export
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md", "config.json", "model.safetensors", "special_tokens_map.json",
        "tokenizer_config.json", "vocab.txt"]
    _, _, feats = _features(out, TEXTS, seq_length=32)
    config, w, logits = _hf_forward(out, feats)
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    assert config["label2id"] == {"negative": 0, "positive": 1}
    assert config["problem_type"] == "single_label_classification"
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
            config["intermediate_size"]) == (2, 128, 2, 256)
    # tfapp's one sigmoid unit became the two logits [0, z].
    np.testing.assert_array_equal(w["classifier.weight"][0], 0.0)
    assert w["classifier.bias"][0] == 0.0

    probs, _ = load_export(classifier_run, PREDICT).predict(TEXTS)  # what `predict` prints
    np.testing.assert_allclose(_softmax(logits), probs, atol=1e-4, rtol=0)
    # The logits too, where a small error in the encoder is not squashed by the sigmoid.
    z = np.log(probs[:, 1]) - np.log(probs[:, 0])
    np.testing.assert_allclose(logits[:, 1] - logits[:, 0], z, atol=1e-4, rtol=0)
    # The texts get different scores, 10x the tolerance: the test can see the encoder. (The
    # shared 4-step run's spread varies from run to run: 0.004 to 0.014 measured.)
    assert np.ptp(z) > 1e-3, z


def test_model_card_header(classifier_run, classifier_export):
    from huggingface_hub import ModelCard

    card = ModelCard.load(classifier_export / "README.md")
    data = card.data.to_dict()
    assert data["license"] == "apache-2.0" and data["language"] == ["en"]
    assert data["datasets"] == ["imdb"] and data["library_name"] == "transformers"
    assert data["pipeline_tag"] == "text-classification"
    assert {"tfapp", "bert", "reviews"} <= set(data["tags"])
    test = json.loads((classifier_run / "test_report.json").read_text())
    validation = json.loads((classifier_run / "validation_report.json").read_text())
    got = {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results}
    assert got == {(split, kind): round(report[key], 4)
                   for split, report in (("validation", validation), ("test", test))
                   for key, kind in (("accuracy", "accuracy"), ("auc", "roc_auc"),
                                     ("macro_f1", "f1"))}
    assert all(r.dataset_name == "imdb" for r in card.data.eval_results)


def test_transformers_loads_the_classifier(classifier_run, classifier_export):
    from tfapp.serving import PREDICT
    from tfapp.tasks import load_export

    python = _peers_python()
    got = _transformers_predict(python, classifier_export, TEXTS)
    assert got["model_class"] == "BertForSequenceClassification"
    assert got["id2label"] == {"0": "negative", "1": "positive"}
    _, _, feats = _features(classifier_export, TEXTS, seq_length=32)
    lengths = feats["input_mask"].sum(axis=1)
    assert got["input_ids"] == [row[:n].tolist() for row, n in
                                zip(feats["input_word_ids"], lengths, strict=True)]
    probs, _ = load_export(classifier_run, PREDICT).predict(TEXTS)
    np.testing.assert_allclose(np.array(got["probabilities"]), probs, atol=1e-4, rtol=0)


def test_push_is_tried_only_after_a_complete_export(classifier_run, tmp_path, monkeypatch,
                                                    capsys):
    """Everything up to the upload: with a token, a Hub that cannot be reached (a closed
    local port) is one line, and the checkpoint is complete in --out."""
    from conftest import free_ports

    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_ports(1)[0]}")
    out = tmp_path / "pushed"
    assert export_hf([str(classifier_run), "--out", str(out), "--push", "me/model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tfapp: error: --push me/model: the upload failed"), err
    assert f"hf upload me/model {out}" in err[-1]
    assert (out / "model.safetensors").is_file() and (out / "README.md").is_file()


# ------------------------------------------------------------------ multi-label pairs
PAIR_TEXTS = ["an absolutely wonderful film, I loved it", "terrible plot and awful acting",
              # long enough that both segments are trimmed to fit 32 word pieces
              "Zoë's café was not bad at all, really; the soup was warm, the bread was fresh "
              "and the staff were kind to every one of us"]
PAIRS = ["the sequel was just as good", "the soundtrack was lovely though",
         "the hotel next door was loud, dirty and far too expensive for what it offered, "
         "and the breakfast was cold every single morning"]
PAIR_LABELS = ["a_negative", "a_positive", "b_positive", "same"]


def _pair_csv(folder: Path) -> Path:
    """A multi-label sentence-pair CSV from the demo reviews: each row pairs two reviews
    and is labelled with the first one's sentiment, `b_positive` if the second is
    positive, and `same` if they agree (1 to 3 labels a row)."""
    import csv

    from tfapp.demo import DEMO_DIR

    with open(DEMO_DIR / "reviews_train.csv", encoding="utf-8") as f:
        reviews = [(r["text"], r["label"]) for r in csv.DictReader(f)][:400]
    path = folder / "pairs.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "pair", "label"])
        for (a, la), (b, lb) in zip(reviews[::2], reviews[1::2], strict=True):
            labels = [f"a_{la}"] + ["b_positive"] * (lb == "positive") + ["same"] * (la == lb)
            writer.writerow([a, b, "|".join(labels)])
    return path


@pytest.fixture(scope="module")
def pair_export(tmp_path_factory) -> tuple[Path, Path]:
    """One multi-label sentence-pair classifier run (both untested forms at once) and its
    export-hf checkpoint."""
    data = _pair_csv(tmp_path_factory.mktemp("pairs"))
    run = _train(tmp_path_factory, "configs/classifier_local.yaml", f"data.train_files={data}",
                 "data.text_pair_column=pair", "data.multi_label=true", "trainer.epochs=1",
                 "trainer.steps_per_epoch=3", "optimizer.learning_rate=1e-2")
    out = tmp_path_factory.mktemp("hf") / "pairs"
    assert export_hf([str(run), "--out", str(out)]) == 0
    return run, out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def test_multi_label_checkpoint_gives_a_sigmoid_per_label(pair_export):
    from tfapp.serving import PREDICT
    from tfapp.tasks import load_export

    run, out = pair_export
    _, _, feats = _features(out, PAIR_TEXTS, seq_length=32, pairs=PAIRS)
    config, w, logits = _hf_forward(out, feats)
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["problem_type"] == "multi_label_classification"
    assert config["id2label"] == {str(i): x for i, x in enumerate(PAIR_LABELS)}
    assert w["classifier.weight"].shape == (4, 128)  # one logit per label, no [0, z] rewrite
    exported = load_export(run, PREDICT)
    assert exported.label_names == PAIR_LABELS
    probs, _ = exported.predict(PAIR_TEXTS, PAIRS)  # what `predict` prints
    np.testing.assert_allclose(_sigmoid(logits), probs, atol=1e-4, rtol=0)
    assert not np.allclose(probs.sum(-1), 1.0, atol=1e-2)  # independent sigmoids, no softmax
    assert np.ptp(logits, axis=0).max() > 1e-2, logits  # texts differ: the test sees them
    card = (out / "README.md").read_text()
    assert "apply a sigmoid to each logit" in card and "pipeline_tag: text-classification" in card


def test_sentence_pair_checkpoint_reads_the_second_segment(pair_export):
    from tfapp.serving import PREDICT
    from tfapp.tasks import load_export

    run, out = pair_export
    _, _, feats = _features(out, PAIR_TEXTS, seq_length=32, pairs=PAIRS)
    # tfapp's packing, which transformers' tokenizer repeats (checked with the peers below):
    # [CLS] a [SEP] (type 0) b [SEP] (type 1), then padding (type 0).
    sep = (out / "vocab.txt").read_text(encoding="utf-8").splitlines().index("[SEP]")
    for ids, types, mask in zip(feats["input_word_ids"], feats["input_type_ids"],
                                feats["input_mask"], strict=True):
        n, first_sep = int(mask.sum()), list(ids).index(sep)
        assert ids[n - 1] == sep and 1 < first_sep < n - 2
        assert types.tolist() == [0] * (first_sep + 1) + [1] * (n - first_sep - 1) + \
            [0] * (len(ids) - n)
    assert feats["input_mask"][2].sum() == 32  # the long pair was trimmed to fit
    _, _, logits = _hf_forward(out, feats)
    probs, _ = load_export(run, PREDICT).predict(PAIR_TEXTS, PAIRS)
    np.testing.assert_allclose(_sigmoid(logits), probs, atol=1e-4, rtol=0)
    # The type of the second segment moves the logits: a checkpoint that lost it would show.
    _, _, single = _hf_forward(out, {**feats, "input_type_ids": 0 * feats["input_type_ids"]})
    assert np.abs(single - logits).max() > 1e-2
    card = (out / "README.md").read_text()
    assert 'tokenizer(["a text"], ["its second text"], truncation=True' in card
    assert "Sentence-pair classifier (4 labels)" in card


def test_transformers_loads_the_pair_classifier(pair_export):
    """transformers' tokenizer packs pairs as tfapp does (ids and token types); a pair too
    long for both makes the one difference the card notes: trimming the longer first, it
    keeps one piece less of the first text than tfapp's round-robin and one more of the
    second. Its probabilities are the export's model's on transformers' own ids."""
    from tfapp.serving import PREDICT
    from tfapp.tasks import load_export

    run, out = pair_export
    got = _transformers_predict(_peers_python(), out, PAIR_TEXTS, PAIRS)
    assert got["model_class"] == "BertForSequenceClassification"
    _, _, feats = _features(out, PAIR_TEXTS, seq_length=32, pairs=PAIRS)
    lengths = feats["input_mask"].sum(axis=1)
    ids = [row[:n].tolist() for row, n in zip(feats["input_word_ids"], lengths, strict=True)]
    types = [row[:n].tolist() for row, n in zip(feats["input_type_ids"], lengths, strict=True)]
    assert got["input_ids"][:2] == ids[:2] and got["token_type_ids"][:2] == types[:2]
    first = types[2].count(0)  # [CLS] a [SEP]
    assert got["input_ids"][2] == ids[2][:first - 2] + ids[2][first - 1:-1] + \
        [got["input_ids"][2][-2], ids[2][-1]]
    assert got["token_type_ids"][2] == [0] * (first - 1) + [1] * (32 - first + 1)
    exported = load_export(run, PREDICT)
    probs, _ = exported.predict(PAIR_TEXTS, PAIRS)
    np.testing.assert_allclose(np.array(got["probabilities"][:2]), probs[:2], atol=1e-4, rtol=0)
    theirs = {"input_word_ids": np.array(got["input_ids"][2:], np.int32),
              "input_type_ids": np.array(got["token_type_ids"][2:], np.int32),
              "input_mask": np.ones((1, 32), np.int32)}
    want = exported.module.model(theirs).numpy()
    np.testing.assert_allclose(np.array(got["probabilities"][2:]), want, atol=1e-4, rtol=0)


# ------------------------------------------------------------------ committed fixture
SEEDED_FIXTURE = REPO / "tests" / "fixtures" / "hf_export_seeded.json"
SEEDED_TEXTS = ["The movie was GREAT!", "I don't like it.", "Unbelievable acting, truly bad films",
                "Café, abc cab.", "Hello world, the movie!"]
SEEDED_LABELS = ["neg", "neutral", "pos"]


def seeded_run(root: Path) -> Path:
    """A 3-label classifier run made from committed inputs only, no training: the seeded
    random BERT checkpoint of test_hub_convert converted to tfapp's module, a seeded head,
    exported as training exports. Its export-hf checkpoint holds the same numbers on every
    machine, so transformers' predictions for it can be committed (SEEDED_FIXTURE)."""
    from tfapp.hub.convert import convert_hf_bert
    from tfapp.models.classifier import build_classifier
    from tfapp.tasks.classifier.export import ClassifierServing, export_classifier

    import tensorflow_hub as hub
    from test_hub_convert import write_hf_checkpoint

    write_hf_checkpoint(root / "hf", seed=7)
    hub_dir = convert_hf_bert(root / "hf", root / "hub", seq_length=16)
    cfg = load_config(None, [f"model.hub_handle={hub_dir}", "data.seq_length=16",
                             f"output_dir={root}", "name=seeded", "model.dropout=0.2"])
    model = build_classifier(cfg.model, num_classes=3, multi_label=False, seq_length=16,
                             hub_handle=str(hub_dir / "encoder"))
    rng = np.random.default_rng(11)
    model.get_layer("logits").set_weights([rng.standard_normal((32, 3)).astype(np.float32),
                                           rng.standard_normal(3).astype(np.float32) * 0.1])
    serving = ClassifierServing(model, hub.load(str(hub_dir / "preprocessor")), seq_length=16,
                                label_names=SEEDED_LABELS, mode="multiclass", text_pair=False)
    run = root / "seeded"
    run.mkdir()
    (run / "params.yaml").write_text(to_yaml(cfg))
    export_classifier(serving, run / "export", metadata={
        "task": "classifier", "label_names": SEEDED_LABELS, "multi_label": False,
        "text_pair": False, "seq_length": 16, "model_kind": "bert", "hub_handle": str(hub_dir),
        "preprocessor": str(hub_dir / "preprocessor")})
    return run


@pytest.fixture(scope="module")
def seeded_export(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("seeded")
    run = seeded_run(root)
    assert export_hf([str(run), "--out", str(root / "hf_out")]) == 0
    return run, root / "hf_out"


def test_seeded_export_matches_committed_transformers_numbers(seeded_export):
    """CI without torch: tfapp's predictions and ids for the seeded model equal what
    transformers computed from its export-hf checkpoint (committed; regenerate with
    scripts/hf_export_predict.py in the peers venv, see test_transformers_still_...)."""
    from tfapp.serving import PREDICT
    from tfapp.tasks import load_export

    run, out = seeded_export
    want = json.loads(SEEDED_FIXTURE.read_text())
    assert want["texts"] == SEEDED_TEXTS and want["model_class"] == \
        "BertForSequenceClassification"
    assert want["id2label"] == {str(i): x for i, x in enumerate(SEEDED_LABELS)}
    probs, _ = load_export(run, PREDICT).predict(SEEDED_TEXTS)
    np.testing.assert_allclose(probs, np.array(want["probabilities"]), atol=1e-4, rtol=0)
    assert np.ptp(want["probabilities"], axis=0).max() > 0.1  # texts differ: a real check
    _, _, feats = _features(out, SEEDED_TEXTS, seq_length=16)
    _, _, logits = _hf_forward(out, feats)
    np.testing.assert_allclose(_softmax(logits), np.array(want["probabilities"]), atol=1e-4,
                               rtol=0)
    lengths = feats["input_mask"].sum(axis=1)
    assert want["input_ids"] == [row[:n].tolist() for row, n in
                                 zip(feats["input_word_ids"], lengths, strict=True)]


def test_transformers_still_gives_the_committed_numbers(seeded_export):
    _, out = seeded_export
    got = _transformers_predict(_peers_python(), out, SEEDED_TEXTS)
    want = json.loads(SEEDED_FIXTURE.read_text())
    assert got["input_ids"] == want["input_ids"]
    np.testing.assert_allclose(np.array(got["probabilities"]), np.array(want["probabilities"]),
                               atol=1e-5, rtol=0)


# ------------------------------------------------------------------ refusals
def _error(argv: list[str], capsys) -> str:
    assert export_hf(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfapp: error:"), err
    return err[0]


def _fake_run(root: Path, *overrides: str, export: bool = False) -> Path:
    """A run directory's params.yaml (and, with ``export``, a stand-in export/ marker: the
    checks before the export is read)."""
    run = root / "run"
    run.mkdir(parents=True)
    (run / "params.yaml").write_text(to_yaml(load_config(None, list(overrides))))
    if export:
        (run / "export").mkdir()
        (run / "export" / "saved_model.pb").write_bytes(b"")
    return run


@pytest.mark.parametrize("overrides, fragment", [
    (["task=generator", "model.kind=seq2seq"], "a generator run has no Hugging Face form"),
    (["task=mlm"], "a mlm run has no Hugging Face form"),
    (["model.kind=cnn"], "model.kind=cnn is not a BERT model"),
    (["task=classifier", "model.kind=rnn"], "model.kind=rnn is not a BERT model"),
    (["model.pooling=mean_max"], "train with model.pooling=pooled"),
    (["task=ner"], "has no export/saved_model.pb; train it with trainer.export=true"),
])
def test_what_cannot_map_is_one_line(tmp_path, capsys, overrides, fragment):
    run = _fake_run(tmp_path, *overrides)
    err = _error([str(run), "--out", str(tmp_path / "out")], capsys)
    assert fragment in err, err
    assert not (tmp_path / "out").exists()


def test_bad_arguments_are_one_line(tmp_path, capsys, monkeypatch):
    assert "not a tfapp run directory" in _error([str(tmp_path), "--out", str(tmp_path / "o")],
                                                 capsys)
    assert "no such directory" in _error([str(tmp_path / "nope"), "--out", "o"], capsys)
    run = _fake_run(tmp_path, export=True)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    assert "already exists" in _error([str(run), "--out", str(tmp_path / "taken")], capsys)
    assert "is not an exported checkpoint" in _error(
        [str(run), "--out", str(tmp_path / "taken"), "--overwrite"], capsys)
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"
    # --push without a token: said before any work is done, nothing written.
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))  # no saved login either
    err = _error([str(run), "--out", str(tmp_path / "o2"), "--push", "me/model"], capsys)
    assert "--push needs a Hugging Face write token: set HF_TOKEN" in err
    assert "not a Hugging Face repo id" in _error(
        [str(run), "--out", str(tmp_path / "o2"), "--push", "no-slash"], capsys)
    assert not (tmp_path / "o2").exists()


# ------------------------------------------------------------------ the tagger
@pytest.fixture(scope="module")
def ner_export(tmp_path_factory) -> tuple[Path, Path]:
    run = shared_run(tmp_path_factory, *NER_RUN)  # test_ner's run: 90 steps, tags that vary
    out = tmp_path_factory.mktemp("hf") / "ner"
    assert export_hf([str(run), "--out", str(out)]) == 0
    return run, out


def _tagger_probs(run: Path, feats: dict) -> np.ndarray:
    """Tag probabilities of the run's export (the model its serving function calls)."""
    from tfapp.serving import load_export
    from tfapp.tasks.ner.serving import FORMAT

    _, module, _ = load_export(run, FORMAT)
    return module.model(feats).numpy()


@pytest.mark.slow
def test_tagger_checkpoint_predicts_as_tfapp(ner_export):
    run, out = ner_export
    _, _, feats = _features(out, NER_TEXTS, seq_length=32, pooler=False)
    config, w, logits = _hf_forward(out, feats)
    assert config["architectures"] == ["BertForTokenClassification"]
    tags = json.loads((run / "labels.json").read_text())["tags"]
    assert config["id2label"] == {str(i): t for i, t in enumerate(tags)}
    assert not any(k.startswith("bert.pooler.") for k in w)  # the tagger has no pooler
    want = _tagger_probs(run, feats)
    mask = feats["input_mask"].astype(bool)
    np.testing.assert_allclose(_softmax(logits)[mask], want[mask], atol=1e-4, rtol=0)
    assert np.ptp(want[mask].max(-1)) > 1e-2  # tokens differ: the comparison sees the encoder


@pytest.mark.slow
def test_transformers_loads_the_tagger(ner_export):
    run, out = ner_export
    python = _peers_python()
    got = _transformers_predict(python, out, NER_TEXTS)
    assert got["model_class"] == "BertForTokenClassification"
    _, _, feats = _features(out, NER_TEXTS, seq_length=32, pooler=False)
    want = _tagger_probs(run, feats)
    for i, row in enumerate(got["probabilities"]):
        n = int(feats["input_mask"][i].sum())
        assert got["input_ids"][i] == feats["input_word_ids"][i][:n].tolist()
        np.testing.assert_allclose(np.array(row), want[i, :n], atol=1e-4, rtol=0)


def test_the_export_computes_a_batch_as_far_as_its_longest_text(seeded_export):
    # serve trims each call to its longest text (rounded up to 8): a row's probabilities
    # are the same alone (trimmed to its own length) as beside a longer one (16 tokens).
    import tensorflow as tf

    run, _ = seeded_export
    module = tf.saved_model.load(str(run / "export"))  # keeps its variables alive
    serve = module.serve
    texts = ["good", "the room was clean and the staff were kind to us all week long"]
    together = serve(tf.constant(texts))["probabilities"].numpy()
    alone = np.concatenate([serve(tf.constant([t]))["probabilities"].numpy() for t in texts])
    np.testing.assert_allclose(alone, together, atol=1e-5)
