"""The printers of ``memsym verify``: a VerifyResult (derivations/paper/verify.py) as text, LaTeX or JSON."""
from __future__ import annotations

from typing import Mapping

import sympy as sp

from symbolic.formula import plain
from symbolic.notation import latex_names
from symbolic.numeric import as_exact
from symbolic.render import expr_latex, fmt_gib, fmt_int


def _subs_text(d: Mapping) -> str:
    return " ".join(f"{k}={plain(v)}" for k, v in sorted(d.items(), key=lambda kv: kv[0].name))


def text(r) -> str:
    """The terminal's text: aligned labels, typed notation (re-readable by the parser)."""
    lines = [f"memsym verify: {r.verdict}",
             f"  against    {r.against} ({r.provenance}): {r.term_meaning}"]
    if r.assumptions:
        lines.append(f"  assuming   {_subs_text(r.assumptions)}")
    if r.defaults:
        lines.append(f"  paper conventions (not mentioned by the formula): {_subs_text(r.defaults)}")
    lines.append(f"  formula    {plain(r.formula)}")
    if r.display is not None:
        lines.append(f"  term       {plain(r.display)}")
    if r.equal:
        lines.append(f"  both sides = {plain(sp.factor_terms(sp.together(sp.expand(r.term_side))))}")
    else:
        lines.append(f"  term - formula = {plain(r.difference)}")
        expanded = sp.expand(r.difference)
        if plain(expanded) != plain(r.difference):
            lines.append(f"                 = {plain(expanded)}")
        signs = {m.term_coeff > m.formula_coeff for m in r.monomials}
        if signs == {False}:
            lines.append(f"  (the formula has {plain(-r.difference)} more than the term)")
        elif signs == {True}:
            lines.append(f"  (the formula misses {plain(r.difference)} of the term)")
    if r.monomials:
        w = max(8, *(len(plain(m.monomial)) for m in r.monomials))
        lines += ["  monomials that differ:",
                  f"    {'monomial':<{w}}  {'term':>10}  {'formula':>10}  term's tensors"]
        lines += [f"    {plain(m.monomial):<{w}}  {str(m.term_coeff):>10}  {str(m.formula_coeff):>10}  "
                  f"{', '.join(m.parts) or '-'}" for m in r.monomials]
    lines += [f"  {e}" for e in r.explanation]
    if not r.equal:
        lines.append(f"  at the paper's configuration ({r.paper_config}):")
        b = r.bytes_at_paper
        if r.value_at_paper is None:
            lines.append("    cannot be evaluated (the difference has symbols without a paper value)")
        else:
            unit = "" if r.unit == "bytes" else f"{fmt_int(r.value_at_paper)} params = "
            what = ("the two agree there, though not for every value of the symbols" if b == 0 else
                    f"the formula counts {fmt_int(abs(b))} bytes {'more' if b < 0 else 'fewer'} than the term")
            lines.append(f"    term - formula = {unit}{fmt_int(b)} bytes ({fmt_gib(b, 4)} GiB): {what}")
    lines += [f"  hint: {h}" for h in r.hints] + [f"  warning: {w}" for w in r.warnings]
    return "\n".join(lines)


def latex(r) -> str:
    """An ``align*`` of formula, term and difference, a tabular of the monomials, comments (``--latex``)."""
    lines = [f"% memsym verify: {r.verdict} -- {r.against} ({r.provenance})"]
    cond = ", ".join(f"{expr_latex(k)} = {expr_latex(v)}" for k, v in r.assumptions.items())
    if cond:
        lines.append(f"% assuming {cond}")
    lines += ["\\begin{align*}", f"\\text{{formula}} &= {expr_latex(r.formula)} \\\\"]
    if r.display is not None:
        lines.append(f"\\text{{term}} &= {sp.latex(r.display, order='none', symbol_names=latex_names())} \\\\")
    if r.equal:
        lines += ["\\text{term} - \\text{formula} &= 0", "\\end{align*}"]
    else:
        lines += [f"\\text{{term}} - \\text{{formula}} &= {expr_latex(r.difference)} \\\\",
                  f"&= {expr_latex(sp.expand(r.difference))}", "\\end{align*}"]
    if r.monomials:
        lines += ["\\begin{tabular}{lrrl}", "monomial & term & formula & term's tensors \\\\ \\hline"]
        for m in r.monomials:
            parts = ", ".join(m.parts).replace("_", "\\_")
            lines.append(f"${expr_latex(m.monomial)}$ & ${sp.latex(m.term_coeff)}$ & "
                         f"${sp.latex(m.formula_coeff)}$ & {parts} \\\\")
        lines.append("\\end{tabular}")
    if not r.equal and r.bytes_at_paper is not None:
        lines.append(f"% at the paper's configuration ({r.paper_config}): term - formula = "
                     f"{fmt_int(r.bytes_at_paper)} bytes ({fmt_gib(r.bytes_at_paper, 4)} GiB)")
    return "\n".join(lines)


def to_json(r) -> dict:
    """Every element of the verdict as a JSON-ready dict (``--json``), whatever the verdict."""
    return {"equal": r.equal, "verdict": r.verdict, "against": r.against, "provenance": r.provenance,
            "meaning": r.term_meaning, "unit": r.unit, "formula_text": r.formula_text,
            "formula": plain(r.formula), "formula_latex": expr_latex(r.formula),
            "assumptions": {k.name: plain(v) for k, v in r.assumptions.items()},
            "defaults": {k.name: plain(v) for k, v in r.defaults.items()},
            "term_side": plain(r.term_side), "formula_side": plain(r.formula_side),
            "difference": plain(r.difference), "difference_latex": expr_latex(r.difference),
            "difference_expanded": plain(sp.expand(r.difference)),
            "monomials": [{"monomial": plain(m.monomial), "latex": expr_latex(m.monomial),
                           "term": as_exact(m.term_coeff), "formula": as_exact(m.formula_coeff),
                           "parts": list(m.parts)} for m in r.monomials],
            "paper_config": r.paper_config, "value_at_paper": as_exact(r.value_at_paper),
            "bytes_at_paper": as_exact(r.bytes_at_paper), "gib_at_paper": r.gib_at_paper,
            "explanation": r.explanation, "hints": r.hints, "warnings": r.warnings}
