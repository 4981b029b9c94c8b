"""Equations and paragraphs of the report: every formula a term's own sympy expression printed by sympy."""
from __future__ import annotations

import re
from dataclasses import replace
from fractions import Fraction
from typing import Dict, Tuple

import sympy as sp

from derivations import notation as nt
from symbolic.exact import exact_text
from symbolic.render import closed_expr, expr_latex

from .blocks import C, Equation, I, M, Paragraph, T
from .text import braced

#: Paper forms longer than this (LaTeX characters) are printed with sympy's long_frac_ratio.
LONG_FORM = 600
#: A fraction whose numerator's LaTeX is longer than this runs past a line (breqn breaks no fraction): the paper form
#: is then printed with its long fractions broken off, as for a long form (DeepSeek-V3.2's ZeRO-sharded sums).
LONG_NUMERATOR = 200


def _widest_numerator(latex: str) -> int:
    """The length of the longest ``\\frac`` numerator in ``latex`` (its braces matched)."""
    widest, at = 0, latex.find("\\frac{")
    while at >= 0:
        i, depth = at + len("\\frac{"), 1
        start = i
        while i < len(latex) and depth:
            depth += {"{": 1, "}": -1}.get(latex[i], 0)
            i += 1
        widest = max(widest, i - 1 - start)
        at = latex.find("\\frac{", at + 1)
    return widest


#: Closed forms longer than this are printed with sympy's long_frac_ratio.
LONG_CLOSED = 150


def refs(part):
    """The ids of the terms a part names (its ``ref:`` tags): the per-layer terms of a stage term's parts."""
    return [t[4:] for t in part.tags if t.startswith("ref:")]


def _named_view(ctx, term):
    """``term`` with factors that are whole named terms replaced by their symbols (display only):
    ``(L_d + L_m) M_1^A`` rather than the expanded M_1^A inside Table 10's stage term."""
    by_id, by_expr, latex = {}, {}, {}  # the terms the paper refers to by name (Term.symbol: M_1^A, P_n ...)
    for t in ctx.terms.values():
        if t.symbol and t.id != term.id:
            sym = sp.Symbol("term:" + t.id, positive=True)
            by_id[t.id] = sym
            by_expr.setdefault(t.expr, sym)
            latex[sym] = (braced(t.symbol), t.id)
    used, parts = {}, []
    for p in term.parts:
        named = refs(p)
        num = list(p.num)
        for i, f in enumerate(num):
            f = sp.sympify(f)
            if named:
                sym = by_id.get(named[0]) if f == ctx.terms[named[0]].expr else None
            else:
                sym = by_expr.get(f)
            if sym is not None:
                num[i] = sym
                used[sym] = latex[sym]
        parts.append(replace(p, num=tuple(num)))
    view = replace(term, parts=tuple(parts))
    return view, used


def _at(ctx, subs: Dict, term, names=None) -> Tuple[Tuple[str, str], ...]:
    names = ctx.names if names is None else names
    free = term.expr.free_symbols | term.base_expr.free_symbols
    rows = [(names.get(k, str(k)), exact_text(v)) for k, v in subs.items()
            if k in free and sp.sympify(v).is_number]  # identities such as d_v = d_h are not values
    order = {braced(nt.REGISTRY[n].latex): i for i, n in enumerate(nt.PAPER_FACTOR_ORDER) if n in nt.REGISTRY}
    return tuple(sorted(rows, key=lambda r: (order.get(r[0], 99), r[0])))  # in the paper's factor order


def breakable_latex(expr, names) -> str:
    """LaTeX of a closed form; a long one with sympy's long_frac_ratio, so that
    ``\\frac{b s}{2} \\left(...\\right)`` can break across lines where a long fraction cannot."""
    text = expr_latex(expr, names=names)
    return text if len(text) <= LONG_CLOSED else expr_latex(expr, names=names, long_frac_ratio=2)


def equation(ctx, term, with_stage: bool, show_parts: bool = False) -> Equation:
    """The three forms of a term at ``ctx`` (see :class:`Equation`)."""
    full = ctx.subs_for(term)
    dsubs = ctx.display_subs(with_stage, full)
    names = ctx.names
    view, used = _named_view(ctx, term)
    shown_names = dict(names)
    shown_names.update({sym: lx for sym, (lx, _) in used.items()})
    shown = view.display(dsubs, full)
    paper = sp.latex(shown, order="none", symbol_names=shown_names)
    if len(paper) > LONG_FORM or _widest_numerator(paper) > LONG_NUMERATOR:
        # print long fractions as \frac{..}{..} (...) so LaTeX can break them
        paper = sp.latex(shown, order="none", symbol_names=shown_names, long_frac_ratio=2)
    value = ctx.exact(term, full)
    value_bytes = None
    if value is not None:
        value_bytes = value * Fraction(full.get(nt.B_w, 2)) if term.unit == "params" else value
    parts = []  # the parts this stage holds, each in the paper's form (a part shown as 0, L_d = 0 ..., left out)
    for p, shown_part in zip(term.parts, view.parts if show_parts else ()):
        formula = shown_part.display(dsubs, full)
        if formula != 0:
            parts.append((T(p.label), M(sp.latex(formula, order="none", symbol_names=shown_names)),
                          I(ctx.exact(p.expr, full))))
    return Equation(term.id, braced(term.symbol) if term.symbol else "", term.meaning, term.provenance, term.unit,
                    paper, breakable_latex(closed_expr(term, dsubs), names), _at(ctx, dsubs, term, names),
                    tuple(used.values()), value, value_bytes, tuple(parts), with_stage)


_REF = re.compile(r"\{(sym|term):([A-Za-z0-9_.]+)\}")


def para(ctx, text: str) -> Paragraph:
    """Prose; ``{sym:d_cq}`` becomes the symbol's LaTeX, ``{term:act.mla.layer}`` the term's (M_1^A)."""
    segs, pos = [], 0
    for m in _REF.finditer(text):
        if m.start() > pos:
            segs.append(T(text[pos:m.start()]))
        kind, name = m.groups()
        if kind == "sym":
            segs.append(M(braced(nt.REGISTRY[name].latex)))
        else:
            t = ctx.terms[name]
            segs.append(M(braced(t.symbol)) if t.symbol else C(t.id))
        pos = m.end()
    if pos < len(text):
        segs.append(T(text[pos:]))
    return Paragraph(tuple(segs))
