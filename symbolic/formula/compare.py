"""Equivalence of two expressions under assumptions, and where they differ: Laurent polynomials in positive
symbols are equal iff every monomial's coefficient agrees after expansion (sums in a denominator brought to a
common one first).  Conventions: the caller's values for symbols the typed side does not mention.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import sympy as sp

from ..notation import FACTOR_ORDER, expand_derived
from .assumptions import substitute
from .lexer import FormulaError
from .parser import MAX_MONOMIALS, sum_denominators

MAX_FACTORED = 200     # differences with more monomials are shown expanded, not factored


def expanded_size(expr, cap: int = 10 ** 9) -> int:
    """An upper bound of the number of monomials of ``expand(expr)`` (capped at ``cap``)."""
    if expr.is_Atom:
        return 1
    if expr.is_Add:
        return min(cap, sum(expanded_size(a, cap) for a in expr.args))
    if expr.is_Mul:
        out = 1
        for a in expr.args:
            out = min(cap, out * expanded_size(a, cap))
        return out
    if expr.is_Pow and expr.exp.is_Integer:
        base = expanded_size(expr.base, cap)
        return 1 if base == 1 else min(cap, base ** min(abs(int(expr.exp)), 64))
    return 1


@dataclass
class Comparison:
    """Two expressions compared under one substitution: both sides after it, whether they are equal for every
    value of the remaining symbols, the difference (factored when small), {monomial: (left's, right's
    coefficient)} of those that differ, the substitution (conventions, then assumptions, which win) and the
    conventions that applied."""

    left: sp.Expr
    right: sp.Expr
    equal: bool
    difference: sp.Expr
    coefficients: Dict[sp.Expr, Tuple[sp.Rational, sp.Rational]]
    substitution: Dict[sp.Symbol, sp.Expr]
    conventions: Dict[sp.Symbol, sp.Expr] = field(default_factory=dict)

    @property
    def delta(self) -> Dict[sp.Expr, sp.Rational]:
        """monomial -> left's minus right's coefficient, of the monomials that differ."""
        return {m: lc - rc for m, (lc, rc) in self.coefficients.items()}


def compare(left: sp.Expr, right: sp.Expr, assumptions: Optional[Mapping] = None,
            conventions: Optional[Mapping] = None, mentioned: Iterable[sp.Symbol] = (),
            sides: Tuple[str, str] = ("the left side", "the right side")) -> Comparison:
    """Compare ``left`` and ``right`` with ``assumptions`` substituted on both sides, and each
    of ``conventions`` whose symbol is neither in ``mentioned`` (the symbols the typed side
    names), nor in an assumption's value, nor assumed.  ``sides`` names them in messages."""
    assumptions = dict(assumptions or {})
    mentioned = set(mentioned)
    for v in assumptions.values():
        mentioned |= v.free_symbols
    defaults = {k: v for k, v in (conventions or {}).items() if k not in mentioned and k not in assumptions}
    subs = {**defaults, **assumptions}
    lhs, rhs = substitute(left, subs), substitute(right, subs)
    for side, expr in zip(sides, (lhs, rhs)):
        if expanded_size(expr, 10 * MAX_MONOMIALS) > MAX_MONOMIALS:
            raise FormulaError(f"too large: after the assumptions, expanding {side} could give more than "
                               f"{MAX_MONOMIALS} monomials", "formula-limit")
    raw = expand_derived(left).free_symbols | expand_derived(right).free_symbols
    for v in assumptions.values():
        raw |= expand_derived(v).free_symbols
    lc = sp.expand(lhs).as_coefficients_dict()
    rc = sp.expand(rhs).as_coefficients_dict()
    coefficients = {}
    for m in dict.fromkeys(list(lc) + list(rc)):
        pair = (sp.Rational(lc.get(m, 0)), sp.Rational(rc.get(m, 0)))
        if pair[0] - pair[1] != 0:
            coefficients[m] = pair
    expanded = sp.Add(*[(l - r) * m for m, (l, r) in coefficients.items()])
    if expanded == 0:
        equal = True
    elif sum_denominators(expanded):
        equal = sp.expand(sp.numer(sp.together(expanded))) == 0
    else:
        equal = False
    difference = (sp.Integer(0) if equal else
                  sp.factor_terms(expanded) if len(coefficients) <= MAX_FACTORED else expanded)
    return Comparison(lhs, rhs, equal, difference, coefficients, subs,
                      {k: v for k, v in defaults.items() if k in raw})


