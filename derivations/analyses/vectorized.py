"""The printed exact Python over float64 arrays, which lets the search (derivations/analyses/exact.py) evaluate
every device of every layout at one (s, b) at once: the family's printed functions with numpy's division, minimum
and floor bound (:func:`printed`), an exact value computed once per distinct substitution of the symbols it reads
(:class:`Memo`), and the layouts' values stacked over the devices (:func:`stack`).
"""
from __future__ import annotations

import types
from fractions import Fraction
from functools import lru_cache
from typing import Dict, Mapping, Sequence

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


class _Reads(dict):
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
            rec = _Reads(values)
            out = self.fn(rec)
            self.reads = tuple(sorted(rec.read))
            self.memo[tuple(values.get(k) for k in self.reads)] = out
            return out
        key = tuple(values.get(k) for k in self.reads)
        if key not in self.memo:
            self.memo[key] = self.fn(values)
        return self.memo[key]


def _number(x):
    return float(x) if isinstance(x, Fraction) else x


def stack(dicts: Sequence[Mapping], owner: np.ndarray, differ) -> Dict[str, object]:
    """{name: value}: the names of ``dicts`` (one per layout), a number where every layout has the same value, else
    a float64 array over the devices (each device its layout's, ``owner``); only the names in ``differ`` may
    differ between layouts."""
    out = {}
    for k in dicts[0]:
        first = dicts[0][k]
        if k not in differ:
            out[k] = _number(first)
            continue
        got = [d[k] for d in dicts]
        if all(x == first and type(x) is type(first) for x in got):
            out[k] = _number(first)
        else:
            out[k] = np.array([float(x) for x in got], dtype=np.float64)[owner]
    return out
