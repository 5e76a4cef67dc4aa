"""The errors a user can cause, on the ground floor: this module imports nothing of tfapp.

Every entry point catches ``ConfigError`` (``tfapp.cli.run_main``) and prints it as one
``tfapp: error: ...`` line with exit code 2, so each user mistake -- in a config, the data,
the environment or an artifact -- is raised as one of these, with a one-line message that
says what is wrong and how to fix it.

A message that names a config key holds it as a ``Setting``, apart from its words: a
command that takes the key as a flag of its own (``tfapp.evaluate --label-column``) then
names the flag instead (``ConfigError.in_flag_terms``), and no text is rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ConfigError", "DataError", "Setting"]


@dataclass(frozen=True)
class Setting:
    """A config key named in a message; with ``value``, the advice to set it to that."""

    key: str
    value: str | None = None

    def __str__(self) -> str:
        return self.key if self.value is None else f"set {self.key}={self.value}"

    def as_flag(self, flag: str) -> str:
        """The same words for a command whose ``flag`` sets ``key``."""
        return flag if self.value is None else f"pass {flag} {self.value}"


class ConfigError(ValueError):
    """A user mistake in a config file or override; the message is one line.

    ``parts`` are joined into the message: text, and ``Setting`` for each config key it
    names (``ConfigError(Setting("data.format"), ": unknown format 'x'")``).
    """

    def __init__(self, *parts: str | Setting) -> None:
        self.parts = parts
        super().__init__("".join(str(part) for part in parts))

    @property
    def settings(self) -> list[Setting]:
        """The config keys the message names, in order."""
        return [part for part in self.parts if isinstance(part, Setting)]

    def in_flag_terms(self, flags: Mapping[str, str]) -> ConfigError:
        """The same error for a command whose flags (config key -> flag) set those keys."""
        return type(self)(*(part.as_flag(flags[part.key])
                            if isinstance(part, Setting) and part.key in flags else part
                            for part in self.parts))


class DataError(ConfigError):
    """A problem with the user's data (file, column, row, label); the message is one line."""
