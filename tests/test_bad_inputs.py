"""The bad-input matrix: every kind of mistake a user can make gives one line naming it.

Each row runs a real entry point's ``main(argv)`` in this process (TensorFlow loads once for
the whole table) and checks what a user relies on: a non-zero exit (2 for a user mistake),
the last stderr line ``<prog>: error: ...`` naming the offending value, no traceback, and
nothing half-written: no export, checkpoint or backup, and a run directory, if one was
started, that says ``failed``. Nothing of the user's is lost either: the input folder
(``{in}``, with a folder of someone's ``{photos}``) and the trained run rows point at
(``{runs}``) hold the same files with the same bytes afterwards. docs/errors.md lists these
messages.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import os
import shutil
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import CLASSIFIER_RUN, REPO, free_ports, shared_run

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
    (tmp / "group_list.yaml").write_text("trainer: [1, 2]\n")
    (tmp / "group_scalar.yaml").write_text("trainer: 3\n")
    (tmp / "not_a_model").mkdir()
    (tmp / "not_a_model" / "saved_model.pb").write_bytes(b"not a protobuf")
    (tmp / "a_file").write_text("x")
    (tmp / "corpus.txt").write_text("".join(f"review number {i}\n" for i in range(40)))
    (tmp / "fake_generator").mkdir()  # a generator export, as far as the finder looks
    (tmp / "fake_generator" / "saved_model.pb").write_bytes(b"not a protobuf")
    (tmp / "fake_generator" / "generator.json").write_text("{}")
    (tmp / "bad_prompts.txt").write_bytes(b"ok\n\xff\n")
    (tmp / "latin1.yaml").write_bytes(b"trainer:\n  epochs: 3  # caf\xe9\n")
    (tmp / "nul.yaml").write_bytes(b"trainer:\n  epochs: 3\x00\n")  # found by test_fuzz
    (tmp / "alias_cycle.yaml").write_text("trainer: &a {epochs: *a}\n")  # found by test_fuzz
    (tmp / "surrogate.yaml").write_text('name: "a\\ud800"\n')  # found by test_fuzz
    (tmp / "lone_surrogate.jsonl").write_text('{"text": "a\\ud800", "label": "pos"}\n')
    (tmp / "header_latin1.csv").write_bytes(b"t\xe9xt,label\nfine,pos\n")
    (tmp / "bad_lines.txt").write_bytes(b"__label__pos ok\n__label__neg \xff\n")
    (tmp / "quoted.tsv").write_text('text\tlabel\n"a\tb"\tpos\n')
    (tmp / "hf_latin1").mkdir()  # a Hugging Face checkpoint folder with a Latin-1 config
    (tmp / "hf_latin1" / "config.json").write_bytes(b'{"model_type": "b\xe9rt"}')
    for name, vocab in (("hf_dup_vocab", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\nthe\n"),
                        ("hf_blank_vocab", "[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n"),
                        ("hf_space_vocab", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nnew york\n")):
        (tmp / name).mkdir()  # a Hugging Face checkpoint folder whose vocab.txt is bad
        (tmp / name / "config.json").write_text(json.dumps({
            "model_type": "bert", "vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 1,
            "num_attention_heads": 1, "intermediate_size": 8, "max_position_embeddings": 16}))
        (tmp / name / "vocab.txt").write_text(vocab)
        (tmp / name / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    (tmp / "ner_short_line.conll").write_text("Anna B-PER x\nParis\n")
    (tmp / "ner_bad_tag.conll").write_text("Anna X-PER\n")
    (tmp / "ner_train.conll").write_text("Anna B-PER\nlives O\nin O\nParis B-LOC\n")
    # BIOES (it holds S-) with what no scheme reads one way: refused, not read as O
    (tmp / "ner_bioes_open.conll").write_text("Anna S-PER\n\nBob B-PER\nLee I-PER\nleft O\n")
    (tmp / "ner_bioes_iob1.conll").write_text("Anna S-PER\n\nin O\nOslo I-LOC\n")
    (tmp / "ner_bioes_type.conll").write_text("Anna B-PER\nBerg E-LOC\n")
    (tmp / "ner_unseen.conll").write_text("ACME B-ORG\nhires O\n")
    (tmp / "ner_all_o.conll").write_text("just O\nwords O\n")
    (tmp / "ner_mismatch.jsonl").write_text('{"tokens": ["Anna"], "tags": ["B-PER", "O"]}\n')
    for name, capture in (("empty_capture", b""), ("corrupt_capture", b"\x0agarbage\x00")):
        session = tmp / name / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00"
        session.mkdir(parents=True)  # a run's profiler capture, killed or damaged
        (session / "host.xplane.pb").write_bytes(capture)
    _parquet_files(tmp)
    (tmp / "photos").mkdir()  # someone's folder: no command may write to or delete it
    (tmp / "photos" / "beach.jpg").write_bytes(b"\xff\xd8 holiday")
    (tmp / "photos" / "notes.txt").write_text("keep me")
    return {p.name.split(".")[0]: str(p) for p in tmp.iterdir()}


def _parquet_files(tmp: Path) -> None:
    """Bad Parquet files: a missing column, a column of the wrong type, a file cut short,
    and a null text in the third row of a good one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [f"review number {i}" for i in range(40)]
    labels = ["pos" if i % 2 else "neg" for i in range(40)]
    pq.write_table(pa.table({"text": rows, "stars": [5] * 40}), tmp / "no_label_pq.parquet")
    pq.write_table(pa.table({"text": list(range(40)), "label": labels}),
                   tmp / "int_text_pq.parquet")
    pq.write_table(pa.table({"text": rows[:2] + [None] + rows[3:], "label": labels}),
                   tmp / "null_text_pq.parquet", row_group_size=16)
    whole = (tmp / "null_text_pq.parquet").read_bytes()
    (tmp / "cut_pq.parquet").write_bytes(whole[:len(whole) // 2])


def _snapshot(*roots: Path) -> dict[str, str]:
    """Every file under ``roots`` (dot files too) -> sha256 of its bytes."""
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest()
            for root in roots if root.exists() for f in sorted(root.rglob("*")) if f.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The session's tiny finished classifier run (conftest CLASSIFIER_RUN: its export
    included, shared with test_export_hf); rows get a copy of its runs/ as {runs}."""
    run = shared_run(tmp_path_factory, *CLASSIFIER_RUN)
    assert (run / "export" / "saved_model.pb").is_file()
    return run


# (id, module, argv, text the error line must contain). {out} is an empty output directory,
# {in} the folder of input files, {runs} a copy of the trained fixture's output_dir ({run} its
# run), {port} a free port; literal braces are doubled (str.format).
TRAIN = ["--config", "configs/classifier_local.yaml", "output_dir={out}"]
# The trained run's own command, but for what a row changes.
RERUN = ["--config", CLASSIFIER_RUN[0], "output_dir={runs}", *CLASSIFIER_RUN[1:]]
TUNE = ["--config", "configs/classifier_tune.yaml", "output_dir={out}"]
BUILD = ["build-bert", "--corpus", "{corpus}"]
PRETRAIN = ["--corpus", "{corpus}", "--hub", "builtin:tiny", "output_dir={out}", "--steps", "1",
            "--batch-size", "4", "--seq-length", "16"]
LR_FIND = ["--config", "configs/classifier_local.yaml"]
NER = ["--config", "configs/ner_local.yaml", "output_dir={out}"]
ROWS = [
    # config files
    ("config-missing", "tfapp.train", ["--config", "/no/such.yaml"], "/no/such.yaml"),
    ("config-bad-yaml", "tfapp.train", ["--config", "{bad}"], "bad.yaml"),
    ("config-unknown-key", "tfapp.train", ["--config", "{unknown_key}"], "epochz"),
    ("config-not-a-mapping", "tfapp.train", ["--config", "{list}"], "list.yaml"),
    ("config-group-a-list", "tfapp.train", ["--config", "{group_list}"],
     "trainer: a config group takes a mapping of its keys, not [1, 2]"),
    ("config-group-a-scalar", "tfapp.train", ["--config", "{group_scalar}"],
     "trainer: a config group takes a mapping of its keys, not 3"),
    # overrides
    ("override-unknown-key", "tfapp.train", [*TRAIN, "trainer.epochz=3"], "epochz"),
    ("override-not-key-value", "tfapp.train", [*TRAIN, "epochs"], "epochs"),
    ("override-group-a-scalar", "tfapp.train", [*TRAIN, "trainer=3"],
     "trainer: a config group takes a mapping of its keys, not 3 (command-line override)"),
    ("override-carriage-return", "tfapp.train", [*TRAIN, "trainer.epochs\r"],  # test_fuzz
     "override 'trainer.epochs\\r' is not of the form key=value"),
    ("override-unknown-key-carriage-return", "tfapp.train", [*TRAIN, "trainer.epochz\r=3"],
     "unknown config key 'trainer.epochz\\r'"),  # found by test_fuzz
    ("override-bad-type", "tfapp.train", [*TRAIN, "trainer.epochs=many"], "trainer.epochs"),
    ("override-out-of-range", "tfapp.train", [*TRAIN, "data.batch_size=0"], "data.batch_size"),
    ("override-bad-choice", "tfapp.train", [*TRAIN, "runtime.strategy=gpu9"], "gpu9"),
    ("multi-worker-without-tf-config", "tfapp.train",
     [*TRAIN, "runtime.strategy=multi_worker"], "TF_CONFIG"),
    ("override-after-a-flag", "tfapp.train", [*TRAIN, "--overwrite", "trainer.epochz=3"],
     "epochz"),
    ("override-interpolation", "tfapp.train", [*TRAIN, "data.train_files=${{oc.env:HOME}}/x.csv"],
     "interpolation"),
    # output directory and run names
    ("output-dir-unwritable", "tfapp.train",
     ["--config", "configs/classifier_local.yaml", "output_dir={a_file}/runs"], "a_file"),
    ("run-name-dotdot", "tfapp.train", [*TRAIN, "name=.."], "name: '..'"),
    ("run-name-dot", "tfapp.train", [*TRAIN, "name=."], "name: '.'"),
    ("run-name-path", "tfapp.train", [*TRAIN, "name=a/b"], "name: 'a/b'"),
    ("run-dir-of-other-files", "tfapp.train",
     ["--config", "configs/classifier_local.yaml", "output_dir={in}", "name=photos"],
     "not a tfapp run directory"),
    ("run-dir-of-other-files-overwrite", "tfapp.train",
     ["--config", "configs/classifier_local.yaml", "output_dir={in}", "name=photos",
      "--overwrite"], "not a tfapp run directory"),
    ("rerun-finished-other-config", "tfapp.train", [*RERUN, "optimizer.learning_rate=0.01"],
     "finished run with another config (optimizer.learning_rate: 0.003 -> 0.01)"),
    ("run-dir-locked", "tfapp.train", RERUN, "is in use by pid"),
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
    ("hub-plain-http", "tfapp.train", [*TRAIN, "model.hub_handle=http://example.com/bert"],
     "https://"),
    # tune: the search space and the distributed roles
    ("tune-empty-space", "tfapp.tune", ["--config", "configs/classifier_local.yaml",
                                        "output_dir={out}"], "tune.space is empty"),
    ("tune-space-unknown-key", "tfapp.tune",
     [*TUNE, "tune.space={{optimizer.learning_rat: {{type: float, min: 0.001, max: 0.01}}}}"],
     "learning_rat"),
    ("tune-space-runtime-key", "tfapp.tune",
     [*TUNE, "tune.space={{runtime.precision: {{type: choice, values: [float32]}}}}"],
     "runtime.precision"),
    ("tune-space-bad-range", "tfapp.tune",
     [*TUNE, "tune.space={{optimizer.learning_rate: {{type: float, min: 0.1, max: 0.01}}}}"],
     "min 0.1 > max 0.01"),
    ("tune-oracle-malformed", "tfapp.tune", [*TUNE, "--worker", "w0", "--oracle", "nonsense"],
     "--oracle 'nonsense'"),
    ("tune-chief-and-worker", "tfapp.tune",
     [*TUNE, "--chief", "--worker", "w0", "--oracle", "127.0.0.1:{port}"], "--chief and --worker"),
    ("tune-chief-beyond-loopback-without-token", "tfapp.tune",
     [*TUNE, "--chief", "--oracle", "0.0.0.0:{port}"], "set TFAPP_ORACLE_TOKEN"),
    ("tune-oracle-not-host-port", "tfapp.tune", [*TUNE, "--chief", "--oracle", "host:"],
     "--oracle 'host:' is not HOST:PORT or PORT"),
    ("tune-token-not-printable", "tfapp.tune", [*TUNE, "--chief", "--oracle", "{port}"],
     "TFAPP_ORACLE_TOKEN may hold only printable ASCII"),
    ("tune-worker-id-chief", "tfapp.tune",
     [*TUNE, "--worker", "chief2", "--oracle", "127.0.0.1:{port}"], "'chief2'"),
    ("tune-worker-without-chief", "tfapp.tune",
     [*TUNE, "--worker", "w0", "--oracle", "127.0.0.1:{port}", "tune.worker_timeout_s=2"],
     "no tuning chief answers"),
    ("tune-overwrite-trained-run", "tfapp.tune",
     ["--config", "configs/classifier_tune.yaml", "output_dir={runs}", "name=classifier_local",
      "--overwrite"], "not a tfapp search"),
    ("tune-overwrite-other-files", "tfapp.tune",
     ["--config", "configs/classifier_tune.yaml", "output_dir={in}", "name=photos",
      "--overwrite"], "not a tfapp search"),
    # model directories
    ("predict-no-export", "tfapp.predict", ["--model", "{out}", "hello"], "no exported classifier"),
    ("predict-missing-input", "tfapp.predict", ["--model", "{out}", "--input", "/no/in.txt"],
     "/no/in.txt"),
    ("evaluate-missing-model", "tfapp.evaluate", ["--model", "/no/run", "--data", "{good}"],
     "/no/run"),
    ("generate-missing-model", "tfapp.generate", ["--model", "/no/run", "hello"], "/no/run"),
    ("generate-given-classifier", "tfapp.generate", ["--model", "{run}", "hello"],
     "not a tfapp generator export"),
    ("predict-given-generator", "tfapp.predict", ["--model", "{fake_generator}", "hello"],
     "not a tfapp classifier export"),
    # evaluate takes a generator export too: this one is found, then named as damaged
    ("evaluate-generator-export-damaged", "tfapp.evaluate",
     ["--model", "{fake_generator}", "--data", "{good}"],
     "the generator export {fake_generator} is damaged (variables/variables.index is missing)"),
    # a damaged export (SETUP damages the row's copy of the run): one line naming it
    ("predict-export-pb-truncated", "tfapp.predict", ["--model", "{run}", "hello"],
     "the classifier export {run}/export is damaged ("),
    ("predict-export-variables-deleted", "tfapp.predict", ["--model", "{run}", "hello"],
     "is damaged (variables/variables.index is missing); export it again (train with "
     "trainer.export=true)"),
    ("evaluate-export-data-truncated", "tfapp.evaluate", ["--model", "{run}", "--data", "{good}"],
     "is damaged (IndexError: Read less bytes than requested)"),
    ("predict-export-marker-corrupt", "tfapp.predict", ["--model", "{run}", "hello"],
     "is damaged (tfapp_export.json is unreadable: Expecting property name"),
    ("generate-export-damaged", "tfapp.generate", ["--model", "{fake_generator}", "hello"],
     "the generator export {fake_generator} is damaged (variables/variables.index is missing)"),
    ("predict-no-texts", "tfapp.predict", ["--model", "{run}"], "no texts given"),
    # a prepared folder (SETUP prepares {good} into {in}/prepared, then damages a shard)
    ("prepared-shard-missing", "tfapp.train", ["--config", "configs/classifier_local.yaml",
     "output_dir={out}", "data.train_files={in}/prepared/train"],
     "is missing; prepare it again (python -m tfapp.prepare"),
    ("prepared-shard-truncated", "tfapp.train", ["--config", "configs/classifier_local.yaml",
     "output_dir={out}", "data.train_files={in}/prepared/train"],
     "bytes, the manifest says"),
    ("prepared-shard-bit-flipped", "tfapp.train", ["--config", "configs/classifier_local.yaml",
     "output_dir={out}", "data.train_files={in}/prepared/train"],
     "does not match its checksum (the file was changed); prepare it again"),
    # damaged exports (found by test_fuzz): cut short, or metadata that is not JSON
    ("predict-export-variables-cut-short", "tfapp.predict", ["--model", "{run}", "hello"],
     "is damaged (IndexError: Read less bytes than requested)"),
    ("predict-export-metadata-not-json", "tfapp.predict", ["--model", "{run}", "hello"],
     "is damaged (tfapp_export.json is unreadable: "),
    ("predict-export-fingerprint-cut-short", "tfapp.predict", ["--model", "{run}", "hello"],
     "is damaged ("),
    ("predict-input-not-utf8", "tfapp.predict", ["--model", "{run}", "--input", "{binary}"],
     "UTF-8"),
    ("predict-pair-count", "tfapp.predict", ["--model", "{run}", "--pair", "x", "a", "b"],
     "--pair given 1 times for 2 texts"),
    # evaluate's errors name its flags, not config keys it does not take
    ("evaluate-unseen-label", "tfapp.evaluate", ["--model", "{run}", "--data", "{unseen_label}"],
     "'sideways' (not among the labels of the model: negative, positive) (fix the data, or "
     "pass "
     "--on-bad-rows skip"),
    ("evaluate-no-label-column", "tfapp.evaluate", ["--model", "{run}", "--data", "{no_label}"],
     "no column 'label' in the header row (has: text, stars) -- set --text-column"),
    ("evaluate-missing-data", "tfapp.evaluate", ["--model", "{run}", "--data", "/no/test.csv"],
     "--data: file not found: /no/test.csv"),
    ("evaluate-nothing-left", "tfapp.evaluate",
     ["--model", "{run}", "--data", "{unseen_label}", "--on-bad-rows", "skip"],
     "--data: no usable examples left after dropping 1 bad row(s)"),
    # hub modules
    ("hub-build-out-exists", "tfapp.hub.__main__", [*BUILD, "--out", "{photos}"],
     "already exists"),
    ("hub-build-overwrite-other-files", "tfapp.hub.__main__",
     [*BUILD, "--out", "{photos}", "--overwrite"], "not a tfapp module directory"),
    ("hub-build-missing-corpus", "tfapp.hub.__main__",
     ["build-bert", "--corpus", "/no/corpus.txt", "--out", "{out}/hub"], "/no/corpus.txt"),
    ("hub-build-vocab-size-zero", "tfapp.hub.__main__",
     [*BUILD, "--out", "{out}/hub", "--vocab-size", "0"], "--vocab-size 0"),
    ("hub-build-vocab-size-too-small", "tfapp.hub.__main__",
     [*BUILD, "--out", "{out}/hub", "--vocab-size", "3"], "reserved tokens"),
    ("hub-build-heads-not-dividing", "tfapp.hub.__main__",
     [*BUILD, "--out", "{out}/hub", "--hidden", "100", "--heads", "3"],
     "--hidden 100 is not divisible by --heads 3"),
    ("hub-convert-missing-dir", "tfapp.hub.__main__",
     ["convert", "--from", "/no/hf", "--out", "{out}/hub"], "/no/hf"),
    ("hub-convert-not-a-checkpoint", "tfapp.hub.__main__",
     ["convert", "--from", "{photos}", "--out", "{out}/hub"], "no config.json"),
    ("hub-convert-vocab-duplicate", "tfapp.hub.__main__",
     ["convert", "--from", "{hf_dup_vocab}", "--out", "{out}/hub"],
     "hf_dup_vocab/vocab.txt:6: token 'the' is already on line 5; a BERT vocab lists each "
     "token once"),
    ("hub-convert-vocab-empty-line", "tfapp.hub.__main__",
     ["convert", "--from", "{hf_blank_vocab}", "--out", "{out}/hub"],
     "hf_blank_vocab/vocab.txt:3: empty line"),
    ("hub-convert-vocab-space-in-token", "tfapp.hub.__main__",
     ["convert", "--from", "{hf_space_vocab}", "--out", "{out}/hub"],
     "hf_space_vocab/vocab.txt:5: token 'new york' has whitespace inside"),
    ("hub-resolve-missing", "tfapp.hub.__main__", ["resolve", "/no/encoder"], "/no/encoder"),
    ("hub-no-command", "tfapp.hub.__main__", [], "no command given; choose one of: build-bert"),
    # pretrain
    ("pretrain-missing-corpus", "tfapp.pretrain",
     ["--corpus", "/no/corpus.txt", "--hub", "builtin:tiny", "--out", "{out}/adapted",
      "output_dir={out}"], "/no/corpus.txt"),
    ("pretrain-missing-hub", "tfapp.pretrain",
     ["--corpus", "{corpus}", "--hub", "/no/hub", "--out", "{out}/adapted"], "/no/hub"),
    ("pretrain-bad-mask-rate", "tfapp.pretrain",
     [*PRETRAIN, "--out", "{out}/adapted", "--mask-rate", "1.5"], "--mask-rate 1.5"),
    ("pretrain-bad-mlm-override", "tfapp.pretrain",  # (after flags: read all the same)
     [*PRETRAIN, "--out", "{out}/adapted", "mlm.mask_rate=2"], "mlm.mask_rate: 2.0"),
    ("pretrain-batch-size-zero", "tfapp.pretrain",
     [*PRETRAIN, "--out", "{out}/adapted", "--batch-size", "0"], "--batch-size must be >= 1"),
    ("pretrain-out-exists", "tfapp.pretrain", [*PRETRAIN, "--out", "{photos}"],
     "already exists"),
    ("pretrain-overwrite-other-files", "tfapp.pretrain",
     [*PRETRAIN, "--out", "{photos}", "--overwrite"], "not a tfapp module directory"),
    # lr_find
    ("lr-find-output-not-png", "tfapp.lr_find", [*LR_FIND, "--output", "{out}/lr.txt"],
     "give a .png path"),
    ("lr-find-output-folder-missing", "tfapp.lr_find", [*LR_FIND, "--output", "/no/dir/lr.png"],
     "/no/dir"),
    ("lr-find-missing-data", "tfapp.lr_find",
     [*LR_FIND, "--output", "{out}/lr.png", "data.train_files=/no/such/file.csv"],
     "/no/such/file.csv"),
    # share, profile, data_service, doctor
    ("share-missing-dir", "tfapp.share", ["/no/run"], "/no/run"),
    ("share-no-runs", "tfapp.share", ["{photos}"], "holds no tfapp run"),
    ("profile-summary-no-capture", "tfapp.profile", ["summary", "{run}"],
     "no profiler capture"),
    ("profile-summary-empty-capture", "tfapp.profile", ["summary", "{empty_capture}"],
     "no usable profiler capture in {empty_capture}/logs/plugins/profile/2026_01_01_00_00_00 "
     "(host.xplane.pb is empty); take a new one: train with trainer.profile_steps=START,STOP"),
    ("profile-summary-corrupt-capture", "tfapp.profile", ["summary", "{corrupt_capture}"],
     "(the profile plugin cannot read host.xplane.pb (input_pipeline_analyzer): truncated or "
     "corrupt, or from another TensorFlow version); take a new one: train with "
     "trainer.profile_steps=START,STOP"),
    ("profile-summary-missing-dir", "tfapp.profile", ["summary", "/no/run"], "/no/run"),
    ("profile-capture-no-server", "tfapp.profile",
     ["capture", "--address", "127.0.0.1:{port}", "--duration-ms", "200", "--logdir",
      "{out}/logs"], "nothing listens there"),
    ("profile-capture-bad-address", "tfapp.profile",
     ["capture", "--address", "nonsense", "--logdir", "{out}/logs"], "--address nonsense"),
    ("profile-capture-zero-duration", "tfapp.profile",
     ["capture", "--address", "127.0.0.1:{port}", "--duration-ms", "0", "--logdir",
      "{out}/logs"], "--duration-ms"),
    # a broken environment: the cache root (TFAPP_CACHE_DIR, or HOME's) and TF_CONFIG (set
    # by SETUP below). A path under a regular file stands for a read-only place: it fails
    # for root too, where a chmod 0555 folder would not.
    ("cache-dir-a-file", "tfapp.train", TRAIN,
     "tfapp cache {a_file} (TFAPP_CACHE_DIR) is unusable: {a_file} is a file, not a folder; "
     "set TFAPP_CACHE_DIR to a writable folder"),
    ("cache-dir-not-writable", "tfapp.train", TRAIN,
     "tfapp cache {a_file}/cache (TFAPP_CACHE_DIR) is unusable: {a_file} is a file"),
    ("home-a-file", "tfapp.train", TRAIN,
     "tfapp cache {a_file}/.cache/tfapp (from HOME={a_file}) is unusable: {a_file} is a file, "
     "not a folder; set TFAPP_CACHE_DIR to a writable folder (or HOME to your home folder)"),
    ("tf-config-not-json", "tfapp.train", TRAIN,
     "TF_CONFIG is not valid JSON (Expecting value at character 0); set TF_CONFIG to JSON like"),
    ("tf-config-not-an-object", "tfapp.train", TRAIN, "TF_CONFIG is a JSON list, not an object"),
    ("tf-config-cluster-not-a-mapping", "tfapp.train", TRAIN,
     "TF_CONFIG 'cluster' must map each job (worker, chief) to its list of host:port "
     "addresses, got [\"h0:1\"]"),
    ("tf-config-task-without-type", "tfapp.train", TRAIN,
     "TF_CONFIG 'task' must say which of the cluster's tasks this process is"),
    ("tf-config-index-out-of-range", "tfapp.train", TRAIN,
     "TF_CONFIG task index 2 is out of range: job 'worker' lists 1 address(es), so 0 to 0"),
    ("tf-config-type-not-in-cluster", "tfapp.train", TRAIN,
     "TF_CONFIG task type \"chief\" is not a job of the cluster (it has: worker)"),
    ("tf-config-tune", "tfapp.tune", TUNE,
     "TF_CONFIG is not valid JSON (Expecting property name enclosed in double quotes"),
    ("tf-config-multi-worker", "tfapp.train", [*TRAIN, "runtime.strategy=multi_worker"],
     "TF_CONFIG task index 2 is out of range"),
    ("data-service-no-workers", "tfapp.data_service", ["--workers", "0", "--port", "0"],
     "--workers 0"),
    ("data-service-port-in-use", "tfapp.data_service", ["--workers", "1", "--port", "{busy}"],
     "choose another --port"),
    ("doctor-unknown-flag", "tfapp.doctor", ["--fix"], "--fix"),
    # prompts
    ("generate-no-prompt", "tfapp.generate", ["--model", "{out}"], "prompt"),
    ("generate-data-without-output", "tfapp.generate", ["--model", "{out}", "--data", "{good}"],
     "--data needs --output OUT"),
    ("generate-output-without-data", "tfapp.generate",
     ["--model", "{out}", "--output", "{out}/g.jsonl", "hi"], "--output and --keep go with --data"),
    ("evaluate-output-exists", "tfapp.evaluate",
     ["--model", "{out}", "--data", "{good}", "--output", "{good}"],
     "the file exists; nothing was written"),
    ("generate-prompts-file-not-utf8", "tfapp.generate",
     ["--model", "{out}", "--prompts-file", "{bad_prompts}"],
     "bad_prompts.txt:2: not valid UTF-8 text"),
    ("config-not-utf8", "tfapp.train", ["--config", "{latin1}"],
     "latin1.yaml:2: not valid UTF-8 text"),
    ("config-alias-cycle", "tfapp.train", ["--config", "{alias_cycle}"],
     "alias_cycle.yaml: a YAML alias (*name) refers to a mapping or list that contains it"),
    ("config-lone-surrogate", "tfapp.train", ["--config", "{surrogate}"],
     "name: 'a\\ud800' is not UTF-8 text"),
    ("config-nul-byte", "tfapp.train", ["--config", "{nul}"],
     "nul.yaml: is not valid YAML (unacceptable character #x0000"),
    ("data-text-not-utf8", "tfapp.train", [*TRAIN, "data.train_files={bad_lines}"],
     "bad_lines.txt:2: not valid UTF-8 text"),
    ("data-jsonl-lone-surrogate", "tfapp.train", [*TRAIN, "data.train_files={lone_surrogate}"],
     "lone_surrogate.jsonl:1: not valid JSON (\\ud800: half a surrogate pair"),
    ("data-header-not-utf8", "tfapp.train", [*TRAIN, "data.train_files={header_latin1}"],
     "header_latin1.csv:1: not valid UTF-8 text"),
    ("data-tsv-tab-in-field", "tfapp.train", [*TRAIN, "data.train_files={quoted}"],
     "a TSV field cannot hold a tab"),
    # Parquet: a missing column, a wrong type, a truncated file, a bad row (FILE:ROW)
    ("data-parquet-no-label-column", "tfapp.train", [*TRAIN, "data.train_files={no_label_pq}"],
     "no_label_pq.parquet: no column 'label' in the Parquet schema (has: text, stars)"),
    ("data-parquet-wrong-type", "tfapp.train", [*TRAIN, "data.train_files={int_text_pq}"],
     "int_text_pq.parquet: column 'text' holds int64, not text (a string or binary column)"),
    ("data-parquet-truncated", "tfapp.train", [*TRAIN, "data.train_files={cut_pq}"],
     "cut_pq.parquet: not a readable Parquet file (Parquet magic bytes not found"),
    ("data-parquet-null-text", "tfapp.train", [*TRAIN, "data.train_files={null_text_pq}"],
     "null_text_pq.parquet:3: column 'text' is null (fix the data, or set "
     "data.on_bad_rows=skip"),
    ("prepare-parquet-truncated", "tfapp.prepare",
     ["--config", "configs/classifier_local.yaml", "--out", "{out}/prepared",
      "data.train_files={cut_pq}"], "cut_pq.parquet: not a readable Parquet file"),
    ("evaluate-parquet-wrong-type", "tfapp.evaluate",
     ["--model", "{run}", "--data", "{int_text_pq}"],
     "int_text_pq.parquet: column 'text' holds int64, not text"),
    ("hub-convert-config-not-utf8", "tfapp.hub.__main__",
     ["convert", "--from", "{hf_latin1}", "--out", "{out}/hub"],
     "config.json:1: not valid UTF-8 text"),
    ("profiler-port-without-listen-all", "tfapp.train", [*TRAIN, "trainer.profiler_port=6009"],
     "trainer.profiler_listen_all=true"),
    ("data-service-without-listen-all", "tfapp.data_service", ["--workers", "1", "--port", "0"],
     "pass --listen-all"),
    ("class-weight-unknown-label", "tfapp.train",
     [*TRAIN, "data.train_files={good}", "data.class_weight={{spam: 2}}"], "spam"),
    ("test-split-too-small", "tfapp.train",
     [*TRAIN, "data.train_files={good}", "data.test_split=0.001"], "data.test_split=0.001"),
    ("generate-missing-prompts-file", "tfapp.generate",
     ["--model", "{out}", "--prompts-file", "/no/prompts.txt"], "/no/prompts.txt"),
    # token classification (task ner)
    ("ner-format-csv", "tfapp.train", [*NER, "data.format=csv"], "task ner reads conll or jsonl"),
    ("ner-tag-column-zero", "tfapp.train", [*NER, "data.tag_column=0"], "0 is the word itself"),
    ("ner-refuses-classifier-key", "tfapp.train", [*NER, "data.text_column=x"],
     "unknown config key 'data.text_column' (command-line override); 'data.text_column' "
     "belongs to task classifier, generator, mlm, not to task ner"),
    ("conll-for-classifier", "tfapp.train", [*TRAIN, "data.format=conll"],
     "conll is read by task ner only"),
    ("tag-scheme-for-classifier", "tfapp.train", [*TRAIN, "data.tag_scheme=bioes"],
     "unknown config key 'data.tag_scheme' (command-line override); 'data.tag_scheme' "
     "belongs to task ner, not to task classifier"),
    ("generation-key-for-ner", "tfapp.train", [*NER, "generation.max_length=5"],
     "unknown config key 'generation.max_length' (command-line override); 'generation' "
     "belongs to task generator, not to task ner"),
    ("ner-short-line", "tfapp.train", [*NER, "data.train_files={ner_short_line}"],
     "ner_short_line.conll:2: has 1 column(s)"),
    ("ner-bad-tag", "tfapp.train", [*NER, "data.train_files={ner_bad_tag}"],
     "ner_bad_tag.conll:1: tag 'X-PER' is not an IOB1, IOB2 or BIOES tag"),
    ("ner-bioes-never-ends", "tfapp.train", [*NER, "data.train_files={ner_bioes_open}"],
     "ner_bioes_open.conll:3: tag 'B-PER' begins a BIOES entity that never ends"),
    ("ner-bioes-with-iob1-start", "tfapp.train", [*NER, "data.train_files={ner_bioes_iob1}"],
     "ner_bioes_iob1.conll:4: tag 'I-LOC' begins an entity, as in IOB1, in a file of BIOES"),
    ("ner-bioes-type-changes", "tfapp.train",
     [*NER, "data.train_files={ner_bioes_type}", "data.tag_scheme=bioes"],
     "ner_bioes_type.conll:2: tag 'E-LOC' changes the type of the BIOES entity"),
    ("ner-unseen-type", "tfapp.train",
     [*NER, "data.train_files={ner_train}", "data.validation_files={ner_unseen}"],
     "entity type 'ORG' is not among"),
    ("ner-all-outside", "tfapp.train", [*NER, "data.train_files={ner_all_o}"],
     "tags no entity at all"),
    ("ner-jsonl-length-mismatch", "tfapp.train", [*NER, "data.train_files={ner_mismatch}"],
     "1 tokens but 2 tags"),
    # command-line arguments
    ("cli-no-command", "tfapp.cli", [], "no command given"),
    ("cli-unknown-command", "tfapp.cli", ["trian"], "trian"),
    ("cli-unknown-flag-predict", "tfapp.cli", ["predict", "--model", "{out}", "--batchsize",
                                               "0", "hi"], "--batchsize"),
    ("predict-batch-size-zero", "tfapp.predict", ["--model", "{out}", "--batch-size", "0",
                                                  "hi"], "--batch-size 0: must be at least 1"),
    ("cli-unknown-flag", "tfapp.train", ["--epochs", "3"], "--epochs"),
    ("cli-missing-required", "tfapp.predict", ["hello"], "--model"),
    # texts on both sides of a flag are all texts; the error is the missing model
    ("predict-texts-around-a-flag", "tfapp.predict", ["--model", "/no/run", "a", "--json", "b"],
     "/no/run"),
    ("generate-prompts-around-a-flag", "tfapp.generate",
     ["--model", "/no/run", "a", "--seed", "1", "b"], "/no/run"),
    ("cli-bad-number", "tfapp.generate", ["--model", "{out}", "--top-k", "many", "hi"],
     "--top-k"),
]


@contextlib.contextmanager
def _run_dir_locked(names: dict[str, str]) -> Iterator[dict[str, str]]:
    """Another process trains into {run}: its flock held, as tfapp's own lock holds it."""
    with open(Path(names["run"]) / ".lock", "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield {}


@contextlib.contextmanager
def _port_in_use(names: dict[str, str]) -> Iterator[dict[str, str]]:  # noqa: ARG001
    """{busy}: a port some other server listens on. Were the dispatcher to start anyway, it
    would serve until a signal: a SIGINT after 60 s ends it (exit 0, so the row fails)
    instead of hanging the suite."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        watchdog = threading.Timer(60, os.kill, (os.getpid(), signal.SIGINT))
        watchdog.start()
        try:
            yield {"busy": str(sock.getsockname()[1])}
        finally:
            watchdog.cancel()


@contextlib.contextmanager
def _unprintable_token(names: dict) -> Iterator[dict]:  # noqa: ARG001
    os.environ["TFAPP_ORACLE_TOKEN"] = "a\tb"
    try:
        yield {}
    finally:
        del os.environ["TFAPP_ORACLE_TOKEN"]


def _env(**values: str):
    """A SETUP that sets environment variables for the row ({name} in a value: the row's
    file; None unsets), restored afterwards."""
    @contextlib.contextmanager
    def setup(names: dict) -> Iterator[dict]:
        before = {key: os.environ.get(key) for key in values}
        try:
            for key, value in values.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value.format(**names)
            yield {}
        finally:
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return setup


def _tf_config(config: object) -> str:
    """TF_CONFIG as JSON, braces doubled for _env's str.format."""
    return json.dumps(config).replace("{", "{{").replace("}", "}}")


def _damaged_export(damage):
    """A SETUP that damages the row's copy of the trained run's export with ``damage``."""
    @contextlib.contextmanager
    def setup(names: dict) -> Iterator[dict]:
        damage(Path(names["run"]) / "export")
        yield {}
    return setup


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def _damaged_prepared(damage):
    """A SETUP that prepares {good} into {in}/prepared and damages its first shard."""
    @contextlib.contextmanager
    def setup(names: dict) -> Iterator[dict]:
        out = Path(names["in"]) / "prepared"
        code = importlib.import_module("tfapp.prepare").main(
            ["--config", "configs/classifier_local.yaml", "--out", str(out),
             f"data.train_files={names['good']}"])
        assert code in (0, None)
        damage(next((out / "train").glob("*.tfrecord")))
        yield {}
    return setup


def _flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


ONE_WORKER = {"worker": ["h0:1"]}
SETUP = {"prepared-shard-missing": _damaged_prepared(Path.unlink),
         "prepared-shard-truncated": _damaged_prepared(_truncate),
         "prepared-shard-bit-flipped": _damaged_prepared(_flip_a_bit),
         "run-dir-locked": _run_dir_locked, "data-service-port-in-use": _port_in_use,
         "tune-token-not-printable": _unprintable_token,
         "predict-export-pb-truncated": _damaged_export(lambda e: _truncate(e / "saved_model.pb")),
         "predict-export-variables-deleted": _damaged_export(
             lambda e: shutil.rmtree(e / "variables")),
         "evaluate-export-data-truncated": _damaged_export(
             lambda e: _truncate(next((e / "variables").glob("variables.data-*")))),
         "predict-export-marker-corrupt": _damaged_export(
             lambda e: (e / "tfapp_export.json").write_text("{not json")),
         # found by test_fuzz: halves of a copy that failed
         "predict-export-variables-cut-short": _damaged_export(
             lambda e: _truncate(e / "variables" / "variables.data-00000-of-00001")),
         "predict-export-metadata-not-json": _damaged_export(
             lambda e: _truncate(e / "tfapp_export.json")),
         "predict-export-fingerprint-cut-short": _damaged_export(
             lambda e: _truncate(e / "fingerprint.pb")),
         "cache-dir-a-file": _env(TFAPP_CACHE_DIR="{a_file}"),
         "cache-dir-not-writable": _env(TFAPP_CACHE_DIR="{a_file}/cache"),
         "home-a-file": _env(HOME="{a_file}", TFAPP_CACHE_DIR=None),
         "tf-config-not-json": _env(TF_CONFIG="not json"),
         "tf-config-not-an-object": _env(TF_CONFIG="[1, 2]"),
         "tf-config-cluster-not-a-mapping": _env(TF_CONFIG=_tf_config(
             {"cluster": ["h0:1"], "task": {"type": "worker", "index": 0}})),
         "tf-config-task-without-type": _env(TF_CONFIG=_tf_config(
             {"cluster": ONE_WORKER, "task": {"index": 0}})),
         "tf-config-index-out-of-range": _env(TF_CONFIG=_tf_config(
             {"cluster": ONE_WORKER, "task": {"type": "worker", "index": 2}})),
         "tf-config-type-not-in-cluster": _env(TF_CONFIG=_tf_config(
             {"cluster": ONE_WORKER, "task": {"type": "chief", "index": 0}})),
         "tf-config-tune": _env(TF_CONFIG="{{not json"),
         "tf-config-multi-worker": _env(TF_CONFIG=_tf_config(
             {"cluster": ONE_WORKER, "task": {"type": "worker", "index": 2}}))}


def _listen_all() -> list[str]:
    """data_service's acknowledgement that its servers listen on every interface, where it
    asks for one (--listen-all): the rows test what comes after it."""
    import inspect

    from tfapp.data_service import LocalDataService

    return (["--listen-all"]
            if "listen_all" in inspect.signature(LocalDataService).parameters else [])


@pytest.mark.parametrize("row_id,module,argv,fragment", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_one_line_and_leaves_nothing(row_id, module, argv, fragment, tmp_path,
                                                  capsys, monkeypatch, request):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for var in ("KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT", "KERASTUNER_TUNER_ID",
                "TFAPP_ORACLE_TOKEN"):
        monkeypatch.setenv(var, "")  # recorded, so what tune's flags set is undone after
        monkeypatch.delenv(var)
    names = _files(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    runs = tmp_path / "runs"
    if any("{run" in a for a in argv):  # a copy of the trained run (the row may not change it)
        shutil.copytree(request.getfixturevalue("trained").parent, runs)
    names.update({"in": str(tmp_path / "in")}, out=str(out), runs=str(runs),
                 run=str(runs / "classifier_local"), port=str(free_ports(1)[0]))
    with SETUP.get(row_id, lambda _: contextlib.nullcontext({}))(names) as extra:
        argv = [a.format(**names, **extra) for a in argv]
        fragment = fragment.format(**names) if "{" in fragment else fragment
        if module == "tfapp.data_service" and row_id != "data-service-without-listen-all":
            argv += _listen_all()
        # The run's lock file is tfapp's, rewritten by whoever takes it; the rest is kept.
        before = {f: h for f, h in _snapshot(tmp_path / "in", runs).items()
                  if not f.endswith("/.lock")}
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
    # Nothing of the user's lost or changed: the same files with the same bytes.
    after = {f: h for f, h in _snapshot(tmp_path / "in", runs).items()
             if not f.endswith("/.lock")}
    assert after == before
    # Nothing half-written: no model, checkpoint or backup; a started run says "failed".
    for bad in ("export", "checkpoints", "backup", ".export.tmp"):
        assert not list(out.rglob(bad)), bad
    for status in out.rglob("status.json"):
        assert json.loads(status.read_text())["state"] == "failed"


def test_a_missing_column_reads_the_same_from_every_command(trained, tmp_path, capsys,
                                                           monkeypatch):
    """One reader per format, so one message per defect: a CSV without its text column is
    reported in the same words by train, prepare, evaluate --data and predict --data; only
    the hint after ' -- ' names each command's own key or flag."""
    monkeypatch.chdir(REPO)
    bad = tmp_path / "no_text.csv"
    bad.write_text("review,label\nfine,pos\n")
    run = trained
    config = ["--config", "configs/classifier_local.yaml"]
    commands = {
        "tfapp.train": [*config, f"output_dir={tmp_path / 'out'}", f"data.train_files={bad}"],
        "tfapp.prepare": [*config, "--out", str(tmp_path / "prepared"), f"data.train_files={bad}"],
        "tfapp.evaluate": ["--model", str(run), "--data", str(bad)],
        "tfapp.predict": ["--model", str(run), "--data", str(bad),
                          "--output", str(tmp_path / "scores.jsonl")],
    }
    defects = {}
    for module, argv in commands.items():
        code = importlib.import_module(module).main(argv)
        err = capsys.readouterr().err
        assert code == 2, (module, err[-2000:])
        defects[module] = err.strip().splitlines()[-1].split(" -- ")[0]
    assert set(defects.values()) == {
        f"tfapp: error: {bad}: no column 'text' in the header row (has: review, label)"}, defects


def test_a_run_that_starts_over_takes_its_data_labels_not_an_old_labels_json(tmp_path):
    """labels.json keeps a resumed run's label ids; a run that starts over (no backup, or
    --overwrite) must not refuse its data's labels because an earlier run left that file."""
    from tfapp.config import ClassifierDataConfig
    from tfapp.data.examples.classification import load_classification_splits
    from tfapp.errors import DataError

    (tmp_path / "labels.json").write_text('{"labels": ["neg", "pos"], "multi_label": false}')
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(
        f"text {i},{('meh', 'neg', 'pos')[i % 3]}\n" for i in range(30)))
    data = ClassifierDataConfig(train_files=str(tmp_path / "train.csv"))
    with pytest.raises(DataError, match="unknown label 'meh'"):  # resuming: ids must not move
        load_classification_splits(data, 0, tmp_path / "labels.json", keep_vocab=True)
    splits = load_classification_splits(data, 0, tmp_path / "labels.json", keep_vocab=False)
    assert splits.label_names == ["meh", "neg", "pos"]
    assert json.loads((tmp_path / "labels.json").read_text())["labels"] == ["meh", "neg", "pos"]
