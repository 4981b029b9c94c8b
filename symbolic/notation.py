"""A registry of named symbols (plain ``sympy.Symbol`` objects), their LaTeX and the definitions of derived ones
(:data:`DEFINITIONS`, replaced by :func:`expand_derived`), filled by a domain package (:mod:`derivations.notation`)
with :func:`register` and read at call time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping

import sympy as sp


@dataclass(frozen=True)
class SymbolInfo:
    """One registry entry: ``name`` (the Symbol's, what users type), ``latex`` and ``meaning`` as the source writes
    them, ``role`` ('model', 'training', 'parallel', 'bytes', 'stage', 'schedule', 'overhead', 'derived'),
    ``source``, the sympy assumptions (positive integer by default), ``aliases`` accepted in typed formulas."""

    name: str
    latex: str
    meaning: str
    role: str
    source: str
    integer: bool = True
    nonnegative_only: bool = False
    aliases: tuple = ()

    @property
    def symbol(self) -> sp.Symbol:
        return SYMBOLS[self.name]


#: name -> SymbolInfo, name -> Symbol, derived Symbol -> definition, factor order of products:
#: filled in place by :func:`register` (so ``from symbolic.notation import REGISTRY`` stays valid).
REGISTRY: Dict[str, SymbolInfo] = {}
SYMBOLS: Dict[str, sp.Symbol] = {}
DEFINITIONS: Dict[sp.Symbol, sp.Expr] = {}
FACTOR_ORDER: List[str] = []


def make_symbol(info: SymbolInfo) -> sp.Symbol:
    """The plain sympy Symbol of an entry, with its assumptions."""
    if info.integer:
        if info.nonnegative_only:
            return sp.Symbol(info.name, integer=True, nonnegative=True)
        return sp.Symbol(info.name, integer=True, positive=True)
    return sp.Symbol(info.name, positive=True)


def register(entries: Iterable[SymbolInfo], definitions: Mapping = (),
             factor_order: Iterable[str] = ()) -> Dict[str, sp.Symbol]:
    """Add ``entries``, derived symbols' ``definitions`` and the ``factor_order`` of products to the registry;
    {name: Symbol} of the entries.  A name registered twice with another meaning is an error."""
    out = {}
    for e in entries:
        old = REGISTRY.get(e.name)
        if old is not None and old != e:
            raise ValueError(f"symbol {e.name!r} is already registered with another definition")
        REGISTRY[e.name] = e
        SYMBOLS.setdefault(e.name, make_symbol(e))
        out[e.name] = SYMBOLS[e.name]
    DEFINITIONS.update(dict(definitions))
    FACTOR_ORDER.extend(n for n in factor_order if n not in FACTOR_ORDER)
    return out


def expand_derived(expr: sp.Expr) -> sp.Expr:
    """Replace derived symbols by their definitions."""
    if not any(sym in DEFINITIONS for sym in getattr(expr, "free_symbols", ())):
        return expr
    return expr.xreplace(DEFINITIONS)


def latex_names(extra: Mapping[sp.Symbol, str] | None = None) -> Dict[sp.Symbol, str]:
    """The ``symbol_names`` mapping for ``sympy.latex``: each symbol's registered LaTeX."""
    names = {SYMBOLS[k]: info.latex for k, info in REGISTRY.items()}
    if extra:
        names.update(extra)
    return names


def symbol(name: str) -> sp.Symbol:
    """Look a symbol up by its Python name; KeyError names the unknown symbol."""
    try:
        return SYMBOLS[name]
    except KeyError:
        raise KeyError(f"unknown symbol {name!r}") from None