def symbol_rank(name: str) -> tuple:
    """Sort key of a symbol name: the registry's factor order, then the name."""
    return (FACTOR_ORDER.index(name) if name in FACTOR_ORDER else 99, name)


def monomial_rank(m) -> tuple:
    """Sort key of a monomial: its symbols' ranks, in factor order."""
    return tuple(symbol_rank(n) for n in sorted((x.name for x in m.free_symbols), key=symbol_rank))


class Leaf(NamedTuple):
    """One summand of a side, by which differences are explained: ``key`` (``a.b`` for summand b of a combined
    summand a), ``label``, its display ``row`` and {monomial: coefficient} of its expansion."""

    key: str
    label: str
    row: str
    coefficients: Mapping


def carriers(monomial, leaves: Sequence[Leaf]) -> Tuple[str, ...]:
    """Keys of the leaves whose expansion contains ``monomial``."""
    return tuple(lf.key for lf in leaves if lf.coefficients.get(monomial, 0) != 0)


def _ratio(d1: Mapping, d2: Mapping):
    """r if the polynomial with coefficients d1 is r times the one with d2, else None."""
    if not d1 or set(d1) != set(d2):
        return None
    ratio = None
    for m, c in d1.items():
        r = sp.Rational(c) / sp.Rational(d2[m])
        if ratio is None:
            ratio = r
        elif r != ratio:
            return None
    return ratio


def _candidates(leaves: Sequence[Leaf]) -> List[Tuple[List[str], List[str], Dict]]:
    """(keys, labels, coefficients) of whole combined summands, display rows, single leaves."""
    groups: Dict[str, Tuple[List[str], List[str], Dict]] = {}   # display rows
    tops: Dict[str, Tuple[List[str], List[str], Dict]] = {}     # summands of a combined summand

    def add(table, name, key, label, d):
        keys, labels, total = table.get(name, ([], [], {}))
        total = dict(total)
        for m, c in d.items():
            total[m] = total.get(m, 0) + c
        table[name] = (keys + [key], labels + [label], {m: c for m, c in total.items() if c != 0})

    singles = []
    for key, label, row, d in leaves:
        d = {m: c for m, c in d.items() if c != 0}
        if not d:
            continue
        singles.append(([key], [label], d))
        if row:
            add(groups, row, key, label, d)
        if "." in key:
            add(tops, key.split(".")[0], key, label, d)
    tops = {name: ([name], [f"all of {name}"], g[2]) for name, g in tops.items() if len(g[0]) > 1}
    return list(tops.values()) + [g for g in groups.values() if len(g[0]) > 1] + singles


def multiples(diff: Mapping, leaves: Sequence[Leaf], limit: int = 3) -> List[Tuple[sp.Rational, List[str], List[str]]]:
    """(n, keys, labels) of the groups of leaves that ``diff`` (monomial -> coefficient) is an
    integer multiple n of: a summand missing, or counted n times (at most ``limit``)."""
    out, covered = [], set()
    for keys, labels, d in _candidates(leaves):
        if covered & set(keys) or any(k.split(".")[0] in covered for k in keys):
            continue
        ratio = _ratio(diff, d)
        if ratio is not None and ratio.q == 1:
            covered |= set(keys)
            out.append((ratio, keys, labels))
            if len(out) >= limit:
                break
    return out
