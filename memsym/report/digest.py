"""The digest of the code the report is made from (a part of every key of the report's caches), without sympy:
what a key of a report served from plain data needs before anything else is loaded."""
from __future__ import annotations

from functools import lru_cache

from symbolic import digests
import derivations
import memsym
import symbolic
from symbolic.resources import PAPER_DIR, TEMPLATES_DIR


@lru_cache(maxsize=None)
def code_digest() -> str:
    """A hash of every file the report is made from: code, the paper's data and the templates."""
    return digests.tree_digest(*derivations.__path__, *symbolic.__path__, *memsym.__path__, PAPER_DIR, TEMPLATES_DIR)
