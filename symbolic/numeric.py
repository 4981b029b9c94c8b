"""Numbers from terms: exact values (``xreplace`` of a full substitution, sympy Rationals) and numpy functions
(``sympy.lambdify`` with common subexpressions, compiled once per expression and argument order)."""
from __future__ import annotations

from fractions import Fraction
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import sympy as sp

from .errors import ConfigError
from .exact import as_exact, as_number, exact_text  # noqa: F401  (re-exported: the pure helpers)
from .notation import SYMBOLS, expand_derived
import linecache
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.precedence import precedence

_CACHE: Dict[Tuple, Callable] = {}


def _expr(obj) -> sp.Expr:
    return expand_derived(getattr(obj, "expr", obj))


def rational(expr, subs: Mapping) -> Optional[Fraction]:
    """The exact value of ``expr`` as written (its derived symbols read from ``subs``), or None when it has none
    at ``subs`` (a symbol unset, a division by zero): then :func:`exact` says what."""
    try:
        return _value(expr, subs, "expression")
    except ConfigError:
        return None


def exact(obj, subs: Mapping) -> Fraction:
    """Exact value of a term (or expression) at a full substitution, as a Fraction: sympy's own ``xreplace``
    (derivations/evaluate.py evaluates the printed trees; the tests compare the two)."""
    return _value(_expr(obj), subs, getattr(obj, "id", "expression"))


def _value(expr, subs: Mapping, name: str) -> Fraction:
    val = sp.sympify(expr.xreplace(dict(subs)))  # a bare symbol xreplaces to a plain int
    if val.free_symbols:
        missing = ", ".join(sorted(str(x) for x in val.free_symbols))
        raise ConfigError("missing-values", f"{name}: no value given for {missing}")
    val = sp.nsimplify(val) if not val.is_Rational else val
    if not val.is_Rational:
        raise ConfigError("not-rational", f"{name} evaluates to {val}, not a rational")
    return Fraction(int(val.p), int(val.q))


def _printer():
    """lambdify's NumPy printer, except that x**-1 prints as 1/x: sympy writes x**(-1.0), and numpy
    has no fast path for a float power of -1 (about 4x slower than a division)."""

    class _Printer(NumPyPrinter):
        def _print_Pow(self, expr, rational=False):
            if expr.exp == -1:
                return "1/" + self.parenthesize(expr.base, precedence(expr), strict=True)
            return super()._print_Pow(expr, rational=rational)

    return _Printer({"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True,
                     "user_functions": {}})


def compile(obj, args: Sequence) -> Callable:
    """A numpy function of ``args`` (symbols or names) computing ``obj``; compiled once, cached."""
    syms = tuple(SYMBOLS[a] if isinstance(a, str) else a for a in args)
    expr = _expr(obj)
    key = (expr, syms)
    fn = _CACHE.get(key)
    if fn is None:
        missing = expr.free_symbols - set(syms)
        if missing:
            raise ValueError(f"compile: expression depends on {sorted(map(str, missing))} not in args")
        import numpy  # the module, not "numpy": same NumPyPrinter, skips lambdify's `from numpy import *` (~0.2 s)
        fn = sp.lambdify(syms, expr, modules=[numpy], cse=True, docstring_limit=0, printer=_printer())
        _CACHE[key] = fn
    return fn


def source(fn: Callable) -> str:
    """The Python source lambdify generated for a function from :func:`compile` (kept in ``linecache``)."""
    return "".join(linecache.cache[fn.__code__.co_filename][2])


def evaluate(obj, subs: Mapping):
    """Numeric value through the compiled function (float), for cross-checking exact()."""
    expr = _expr(obj)
    syms = tuple(sorted(expr.free_symbols, key=lambda x: x.name))
    fn = compile(expr, syms)
    vals = []
    for x in syms:
        if x not in subs:
            raise ConfigError("missing-values", f"no value given for {x}")
        vals.append(subs[x])
    return fn(*vals)
