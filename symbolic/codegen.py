"""sympy expressions -> exact Python source and JSON trees, for generated evaluators.

:class:`ExactPython` is sympy's ``PythonCodePrinter`` made exact: divisions by ``_Q`` (``fractions.Fraction``),
``_floor`` (``math.floor``), ``Piecewise`` a conditional expression, symbols ``v["name"]`` or local ``_name``.
:func:`json_tree` writes an expression as a JSON tree, :func:`merged` one JSON value for several structures'.
"""
from __future__ import annotations

import json
from typing import Dict, List, Optional, Tuple

import sympy as sp
from sympy.printing.precedence import PRECEDENCE, precedence
from sympy.printing.pycode import PythonCodePrinter


class ExactPython(PythonCodePrinter):
    """Exact Python for integer and rational expressions (see the module docstring)."""

    def __init__(self, values: str = "v", local: bool = False):
        super().__init__({"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": False})
        self._values, self._local = values, local

    def _print_Symbol(self, expr):
        return f"_{expr.name}" if self._local else f'{self._values}["{expr.name}"]'

    def _print_Integer(self, expr):
        return str(int(expr))

    def _print_Rational(self, expr):
        return f"_Q({expr.p}, {expr.q})"

    _print_Half = _print_Rational  # (PythonCodePrinter prints S.Half on its own)

    def _print_Mul(self, expr):
        num, den = [], []
        for a in expr.as_ordered_factors():
            if a.is_Pow and a.exp.is_Integer and a.exp < 0:
                den.append(a.base if a.exp == -1 else sp.Pow(a.base, -a.exp, evaluate=False))
            elif a.is_Rational and not a.is_Integer:
                if a.p != 1:
                    num.append(sp.Integer(a.p))
                den.append(sp.Integer(a.q))
            else:
                num.append(a)
        prec = PRECEDENCE["Mul"]
        top = "*".join(self.parenthesize(a, prec, strict=False) for a in num) if num else "1"
        if not den:
            return top
        bottom = "*".join(self.parenthesize(a, prec, strict=False) for a in den)
        return f"{top}/_Q({bottom})"

    def _print_Pow(self, expr, rational=False):
        if not expr.exp.is_Integer:
            raise ValueError(f"cannot print a non-integer power exactly: {expr}")
        k = int(expr.exp)
        base = self.parenthesize(expr.base, PRECEDENCE["Pow"], strict=True)
        if k < 0:
            return f"_Q(1, {base}**{-k})" if -k != 1 else f"_Q(1, {base})"
        return f"{base}**{k}"

    def _print_floor(self, expr):
        return f"_floor({self._print(expr.args[0])})"

    def _print_Min(self, expr):  # min(...) or max(...)
        return type(expr).__name__.lower() + "(" + ", ".join(self._print(a) for a in expr.args) + ")"

    _print_Max = _print_Min

    def _print_Piecewise(self, expr):
        out = []
        for value, cond in expr.args:
            if cond == sp.true:
                out.append(self._print(value))
                break
            out.append(f"{self._print(value)} if {self._print(cond)} else ")
        else:
            out.append("None")
        return "(" + "".join(out) + ")"

    def _print_Equality(self, expr):
        return f"{self._print(expr.lhs)} == {self._print(expr.rhs)}"

    def _print_Unequality(self, expr):
        return f"{self._print(expr.lhs)} != {self._print(expr.rhs)}"

    def _print_Infinity(self, expr):
        return '_Q(10) ** 400'  # never reached: callers substitute a finite value first


def python(expr, values: str = "v", local: bool = False) -> str:
    """Exact Python source of ``expr`` reading symbol values from the dict named ``values`` (``local``: from
    the local names ``_name``, which the caller binds)."""
    text = ExactPython(values, local).doprint(sp.sympify(expr))
    if precedence(sp.sympify(expr)) < PRECEDENCE["Atom"] and not text.startswith("("):
        return f"({text})"
    return text


def json_tree(expr, refs: Optional[Dict] = None):
    """``expr`` as a JSON tree: an integer, a symbol's name, ``["q", p, q]`` (a rational),
    ``["+", ...]``, ``["*", ...]``, ``["^", base, integer exponent]``, or ``["r", term id]`` for a
    sub-expression equal to a term's (``refs``: {expression: term id}); sympy's canonical form, so
    two trees are equal exactly when the expressions are (sympy's structural ``==``)."""
    refs = refs or {}
    expr = sp.sympify(expr)
    if expr in refs:
        return ["r", refs[expr]]
    if expr.is_Integer:
        return int(expr)
    if expr.is_Rational:
        return ["q", int(expr.p), int(expr.q)]
    if expr.is_Symbol:
        return expr.name
    if expr.is_Add:
        return ["+", *[json_tree(a, refs) for a in expr.args]]
    if expr.is_Mul:
        return ["*", *[json_tree(a, refs) for a in expr.args]]
    if expr.is_Pow and expr.exp.is_Integer:
        return ["^", json_tree(expr.base, refs), int(expr.exp)]
    raise ValueError(f"cannot encode {expr!r} ({type(expr).__name__})")


#: The node of a merged tree that chooses by a flag: ``["?", flag, value when set, value when not]``
#: (derivations/evaluate.py ``resolve``
#: replaces each by its branch, and drops a dict entry that resolves to null).
CHOOSE = "?"


def _matters(cases, flag) -> bool:
    by: Dict = {}
    for at, v in cases:
        by.setdefault(tuple(x for k, x in at.items() if k != flag), set()).add(json.dumps(v, sort_keys=True))
    return any(len(vs) > 1 for vs in by.values())


def branch_flag(cases: List[Tuple[Dict[str, bool], object]]) -> str:
    """The flag to branch ``cases`` on: the first whose value alone changes the value, else the first that varies."""
    flags = list(cases[0][0])
    return next((f for f in flags if _matters(cases, f)), None) or next(
        f for f in flags if len({at[f] for at, _ in cases}) > 1)


def merged(cases: List[Tuple[Dict[str, bool], object]]):
    """One JSON value standing for each case's (``cases``: [({flag: value}, JSON value or None: absent), ...]):
    shared values once, dicts key by key, lists of equal length and head item by item, otherwise a :data:`CHOOSE`
    node on :func:`branch_flag`."""
    first = cases[0][1]
    if all(v == first for _, v in cases[1:]):
        return first
    values = [v for _, v in cases]
    if all(type(v) is dict for v in values):
        keys = sorted({k for v in values for k in v})
        return {k: merged([(at, v.get(k)) for at, v in cases]) for k in keys}
    if all(type(v) is list and len(v) == len(first) and len(v) > 0 for v in values) and (
            type(first[0]) is not str or all(v[0] == first[0] for v in values)):
        return [merged([(at, v[i]) for at, v in cases]) for i in range(len(first))]
    flag = branch_flag(cases)
    return [CHOOSE, flag, merged([c for c in cases if c[0][flag]]), merged([c for c in cases if not c[0][flag]])]


def plain(value) -> None:
    """A generated value holds no :data:`CHOOSE` node and no null of its own (they would read as choices)."""
    if value is None or (type(value) is list and value[:1] == [CHOOSE]):
        raise ValueError(f"generate: {value!r} reads as a choice")
    for v in value.values() if type(value) is dict else value if type(value) is list else ():
        plain(v)
