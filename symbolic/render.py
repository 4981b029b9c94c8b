"""LaTeX of terms with the notation registry's names, in the paper's factor order (``b s h``, ``b n_h s^2``:
:func:`paper_order`), and number formatting."""
from __future__ import annotations

from typing import Mapping, Optional

import sympy as sp

from .notation import FACTOR_ORDER, latex_names


_RANKS: dict = {}


def _order_rank(name: str) -> int:
    """Position of a symbol in the registered factor order (50 when unlisted), rebuilt when the registry grew."""
    if len(_RANKS) != len(FACTOR_ORDER):
        _RANKS.clear()
        _RANKS.update({n: i for i, n in enumerate(FACTOR_ORDER)})
    return _RANKS.get(name, 50)


def _rank(f) -> tuple:
    """Sort key of a factor: numbers first, then the paper's symbol order, then the rest."""
    if f.is_Number:
        return (0, 0, "")
    base = f.base if f.is_Pow else f
    if base.is_Symbol:
        name = base.name
        return (1, _order_rank(name), name)
    if base.is_Add:
        return (2, 0, "")
    return (3, 0, sp.srepr(f))


def _term_rank(t) -> tuple:
    coeff, factors = t.as_coeff_mul()
    syms = []
    for f in factors:
        base = f.base if f.is_Pow else f
        if base.is_Symbol:
            syms.append(_order_rank(base.name))
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


def expr_latex(expr, ordered: bool = True, names: Optional[Mapping] = None, **settings) -> str:
    """LaTeX of an expression with the paper's symbol names (``names``: others) and order; ``settings`` go to
    ``sympy.latex``."""
    e = paper_order(expr) if ordered else expr
    return sp.latex(e, order="none", symbol_names=dict(names) if names is not None else latex_names(), **settings)


def closed_expr(term, subs: Optional[Mapping] = None):
    """The simplified closed form of a term (``Term.closed``), or at ``subs``; a polynomial there as its rational
    content times its primitive part, ``\\frac{1}{2} b s (5 s n_h + ...)``."""
    if not subs:
        return term.closed
    e = sp.expand(term.base_expr.xreplace(subs))
    if any(p.exp.is_negative for p in e.atoms(sp.Pow)):
        return sp.factor_terms(sp.together(e))
    content, primitive = e.as_content_primitive()
    primitive = sp.factor_terms(primitive)
    return primitive if content == 1 else sp.Mul(content, primitive, evaluate=False)


def term_latex(term, subs: Optional[Mapping] = None, form: str = "paper", full: Optional[Mapping] = None,
               names: Optional[Mapping] = None) -> str:
    """LaTeX of a term: ``form='paper'`` the factored per-row form (optionally at the
    parallel layout ``subs``, with counted factors such as N/EP at ``full``), ``'closed'``
    the simplified closed form.  ``names`` overrides the symbol names (default: the registry's)."""
    symbol_names = dict(names) if names is not None else latex_names()
    if form == "closed":
        e = term.closed if not subs else sp.factor_terms(sp.together(sp.expand(term.base_expr.xreplace(subs))))
        return expr_latex(e, names=symbol_names)
    return sp.latex(term.display(subs, full), order="none", symbol_names=symbol_names)


from .exact import count, fmt_gib, fmt_int  # noqa: E402,F401  (re-exported: formatting needs no sympy)
