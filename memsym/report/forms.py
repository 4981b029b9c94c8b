"""Closed forms of terms kept on disk (:mod:`symbolic.cache`), per term and display substitution.

The closed form of an equation (``symbolic.render.closed_expr``: expand, content and primitive
part, ``factor_terms``; then printed) is most of an equation's cost and depends only on the
term's expression, the substitution it is shown at (parallel degrees, bytes, the stage) and the
symbol names: a report at another sequence length, batch size, ZeRO stage or model of the same
structure shows the same closed forms.  Each is kept as its LaTeX text under a key of the
term's ``srepr``, the substitution's, the names, and every file of the code (:func:`code_digest`);
an entry that does not verify (:func:`symbolic.cache.load`) is deleted and rebuilt.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Callable, Dict, Mapping, Optional

from symbolic import cache
import sys
import sympy as sp

from .digest import code_digest  # noqa: F401  (re-exported: memsym.report.forms.code_digest)

KIND = "report/forms"


def closed_latex(term, subs: Mapping, names: Mapping, make: Callable[[], str]) -> str:
    """``make()`` (the LaTeX of ``term``'s closed form at ``subs`` with ``names``), from the cache
    when the same expression was shown at the same substitution by the same code before."""
    if not cache.enabled():
        return make()

    parts = ("closed-latex", sp.srepr(term.base_expr),
             repr(sorted((sp.srepr(k), sp.srepr(v)) for k, v in subs.items())),
             repr(sorted((sp.srepr(k), str(v)) for k, v in names.items())),
             sp.__version__, sys.version_info[:2], code_digest())
    if parts[-1] is None:  # the code changed under this process: no key describes it
        return make()
    k = cache.key(*parts)
    data = cache.load(KIND, k)
    if data is not None:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    text = make()
    cache.store(KIND, k, text.encode("utf-8"))
    return text


def _subs_text(subs: Mapping) -> str:
    return repr(sorted((str(k), _srepr(v)) for k, v in subs.items()))


_SREPR: Dict = {}


def _srepr(v) -> str:
    """``sp.srepr(v)``, printed once per value and type (an equation's key prints the same few numbers again)."""
    if not (type(v) is int or getattr(v, "is_Rational", False) is True or getattr(v, "is_Symbol", False) is True):
        return sp.srepr(v)  # only values whose equals print the same (not a Float of another precision)
    k = (type(v), v)
    out = _SREPR.get(k)
    if out is None:
        out = _SREPR[k] = sp.srepr(v)
    return out


def equation_forms(ctx, term, dsubs: Mapping, full: Mapping, names: Mapping, show_parts: bool,
                   make: Callable[[], Dict]) -> Dict:
    """``make()`` (what an equation shows that no number of the configuration changes: the paper's form,
    the closed form, the substitution shown, the named terms used, the parts' forms), from the cache when
    the same term of the same registry was shown at the same substitution by the same code before.

    Kept as JSON text (plain data, never unpickled), keyed by ``ctx.registry_key()``
    (:meth:`memsym.report.context.Context.registry_key`) and the term's id
    (not the expression's ``srepr``, which costs as much as printing it), the display substitution, the
    values of the factors the paper's form counts (``N/EP``: :meth:`symbolic.term.Part.factors`), the
    names, and the code (:func:`code_digest`)."""
    key_of = getattr(ctx, "registry_key", None)
    reg = key_of() if key_of is not None and cache.enabled() else None
    if reg is None:
        return make()
    counted = counted_symbols((term,))
    parts = ("equation-forms", reg, term.id, show_parts, _subs_text(dsubs),
             _subs_text({k: v for k, v in full.items() if k in counted}),
             _names_text(tuple(names.items())), sp.__version__, sys.version_info[:2], code_digest())
    if parts[-1] is None:  # the code changed under this process: no key describes it
        return make()
    k = cache.key(*parts)
    data = cache.load(KIND, k)
    if data is not None:
        value = _forms_of(data)
        if value is not None:
            return value
    value = make()
    cache.store(KIND, k, json.dumps(value, sort_keys=True).encode("utf-8"))
    return value


def counted_symbols(terms) -> set:
    """The symbols of the factors the paper's forms of ``terms`` count (``N/EP``:
    :meth:`symbolic.term.Part.factors`): their values decide those forms."""
    return {s for t in terms for p in t.parts for i in p.counts if i < len(p.num)
            for s in sp.sympify(p.num[i]).free_symbols}


def display_json(ctx, name: str, parts: tuple, make: Callable[[], object], check: Callable[[object], bool]):
    """``make()`` (plain data: what a table shows that only the display substitution decides), from the cache
    when the same registry (:meth:`memsym.report.context.Context.registry_key`) was shown with the same
    ``parts`` (texts: the substitutions it depends on) and names by the same code before; kept as JSON."""
    key_of = getattr(ctx, "registry_key", None)
    reg = key_of() if key_of is not None and cache.enabled() else None
    if reg is None:
        return make()
    key_parts = (name, reg) + tuple(parts) + (_names_text(tuple(ctx.names.items())), sp.__version__,
                                               sys.version_info[:2], code_digest())
    if key_parts[-1] is None:  # the code changed under this process: no key describes it
        return make()
    k = cache.key(*key_parts)
    data = cache.load(KIND, k)
    if data is not None:
        try:
            value = json.loads(data.decode("utf-8"))
        except ValueError:
            value = None
        if value is not None and check(value):
            return value
    value = make()
    cache.store(KIND, k, json.dumps(value).encode("utf-8"))
    return value


def term_outputs(ctx, term, make: Callable[[], Dict]) -> Dict:
    """``make()`` (the MIME bundle a kernel shows for ``term``: its ``repr`` and ``_repr_latex_``, sympy's
    printing of the term, which no number of the configuration changes), from the cache when the same term of
    the same registry was shown with the same names by the same code before; kept as JSON (pairs, in order)."""
    return dict(display_json(ctx, "term-outputs", (term.id,), lambda: [[m, t] for m, t in make().items()], _pairs))


def _pairs(xs) -> bool:
    """Whether ``xs`` is a JSON list of [text, text] pairs."""
    return isinstance(xs, list) and all(isinstance(x, list) and len(x) == 2 and all(isinstance(y, str) for y in x)
                                        for x in xs)


@lru_cache(maxsize=8)
def _names_text(items) -> str:
    """The symbol names of a key as text (the report's names are the same for every equation: once)."""
    return repr(sorted((str(k), str(v)) for k, v in items))


def _forms_of(data: bytes) -> Optional[Dict]:
    """The forms of an entry's JSON text, or None when it is not what :func:`equation_forms` stores."""
    try:
        value = json.loads(data.decode("utf-8"))
    except ValueError:
        return None
    ok = (isinstance(value, dict) and set(value) == {"paper", "closed", "at", "uses", "parts", "value", "part_values"}
          and isinstance(value["part_values"], list)
          and all(isinstance(x, list) and len(x) == 2 and type(x[0]) is int for x in value["part_values"])
          and isinstance(value["paper"], str) and isinstance(value["closed"], str) and _pairs(value["at"])
          and _pairs(value["uses"]) and isinstance(value["parts"], list)
          and all(isinstance(x, list) and len(x) == 2 and type(x[0]) is int and isinstance(x[1], str)
                  for x in value["parts"]))
    return value if ok else None
