"""The report's on-disk cache (:mod:`symbolic.cache`): the computed report of a configuration and
the HTML of its notebooks, so a second ``memsym report`` of the same configuration by the same
code computes nothing.

Entries are keyed by everything they are made from: the configuration (model, layout, training,
stage), the outline, every file of ``derivations/``, ``symbolic/``, ``memsym/``, ``paper/`` and
``templates/`` (code and data), and the versions of Python, sympy and (for HTML) the notebook
packages.  A context whose terms or substitution were changed by hand (``S.subs[nt.s] = 8192``
in a notebook) is never cached.  An entry is unpickled only once its HMAC verifies (:mod:`symbolic.cache`); one that
does not, or holds anything but what its key describes, is deleted and rebuilt; ``MEMSYM_CACHE=0`` turns the cache off.
"""
from __future__ import annotations

import pickle
from functools import lru_cache
from typing import Callable, Dict, Optional, Tuple

from symbolic import cache

from .forms import code_digest
import sys
import sympy
from derivations import config as cfg
from derivations import families
from derivations import notation as nt
from .context import Context
from . import sections
from .blocks import Report, Stub, Table
from .tables import CONFIGURATION_FREE, TABLES

from .digest import HTML_PACKAGES

KIND = "report"


def report_key(ctx, plan) -> Optional[Tuple]:
    """The key parts of ``ctx``'s report laid out as ``plan``, or None when ``ctx`` is not one the
    configuration alone determines (terms or substitution changed by hand, a subclass)."""


    # lazy: modules this module's importers do not need (loaded only on this path)
    from derivations import configured

    if type(ctx) is not Context or (ctx._terms is not None and ctx._terms is not configured(ctx.model, ctx.training)):
        return None
    if ctx.subs != cfg.substitution(ctx.model, ctx.layout, ctx.training, ctx.stage):
        return None
    if not families.packaged(getattr(ctx.model, "family", None)):
        return None  # a family from elsewhere: its code is not in code_digest(), so no key describes it
    # the notation table lists every registered symbol: a family registered in this process adds its own
    registry = repr(sorted(nt.REGISTRY.items()))
    return ("report", repr(ctx.model), repr(ctx.layout), repr(ctx.training), repr(ctx.stage), repr(plan),
            registry, sympy.__version__, sys.version_info[:2], code_digest())


def _key(parts, name: str) -> Optional[str]:
    if parts is None or any(p is None for p in parts) or not cache.enabled():
        return None
    return cache.key(name, *parts)


def _stored(parts, name: str, make: Callable[[], object], check: Callable[[object], bool]):
    """``make()``, or the entry ``name`` under ``parts`` when it verifies (:func:`symbolic.cache.load`:
    authenticated before it is unpickled) and passes ``check``."""
    k = _key(parts, name)
    if k is None:
        return make()
    data = cache.load(KIND, k)
    if data is not None:
        try:
            value = pickle.loads(data)  # authenticated: this user's memsym wrote it
        except Exception:
            value = None
        if value is not None and check(value):
            return value
    value = make()
    cache.store(KIND, k, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    return value


def complete_report(ctx, plan, progress: Optional[Callable[[str], None]] = None, done=None):
    """:func:`memsym.report.sections.complete_report`, from the cache when this configuration's
    report was computed by the same code before (then ``done`` is not called)."""

    def check(rep) -> bool:
        return isinstance(rep, Report) and len(rep.sections) == len(plan.sections) and all(
            len(a.blocks) == len(b.blocks) and not any(isinstance(x, Stub) for x in b.blocks)
            for a, b in zip(plan.sections, rep.sections))
    parts = report_key(ctx, plan)
    tables = _shared_tables(ctx) if parts is not None else {}
    return _stored(parts, "complete", lambda: sections.complete_report(ctx, plan, progress, tables, done), check)


def _shared_tables(ctx) -> Dict[str, Callable[[], object]]:
    """{key: the table, from the cache} of the tables no configuration changes
    (:data:`~memsym.report.tables.CONFIGURATION_FREE`): kept once for all configurations."""



    def one(key):
        parts = ("table", key, sympy.__version__, sys.version_info[:2], code_digest())
        return lambda: _stored(parts, "table", lambda: TABLES[key](ctx), lambda t: isinstance(t, Table) and t.key == key)
    return {key: one(key) for key in CONFIGURATION_FREE}


def rendered(ctx, plan, report, fmt: str, make: Callable[[], str]) -> str:
    """``make()`` (``report`` rendered as ``fmt`` through the templates), from the cache when the
    same report (with the same notebook links) was rendered by the same Jinja before."""
    parts = report_key(ctx, plan)
    if parts is not None:
        parts = parts + (fmt, repr(report.notebooks)) + _versions(("jinja2", "markupsafe"))
    return _stored(parts, "rendered", make, lambda text: isinstance(text, str))


@lru_cache(maxsize=None)
def _versions(packages=HTML_PACKAGES) -> Tuple:
    """((package, version or None), ...) of ``packages`` (read once per process)."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from importlib import metadata
    out = []
    for name in packages:
        try:
            out.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            out.append((name, None))
    return tuple(out)


def _html_parts(ctx, plan) -> Optional[Tuple]:
    parts = report_key(ctx, plan)
    return parts + _versions() if parts is not None else None


def has_notebook_html(ctx, plan) -> bool:
    """Whether :func:`notebook_html` will probably find its entry (no conversion to prepare for)."""
    k = _key(_html_parts(ctx, plan), "notebook-html")
    return k is not None and cache.exists(KIND, k)


def notebook_html(ctx, plan, report, make: Callable[[], Dict[str, str]]) -> Dict[str, str]:
    """``make()`` ({file name: HTML} of the report's notebooks, outputs from ``report``), from the
    cache when the same report was converted by the same packages before."""
    parts = _html_parts(ctx, plan)

    def check(value) -> bool:
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    return _stored(parts, "notebook-html", make, check)
