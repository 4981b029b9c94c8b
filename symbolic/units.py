"""Units at the edge: GiB is 2^30 bytes; memory sizes typed on the command line."""
from __future__ import annotations

import re
from fractions import Fraction

from .errors import ConfigError

GiB = 2 ** 30

#: Size units, case-insensitive: binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB, TB), and B.
UNITS = {"b": 1, "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40,
         "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12}
FORMS = "a number and a unit: GiB, MiB, TiB (binary, 2^30 ...) or GB, MB, TB (decimal, 10^9 ...), e.g. 80GiB or 141GB"


def parse_size(text: str) -> int:
    """'80GiB' -> 85899345920 bytes; '141GB' -> 141000000000: a unit required (case-insensitive), decimals
    allowed, a fractional byte rounded down."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)?\s*", str(text), flags=re.ASCII)
    if re.fullmatch(r"\s*-\s*\.?[0-9].*", str(text), flags=re.ASCII | re.DOTALL):
        raise ConfigError("size", f"a size must be positive, got the negative size {text!r}")
    if not m or m.group(2) is None:
        raise ConfigError("size", f"cannot read the size {text!r}: write {FORMS}")
    unit = m.group(2).lower()
    if unit not in UNITS:
        raise ConfigError("size", f"unknown unit {m.group(2)!r} in {text!r}: write {FORMS}")
    val = Fraction(m.group(1)) * UNITS[unit]
    if val < 1:
        raise ConfigError("size", f"size must be at least one byte, got {text!r}")
    return int(val)  # a fractional byte count (e.g. 0.3KiB) is rounded down
