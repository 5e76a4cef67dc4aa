"""Every config key says what a resume may do with it (``resume=`` in ``tfapp/config``):
a key added without a rule fails here, instead of being silently safe (or unsafe) to
change under a backup."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tfapp.config import TASK_CONFIGS, ConfigError, load_config
from tfapp.config.fields import FREE, LONGER, MATCH, NEVER, RESUME_RULES, setting
from tfapp.run_layout import RunLayout
from tfapp.tasks import get_task
from tfapp.training.context import RunContext
from tfapp.training.resume_rules import check_resumable, differences, rule_of
from tfapp.training.run_directory import RunDirectory

import pytest


def _leaf_rules(cls: type, prefix: str = "") -> dict[str, str | None]:
    """Dotted leaf key -> its rule, for every key of config class ``cls``."""
    rules: dict[str, str | None] = {}
    for f in dataclasses.fields(cls):
        default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                   else f.default)
        if dataclasses.is_dataclass(default):
            assert rule_of(f) is None, f"{prefix}{f.name}: a group's keys carry the rules"
            rules.update(_leaf_rules(type(default), f"{prefix}{f.name}."))
        else:
            rules[f"{prefix}{f.name}"] = rule_of(f)
    return rules


def test_every_key_of_every_task_has_a_resume_rule_and_the_same_one_in_each_task():
    seen: dict[str, str | None] = {}
    for task, cls in TASK_CONFIGS.items():
        rules = _leaf_rules(cls)
        missing = sorted(k for k, rule in rules.items() if rule not in RESUME_RULES)
        assert missing == [], (f"task {task}: give these config keys a resume rule "
                               f"(resume=FREE|LONGER|MATCH|NEVER, tfapp/config/fields.py)")
        for key, rule in rules.items():
            assert seen.setdefault(key, rule) == rule, f"{key}: another rule in task {task}"
    # What the hand-written lists said before the rules moved onto the keys (the same
    # behaviour), and data.length_buckets: a resume under another bucket count would
    # group the rest of its window differently from the batches already trained on; and
    # model.tie_embeddings, new: tied and untied models hold different weights.
    assert {k for k, r in seen.items() if r == LONGER} == {"trainer.epochs",
                                                           "trainer.max_steps"}
    assert {k for k, r in seen.items() if r == NEVER} == {
        "task", "model.kind", "model.hub_handle", "model.hub_preprocessor",
        "optimizer.name", "optimizer.ema_decay", "trainer.gradient_accumulation_steps",
        "model.tie_embeddings"}
    free = {k for k, r in seen.items() if r == FREE}
    assert free == {"output_dir", "name", "trainer.log_every_steps", "trainer.profile_steps",
                    "trainer.profiler_port", "trainer.profiler_listen_all", "data.cache",
                    "data.snapshot", "data.prefetch", "runtime.tpu", "mlm.overwrite",
                    # decoding only: the epoch samples and the export's defaults
                    "generation.no_repeat_ngram_size", "generation.repetition_penalty",
                    *(k for k in seen if k.startswith(("data.service.", "tracking.")))}
    assert seen["data.length_buckets"] == MATCH


def test_the_check_sees_a_key_without_a_rule():
    @dataclass
    class Group:
        ruled: int = setting(1, resume=MATCH)
        bare: int = 2

    @dataclass
    class Config:
        group: Group = dataclasses.field(default_factory=Group)

    assert _leaf_rules(Config) == {"group.ruled": MATCH, "group.bare": None}
    with pytest.raises(ValueError, match="resume='maybe'"):
        setting(1, resume="maybe")


def test_differences_carry_each_keys_rule():
    a = load_config(None, ["trainer.epochs=2", "data.length_buckets=8"])
    b = load_config(None, ["trainer.epochs=3", "data.length_buckets=4",
                           "tracking.wandb.enabled=true", "optimizer.name=sgd"])
    assert differences(a, b) == [
        ("data.length_buckets", 8, 4, MATCH), ("optimizer.name", "adamw", "sgd", NEVER),
        ("trainer.epochs", 2, 3, LONGER), ("tracking.wandb.enabled", False, True, FREE)]


def test_a_resume_under_other_length_buckets_needs_resume_anyway(tmp_path):
    cfg = load_config(None, [f"output_dir={tmp_path}", "name=run"])
    with RunDirectory.take(RunContext.create(cfg, task=get_task(cfg.task))) as taken:
        (taken.run.backup / "chief").mkdir(parents=True)
        (taken.run.backup / "chief" / "checkpoint").write_text("x")
        taken.keep_config_with_backup()
    other = load_config(None, [f"output_dir={tmp_path}", "name=run", "data.length_buckets=1"])
    run = RunLayout(tmp_path / "run")
    with pytest.raises(ConfigError, match=r"another config \(data.length_buckets: 8 -> 1\)"):
        check_resumable(run, other, resume_anyway=False)
    assert check_resumable(run, other, resume_anyway=True) == ("data.length_buckets: 8 -> 1",)
