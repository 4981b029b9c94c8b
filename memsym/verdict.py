"""The printers of ``memsym verify``: a VerifyResult as text, LaTeX or JSON (:class:`Verdict`'s methods)."""
from __future__ import annotations

from dataclasses import fields
from typing import Mapping, Optional

import sympy as sp

from derivations.paper.verify import VerifyResult, verify as _verify
from symbolic.formula import plain
from symbolic.notation import latex_names
from symbolic.numeric import as_exact
from symbolic.render import expr_latex, fmt_gib, fmt_int


def _subs_text(d: Mapping) -> str:
    return " ".join(f"{k}={plain(v)}" for k, v in sorted(d.items(), key=lambda kv: kv[0].name))


class Verdict(VerifyResult):
    """A verdict with its printers as methods."""

    def text(self) -> str:
        """The terminal's text: aligned labels, typed notation (re-readable by the parser)."""
        lines = [f"memsym verify: {self.verdict}",
                 f"  against    {self.against} ({self.provenance}): {self.term_meaning}"]
        if self.assumptions:
            lines.append(f"  assuming   {_subs_text(self.assumptions)}")
        if self.defaults:
            lines.append(f"  paper conventions (not mentioned by the formula): {_subs_text(self.defaults)}")
        lines.append(f"  formula    {plain(self.formula)}")
        if self.display is not None:
            lines.append(f"  term       {plain(self.display)}")
        if self.equal:
            lines.append(f"  both sides = {plain(sp.factor_terms(sp.together(sp.expand(self.term_side))))}")
        else:
            lines.append(f"  term - formula = {plain(self.difference)}")
            expanded = sp.expand(self.difference)
            if plain(expanded) != plain(self.difference):
                lines.append(f"                 = {plain(expanded)}")
            signs = {m.term_coeff > m.formula_coeff for m in self.monomials}
            if signs == {False}:
                lines.append(f"  (the formula has {plain(-self.difference)} more than the term)")
            elif signs == {True}:
                lines.append(f"  (the formula misses {plain(self.difference)} of the term)")
        if self.monomials:
            w = max(8, *(len(plain(m.monomial)) for m in self.monomials))
            lines += ["  monomials that differ:",
                      f"    {'monomial':<{w}}  {'term':>10}  {'formula':>10}  term's tensors"]
            lines += [f"    {plain(m.monomial):<{w}}  {str(m.term_coeff):>10}  {str(m.formula_coeff):>10}  "
                      f"{', '.join(m.parts) or '-'}" for m in self.monomials]
        lines += [f"  {e}" for e in self.explanation]
        if not self.equal:
            lines.append(f"  at the paper's configuration ({self.paper_config}):")
            b = self.bytes_at_paper
            if self.value_at_paper is None:
                lines.append("    cannot be evaluated (the difference has symbols without a paper value)")
            else:
                unit = "" if self.unit == "bytes" else f"{fmt_int(self.value_at_paper)} params = "
                what = ("the two agree there, though not for every value of the symbols" if b == 0 else
                        f"the formula counts {fmt_int(abs(b))} bytes {'more' if b < 0 else 'fewer'} than the term")
                lines.append(f"    term - formula = {unit}{fmt_int(b)} bytes ({fmt_gib(b, 4)} GiB): {what}")
        lines += [f"  hint: {h}" for h in self.hints] + [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def latex(self) -> str:
        """An ``align*`` of formula, term and difference, a tabular of the monomials, comments (``--latex``)."""
        lines = [f"% memsym verify: {self.verdict} -- {self.against} ({self.provenance})"]
        cond = ", ".join(f"{expr_latex(k)} = {expr_latex(v)}" for k, v in self.assumptions.items())
        if cond:
            lines.append(f"% assuming {cond}")
        lines += ["\\begin{align*}", f"\\text{{formula}} &= {expr_latex(self.formula)} \\\\"]
        if self.display is not None:
            lines.append(f"\\text{{term}} &= {sp.latex(self.display, order='none', symbol_names=latex_names())} \\\\")
        if self.equal:
            lines += ["\\text{term} - \\text{formula} &= 0", "\\end{align*}"]
        else:
            lines += [f"\\text{{term}} - \\text{{formula}} &= {expr_latex(self.difference)} \\\\",
                      f"&= {expr_latex(sp.expand(self.difference))}", "\\end{align*}"]
        if self.monomials:
            lines += ["\\begin{tabular}{lrrl}", "monomial & term & formula & term's tensors \\\\ \\hline"]
            for m in self.monomials:
                parts = ", ".join(m.parts).replace("_", "\\_")
                lines.append(f"${expr_latex(m.monomial)}$ & ${sp.latex(m.term_coeff)}$ & "
                             f"${sp.latex(m.formula_coeff)}$ & {parts} \\\\")
            lines.append("\\end{tabular}")
        if not self.equal and self.bytes_at_paper is not None:
            lines.append(f"% at the paper's configuration ({self.paper_config}): term - formula = "
                         f"{fmt_int(self.bytes_at_paper)} bytes ({fmt_gib(self.bytes_at_paper, 4)} GiB)")
        return "\n".join(lines)

    def to_json(self) -> dict:
        """Every element of the verdict as a JSON-ready dict (``--json``), whatever the verdict."""
        return {"equal": self.equal, "verdict": self.verdict, "against": self.against, "provenance": self.provenance,
                "meaning": self.term_meaning, "unit": self.unit, "formula_text": self.formula_text,
                "formula": plain(self.formula), "formula_latex": expr_latex(self.formula),
                "assumptions": {k.name: plain(v) for k, v in self.assumptions.items()},
                "defaults": {k.name: plain(v) for k, v in self.defaults.items()},
                "term_side": plain(self.term_side), "formula_side": plain(self.formula_side),
                "difference": plain(self.difference), "difference_latex": expr_latex(self.difference),
                "difference_expanded": plain(sp.expand(self.difference)),
                "monomials": [{"monomial": plain(m.monomial), "latex": expr_latex(m.monomial),
                               "term": as_exact(m.term_coeff), "formula": as_exact(m.formula_coeff),
                               "parts": list(m.parts)} for m in self.monomials],
                "paper_config": self.paper_config, "value_at_paper": as_exact(self.value_at_paper),
                "bytes_at_paper": as_exact(self.bytes_at_paper), "gib_at_paper": self.gib_at_paper,
                "explanation": self.explanation, "hints": self.hints, "warnings": self.warnings}


text, latex, to_json = Verdict.text, Verdict.latex, Verdict.to_json


def verify(formula: str, against, assume=None, model=None, stage: Optional[int] = None) -> Verdict:
    """:func:`derivations.paper.verify.verify` (same arguments), its verdict as a :class:`Verdict`."""
    r = _verify(formula, against, assume=assume, model=model, stage=stage)
    return Verdict(**{f.name: getattr(r, f.name) for f in fields(r)})
