"""The domain of every number memsym accepts, as data: each bound the largest value a real model or cluster uses,
with a wide margin, so that every accepted input is computed within seconds and under 1 GiB, within a float64 and a
printed column.  Checked before any work (memsym/argtypes.py apply_limits, a config.json's fields, a
Layout's or Training's validation); a value outside raises ConfigError ``limit.<name>`` naming the limit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

from symbolic import tomlfile
from symbolic.errors import ConfigError


@dataclass(frozen=True)
class Limit:
    """The integers ``low..high`` a quantity may take, and why ``high`` (the largest real value)."""

    name: str
    low: int
    high: int
    why: str

    @property
    def domain(self) -> str:
        return f"{self.low}..{_power(self.high)}"

    def message(self, what: str, value) -> str:
        shown = _show(value)
        return f"{what} must be an integer in {self.domain} ({self.why}), got {shown}"

    def check(self, value, what: Optional[str] = None) -> int:
        """``value`` if it is an integer inside the domain, else ConfigError naming the limit."""
        what = what or self.name
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            raise ConfigError(f"limit.{self.name}", self.message(what, value))
        return value


def _power(n: int) -> str:
    """2^20 for 1048576, 10^4 for 10000, the number otherwise."""
    for base in (2, 10):
        k = round(math.log(n, base)) if n > 0 else 0
        if k >= 4 and base ** k == n:
            return f"{n} = {base}^{k}"
    return str(n)


def _show(value) -> str:
    text = str(value)
    if len(text) > 24:
        return f"{text[:12]}...({len(text)} characters)"
    return text


def _read(path=Path(__file__).with_name("limits.toml")) -> Dict[str, Dict[str, Limit]]:
    with tomlfile.package_data(path) as data:
        return {table: {name: Limit(name, *row) for name, row in rows.items()} for table, rows in data.items()}


_TABLES = _read()
#: Command-line options by their argparse ``dest`` (limits.toml [options]); a list option (``--mbs 1,2,4`` of search)
#: bounds each entry and, in LIST_LENGTHS, the entries.
OPTIONS: Dict[str, Limit] = _TABLES["options"]
#: config.json fields (Hugging Face names; limits.toml [fields]).
FIELDS: Dict[str, Limit] = _TABLES["fields"]
GPUS = OPTIONS["gpus"].high  # the largest training clusters are ~10^5 GPUs
LAYERS = FIELDS["num_hidden_layers"].high  # the deepest released models have ~10^2 layers

#: Entries of a list option (a search evaluates every combination of its lists).
LIST_LENGTHS: Dict[str, int] = {"mbs": 16, "seq": 16, "zero": 4, "layers_per_stage": LAYERS}
#: A search evaluates every micro-batch size at every sequence length, and keeps every row: at
#: most this many pairs (2^20 GPUs with TP unconstrained, every ZeRO stage and policy, 4 pairs:
#: 0.7 GiB, 9 s; 8 pairs would take 1.3 GiB).  Split a larger grid into several searches.
SEARCH_GRID = 4
#: List options that are sets of values to try (search): a value typed twice is refused.
SET_OPTIONS = ("mbs", "seq", "zero")
#: Any integer typed on the command line: at most this many digits (checked before it is converted).
MAX_DIGITS = 18
#: Any argument typed on the command line (a formula, a path, a list): at most this many characters.
MAX_ARG_CHARS = 2 ** 16
#: Memory per GPU (--hbm): the largest GPUs have ~2^38 bytes.
HBM = Limit("hbm", 1, 2 ** 50, "the largest GPUs have ~2^38 bytes")
#: Routing imbalance F (--imbalance): typed as a decimal of at most this many characters, at most IMBALANCE.
MAX_NUMBER_CHARS = 32
IMBALANCE = 10 ** 6
#: How the command line reads a typed integer (ASCII digits, an optional sign) and the imbalance F (a
#: decimal whose exponent has at most two digits, or a fraction): fullmatch after str.strip().  The
#: calculator page (memsym page) reads its fields with the same patterns.
INT_PATTERN = r"[+-]?[0-9]+"
DECIMAL_PATTERN = r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]{1,2})?|[0-9]+/[0-9]+"

#: config.json: at most this many bytes read, nested at most this deep (released configs: ~2 KiB, depth 3).
CONFIG_BYTES = 4 * 2 ** 20
CONFIG_DEPTH = 32
#: config.json: an integer of more than this many characters (its sign excluded) is refused as it is read.
CONFIG_DIGITS = 30


def option(dest: str) -> Optional[Limit]:
    """The limit of the command-line option stored in ``dest``, if it has one."""
    return OPTIONS.get(dest)

