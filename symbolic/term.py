"""Terms: named sympy expressions with unit, provenance and ordered parts.  A :class:`Term` is the sum of its
:class:`Part` s, each one row the paper prints, its factors kept as the paper writes them (``4 b s h / SP``) for
display; a configuration is a substitution applied to ``Term.expr``.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, Iterable, Mapping, Sequence, Tuple

import sympy as sp

from .notation import expand_derived
from .render import paper_order, term_latex

UNITS = ("params", "bytes")


def _prod(factors: Sequence) -> sp.Expr:
    out = sp.Integer(1)
    for f in factors:
        out = out * sp.sympify(f)
    return out


@dataclass(frozen=True)
class Part:
    """One row of a term, ``prod(num) / prod(den)`` with the factors in the paper's order: ``key`` (``q_k``),
    ``label`` (the paper's reading), ``provenance`` if more specific than the term's, ``tags`` read by views
    (``'tp_split'``, ``'score'``), ``row`` (parts shown as one row), ``counts`` (factors evaluated at ``full``)."""

    key: str
    label: str
    num: Tuple = ()
    den: Tuple = ()
    provenance: str = ""
    tags: Tuple[str, ...] = ()

    row: str = ""
    counts: Tuple[int, ...] = ()

    @cached_property
    def expr(self) -> sp.Expr:
        return _prod(self.num) / _prod(self.den)

    def factors(self, subs: Mapping | None = None, full: Mapping | None = None):
        """(coefficient, symbolic factors in paper order, denominator) after substitution: numeric factors
        multiplied into one coefficient (``4bsh``), factors listed in ``counts`` (N/EP) evaluated at ``full``."""
        coef, rest = sp.Integer(1), []
        subs = {k: sp.sympify(v) for k, v in subs.items()} if subs else None
        full = {k: sp.sympify(v) for k, v in full.items()} if full else None
        for i, f in enumerate(self.num):
            f = sp.sympify(f)
            use = full if (full and i in self.counts) else subs
            if use:
                f = sp.sympify(f.xreplace(use))
            if f.is_Number:
                coef *= f
            else:
                rest.append(paper_order(f))
        den = _prod(self.den)
        if subs:
            den = sp.sympify(den.xreplace(subs))
        return coef, rest, den

    def display(self, subs: Mapping | None = None, full: Mapping | None = None) -> sp.Expr:
        """The paper's factored form, unevaluated, optionally at a substitution."""
        return _assemble(*self.factors(subs, full))


def _assemble(coef, rest, den) -> sp.Expr:
    if coef == 0:
        return sp.Integer(0)
    factors = ([coef] if coef != 1 or not rest else []) + list(rest)
    top = factors[0] if len(factors) == 1 else sp.Mul(*factors, evaluate=False)
    if den == 1:
        return top
    if den.is_Number and coef.is_Number and not rest:
        return coef / den
    return sp.Mul(top, sp.Pow(den, -1, evaluate=False), evaluate=False)


@dataclass(frozen=True)
class Term:
    """A named quantity of the paper: ``id`` (``act.mla.layer``), ``meaning`` in the paper's words, ``unit``
    ('params' or 'bytes'), ``provenance`` (``"Sec. 5.1, M_1^A"``), ``parts`` (ordered rows, summed), ``symbol``
    (the paper's LaTeX name, ``M_1^A``)."""

    id: str
    meaning: str
    unit: str
    provenance: str
    parts: Tuple[Part, ...]
    symbol: str = ""
    notes: str = ""
    #: where the term is evaluated: 'stage' (at a stage's composition L_d, L_m, e_E, e_H) or
    #: 'model' (at the whole model's composition: formulas that divide by PP themselves,
    #: such as Megatron's most-loaded shard)
    scope: str = "stage"

    def __post_init__(self):
        if self.unit not in UNITS:
            raise ValueError(f"term {self.id}: unit must be one of {UNITS}, got {self.unit!r}")
        keys = [p.key for p in self.parts]
        if len(keys) != len(set(keys)):
            raise ValueError(f"term {self.id}: duplicate part keys {keys}")

    @cached_property
    def expr(self) -> sp.Expr:
        """The term as one sympy expression (derived symbols kept)."""
        return sp.Add(*[p.expr for p in self.parts])

    @cached_property
    def base_expr(self) -> sp.Expr:
        """The term with derived symbols (E_token, EDP) replaced by their definitions."""
        return expand_derived(self.expr)

    @cached_property
    def closed(self) -> sp.Expr:
        """Simplified closed form (in base symbols)."""
        return sp.factor_terms(sp.together(sp.expand(self.base_expr)))

    def part(self, key: str) -> Part:
        for p in self.parts:
            if p.key == key:
                return p
        raise KeyError(f"term {self.id} has no part {key!r}; parts: {[p.key for p in self.parts]}")

    def display(self, subs: Mapping | None = None, full: Mapping | None = None) -> sp.Expr:
        """The paper's factored form, unevaluated, one item per display row (:meth:`rows`)."""
        items = []
        for row in self.rows(subs, full):
            shown = _assemble(*row)
            if shown != 0:
                items.append(shown)
        if not items:
            return sp.Integer(0)
        if len(items) == 1:
            return items[0]
        return sp.Add(*items, evaluate=False)

    def rows(self, subs: Mapping | None = None, full: Mapping | None = None):
        """The display rows: (coefficient, factors, denominator), consecutive parts sharing a ``row`` whose factors
        and denominator agree merged with their coefficients added."""
        rows, keys = [], []
        for p in self.parts:
            coef, rest, den = p.factors(subs, full)
            if p.row and keys and keys[-1] == p.row and rows[-1][1] == rest and rows[-1][2] == den:
                rows[-1] = (rows[-1][0] + coef, rest, den)
                continue
            rows.append((coef, rest, den))
            keys.append(p.row)
        return rows

    @property
    def free_symbols(self):
        return self.base_expr.free_symbols

    def _repr_latex_(self) -> str:  # Jupyter
        return "$\\displaystyle " + term_latex(self) + "$"

    def __repr__(self) -> str:
        return f"Term({self.id!r}, {self.expr})"


def combine(term_id: str, meaning: str, unit: str, provenance: str,
            items: Iterable[Tuple[str, str, object, Term]], symbol: str = "") -> Term:
    """A term whose parts are ``coefficient * term.expr`` rows of ``items`` (key, label, coefficient, term)."""
    parts = tuple(Part(key, label, (coef, t.expr) if coef != 1 else (t.expr,), provenance=t.provenance,
                       tags=("ref:" + t.id,)) for key, label, coef, t in items)
    return Term(term_id, meaning, unit, provenance, parts, symbol)


class Terms(Dict[str, Term]):
    """An ordered registry of terms by id, with a helpful KeyError, built with :meth:`add` then frozen (every
    change refused); a configuration's extra terms live in an :meth:`overlay`."""

    _frozen = False
    #: appended to the KeyError of an unknown id (the domain says where ids are listed)
    hint = ""

    def _check(self):
        if self._frozen:
            raise TypeError("this term registry is frozen: add a configuration's terms with overlay()")

    def __copy__(self):  # a frozen registry is a value: its copy is itself (copy's dict path would write to it)
        return self if self._frozen else self.__class__(self)

    def __deepcopy__(self, memo):
        return self.__copy__()

    def add(self, term: Term) -> Term:
        self._check()
        if term.id in self:
            raise ValueError(f"duplicate term id {term.id}")
        dict.__setitem__(self, term.id, term)
        return term

    def __setitem__(self, key, value):
        self._check()
        dict.__setitem__(self, key, value)

    def __delitem__(self, key):
        self._check()
        dict.__delitem__(self, key)

    def _refuse(self, *args, **kwargs):
        self._check()
        raise TypeError("use add() to register a term")

    update = setdefault = pop = popitem = clear = _refuse

    def __ior__(self, other):
        self._check()
        raise TypeError("use add() to register a term")

    def __setattr__(self, name, value):
        if name == "_frozen" and self._frozen and not value:
            raise TypeError("a frozen term registry cannot be thawed")
        object.__setattr__(self, name, value)

    def freeze(self) -> "Terms":
        self._frozen = True
        return self

    @property
    def frozen(self) -> bool:
        return self._frozen

    def overlay(self, terms: Iterable[Term]) -> "Terms":
        """A new frozen registry: this one's terms, then ``terms`` not already in it (by id)."""
        out = Terms()
        dict.update(out, self)
        out.hint = self.hint
        for t in terms:
            if t.id not in out:
                out.add(t)
            elif out[t.id] is not t and out[t.id].expr != t.expr:
                raise ValueError(f"overlay: term {t.id} differs from the registry's term of the same id")
        return out.freeze()

    def __missing__(self, key):
        close = difflib.get_close_matches(key, list(self), n=5, cutoff=0.5)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise KeyError(f"unknown term {key!r}{hint}{(' ' + self.hint) if self.hint else ''}")
