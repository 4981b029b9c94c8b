"""The search's kernels at run time (no sympy): the generated functions of derivations/generated/<family>_search.py
(printed by derivations/analyses/kernelgen.py), a model's coefficients computed exactly and converted once to
float64, the kernels evaluated over the rows in cache-sized blocks (:func:`symbolic.search.evaluate`).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Callable, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

from symbolic.search import evaluate

from derivations import config as cfg
from derivations import evaluate as ev
from derivations import families
from derivations.assembly.sides import device_component_ids
from derivations.config.values import named
from derivations.generated import deepseek_search as generated
from derivations.generated.deepseek_search import ROWS

FAMILY = ev.FAMILY


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


class Kernels(NamedTuple):
    """A structure's search kernels under one attention kernel: the rows its terms read (the others given 0) and
    {group: (term ids, coefficients function, kernel function)}."""
    rows: Tuple[str, ...]
    groups: Dict[str, Tuple[Tuple[str, ...], Callable, Callable]]


@lru_cache(maxsize=None)
def _kernels(family: str, structure: Tuple[bool, ...], attention: str) -> Kernels:
    return Kernels(*generated.kernel(dict(zip(families.get(family).flags, structure)), attention))


def module(model, attention: str = "eager") -> Kernels:
    """The generated kernels of ``model``'s structure under ``attention``'s kernel (eager: the paper's; flash)."""
    if model.family != ev.FAMILY:  # the kernels are committed for DeepSeek's structures only
        raise families.unsupported(model, "memsym search (its generated kernels)")
    if attention not in ("eager", "flash"):
        raise cfg.ConfigError("attention", f"search: no generated kernels for attention {attention!r} "
                                           f"(eager or flash)")
    return _kernels(model.family, tuple(model.structure), attention)


@lru_cache(maxsize=64)
def coefficients(model, training, group: str) -> Tuple[float, ...]:
    """The coefficients of a group's kernel at ``model`` and ``training`` (exact, then float64)."""
    fixed = {k: v for k, v in named(model, None, training).items() if k not in ROWS}
    return tuple(float(c) for c in module(model, training.attention).groups[group][1](ev.derived(fixed)))


def group_of(model, keys: Sequence[str], attention: str = "eager") -> str:
    """The group ('states' or 'activations') whose kernel computes every term of ``keys``."""
    for g, (terms, _, _) in module(model, attention).groups.items():
        if set(keys) <= set(terms):
            return g
    raise cfg.ConfigError("search-kernel", f"search: no generated kernel computes {sorted(keys)} "
                                           f"(run python -m derivations.generate)")


def values(model, training, group: str, rows: Mapping[str, object],
           chunk: Optional[int] = 1 << 14) -> Dict[str, object]:
    """{term id: array} of a group's terms at ``rows`` ({row symbol name: array or number}, broadcasting), in
    blocks of ``chunk`` rows (axis 0), or in one call (None)."""
    kern = module(model, training.attention)
    missing = [r for r in kern.rows if r not in rows]
    if missing:
        raise cfg.ConfigError("missing-values", f"search: no value for {', '.join(missing)} "
                                                f"(not a layout, training or stage symbol)")
    terms, _, fn = kern.groups[group]
    args = list(coefficients(model, training, group)) + [rows[r] if r in kern.rows else 0 for r in ROWS]
    outs = fn(*args) if chunk is None else evaluate(fn, args, chunk)
    return dict(zip(terms, outs))


def step_id(kind: str, policy: str) -> str:
    """The search's key of the paper view's step moment (derivations/assembly/step_terms.py) of a layer of ``kind``
    (moe, dense) rebuilt under ``policy``, without its factor 'the stage has such a layer'."""
    return f"step.paper.{kind}_layer.{policy}"


def step_keys(choices) -> Dict[str, Tuple[str, str]]:
    """{activation term id: (MoE moment key, dense moment key)} of the choices' recomputing policies."""
    return {pick["activations"]: (step_id("moe", r), step_id("dense", r))
            for (_, r), pick in choices.items() if r in ("full", "selective")}


def add_step(value: Dict, keys: Mapping[str, Tuple[str, str]], moments: Mapping, L_d, L_m) -> None:
    """Each recomputing policy's activations in ``value`` plus its step excess (new arrays): the largest of its
    moments, a MoE layer rebuilt when the stage has one (L_m > 0), a dense layer likewise, else 0
    (derivations/assembly/device.py ``step_excess``)."""
    # lazy: numpy (the search only)
    import numpy as np
    for act, (moe, dense) in keys.items():
        value[act] = value[act] + np.maximum(np.maximum(np.where(L_m > 0, moments[moe], 0.0),
                                                        np.where(L_d > 0, moments[dense], 0.0)), 0.0)
