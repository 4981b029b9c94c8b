"""The printers of ``memsym verify``: a verdict (:class:`derivations.verify.VerifyResult`)
as text, LaTeX or JSON.

One walk (:func:`render`) visits the elements of a verdict in order (header, conditions,
formula, term, agreement or difference, monomials, explanation, value at the paper's
configuration, notes); a small formatter per format decides how each is written, or
whether at all.  :func:`verify` is the application's entry: the model's verdict as a
:class:`Verdict`, which prints itself (``text()``, ``latex()``, ``to_json()``).
"""
from __future__ import annotations

from dataclasses import fields
from typing import Dict, List, Mapping, Optional

import sympy as sp

from derivations.paper.verify import Monomial, VerifyResult, verify as _verify
from symbolic.formula import plain
from symbolic.notation import latex_names
from symbolic.numeric import as_exact
from symbolic.render import expr_latex, fmt_gib, fmt_int


def _subs_text(d: Mapping) -> str:
    return " ".join(f"{k}={plain(v)}" for k, v in sorted(d.items(), key=lambda kv: kv[0].name))


def _closed(expr: sp.Expr) -> sp.Expr:
    return sp.factor_terms(sp.together(sp.expand(expr)))


class Formatter:
    """How one format writes each element of a verdict; an element it omits is a no-op."""

    def header(self, r: VerifyResult): pass
    def conditions(self, r: VerifyResult): pass
    def formula(self, r: VerifyResult): pass
    def term(self, r: VerifyResult): pass
    def agreement(self, r: VerifyResult): pass
    def difference(self, r: VerifyResult): pass
    def monomials(self, monomials: List[Monomial]): pass
    def explanation(self, lines: List[str]): pass
    def at_paper(self, r: VerifyResult): pass
    def notes(self, r: VerifyResult): pass

    def finish(self):
        raise NotImplementedError


def render(r: VerifyResult, out: Formatter):
    """Walk the verdict ``r`` through the formatter ``out``; its finished output."""
    out.header(r)
    out.conditions(r)
    out.formula(r)
    out.term(r)
    if r.equal:
        out.agreement(r)
    else:
        out.difference(r)
    out.monomials(r.monomials)
    out.explanation(r.explanation)
    out.at_paper(r)
    out.notes(r)
    return out.finish()


class _Lines(Formatter):
    def __init__(self):
        self.lines: List[str] = []

    def finish(self) -> str:
        return "\n".join(self.lines)


class TextFormatter(_Lines):
    """The terminal's text: aligned labels, typed notation (re-readable by the parser)."""

    def header(self, r):
        self.lines += [f"memsym verify: {r.verdict}", f"  against    {r.against} ({r.provenance}): {r.term_meaning}"]

    def conditions(self, r):
        if r.assumptions:
            self.lines.append(f"  assuming   {_subs_text(r.assumptions)}")
        if r.defaults:
            self.lines.append(f"  paper conventions (not mentioned by the formula): {_subs_text(r.defaults)}")

    def formula(self, r):
        self.lines.append(f"  formula    {plain(r.formula)}")

    def term(self, r):
        if r.display is not None:
            self.lines.append(f"  term       {plain(r.display)}")

    def agreement(self, r):
        self.lines.append(f"  both sides = {plain(_closed(r.term_side))}")

    def difference(self, r):
        self.lines.append(f"  term - formula = {plain(r.difference)}")
        expanded = sp.expand(r.difference)
        if plain(expanded) != plain(r.difference):
            self.lines.append(f"                 = {plain(expanded)}")
        signs = {m.term_coeff > m.formula_coeff for m in r.monomials}
        if signs == {False}:
            self.lines.append(f"  (the formula has {plain(-r.difference)} more than the term)")
        elif signs == {True}:
            self.lines.append(f"  (the formula misses {plain(r.difference)} of the term)")

    def monomials(self, monomials):
        if not monomials:
            return
        w = max(8, *(len(plain(m.monomial)) for m in monomials))
        self.lines.append("  monomials that differ:")
        self.lines.append(f"    {'monomial':<{w}}  {'term':>10}  {'formula':>10}  term's tensors")
        for m in monomials:
            self.lines.append(f"    {plain(m.monomial):<{w}}  {str(m.term_coeff):>10}  {str(m.formula_coeff):>10}  "
                              f"{', '.join(m.parts) or '-'}")

    def explanation(self, lines):
        self.lines += [f"  {e}" for e in lines]

    def at_paper(self, r):
        if r.equal:
            return
        self.lines.append(f"  at the paper's configuration ({r.paper_config}):")
        if r.value_at_paper is None:
            self.lines.append("    cannot be evaluated (the difference has symbols without a paper value)")
            return
        b = r.bytes_at_paper
        unit = "" if r.unit == "bytes" else f"{fmt_int(r.value_at_paper)} params = "
        if b == 0:
            what = "the two agree there, though not for every value of the symbols"
        else:
            what = f"the formula counts {fmt_int(abs(b))} bytes {'more' if b < 0 else 'fewer'} than the term"
        self.lines.append(f"    term - formula = {unit}{fmt_int(b)} bytes ({fmt_gib(b, 4)} GiB): {what}")

    def notes(self, r):
        self.lines += [f"  hint: {h}" for h in r.hints]
        self.lines += [f"  warning: {w}" for w in r.warnings]


