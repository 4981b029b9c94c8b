"""The report's formats and their parsing (``--format tex,md``); no sympy, so the command line
parses its options before the report's modules load."""
from __future__ import annotations

from typing import Tuple

from symbolic.errors import ConfigError

FORMATS = ("tex", "md", "html", "ipynb", "pdf")
DEFAULT_FORMATS = FORMATS


def parse_formats(text: str) -> Tuple[str, ...]:
    """``"tex,md"`` -> ('tex', 'md') in :data:`FORMATS` order; ConfigError names an unknown one."""
    items = [x.strip().lower() for x in str(text).split(",") if x.strip()]
    bad = [x for x in items if x not in FORMATS]
    if bad or not items:
        raise ConfigError("format", f"unknown report format {', '.join(map(repr, bad)) or repr(text)}: "
                                    f"use a comma-separated list of {', '.join(FORMATS)}")
    return tuple(f for f in FORMATS if f in items)
