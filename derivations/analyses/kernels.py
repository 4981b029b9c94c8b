"""The search's named recomputation policies (no sympy)."""
from __future__ import annotations

from typing import Tuple

from derivations import config as cfg


def policies() -> Tuple[str, ...]:
    """The named recomputation policies (derivations/assembly/totals.py ``policies``, without sympy)."""
    return tuple(r for r in cfg.RECOMPUTE if r != "custom")
