"""The report's data the Jinja templates render (a block shows itself as Markdown in Jupyter); a :class:`Stub` is a
table or equation named but not computed yet."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import List, Optional, Tuple
from .rendering import render_block


@dataclass(frozen=True)
class Cell:
    """One table cell or paragraph segment of ``kind`` text, math (LaTeX), code, int (exact), gib or blank."""

    kind: str
    value: object = ""


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
    """A table; ``align`` per column: 'l', 'r', or 'p.NN' (wrapping at NN% of the line in LaTeX)."""

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
    """One term as the paper's factored form and the closed form (LaTeX) at the substitution ``at``, and its exact
    value (None when no configuration sets its symbols); ``uses``: (LaTeX symbol, term id) it refers to."""

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
