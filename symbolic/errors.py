"""The one exception type for invalid input: it names the constraint that failed and what
was given; the command line maps it to exit code 2 and one line."""
from __future__ import annotations


class ConfigError(ValueError):
    """An invalid configuration or input. ``constraint`` names the rule that failed."""

    def __init__(self, constraint: str, message: str):
        super().__init__(message)
        self.constraint = constraint
