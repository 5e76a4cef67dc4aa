"""Config layering, validation messages, params.yaml, and the CLI's handling of mistakes."""

from __future__ import annotations

import dataclasses

from tfapp.config import (
    TASK_CONFIGS,
    ConfigError,
    config_reference,
    field_docs,
    load_config,
    save_params,
    to_yaml,
)

import pytest
import yaml
from conftest import REPO, run_python


def test_defaults_are_the_default_run():
    cfg = load_config()
    assert cfg.task == "classifier" and cfg.model.kind == "bert"
    assert cfg.data.train_files == "demo"
    assert cfg.name == "classifier"


def test_layering_defaults_yaml_overrides(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("trainer:\n  epochs: 5\ndata:\n  batch_size: 16\n  seq_length: 64\n")
    cfg = load_config(path, ["trainer.epochs=7", "optimizer.learning_rate=1e-4"])
    assert cfg.trainer.epochs == 7            # override beats YAML
    assert cfg.data.batch_size == 16          # YAML beats default
    assert cfg.data.seq_length == 64
    assert cfg.optimizer.learning_rate == pytest.approx(1e-4)
    assert cfg.model.dropout == 0.1           # default kept
    assert cfg.name == "exp"                  # run named after the file


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_load_and_say_how_to_run(path):
    load_config(path)
    header = path.read_text().splitlines()[0]
    assert header.startswith("#") and "python -m tfapp." in path.read_text().split("\n\n")[0]


@pytest.mark.parametrize("overrides,fragment", [
    (["trainer.epoch=3"], "unknown config key 'trainer.epoch'"),
    (["trainer.epoch=3"], "did you mean 'trainer.epochs'"),
    (["data.batch_size=-1"], "data.batch_size: -1 is too small; must be >= 1"),
    (["data.batch_size=abc"], "data.batch_size: wrong type"),
    (["runtime.strategy=gpu"], "choose one of: auto, tpu, mirrored, multi_worker, one_device, cpu"),
    (["optimizer.learning_rate=0"], "optimizer.learning_rate: 0.0 must be > 0"),
    (["task=generator", "generation.no_repeat_ngram_size=-1"],
     "generation.no_repeat_ngram_size: -1 is too small; must be >= 0"),
    (["task=generator", "generation.repetition_penalty=0"],
     "generation.repetition_penalty: 0.0 must be > 0"),
    (["trainer.profile_steps=9,3"], "trainer.profile_steps"),
    (["nonsense"], "not of the form key=value"),
    (["task=generator", "model.kind=bert"], "task 'generator' needs model.kind=seq2seq, got "
     "'bert'"),
    (["task=bogus"], "task: 'bogus' is not allowed; choose one of: classifier, generator, mlm, "
     "ner"),
    (["data.service.adress=x"], "did you mean 'data.service.address'"),
    # No interpolation: a shared config must not copy the runner's environment anywhere.
    (["tracking.wandb.project=${oc.env:HOME}"],
     "tracking.wandb.project: '${oc.env:HOME}' is an interpolation"),
    (["name=${task}"], "name: '${task}' is an interpolation"),
    # A name is one folder inside output_dir, never a path out of it.
    (["name=.."], "name: '..' must be a folder name"),
    (["name=."], "name: '.' must be a folder name"),
    (["name=a/b"], "name: 'a/b' must be a folder name"),
    (["name=caf\u00e9"], "must be a folder name of ASCII letters"),
    # A key of another task is not in the chosen task's class: an unknown key, named in
    # full, with the task it belongs to (whichever order task= comes in).
    (["task=generator", "model.kind=seq2seq", "data.seq_length=64"],
     "unknown config key 'data.seq_length' (command-line override); 'data.seq_length' "
     "belongs to task classifier, mlm, ner, not to task generator"),
    (["data.seq_length=64", "task=generator"], "unknown config key 'data.seq_length'"),
    (["generation.method=beam"], "unknown config key 'generation.method' (command-line "
     "override); 'generation' belongs to task generator, not to task classifier"),
    (["task=ner", "generation.max_len=5"], "unknown config key 'generation.max_len'"),
    (["data.tag_column=3"], "unknown config key 'data.tag_column' (command-line override); "
     "'data.tag_column' belongs to task ner, not to task classifier"),
    (["data.context_words=4"], "unknown config key 'data.context_words'"),
    (["task=ner", "data.text_column=x"], "unknown config key 'data.text_column'"),
    (["task=mlm", "data.snapshot=/tmp/s"], "unknown config key 'data.snapshot'"),
    (["task=mlm", "data.service.address=localhost:5000"],
     "unknown config key 'data.service.address' (command-line override); 'data.service' "
     "belongs to task classifier, generator, ner, not to task mlm"),
    (["task=mlm", "trainer.monitor=val_loss"], "unknown config key 'trainer.monitor'"),
    (["model.attention=luong"], "'model.attention' belongs to task generator, not to task "
     "classifier"),
    (["task=mlm", "optimizer.learning_rate=auto"], "not supported by task mlm"),
    (["task=mlm", "model.kind=cnn"], "task 'mlm' needs model.kind=bert, got 'cnn'"),
    (["tune.space={runtime.precision: {type: choice, values: [float32]}}"],
     "set up once per process"),
    # The profiler server binds [::]:port unauthenticated: only with the acknowledgement.
    (["trainer.profiler_port=6009"], "trainer.profiler_port=6009 starts TensorFlow's profiler "
     "server, which listens on every network interface with no authentication (it has no "
     "bind address); set trainer.profiler_listen_all=true to start it where a firewall "
     "keeps port 6009 closed to other hosts, or trainer.profiler_port=0"),
])
def test_bad_overrides_name_the_key(overrides, fragment):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


@pytest.mark.parametrize("text,overrides,fragment", [
    ("trainer: [1, 2]\n", [], "trainer: a config group takes a mapping of its keys, not [1, 2] "
     "(GROUP.yaml); set its keys, e.g. trainer.epochs=..."),
    ("trainer: 3\n", [], "trainer: a config group takes a mapping of its keys, not 3"),
    ("trainer:\n", [], "trainer: a config group takes a mapping of its keys, not an empty value"),
    ("tracking:\n  wandb: off\n", [], "tracking.wandb: a config group takes a mapping of its "
     "keys, not False (GROUP.yaml); set its keys, e.g. tracking.wandb.enabled=..."),
    ("", ["trainer=3"], "trainer: a config group takes a mapping of its keys, not 3 "
     "(command-line override)"),
    ("", ["trainer=[1, 2]"], "trainer: a config group takes a mapping of its keys, not [1, 2]"),
    ("", ["data.service=x"], "data.service: a config group takes a mapping of its keys, not 'x'"),
])
def test_a_group_that_is_not_a_mapping_is_named(tmp_path, text, overrides, fragment):
    """OmegaConf alone said "config: wrong type (...):, got None" for all of these."""
    path = tmp_path / "GROUP.yaml"
    path.write_text(text or "task: classifier\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    message = str(info.value).replace(str(tmp_path) + "/", "")
    assert fragment in message and "\n" not in message


def test_profiler_port_with_the_acknowledgement_validates():
    cfg = load_config(None, ["trainer.profiler_port=6009", "trainer.profiler_listen_all=true"])
    assert (cfg.trainer.profiler_port, cfg.trainer.profiler_listen_all) == (6009, True)


def test_bad_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer:\n  epochs: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    typo = tmp_path / "typo.yaml"
    typo.write_text("trainer:\n  epcohs: 2\n")
    with pytest.raises(ConfigError, match=r"typo.yaml.*did you mean 'trainer.epochs'"):
        load_config(typo)


def test_every_field_is_documented():
    def walk(cls):
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            assert docs.get(f.name), f"{cls.__name__}.{f.name} has no docstring entry"
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
                else f.default
            if dataclasses.is_dataclass(default):
                walk(type(default))
    for cls in TASK_CONFIGS.values():
        walk(cls)
    keys = [row[0] for row in config_reference()]
    assert "data.service.address" in keys and "trainer.epochs" in keys


def test_params_yaml_round_trips(tmp_path):
    cfg = load_config(None, ["trainer.epochs=2", "tracking.wandb.tags=[a,b]"])
    path = save_params(cfg, tmp_path / "run")
    assert path.name == "params.yaml"
    assert yaml.safe_load(path.read_text())["trainer"]["epochs"] == 2
    assert load_config(path) == cfg  # rerunning from params.yaml keeps the run name
    assert not list((tmp_path / "run").glob(".params*"))  # no temp file left behind


def test_cli_bad_override_is_one_line_exit_2():
    proc = run_python(["-m", "tfapp.train", "trainer.epoch=3"], timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [lines[-1]] and lines[0].startswith("tfapp: error: unknown config key")
    assert "Traceback" not in proc.stderr


def test_console_script_dispatch():
    proc = run_python(["-m", "tfapp.cli", "bogus"], timeout=120)
    assert proc.returncode == 2 and "unknown command 'bogus'" in proc.stderr
    proc = run_python(["-m", "tfapp.cli", "train", "--print-config", "trainer.epochs=4"],
                      timeout=120)
    assert proc.returncode == 0 and yaml.safe_load(proc.stdout)["trainer"]["epochs"] == 4


def test_importing_tfapp_first_selects_tf_keras():
    code = ("import tfapp, tensorflow as tf, tf_keras; "
            "assert tf.keras.layers.Dense is tf_keras.layers.Dense, tf.keras; print('ok')")
    env = {k: v for k, v in __import__("os").environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["PYTHONPATH"] = str(REPO)
    proc = run_python(["-c", code], env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-1500:]


@pytest.mark.skipif(__import__("platform").machine().lower() not in ("x86_64", "amd64"),
                    reason="tfapp turns oneDNN on only on x86")
@pytest.mark.parametrize("user_value, expected", [(None, "True"), ("0", "False")])
def test_importing_tfapp_turns_on_onednn_unless_the_user_chose(user_value, expected):
    # TensorFlow enables its oneDNN kernels by default only on AVX512/AMX CPUs; tfapp
    # enables them on every x86 CPU (faster training step, docs/performance.md), and an
    # explicit TF_ENABLE_ONEDNN_OPTS from the user wins.
    # TensorFlow's own answer (compat's query of it; its fallback reads the variable tfapp
    # sets, which would prove nothing here).
    code = ("import tfapp, tensorflow as tf; from tfapp import compat; "
            "assert compat.use_private('onednn_query'); print(compat.onednn_enabled())")
    env = {k: v for k, v in __import__("os").environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if user_value is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = user_value
    env["PYTHONPATH"] = str(REPO)
    proc = run_python(["-c", code], env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == expected, proc.stderr[-1500:]


def test_an_empty_override_is_the_empty_string():
    path = REPO / "configs" / "generator_local.yaml"
    assert load_config(path).data.drop_regex == "^#"
    assert load_config(path, ["data.drop_regex="]).data.drop_regex == ""
    assert load_config(path, ["data.drop_regex=''"]).data.drop_regex == ""


# --------------------------------------------------------------------------- a class per task

OLD_PARAMS = REPO / "tests" / "old_params"


@pytest.mark.parametrize("task", ["classifier", "generator", "ner", "mlm"])
def test_a_params_yaml_of_the_one_union_config_still_loads(task):
    """params.yaml, backup/tfapp_params.yaml and best_params.yaml written before the config
    class per task hold every task's keys, the others' at their defaults: they load, and
    what they set for their own task is kept."""
    old = yaml.safe_load((OLD_PARAMS / f"{task}.yaml").read_text())
    assert "generation" in old and "mlm" in old and "tag_column" in old["data"]  # the union
    cfg = load_config(OLD_PARAMS / f"{task}.yaml")
    assert type(cfg) is TASK_CONFIGS[task] and cfg.name == task
    own = {"classifier": lambda c: (c.trainer.epochs, c.data.labels) == (2, ["neg", "pos"]),
           "generator": lambda c: c.generation.method == "beam",
           "ner": lambda c: c.data.tag_scheme == "bioes",
           "mlm": lambda c: c.mlm.mask_rate == 0.2}[task]
    assert own(cfg)
    # saved again, it holds its own task's keys only
    again = yaml.safe_load(to_yaml(cfg))
    assert ("generation" in again) == (task == "generator")
    assert ("mlm" in again) == (task == "mlm")
    assert ("tag_column" in again["data"]) == (task == "ner")
    assert load_config(OLD_PARAMS / f"{task}.yaml") == cfg


def test_an_old_params_yaml_with_another_tasks_key_set_is_refused(tmp_path):
    """Only another task's keys at their default are dropped; one set is named."""
    text = (OLD_PARAMS / "classifier.yaml").read_text()
    path = tmp_path / "params.yaml"
    path.write_text(text.replace("  tag_scheme: iob2", "  tag_scheme: bioes"))
    with pytest.raises(ConfigError, match=r"unknown config key 'data.tag_scheme' \(.*params.yaml"
                       r"\); 'data.tag_scheme' belongs to task ner, not to task classifier"):
        load_config(path)
    path.write_text(text.replace("  method: top_k", "  method: beam"))
    with pytest.raises(ConfigError, match="unknown config key 'generation.method'"):
        load_config(path)


@pytest.mark.parametrize("task", ["classifier", "generator", "ner", "mlm"])
def test_each_task_class_holds_only_the_keys_its_task_reads(task):
    keys = {row[0] for row in config_reference(task)}
    assert ("data.tag_column" in keys) == (task == "ner")
    assert ("data.label_column" in keys) == (task == "classifier")
    assert ("data.context_words" in keys) == (task == "generator")
    assert ("model.attention" in keys) == (task == "generator")
    assert any(k.startswith("generation.") for k in keys) == (task == "generator")
    assert any(k.startswith("mlm.") for k in keys) == (task == "mlm")
    assert ("data.snapshot" in keys) == (task != "mlm")
    assert ("trainer.monitor" in keys) == (task != "mlm")
    assert {"data.train_files", "data.batch_size", "optimizer.learning_rate",
            "trainer.epochs", "tune.max_trials"} <= keys


def test_the_generator_takes_a_test_split():
    cfg = load_config(None, ["task=generator", "data.test_files=t.txt", "data.test_split=0.1"])
    assert (cfg.data.test_files, cfg.data.test_split) == ("t.txt", 0.1)
    assert load_config(None, ["task=generator"]).model.kind == "seq2seq"  # its only kind


def test_the_masked_lm_task_holds_nothing_out_and_stores_nothing():
    """The shared split and stream code reads these of every task; mlm's are fixed."""
    d = load_config(None, ["task=mlm"]).data
    assert (d.validation_files, d.test_files, d.validation_split, d.test_split) == ("", "", 0, 0)
    assert (d.cache, d.snapshot, d.service.address) == ("", "", "")


def test_print_config_shows_the_keys_of_the_task_it_names(capsys):
    """What a config command's --help points to for another task's keys."""
    from tfapp import cli

    assert cli.main(["train", "--print-config"]) == 0
    default = capsys.readouterr().out
    assert cli.main(["train", "task=ner", "--print-config"]) == 0
    ner = capsys.readouterr().out
    assert "label_column:" in default and "tag_column:" not in default
    assert "tag_column:" in ner and "label_column:" not in ner
    assert "generation:" not in default + ner
    assert "--print-config" in " ".join(cli.CONFIG_KEYS_HELP.split())