class LatexFormatter(_Lines):
    """An ``align*`` of formula, term and difference, a tabular of the monomials, comments."""

    def header(self, r):
        self.lines.append(f"% memsym verify: {r.verdict} -- {r.against} ({r.provenance})")

    def conditions(self, r):
        cond = ", ".join(f"{expr_latex(k)} = {expr_latex(v)}" for k, v in r.assumptions.items())
        if cond:
            self.lines.append(f"% assuming {cond}")

    def formula(self, r):
        self.lines.append("\\begin{align*}")
        self.lines.append(f"\\text{{formula}} &= {expr_latex(r.formula)} \\\\")

    def term(self, r):
        if r.display is not None:
            self.lines.append(f"\\text{{term}} &= {sp.latex(r.display, order='none', symbol_names=latex_names())} \\\\")

    def agreement(self, r):
        self.lines += ["\\text{term} - \\text{formula} &= 0", "\\end{align*}"]

    def difference(self, r):
        self.lines += [f"\\text{{term}} - \\text{{formula}} &= {expr_latex(r.difference)} \\\\",
                       f"&= {expr_latex(sp.expand(r.difference))}", "\\end{align*}"]

    def monomials(self, monomials):
        if not monomials:
            return
        self.lines.append("\\begin{tabular}{lrrl}")
        self.lines.append("monomial & term & formula & term's tensors \\\\ \\hline")
        for m in monomials:
            parts = ", ".join(m.parts).replace("_", "\\_")
            self.lines.append(f"${expr_latex(m.monomial)}$ & ${sp.latex(m.term_coeff)}$ & "
                              f"${sp.latex(m.formula_coeff)}$ & {parts} \\\\")
        self.lines.append("\\end{tabular}")

    def at_paper(self, r):
        if not r.equal and r.bytes_at_paper is not None:
            self.lines.append(f"% at the paper's configuration ({r.paper_config}): term - formula = "
                              f"{fmt_int(r.bytes_at_paper)} bytes ({fmt_gib(r.bytes_at_paper, 4)} GiB)")


class JsonFormatter(Formatter):
    """A dict of every element (keys in :data:`KEYS` order), whatever the verdict."""

    KEYS = ("equal", "verdict", "against", "provenance", "meaning", "unit", "formula_text", "formula",
            "formula_latex", "assumptions", "defaults", "term_side", "formula_side", "difference",
            "difference_latex", "difference_expanded", "monomials", "paper_config", "value_at_paper",
            "bytes_at_paper", "gib_at_paper", "explanation", "hints", "warnings")

    def __init__(self):
        self.data: Dict[str, object] = {}

    def header(self, r):
        self.data.update(equal=r.equal, verdict=r.verdict, against=r.against, provenance=r.provenance,
                         meaning=r.term_meaning, unit=r.unit)

    def conditions(self, r):
        self.data["assumptions"] = {k.name: plain(v) for k, v in r.assumptions.items()}
        self.data["defaults"] = {k.name: plain(v) for k, v in r.defaults.items()}

    def formula(self, r):
        self.data.update(formula_text=r.formula_text, formula=plain(r.formula), formula_latex=expr_latex(r.formula))

    def term(self, r):
        self.data.update(term_side=plain(r.term_side), formula_side=plain(r.formula_side))

    def difference(self, r):
        self.data.update(difference=plain(r.difference), difference_latex=expr_latex(r.difference),
                         difference_expanded=plain(sp.expand(r.difference)))

    agreement = difference

    def monomials(self, monomials):
        self.data["monomials"] = [{"monomial": plain(m.monomial), "latex": expr_latex(m.monomial),
                                   "term": as_exact(m.term_coeff), "formula": as_exact(m.formula_coeff),
                                   "parts": list(m.parts)} for m in monomials]

    def explanation(self, lines):
        self.data["explanation"] = lines

    def at_paper(self, r):
        self.data.update(paper_config=r.paper_config, value_at_paper=as_exact(r.value_at_paper),
                         bytes_at_paper=as_exact(r.bytes_at_paper), gib_at_paper=r.gib_at_paper)

    def notes(self, r):
        self.data.update(hints=r.hints, warnings=r.warnings)

    def finish(self) -> dict:
        return {k: self.data[k] for k in self.KEYS}


def text(r: VerifyResult) -> str:
    """The verdict as the terminal shows it."""
    return render(r, TextFormatter())


def latex(r: VerifyResult) -> str:
    """The verdict as LaTeX (``--latex``)."""
    return render(r, LatexFormatter())


def to_json(r: VerifyResult) -> dict:
    """The verdict as a JSON-ready dict (``--json``)."""
    return render(r, JsonFormatter())


class Verdict(VerifyResult):
    """A verdict with its printers as methods."""

    def text(self) -> str:
        return text(self)

    def latex(self) -> str:
        return latex(self)

    def to_json(self) -> dict:
        return to_json(self)


def verify(formula: str, against, assume=None, model=None, stage: Optional[int] = None) -> Verdict:
    """:func:`derivations.verify.verify` (same arguments), its verdict as a :class:`Verdict`."""
    r = _verify(formula, against, assume=assume, model=model, stage=stage)
    return Verdict(**{f.name: getattr(r, f.name) for f in fields(r)})
