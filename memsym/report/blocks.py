"""The report's data: cells, paragraphs, tables, equations, sections and the report, plain data the Jinja
templates render; a block shows itself as Markdown in Jupyter.  A :class:`Stub` is a table or equation named but
not computed yet (an outline's; :func:`memsym.report.sections.complete_report` fills it in).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import List, Optional, Tuple
from .rendering import render_block


@dataclass(frozen=True)
class Cell:
    """One table cell or paragraph segment.

    kind: 'text' (plain text, escaped per format), 'math' (LaTeX from sympy or the
    notation registry), 'code' (an identifier such as a term id), 'int' (an exact number,
    formatted with thousands separators), 'gib' (bytes shown as GiB), 'blank'.
    """

    kind: str
    value: object = ""


def A(spec: str) -> Tuple[str, ...]:
    """Column alignments from ``"l p.30 r"``."""
    return tuple(spec.split())


def T(x) -> Cell:
    return Cell("text", str(x))


def M(x) -> Cell:
    return Cell("math", str(x))


def C(x) -> Cell:
    return Cell("code", str(x))


def I(x) -> Cell:  # noqa: E743
    """An exact number."""
    return Cell("int", x if isinstance(x, Fraction) else Fraction(x)) if x is not None else Cell("blank")


def G(x) -> Cell:
    return Cell("gib", x if isinstance(x, Fraction) else Fraction(x)) if x is not None else Cell("blank")


class _Markdown:
    def _repr_markdown_(self) -> str:
        return render_block(self, "md")


@dataclass(frozen=True)
class Paragraph(_Markdown):
    segments: Tuple[Cell, ...]
    kind: str = "paragraph"


@dataclass(frozen=True)
class Table(_Markdown):
    """A table: ``columns`` headers, ``rows`` of cells; ``align`` per column: 'l', 'r', or
    'p.NN' (a wrapping column NN% of the line wide in LaTeX; left-aligned elsewhere)."""

    key: str
    caption: str
    source: str
    columns: Tuple[str, ...]
    align: Tuple[str, ...]
    rows: Tuple[Tuple[Cell, ...], ...]
    note: str = ""
    kind: str = "table"


@dataclass(frozen=True)
class Equation(_Markdown):
    """One term in three forms: the paper's factored form, the closed form, the value.

    paper / closed: LaTeX printed by sympy with the notation's names; ``at`` the
    substitution applied to both (layout and bytes, and the stage composition for
    per-device terms), as LaTeX; ``uses`` the named terms the paper's form refers to
    (``M_1^A`` in Table 10) as (LaTeX symbol, term id); ``value`` exact (params or
    bytes), None when the term has symbols no configuration sets (Sec. 6).
    """

    term_id: str
    symbol: str
    meaning: str
    provenance: str
    unit: str
    paper: str
    closed: str
    at: Tuple[Tuple[str, str], ...]
    uses: Tuple[Tuple[str, str], ...]
    value: Optional[Fraction]
    value_bytes: Optional[Fraction]
    parts: Tuple[Tuple[Cell, ...], ...] = ()
    at_stage: bool = False
    kind: str = "equation"

    @property
    def lhs(self) -> str:
        return self.symbol or r"\mathrm{" + self.term_id.replace("_", r"\_") + "}"


@dataclass(frozen=True)
class Stub:
    """A table or equation named but not computed (the outline notebooks are built from)."""

    kind: str
    key: str = ""
    source: str = ""
    term_id: str = ""
    provenance: str = ""
    parts: bool = False
    at_stage: bool = False


@dataclass
class Section:
    key: str
    number: int
    title: str
    source: str
    blocks: List
    notebook: bool = True


@dataclass
class Report:
    title: str
    subtitle: str
    model: str
    setting: Tuple[Tuple[str, str], ...]
    sections: List[Section]
    notebooks: Tuple[Tuple[str, str], ...] = ()   # (file stem, section key), for links
