"""Rendering: the Jinja environments of ``templates/`` and the report or one block through them."""
from __future__ import annotations

from functools import lru_cache

import jinja2
from markupsafe import Markup, escape

from symbolic.exact import fmt_gib, fmt_int
from symbolic.resources import TEMPLATES_DIR

from .offline import math_scripts
from .text import md_escape, one_line, tex_escape

#: Jinja delimiters for ``.tex`` templates: LaTeX's braces and ``%`` stay untouched.
TEX_DELIMITERS = dict(block_start_string="((*", block_end_string="*))", variable_start_string="(((",
                      variable_end_string=")))", comment_start_string="((=", comment_end_string="=))",
                      line_statement_prefix=None, line_comment_prefix=None)
KINDS = ("tex", "md", "html", "notebook")


@lru_cache(maxsize=None)
def environment(kind: str, templates_dir=None):
    """The Jinja environment of ``templates/`` (or ``templates_dir``) for ``kind``, one per process (``tex`` with
    :data:`TEX_DELIMITERS`, ``html`` autoescaped)."""
    if kind not in KINDS:
        raise ValueError(f"unknown template kind {kind!r}")
    opts = dict(loader=jinja2.FileSystemLoader(str(templates_dir or TEMPLATES_DIR)), undefined=jinja2.StrictUndefined,
                trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=kind == "html")
    if kind == "tex":
        opts.update(TEX_DELIMITERS)
    env = jinja2.Environment(**opts)
    env.filters.update(num=fmt_int, gib=fmt_gib, tex=tex_escape, md=md_escape, comment=one_line)
    if kind in CELLS:
        env.globals["cell_of"] = CELLS[kind]
    if kind == "tex":
        env.globals["tex_spec"] = tex_spec
    if kind == "html":
        env.globals["offline_math"] = lambda: Markup(math_scripts())
    return env


def _tex_math(v: str) -> str:
    if len(v) > 60 and "\\left" in v:  # a long formula with \left( \right) groups: breqn's dmath* breaks it
        return "\\vspace{-\\baselineskip}\\begin{dmath*}[compact]" + v + "\\end{dmath*}"
    return "$\\displaystyle " + v + "$"


#: A table cell or paragraph segment by its kind (blank: nothing), as functions (ten times faster than macros).
_TEX = {"text": tex_escape, "math": _tex_math, "int": fmt_int, "gib": fmt_gib,
        "code": lambda v: "\\texttt{" + tex_escape(v).replace(".", ".\\allowbreak{}") + "}"}
_MD = {"text": md_escape, "math": lambda v: f"${v}$", "code": lambda v: f"`{v}`", "int": fmt_int, "gib": fmt_gib}


def _tex_cell(c) -> str:
    return _TEX[c.kind](c.value) if c.kind in _TEX else ""


def _md_cell(c, in_table=True) -> str:
    if c.kind == "text" and not in_table:
        return str(c.value)
    return _MD[c.kind](c.value) if c.kind in _MD else ""


def _html_cell(c):
    shown = {"text": escape, "math": lambda v: Markup("\\(") + escape(v) + Markup("\\)"),
             "code": lambda v: Markup("<code>") + escape(v) + Markup("</code>"),
             "int": lambda v: escape(fmt_int(v)), "gib": lambda v: escape(fmt_gib(v))}
    return shown[c.kind](c.value) if c.kind in shown else Markup("")


CELLS = {"tex": _tex_cell, "md": _md_cell, "html": _html_cell}


def tex_spec(b):
    """The LaTeX column types of table ``b``: a left-aligned column with a text cell over 45 characters wraps."""
    spec = []
    for i, a in enumerate(b.align):
        longest = max([len(row[i].value) for row in b.rows if i < len(row) and row[i].kind == "text"] + [0])
        spec.append("p.42" if (a == "l" and longest > 45) else a)
    return spec


def render_block(block, fmt: str) -> str:
    """One block rendered alone (Markdown in notebooks)."""
    macros = environment(fmt).get_template(f"macros.{fmt}.j2")
    return getattr(macros.module, block.kind)(block)


def render(report, fmt: str) -> str:
    """The report as ``tex``, ``md`` or ``html`` through ``templates/report.<fmt>.j2``."""
    return environment(fmt).get_template(f"report.{fmt}.j2").render(report=report)
