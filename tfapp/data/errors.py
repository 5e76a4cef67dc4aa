"""User-facing data errors.

``DataError`` subclasses ``tfapp.config.ConfigError`` so that entry points catch a single
type for every user mistake and print it as one ``tfapp: error: ...`` line.
"""

from __future__ import annotations

from tfapp.config import ConfigError

__all__ = ["DataError"]


class DataError(ConfigError):
    """A problem with the user's data (file, column, row, label); the message is one line."""
