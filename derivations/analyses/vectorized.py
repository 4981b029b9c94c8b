"""The printed exact Python over float64 arrays, so that the search (exact.py) evaluates every device of every
layout at one (s, b) at once: the printed functions with numpy's division, minimum and floor (:func:`printed`),
an exact value once per distinct substitution of what it reads (:class:`Memo`), ``derived`` over the layouts
(:func:`derive`).
"""
from __future__ import annotations

import types
from fractions import Fraction
from functools import lru_cache
from typing import Dict, Mapping

import numpy as np

from derivations import evaluate as ev


def divide(a, b=1):
    return np.true_divide(a, b)


@lru_cache(maxsize=None)
def printed(family: str) -> Dict[str, object]:
    """The namespace of the family's printed exact Python (derivations/generated/<family>.py: the per-device
    assembly and the step's moments) with ``fractions.Fraction``, ``min`` and ``floor`` bound to numpy's division,
    minimum and floor: the same functions, plain arithmetic on their inputs, evaluate float64 arrays element-wise
    (a value compared in a condition, b, must be a number)."""
    mod = ev._module(family)
    g = dict(vars(mod))
    g.update(_Q=divide, min=np.minimum, _floor=np.floor)
    for name, obj in vars(mod).items():
        if isinstance(obj, types.FunctionType) and obj.__module__ == mod.__name__:
            g[name] = types.FunctionType(obj.__code__, g, name, obj.__defaults__, obj.__closure__)
    return g


class Reads(dict):
    """A substitution that records the names read from it."""

    def __init__(self, values):
        super().__init__(values)
        self.read = set()

    def __getitem__(self, k):
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        self.read.add(k)
        return super().get(k, default)

    def __contains__(self, k):
        self.read.add(k)
        return super().__contains__(k)


class Memo:
    """``fn(values)`` (exact) once per distinct substitution of the names it reads (recorded at its first call:
    the functions memoised here read the same names at every substitution, their trees evaluated whole)."""

    def __init__(self, fn):
        self.fn, self.reads, self.memo = fn, None, {}

    def __call__(self, values: Mapping):
        if self.reads is None:
            rec = Reads(values)
            out = self.fn(rec)
            self.reads = tuple(sorted(rec.read))
            self.memo[tuple(values.get(k) for k in self.reads)] = out
            return out
        key = tuple(values.get(k) for k in self.reads)
        if key not in self.memo:
            self.memo[key] = self.fn(values)
        return self.memo[key]


class _Split(Exception):
    """A condition of the printed ``derived`` that holds for some layouts only (``mask``: those)."""

    def __init__(self, mask: np.ndarray):
        super().__init__()
        self.mask = mask


class _Uniform(np.ndarray):
    """An array whose truth (a printed condition's, ``1 if TP == n_h else 0``) is its elements' when they agree,
    else :class:`_Split`."""

    def __bool__(self):
        mask = np.asarray(self, dtype=bool)
        if mask.all():
            return True
        if not mask.any():
            return False
        raise _Split(mask)


def derive(family: str, values: Mapping, arrays: Mapping[str, np.ndarray]) -> Dict[str, object]:
    """{name: value}: the printed ``derived`` (derivations/generated/<family>.py) of every layout at once, ``values``
    one layout's exact substitution with its derived symbols, ``arrays`` {name: int64 array over the layouts} the
    names whose values differ between layouts (``values`` holding the first's).  A number where every layout has the
    same value (``values``' own, as :func:`stack` gives it), else a float64 array over the layouts; the layouts a
    printed condition tells apart are evaluated apart (:class:`_Uniform`)."""
    fn = printed(family)["derived"]
    n = len(next(iter(arrays.values())))
    leaves = []

    def split(at: np.ndarray):
        v = dict(values, **{k: x[at].view(_Uniform) for k, x in arrays.items()})
        try:
            fn(v)
        except _Split as e:
            split(at[e.mask])
            split(at[~e.mask])
            return
        leaves.append((at, v))

    split(np.arange(n))
    out = {}
    for k, first in values.items():
        got = [(at, v[k]) for at, v in leaves]
        if all(not isinstance(x, np.ndarray) and x == first for _, x in got):
            out[k] = _number(first)
            continue
        full = np.empty(n)
        for at, x in got:
            full[at] = np.asarray(x, dtype=np.float64)
        out[k] = _number(first) if (full == full[0]).all() else full
    return out


def _number(x):
    return float(x) if isinstance(x, Fraction) else x
