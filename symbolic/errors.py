"""The one exception type for invalid input: it names the constraint that failed and what
was given; the command line maps it to exit code 2 and one line."""
from __future__ import annotations

import difflib


class ConfigError(ValueError):
    """An invalid configuration or input. ``constraint`` names the rule that failed."""

    def __init__(self, constraint: str, message: str):
        super().__init__(message)
        self.constraint = constraint


def did_you_mean(word: str, names) -> str:
    """`` (did you mean a or b?)`` naming the up to 3 ``names`` nearest ``word`` (difflib's ratio >= 0.6, as
    argparse suggests choices), or ``""``: the tail of a refusal of a mistyped preset name."""
    near = difflib.get_close_matches(str(word), list(names), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(near)}?)" if near else ""
