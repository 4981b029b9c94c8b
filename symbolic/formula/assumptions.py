"""Assumptions: values or relations for symbols (``TP=2``, ``SP=TP``), read in the same safe
language as formulas, and their substitution."""
from __future__ import annotations

from fractions import Fraction
from typing import Dict, List, Mapping, Tuple

import sympy as sp

from ..notation import SYMBOLS, expand_derived
from .lexer import FormulaError, closest_symbols, normalise, spellings
from .parser import MAX_MONOMIALS, parse


def symbol_of(name) -> sp.Symbol:
    """The registered symbol a name (any spelling) or Symbol stands for."""
    if isinstance(name, sp.Symbol):
        if name.name in SYMBOLS and SYMBOLS[name.name] == name:
            return name
        raise FormulaError(f"unknown symbol {name} in an assumption", "assumption")
    key = normalise(str(name).strip()).replace(" ", "")
    if key in spellings():
        return SYMBOLS[spellings()[key]]
    close = closest_symbols(key) if key else []
    raise FormulaError(f"unknown symbol {str(name)!r} in an assumption; closest known symbols: "
                       f"{', '.join(close) or 'none'}", "assumption")


def _items(assume) -> List[Tuple[object, object]]:
    """(name, value) pairs of a mapping, a list of ``NAME=VALUE`` or a string of them."""
    if isinstance(assume, str):
        assume = assume.replace(",", " ").split()
    if isinstance(assume, Mapping):
        return list(assume.items())
    items = []
    for a in assume:
        for piece in str(a).replace(",", " ").split():
            if piece.count("=") != 1:
                raise FormulaError(f"an assumption must be NAME=VALUE (e.g. TP=2), got {piece!r}", "assumption")
            k, v = piece.split("=")
            items.append((k, v))
    return items


def _value(sym: sp.Symbol, v, symbols_help: str) -> sp.Expr:
    """The value assumed for ``sym``: a number, an expression of registered symbols, or a formula."""
    if isinstance(v, bool):
        raise FormulaError(f"assumption {sym}: expected a number or formula, got {v!r}", "assumption")
    if isinstance(v, (int, Fraction)):
        val = sp.Rational(v.numerator, v.denominator) if isinstance(v, Fraction) else sp.Integer(v)
    elif isinstance(v, sp.Basic):
        val = v
        if not val.free_symbols <= set(SYMBOLS.values()):
            raise FormulaError(f"assumption {sym}: value {v} uses symbols outside the notation", "assumption")
    else:
        text = str(v).strip()
        if not text:
            raise FormulaError(f"assumption {sym}: empty value", "assumption")
        val = parse(text, symbols_help)
    if val.is_number:  # a numeric value must respect the symbol's assumptions (sizes > 0)
        if (sym.is_positive and not val.is_positive) or (sym.is_nonnegative and val.is_negative):
            raise FormulaError(f"assumption {sym}={val}: {sym} must be "
                               f"{'positive' if sym.is_positive else 'non-negative'}", "assumption")
        if sym.is_integer and not val.is_integer:
            raise FormulaError(f"assumption {sym}={val}: {sym} must be an integer", "assumption")
    return val


def parse_assumptions(assume, symbols_help: str = "") -> Dict[sp.Symbol, sp.Expr]:
    """``{"TP": 2}``, ``["TP=2", "SP=TP"]`` or ``"TP=2 SP=2"`` -> {Symbol: value}.

    A value is a number or a formula in the same safe language (``EP=N/32``).
    """
    if assume is None:
        return {}
    out: Dict[sp.Symbol, sp.Expr] = {}
    for k, v in _items(assume):
        sym = symbol_of(k)
        val = _value(sym, v, symbols_help)
        if sym in out and out[sym] != val:
            raise FormulaError(f"{sym} is assumed twice ({out[sym]} and {val})", "assumption")
        out[sym] = val
    total = 1
    for val in out.values():  # each value multiplies the size of every monomial it enters
        total *= len(sp.Add.make_args(sp.expand(val))) if isinstance(val, sp.Expr) else 1
        if total > MAX_MONOMIALS:
            raise FormulaError(f"assumptions too large: substituting them could give more than {MAX_MONOMIALS} "
                               f"monomials per monomial of the term", "formula-limit")
    return out


def substitute(expr: sp.Expr, subs: Mapping) -> sp.Expr:
    """``expr`` at ``subs`` (derived symbols expanded), repeated until nothing changes:
    assumptions may refer to each other (SP=TP, TP=2)."""
    for _ in range(10):
        new = expand_derived(expr.xreplace(subs))
        if new == expr:
            return new
        expr = new
    raise FormulaError("the assumptions refer to each other in a circle (e.g. TP=SP SP=TP)", "assumption")
