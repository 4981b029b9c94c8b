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

from functools import lru_cache
from typing import Callable, Mapping

from symbolic import cache, digests
import derivations
import memsym
import symbolic
import sys
import sympy as sp
from symbolic.resources import PAPER_DIR, TEMPLATES_DIR

KIND = "report/forms"


@lru_cache(maxsize=None)
def code_digest() -> str:
    """A hash of every file the report is made from: code, the paper's data and the templates."""
    return digests.tree_digest(*derivations.__path__, *symbolic.__path__, *memsym.__path__, PAPER_DIR, TEMPLATES_DIR)


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
