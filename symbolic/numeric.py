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


class _Printer(NumPyPrinter):
    """lambdify's NumPy printer, except that x**-1 prints as 1/x: sympy writes x**(-1.0), and numpy
    has no fast path for a float power of -1 (about 4x slower than a division)."""

    def _print_Pow(self, expr, rational=False):
        if expr.exp == -1:
            return "1/" + self.parenthesize(expr.base, precedence(expr), strict=True)
        return super()._print_Pow(expr, rational=rational)


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
        printer = _Printer({"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True,
                            "user_functions": {}})
        fn = sp.lambdify(syms, expr, modules=[numpy], cse=True, docstring_limit=0, printer=printer)
        _CACHE[key] = fn
    return fn


def source(fn: Callable) -> str:
    """The Python source lambdify generated for a function from :func:`compile` (kept in ``linecache``)."""
    return "".join(linecache.cache[fn.__code__.co_filename][2])


def _monomials(e, recip: Dict):
    """(coefficient, {symbol or reciprocal dummy: power}) of each term of the expanded ``e``, or
    None when a term is not a product of integer powers of symbols."""
    monomials = []
    for t in sp.Add.make_args(e):
        c, rest = t.as_coeff_Mul()
        powers: Dict = {}
        for f in sp.Mul.make_args(rest):
            base, ex = f.as_base_exp()
            if not (base.is_Symbol and ex.is_Integer):
                return None
            if ex < 0:
                base = recip.setdefault(base, sp.Dummy("r_" + base.name, positive=True))
            powers[base] = powers.get(base, 0) + abs(int(ex))
        monomials.append((c, powers))
    return monomials


def _share_sums(monomials, sums: Dict):
    """Monomials equal but for one variable (same coefficient) share a sum dummy:
    640 b s^2 (L_d + L_m)/(CP TP); ``sums`` maps the summed symbols to their dummy."""
    while True:
        groups: Dict = {}
        for i, (c, p) in enumerate(monomials):
            for x, q in p.items():
                if q == 1:
                    rest = frozenset((k, v) for k, v in p.items() if k != x)
                    groups.setdefault((c, rest), []).append((i, x))
        best = max(groups.items(), key=lambda kv: (len(kv[1]), -min(i for i, _ in kv[1])), default=None)
        if best is None or len(best[1]) < 2:
            return monomials
        (c, rest), members = best
        names = tuple(sorted((x for _, x in members), key=lambda k: k.name))
        sym = sums.setdefault(names, sp.Dummy("sum_" + "_".join(k.name for k in names), positive=True))
        drop = {i for i, _ in members}
        rest = sorted(rest, key=lambda kv: kv[0].name)  # a frozenset's order follows string hashes: fix it
        monomials = [m for i, m in enumerate(monomials) if i not in drop] + [(c, {**dict(rest), sym: 1})]


def _nest(items, back: Dict):
    """Greedy multivariate Horner: factor out the symbol shared by the most monomials, recursively, built
    unevaluated (sympy would distribute 2 (x + y)) with the sums and reciprocals put back (``back``)."""
    def product(factors):
        factors = [f for f in factors if f != 1]
        if not factors:
            return sp.Integer(1)
        return factors[0] if len(factors) == 1 else sp.Mul(*factors, evaluate=False)

    def total(terms):
        return terms[0] if len(terms) == 1 else sp.Add(*terms, evaluate=False)

    count: Dict = {}
    for _, p in items:
        for x in p:
            count[x] = count.get(x, 0) + 1
    if not count:
        return sp.Add(*[c for c, _ in items])
    x = max(count, key=lambda k: (count[k], k.name))
    if count[x] == 1:
        return total([product([c] + [back.get(k, k) if q == 1 else sp.Pow(back.get(k, k), q) for k, q in p.items()])
                      for c, p in items])
    inner, rest = [], []
    for c, p in items:
        if x in p:
            q = dict(p)
            q[x] -= 1
            if not q[x]:
                del q[x]
            inner.append((c, q))
        else:
            rest.append((c, p))
    head = product([back.get(x, x), _nest(inner, back)])
    return total([head, _nest(rest, back)]) if rest else head


def factored(expr):
    """The same rational function in a form that evaluates with few array operations: a polynomial in the
    symbols and their reciprocals, monomials differing in one variable sharing a sum (``c (L_d + L_m)``), nested
    by multivariate Horner.  A tuple element by element; anything else as is."""
    if isinstance(expr, (sp.Tuple, tuple, list)):
        return sp.Tuple(*[factored(e) for e in expr])
    recip: Dict = {}
    monomials = _monomials(sp.expand(expr), recip)
    if monomials is None:
        return expr
    sums: Dict = {}
    monomials = _share_sums(monomials, sums)
    back = {r: 1 / x for x, r in recip.items()}
    back.update({d: sp.Add(*names) for names, d in sums.items()})
    return _nest(monomials, back) if monomials else sp.Integer(0)


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
