"""sympy expressions as exact JavaScript (their Python, symbolic/codegen.py, written by :mod:`memsym.page.pyjs`)
and as presentation MathML."""
from __future__ import annotations

import sympy as sp
from sympy.printing.mathml import MathMLPresentationPrinter

from derivations.notation import expand_derived
from symbolic.codegen import python

from .pyjs import expression_js

#: Symbol names as the paper prints them, for MathML (split into sub/superscripts by sympy).
DISPLAY = {"d_cq": "d_c\u2032", "d_hr": "d_h^R", "e_E": "\u03b4_E", "e_H": "\u03b4_H", "n_mb": "m", "VPP": "V",
           "i_s": "i", "n_fl": "n_fl", "E_token": "E_token", "M_buf": "M_buf", "f_frag": "f_frag",
           # the activation kinds of the device assembly (derivations/assembly/device_terms.py), as Table 10
           "M_A": "M^A", "M_E": "M^E", "M_D": "M^D", "M_H": "M^H", "M_MTP": "M^MTP",
           # and without recomputation, which the step's moments read (derivations/assembly/step_terms.py)
           "M_A0": "M^A_0", "M_E0": "M^E_0", "M_D0": "M^D_0"}


def js(expr) -> str:
    """The JavaScript expression of ``expr`` (derived symbols expanded) over the rationals ``Q``: its exact Python
    (symbolic/codegen.py ``python``, as the generated modules print it) written by :mod:`memsym.page.pyjs`."""
    return expression_js(python(expand_derived(sp.sympify(expr)), "e"))


def symbols_of(expr) -> set:
    return {s.name for s in expand_derived(sp.sympify(expr)).free_symbols}


def mathml(expr) -> str:
    """Presentation MathML (no ``<math>`` wrapper) of ``expr``, the paper's symbol names."""
    expr = sp.sympify(expr)
    expr = expr.xreplace({s: sp.Symbol(DISPLAY[s.name], positive=True) for s in expr.free_symbols
                          if s.name in DISPLAY})
    return MathMLPresentationPrinter({"mul_symbol": None}).doprint(expr)
