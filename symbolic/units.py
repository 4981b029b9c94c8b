"""Units at the edge: GiB is 2^30 bytes; sizes typed on the command line."""
from __future__ import annotations

import re
from fractions import Fraction

from .errors import ConfigError

GiB = 2 ** 30


def parse_size(text: str) -> int:
    """'80GiB' -> bytes. GiB/GB both mean 2^30 (the paper's 'GB'); MiB, KiB, B also accepted.
    A fractional number of bytes is rounded down."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(GiB|GB|G|MiB|MB|M|KiB|KB|K|B)?\s*", str(text))
    if not m:
        raise ConfigError("size", f"cannot read the size {text!r}: write e.g. 80GiB")
    num = Fraction(m.group(1))
    unit = (m.group(2) or "B").upper().replace("IB", "B")
    scale = {"GB": GiB, "G": GiB, "MB": 2 ** 20, "M": 2 ** 20, "KB": 2 ** 10, "K": 2 ** 10, "B": 1}[unit]
    val = num * scale
    if val < 1:
        raise ConfigError("size", f"size must be at least one byte, got {text!r}")
    return int(val)  # a fractional byte count (e.g. 0.3KiB) is rounded down
