"""sympy expressions -> JavaScript over exact rationals, and -> presentation MathML.

The page evaluates every term with the code printed here from the same sympy expressions
the command line evaluates: :class:`RationalJS` is sympy's JavaScript code printer
(``sympy.printing.jscode``) made exact, printing each +, x, / and integer power as a call
of the page's BigInt rational helpers (``Q.add``, ``Q.mul``, ``Q.pow``, ``Q.min``), numbers
as ``Q.n("...")`` and symbols as ``e.<name>`` (the page's substitution).  Formulas are
shown with sympy's presentation MathML printer (``sympy.printing.mathml``), which a
browser renders natively: nothing is fetched.
"""
from __future__ import annotations

import sympy as sp
from sympy.printing.jscode import JavascriptCodePrinter
from sympy.printing.mathml import MathMLPresentationPrinter

from derivations.notation import expand_derived

#: Symbol names as the paper prints them, for MathML (split into sub/superscripts by sympy).
DISPLAY = {"d_cq": "d_c\u2032", "d_hr": "d_h^R", "e_E": "\u03b4_E", "e_H": "\u03b4_H", "n_mb": "m", "VPP": "V",
           "i_s": "i", "n_fl": "n_fl", "E_token": "E_token", "M_buf": "M_buf", "f_frag": "f_frag",
           # the activation kinds of the device assembly (derivations/assembly/device_terms.py), as Table 10
           "M_A": "M^A", "M_E": "M^E", "M_D": "M^D", "M_H": "M^H", "M_MTP": "M^MTP",
           # and without recomputation, which the step's moments read (derivations/assembly/step_terms.py)
           "M_A0": "M^A_0", "M_E0": "M^E_0", "M_D0": "M^D_0"}


class RationalJS(JavascriptCodePrinter):
    """sympy's JavaScript printer, exact: every operation on the page's BigInt rationals."""

    def _print_Symbol(self, expr):
        return f"e.{expr.name}"

    def _print_Integer(self, expr):
        return f'Q.n("{int(expr)}")'

    def _print_Rational(self, expr):
        return f'Q.n("{expr.p}", "{expr.q}")'

    def _print_Add(self, expr, order=None):
        return "Q.add(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Mul(self, expr):
        num, den = [], []
        for a in expr.args:
            if a.is_Pow and a.exp.is_Integer and a.exp < 0:
                den.append(a.base if a.exp == -1 else sp.Pow(a.base, -a.exp, evaluate=False))
            elif a.is_Rational and not a.is_Integer:
                num.append(sp.Integer(a.p))
                den.append(sp.Integer(a.q))
            else:
                num.append(a)
        out = "Q.mul(" + ", ".join(self._print(a) for a in num) + ")" if num else 'Q.n("1")'
        if den:
            out = f"Q.div({out}, Q.mul(" + ", ".join(self._print(a) for a in den) + "))"
        return out

    def _print_Pow(self, expr, rational=False):
        if not expr.exp.is_Integer:
            raise ValueError(f"cannot print a non-integer power exactly: {expr}")
        return f"Q.pow({self._print(expr.base)}, {int(expr.exp)})"

    def _print_Min(self, expr):
        return "Q.min(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_floor(self, expr):
        return f"Q.floor({self._print(expr.args[0])})"

    def _print_Equality(self, expr):
        return f"Q.eq({self._print(expr.lhs)}, {self._print(expr.rhs)})"

    def _print_LessThan(self, expr):  # sympy writes a >= b as b <= a
        return f"Q.le({self._print(expr.lhs)}, {self._print(expr.rhs)})"

    def _print_GreaterThan(self, expr):
        return f"Q.le({self._print(expr.rhs)}, {self._print(expr.lhs)})"

    def _print_StrictLessThan(self, expr):
        return f"Q.lt({self._print(expr.lhs)}, {self._print(expr.rhs)})"

    def _print_StrictGreaterThan(self, expr):
        return f"Q.lt({self._print(expr.rhs)}, {self._print(expr.lhs)})"

    def _print_Piecewise(self, expr):
        """Piecewise((v, cond), ..., (w, True)) as nested conditionals (exact comparisons)."""
        *pairs, (last, cond) = expr.args
        if cond != sp.true:
            raise ValueError(f"cannot print a Piecewise without an otherwise branch: {expr}")
        out = self._print(last)
        for v, c in reversed(pairs):
            out = f"({self._print(c)} ? {self._print(v)} : {out})"
        return out

    def _print_Max(self, expr):
        return "Q.max(" + ", ".join(self._print(a) for a in expr.args) + ")"


_JS = RationalJS()


def js(expr) -> str:
    """The JavaScript expression of ``expr`` (derived symbols expanded) over the rationals ``Q``."""
    return _JS.doprint(expand_derived(sp.sympify(expr)))


def symbols_of(expr) -> set:
    return {s.name for s in expand_derived(sp.sympify(expr)).free_symbols}


def mathml(expr) -> str:
    """Presentation MathML (no ``<math>`` wrapper) of ``expr``, the paper's symbol names."""
    expr = sp.sympify(expr)
    expr = expr.xreplace({s: sp.Symbol(DISPLAY[s.name], positive=True) for s in expr.free_symbols
                          if s.name in DISPLAY})
    return MathMLPresentationPrinter({"mul_symbol": None}).doprint(expr)
