"""Rendering: the Jinja environments of ``templates/`` and the report or one block through them."""
from __future__ import annotations

from symbolic.render import fmt_gib, fmt_int, term_latex
from symbolic.resources import TEMPLATES_DIR

from .text import md_escape, one_line, report_names, tex_escape

#: Jinja delimiters for ``.tex`` templates: LaTeX's braces and ``%`` stay untouched.
TEX_DELIMITERS = dict(block_start_string="((*", block_end_string="*))", variable_start_string="(((",
                      variable_end_string=")))", comment_start_string="((=", comment_end_string="=))",
                      line_statement_prefix=None, line_comment_prefix=None)
KINDS = ("tex", "md", "html", "notebook")

_ENVIRONMENTS: dict = {}


def environment(kind: str, templates_dir=None):
    """A Jinja environment for ``kind`` (cached: templates compile once per process); see :func:`make_environment`."""
    key = (kind, str(templates_dir or TEMPLATES_DIR))
    env = _ENVIRONMENTS.get(key)
    if env is None:
        env = _ENVIRONMENTS[key] = make_environment(kind, templates_dir)
    return env


def make_environment(kind: str, templates_dir=None):
    """A Jinja environment for ``kind`` in ('tex', 'md', 'html', 'notebook').

    ``tex`` uses LaTeX-safe delimiters (``((( var )))``, ``((* block *))``, ``((= comment =))``);
    ``html`` autoescapes.  Filters: ``num`` (exact number, thousands separators), ``gib``
    (bytes as GiB), ``term_latex`` (a term's LaTeX in the paper's notation), ``esc`` (text
    escaping for the format), ``tex``/``md`` (explicit escapers), ``comment`` (one line, for a
    ``# comment`` in a notebook's code cell).  Values in code go in as ``repr``/``tojson`` literals.
    """
    # lazy: jinja2 (only this path needs it)
    import jinja2
    if kind not in KINDS:
        raise ValueError(f"unknown template kind {kind!r}")
    opts = dict(loader=jinja2.FileSystemLoader(str(templates_dir or TEMPLATES_DIR)), undefined=jinja2.StrictUndefined,
                trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    if kind == "tex":
        opts.update(TEX_DELIMITERS)
    if kind == "html":
        opts["autoescape"] = True
    env = jinja2.Environment(**opts)
    env.filters["num"] = fmt_int
    env.filters["gib"] = fmt_gib
    env.filters["tex"] = tex_escape
    env.filters["md"] = md_escape
    env.filters["comment"] = one_line
    env.filters["esc"] = {"tex": tex_escape, "md": md_escape}.get(kind, str)
    env.filters["term_latex"] = lambda term, subs=None, form="paper": term_latex(term, subs, form, names=report_names())
    if kind == "html":
        from markupsafe import Markup

        from .offline import math_scripts
        env.globals["offline_math"] = lambda: Markup(math_scripts())
    return env


def render_block(block, fmt: str) -> str:
    """One block rendered alone (Markdown in notebooks)."""
    macros = environment(fmt).get_template(f"macros.{fmt}.j2")
    return getattr(macros.module, block.kind)(block)


def render(report, fmt: str) -> str:
    """The report as ``tex``, ``md`` or ``html`` through ``templates/report.<fmt>.j2``."""
    return environment(fmt).get_template(f"report.{fmt}.j2").render(report=report)
