"""Rendering: LaTeX of terms in the paper's notation, and number formatting.

LaTeX names come from the notation registry (``d_c'``, ``d_h^R``, ``E_{token}``); the
paper's factor order (``b s h``, ``b n_h s^2``) is restored by :func:`paper_order`, which
rebuilds products and sums unevaluated in the registry's order before printing with
``order='none'``.  Jinja environments live in the report layer (imported lazily).
"""
from __future__ import annotations

from fractions import Fraction
from typing import Mapping, Optional

import sympy as sp

from .notation import PAPER_FACTOR_ORDER, latex_names

GiB = 2 ** 30
_RANK = {name: i for i, name in enumerate(PAPER_FACTOR_ORDER)}


def _rank(f) -> tuple:
    """Sort key of a factor: numbers first, then the paper's symbol order, then the rest."""
    if f.is_Number:
        return (0, 0, "")
    base = f.base if f.is_Pow else f
    if base.is_Symbol:
        name = base.name
        return (1, _RANK.get(name, 50), name)
    if base.is_Add:
        return (2, 0, "")
    return (3, 0, sp.srepr(f))


def _term_rank(t) -> tuple:
    coeff, factors = t.as_coeff_mul()
    syms = []
    for f in factors:
        base = f.base if f.is_Pow else f
        if base.is_Symbol:
            syms.append(_RANK.get(base.name, 50))
    return tuple(sorted(syms)) or (99,)


def paper_order(expr):
    """``expr`` with every product and sum rebuilt, unevaluated, in the paper's order."""
    expr = sp.sympify(expr)
    if expr.is_Atom:
        return expr
    if expr.is_Mul:
        num, den = sp.fraction(expr, exact=True)
        if den != 1:
            return sp.Mul(paper_order(num), sp.Pow(paper_order(den), -1, evaluate=False), evaluate=False)
        args = sorted((paper_order(a) for a in expr.args), key=_rank)
        return sp.Mul(*args, evaluate=False)
    if expr.is_Add:
        args = sorted(expr.args, key=_term_rank)
        return sp.Add(*[paper_order(a) for a in args], evaluate=False)
    if expr.is_Pow:
        return sp.Pow(paper_order(expr.base), expr.exp, evaluate=False)
    return expr


def expr_latex(expr, ordered: bool = True) -> str:
    """LaTeX of an expression with the paper's symbol names (and order)."""
    e = paper_order(expr) if ordered else expr
    return sp.latex(e, order="none", symbol_names=latex_names())


def term_latex(term, subs: Optional[Mapping] = None, form: str = "paper") -> str:
    """LaTeX of a term: ``form='paper'`` the factored per-row form (optionally at the
    parallel layout ``subs``), ``'closed'`` the simplified closed form."""
    if form == "closed":
        e = term.closed if not subs else sp.factor_terms(sp.together(sp.expand(term.base_expr.xreplace(subs))))
        return expr_latex(e)
    return sp.latex(term.display(subs), order="none", symbol_names=latex_names())


# --------------------------------------------------------------------------- numbers
def fmt_int(x) -> str:
    """Exact number with thousands separators (rationals as a/b)."""
    x = Fraction(x)
    if x.denominator == 1:
        return f"{x.numerator:,}"
    return f"{float(x):,.3f}"


def fmt_gib(nbytes, decimals: int = 2) -> str:
    return f"{float(Fraction(nbytes) / GiB):,.{decimals}f}"


def fmt_bytes(nbytes) -> str:
    return f"{fmt_int(nbytes)} B ({fmt_gib(nbytes)} GiB)"
