"""`python -m tfapp.hub build-bert`, corpus reading, and model.hub_handle resolution
(local builds, plain SavedModels, URLs, builtin:tiny built once under a lock)."""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys

import tfapp  # noqa: F401
from tfapp.config import ConfigError
from tfapp.hub.builder import read_corpus
from tfapp.hub.handles import builtin_module_dir, resolve_hub_handle

import pytest
from conftest import REPO, run_python, run_tfapp, subprocess_env

CORPUS = """The movie was great and the acting was superb.
I did not like the food, it was cold.
What a wonderful day at the beach!
Terrible battery life; the phone died twice.
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One build through the CLI's entry point (in this process: the reload without tfapp
    below is the test of a fresh one): half the corpus a gzipped text file, half the
    ``review`` column of a CSV (``--text-column``)."""
    root = tmp_path_factory.mktemp("build")
    lines = CORPUS.splitlines()
    (root / "corpus.txt").write_text(CORPUS, encoding="utf-8")  # for later tests
    (root / "a.txt.gz").write_bytes(gzip.compress("\n".join(lines[:2]).encode()))
    with (root / "b.csv").open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([("label", "review"), *(("x", t) for t in lines[2:])])
    out = root / "hub"
    proc = run_tfapp("tfapp.hub.__main__", [
        "build-bert", "--corpus", str(root / "a.txt.gz"), str(root / "b.csv"), "--text-column",
        "review", "--out", str(out), "--layers", "2", "--hidden", "32", "--heads", "2",
        "--intermediate", "64", "--max-positions", "64", "--vocab-size", "100",
        "--no-lower-case", "--seed", "3", "--seq-length", "16"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc.stdout


def test_cli_build_bert_writes_both_modules(built):
    out, stdout = built
    assert "built BERT (2 layers, hidden 32, 2 heads" in stdout
    # 2 gzipped lines + 2 CSV rows (not its header, nor compressed bytes as text).
    assert "from 4 texts" in stdout
    assert f"model.hub_handle={out}" in stdout
    meta = json.loads((out / "tfapp_hub.json").read_text())
    assert meta["lower_case"] is False and meta["default_seq_length"] == 16
    assert meta["bert_config"]["num_layers"] == 2 and meta["bert_config"]["hidden_size"] == 32
    assert meta["build_params"]["seed"] == 3
    vocab = (out / "vocab.txt").read_text().splitlines()
    assert vocab[:4] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    assert meta["vocab_size"] == meta["bert_config"]["vocab_size"] == len(vocab)
    assert "T" in vocab and "W" in vocab  # cased: --no-lower-case kept capitals
    for sub in ("encoder", "preprocessor"):
        assert (out / sub / "saved_model.pb").is_file()


def test_cli_build_runs_in_a_process_without_tfapp(built, tmp_path):
    out, _ = built
    script = f"""
import sys
import tensorflow as tf, tensorflow_hub as hub, tensorflow_text  # noqa
pre = hub.load({str(out / 'preprocessor')!r})
enc = hub.KerasLayer({str(out / 'encoder')!r}, trainable=True)
x = pre(tf.constant(["The movie was cold"]))
y = enc(x)
assert "tfapp" not in sys.modules
print(y["pooled_output"].shape, y["sequence_output"].shape, len(enc.trainable_weights))
"""
    proc = run_python(["-c", script], timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["(1,", "32)", "(1,", "16,", "32)", str(2 * 16 + 7)]


def test_cli_user_errors_exit_2_with_one_line(tmp_path):
    (tmp_path / "c.csv").write_text("review,label\nnice,pos\n")
    cases = [
        (["--corpus", str(tmp_path / "missing.txt")], "--corpus: file not found"),
        (["--corpus", str(tmp_path / "c.csv")],
         "no column 'text' in the header row (has: review, label) -- pass --text-column"),
        (["--corpus", str(tmp_path / "c.csv"), "--text-column", "review", "--hidden", "30",
          "--heads", "4"], "--hidden 30 is not divisible by --heads 4"),
    ]
    for args, expected in cases:
        proc = run_tfapp("tfapp.hub.__main__", ["build-bert", "--out", str(tmp_path / "o"),
                                                *args])
        assert proc.returncode == 2, proc.stderr[-2000:]
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("tfapp: error:")]
        assert len(errors) == 1 and expected in errors[0], proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_existing_output_is_refused(built):
    out, _ = built
    proc = run_tfapp("tfapp.hub.__main__", ["build-bert", "--corpus", str(out / "vocab.txt"),
                                            "--out", str(out)])
    assert proc.returncode == 2 and "already exists" in proc.stderr


def test_read_corpus_formats(tmp_path):
    (tmp_path / "a.txt").write_text("one\n\n  two  words\n")
    (tmp_path / "b.tsv").write_text("text\tlabel\nthree\tx\n")
    (tmp_path / "c.jsonl").write_text('{"text": "four"}\n\n{"text": "five"}\n')
    files = [tmp_path / n for n in ("a.txt", "b.tsv", "c.jsonl")]
    # Text lines verbatim (whitespace kept, as the old reader did), blank lines dropped.
    assert read_corpus(files) == ["one", "  two  words", "three", "four", "five"]
    (tmp_path / "bad.jsonl").write_text('{"body": "x"}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl: no column 'text' in the first JSON "
                                          r"object \(has: body\) -- pass --text-column"):
        read_corpus([tmp_path / "bad.jsonl"])
    (tmp_path / "blank.txt").write_text("\n \n")
    with pytest.raises(ConfigError, match=r"blank.txt:1: empty file \(no text lines\) "
                                          r"\(fix the data\)$"):
        read_corpus([tmp_path / "blank.txt"])  # build-bert has no skip switch to offer
    with pytest.raises(ConfigError, match="--corpus: .*blank.txt' holds no text"):
        read_corpus([tmp_path / "blank.txt"], on_bad_rows="skip")


def test_corpus_reader_is_the_shared_one_gz_csv_column_glob_and_bad_rows(tmp_path):
    """build-bert and pretrain read corpora through tfapp.data.rows.read: .gz, a custom CSV
    column, globs, unknown extensions as text lines, and pretrain's data.on_bad_rows."""
    (tmp_path / "lines.txt.gz").write_bytes(gzip.compress(b"first text\nsecond text\n"))
    (tmp_path / "notes").write_text("no extension: text lines\n")
    with gzip.open(tmp_path / "r.csv.gz", "wt", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([("id", "review"), ("1", "a quoted, comma text"),
                                  ("2", "third text")])
    texts = read_corpus([tmp_path / "lines.txt.gz", tmp_path / "notes",
                         str(tmp_path / "r.csv*")], text_column="review")
    assert texts == ["first text", "second text", "no extension: text lines",
                     "a quoted, comma text", "third text"]
    (tmp_path / "bad.jsonl").write_text('{"review": "ok"}\n{oops\n{"review": "fine"}\n')
    # pretrain passes data.on_bad_rows: fail names the switch, skip drops the row.
    with pytest.raises(ConfigError, match=r"bad.jsonl:2: not valid JSON .*set "
                                          r"data.on_bad_rows=skip"):
        read_corpus([tmp_path / "bad.jsonl"], "review", on_bad_rows="fail")
    assert read_corpus([tmp_path / "bad.jsonl"], "review", on_bad_rows="skip") == ["ok", "fine"]


def test_resolve_local_directories_and_urls(built, tmp_path):
    out, _ = built
    assert resolve_hub_handle(str(out)) == (str(out / "encoder"), str(out / "preprocessor"))
    # The encoder/ directory of a build finds its sibling preprocessor.
    assert resolve_hub_handle(str(out / "encoder")) == (str(out / "encoder"),
                                                        str(out / "preprocessor"))
    # A SavedModel without tfapp metadata: the encoder only.
    assert resolve_hub_handle(str(out / "preprocessor")) == (str(out / "preprocessor"), "")
    for url in ("https://tfhub.dev/tensorflow/bert_en_uncased_L-12_H-768_A-12/4",
                "https://www.kaggle.com/models/tensorflow/bert/TensorFlow2/en-uncased-l-12-h-768-a-12/4",
                "gs://bucket/bert/encoder"):
        assert resolve_hub_handle(url) == (url, "")
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_hub_handle(str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="is empty"):
        resolve_hub_handle("  ")
    with pytest.raises(ConfigError, match="'builtin:huge' is unknown; builtin modules: "
                                          "builtin:tiny"):
        resolve_hub_handle("builtin:huge")


def test_builtin_cache_key_follows_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TFAPP_CACHE_DIR", str(tmp_path / "c1"))
    first = builtin_module_dir("tiny")
    assert first.parent == tmp_path / "c1" / "hub" and first.name.startswith("tiny-bert-")
    monkeypatch.setenv("TFAPP_CACHE_DIR", str(tmp_path / "c2"))
    assert builtin_module_dir("tiny").name == first.name  # same params + corpus, same key


@pytest.mark.slow
def test_builtin_tiny_builds_once_even_when_two_processes_race(tmp_path):
    env = subprocess_env(TFAPP_CACHE_DIR=str(tmp_path / "cache"))
    code = ("import json, tfapp; from tfapp.hub.handles import resolve_hub_handle; "
            "print(json.dumps(resolve_hub_handle('builtin:tiny')))")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=400)
        assert proc.returncode == 0, stderr[-3000:]
        results.append(tuple(json.loads(stdout.strip().splitlines()[-1])))
    assert results[0] == results[1]
    encoder, preprocessor = results[0]
    hub_dir = tmp_path / "cache" / "hub"
    built = [p for p in hub_dir.iterdir() if not p.name.startswith(".")]
    assert len(built) == 1 and built[0].name.startswith("tiny-bert-")
    assert [p.name for p in hub_dir.iterdir() if ".tmp-" in p.name] == []
    meta = json.loads((built[0] / "tfapp_hub.json").read_text())
    assert meta["bert_config"]["num_layers"] == 2 and meta["bert_config"]["hidden_size"] == 128
    assert meta["bert_config"]["num_heads"] == 2
    assert meta["bert_config"]["intermediate_size"] == 256
    assert encoder == str(built[0] / "encoder") and preprocessor == str(built[0] / "preprocessor")
    # A third call is a cache hit: no build, same answer, fast.
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert tuple(json.loads(proc.stdout.strip().splitlines()[-1])) == results[0]


def test_url_handles_https_only_and_cached_in_the_users_own_folder(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="plain http .*use its https:// address"):
        resolve_hub_handle("http://tfhub.dev/google/bert/1")
    monkeypatch.delenv("TFHUB_CACHE_DIR", raising=False)
    monkeypatch.setenv("TFAPP_CACHE_DIR", str(tmp_path / "cache"))
    url = "https://tfhub.dev/tensorflow/bert_en_uncased_L-12_H-768_A-12/4"
    assert resolve_hub_handle(url) == (url, "")
    # not tensorflow_hub's default (a shared, world-writable temp folder)
    assert os.environ["TFHUB_CACHE_DIR"] == str(tmp_path / "cache" / "tfhub_modules")
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path / "mine"))
    resolve_hub_handle(url)
    assert os.environ["TFHUB_CACHE_DIR"] == str(tmp_path / "mine")  # the user's choice kept
