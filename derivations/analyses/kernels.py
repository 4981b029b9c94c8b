"""The search's choices (no sympy): the named recomputation policies and the terms each (ZeRO stage, policy) picks,
as the page's search reads them with its generated kernels (derivations/generated/<family>_search.py, printed by
derivations/analyses/kernelgen.py).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, Tuple

from derivations import config as cfg
from derivations.assembly.sides import device_component_ids


def policies() -> Tuple[str, ...]:
    """The named recomputation policies (derivations/assembly/totals.py ``policies``, without sympy)."""
    return tuple(r for r in cfg.RECOMPUTE if r != "custom")


def choices(model, zeros=(0, 1, 2, 3), recompute=None,
            attention: str = "eager") -> Dict[Tuple[int, str], Dict[str, str]]:
    """{(ZeRO stage, policy): {component: term id}} of the default training under ``attention``'s kernel
    (derivations/assembly/sides.py ``device_component_ids``)."""
    base = cfg.Training(attention=attention)
    return {(z, r): device_component_ids(model, replace(base, zero=z, recompute=r, recompute_ops=()))
            for z in zeros for r in (recompute or policies())}
