"""The errors a user can cause, on the ground floor: this module imports nothing of tfapp.

Every entry point catches ``ConfigError`` (``tfapp.cli.run_main``) and prints it as one
``tfapp: error: ...`` line with exit code 2, so each user mistake -- in a config, the data,
the environment or an artifact -- is raised as one of these, with a one-line message that
says what is wrong and how to fix it.
"""

from __future__ import annotations

__all__ = ["ConfigError", "DataError"]


class ConfigError(ValueError):
    """A user mistake in a config file or override; the message is one line."""


class DataError(ConfigError):
    """A problem with the user's data (file, column, row, label); the message is one line."""
