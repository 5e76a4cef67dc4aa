"""Which config changes a rerun of a run may make: the resume policy.

Every leaf key of a task's config carries its rule (``resume=`` in ``tfapp/config``;
``config.fields`` says what each rule means); this module only compares two configs key by
key and applies the rules:

* a backup is resumed under its own config, but for keys that do not touch the trained
  state (``FREE``) or say how long it trains (``LONGER``);
* ``--resume-anyway`` resumes it under other ``MATCH`` keys too, never under another
  ``NEVER`` key (another encoder, optimizer, task);
* a finished run is trained again only under its own config, ``FREE`` keys aside.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, NamedTuple

from tfapp.atomic import read_state
from tfapp.config import ConfigError, ExperimentConfig, load_config
from tfapp.config.fields import FREE, LONGER, NEVER
from tfapp.run_layout import RunLayout

log = logging.getLogger("tfapp")

__all__ = ["Change", "check_finished_same", "check_resumable", "describe", "differences",
           "rule_of"]


class Change(NamedTuple):
    """One key whose value differs between two configs, and its resume rule."""

    key: str
    old: Any
    new: Any
    rule: str


def rule_of(f: dataclasses.Field) -> str | None:
    """The resume rule of a config field (None: it has none, which a test refuses)."""
    return f.metadata.get("resume")


def differences(a: Any, b: Any, prefix: str = "") -> list[Change]:
    """Every leaf key whose value differs between configs ``a`` and ``b`` (dotted), with
    ``a``'s rule for it."""
    found = []
    for f in dataclasses.fields(a):
        key = f"{prefix}{f.name}"
        # under another task, b's class may lack a's key (the task differs too)
        x, y = getattr(a, f.name), getattr(b, f.name, None)
        if x == y:
            continue
        if dataclasses.is_dataclass(x):
            found += differences(x, y, key + ".")
        else:
            found.append(Change(key, x, y, rule_of(f)))
    return found


def describe(changes: list[Change]) -> str:
    """``key: old -> new`` for each change, joined."""
    def short(value: Any) -> str:
        text = repr(value) if isinstance(value, str) else str(value)
        return text if len(text) <= 40 else text[:37] + "..."

    return ", ".join(f"{c.key}: {short(c.old)} -> {short(c.new)}" for c in changes)


_WAYS_FORWARD = ("to resume it as it was, rerun with --config {stored}; to start over, pass "
                 "--start-over (the run is moved to {aside}, nothing is deleted); or set "
                 "name= for a new run")


def _aside_name(run: RunLayout) -> Any:
    return run.root.with_name(f"{run.root.name}.old-<date>-<time>")


def check_finished_same(run: RunLayout, cfg: ExperimentConfig) -> None:
    """Training a finished run again starts from scratch and replaces its export and
    checkpoints: done silently only under the same config (``FREE`` keys aside); under
    another one it is refused unless --start-over, which moves the finished run aside."""
    status = read_state(run.status, "run status") or {}
    if status.get("state") != "finished" or not run.params.is_file():
        return
    try:
        changed = describe([c for c in differences(load_config(run.params), cfg)
                            if c.rule != FREE])
    except ConfigError:
        changed = "its params.yaml is unreadable"
    if changed:
        raise ConfigError(f"{run.root} holds a finished run with another config ({changed}); "
                          "nothing was changed; pass --start-over to train it again (the "
                          f"finished run is moved to {_aside_name(run)}, nothing is "
                          "deleted), or set name= for a new run")


def check_resumable(run: RunLayout, cfg: ExperimentConfig,
                    resume_anyway: bool) -> tuple[str, ...]:
    """Resuming a backup is only right under the config that made it (``FREE`` and
    ``LONGER`` keys aside). Another config is refused in one line naming every key that
    differs and each way forward; with ``resume_anyway`` it is resumed (returns the
    changes, described), unless a ``NEVER`` key differs."""
    stored = run.backup_params if run.backup_params.is_file() else run.params
    if not stored.is_file():
        return ()
    try:
        changes = [c for c in differences(load_config(stored), cfg)
                   if c.rule not in (FREE, LONGER)]
    except ConfigError as err:
        raise ConfigError(f"{stored}, the config {run.root}'s backup was made under, cannot "
                          f"be read ({err}); pass --start-over to start the run again (it "
                          "is moved aside, nothing is deleted)") from None
    if not changes:
        return ()
    ways_forward = _WAYS_FORWARD.format(stored=stored, aside=_aside_name(run))
    if not resume_anyway:
        raise ConfigError(f"{run.root} holds a backup made under another config "
                          f"({describe(changes)}); nothing was changed; to resume it with "
                          "these changes, pass --resume-anyway; " + ways_forward)
    never = [c for c in changes if c.rule == NEVER]
    if never:
        raise ConfigError(f"--resume-anyway: {describe(never)} since the backup was made, "
                          f"and a backup cannot be resumed under another {never[0].key}; "
                          + ways_forward)
    log.warning("resuming %s under a changed config: %s", run.root, describe(changes))
    return tuple(describe([c]) for c in changes)
