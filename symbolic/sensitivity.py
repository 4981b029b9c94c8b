"""Readable closed forms of derivatives for derivations/analyses/sensitivity.py: grouped by denominator
(:func:`closed_form`), or ordered by value at a configuration (:func:`dominant_form`)."""
from __future__ import annotations

from fractions import Fraction
from typing import Dict, List, Mapping, Tuple

import sympy as sp

from . import notation as nt
from .numeric import exact as _exact
from .render import paper_order


def closed_form(expr) -> sp.Expr:
    """Expanded, then grouped by denominator with common factors pulled out (readable closed form)."""
    e = sp.expand(expr)
    if e == 0:
        return sp.Integer(0)
    groups: Dict[sp.Expr, List[sp.Expr]] = {}
    for t in sp.Add.make_args(e):
        n, d = sp.fraction(t)
        groups.setdefault(d, []).append(n)
    parts = [sp.factor_terms(sp.Add(*ns)) / d for d, ns in groups.items()]
    return sp.Add(*parts)


def dominant_form(expr, subs: Mapping) -> sp.Expr:
    """Expanded and grouped by (symbolic) denominator, in the paper's factor order, terms and groups by their value
    at ``subs``, largest first; a group of negative terms shown as ``-(...)/den``."""
    e = sp.expand(expr)
    if e == 0:
        return sp.Integer(0)
    groups: Dict[sp.Expr, List[Tuple[Fraction, sp.Expr]]] = {}
    for t in sp.Add.make_args(e):
        c, m = t.as_coeff_Mul()
        n, d = sp.fraction(m)
        groups.setdefault(d, []).append((_exact(t, subs), c * n))
    shown = []
    for d, items in groups.items():
        items.sort(key=lambda vn: (-abs(vn[0]), sp.default_sort_key(vn[1])))
        neg = all(v < 0 for v, _ in items)
        nums = [paper_order(-n if neg else n) for _, n in items]
        g = nums[0] if len(nums) == 1 else sp.Add(*nums, evaluate=False)
        if d != 1:
            g = sp.Mul(g, sp.Pow(paper_order(d), -1, evaluate=False), evaluate=False)
        if neg:
            g = sp.Mul(sp.Integer(-1), g, evaluate=False)
        shown.append((sum(v for v, _ in items), g))
    shown.sort(key=lambda vg: -abs(vg[0]))
    return shown[0][1] if len(shown) == 1 else sp.Add(*[g for _, g in shown], evaluate=False)


def text(expr) -> str:
    return sp.sstr(expr, order="none")


def latex(expr) -> str:
    return sp.latex(expr, order="none", symbol_names=nt.latex_names())
