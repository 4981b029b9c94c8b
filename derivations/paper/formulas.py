"""The paper's printed formulas (Sec. 5.1-5.2, Table 10; ``paper/formulas.toml``: the text, LaTeX where given, the term
and the setting) verified against the terms (:func:`derivations.paper.verify.verify`) by ``memsym reproduce``, which
fails when one does not verify."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from derivations.paper.reference import PAPER_DIR
from derivations.config import ConfigError


@dataclass(frozen=True)
class Formula:
    """One printed formula: where it is, its text (and LaTeX), the term and setting."""

    id: str
    place: str
    text: str
    term: str
    assume: Dict
    stage: Optional[int] = None
    latex: str = ""
    note: str = ""


@dataclass
class FormulaCheck:
    """A formula's verification: the plain-text result and, if given, the LaTeX one."""

    formula: Formula
    result: object                      # derivations.verify.VerifyResult
    latex_result: Optional[object] = None
    error: str = ""                     # a formula that could not be read

    @property
    def ok(self) -> bool:
        return not self.error and self.result.equal and (self.latex_result is None or self.latex_result.equal)

    @property
    def status(self) -> str:
        if self.error:
            return "UNREADABLE"
        return "verified" if self.ok else "NOT EQUAL"

    @property
    def readings(self) -> str:
        return "text+latex" if self.latex_result is not None else "text"

    def detail(self) -> str:
        """Why it failed (empty when ok)."""
        if self.error:
            return self.error
        bad = [r for r in (self.result, self.latex_result) if r is not None and not r.equal]
        # lazy: sympy (only this path needs it)
        from symbolic.formula import plain
        return "; ".join(f"term - formula = {plain(r.difference)}" for r in bad)

    def to_json(self) -> dict:
        f = self.formula
        return {"id": f.id, "place": f.place, "text": f.text, "latex": f.latex, "term": f.term,
                "assume": {k: str(v) for k, v in f.assume.items()}, "stage": f.stage, "status": self.status,
                "ok": self.ok, "detail": self.detail()}


def load(path=None) -> List[Formula]:
    """Read ``paper/formulas.toml``; ValueError names a malformed entry."""
    path = Path(path or PAPER_DIR / "formulas.toml")
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    out = []
    for raw in data.get("formula", []):
        try:
            out.append(Formula(id=raw["id"], place=raw["place"], text=raw["text"], term=raw["term"],
                               assume=dict(raw.get("assume", {})), stage=raw.get("stage"),
                               latex=raw.get("latex", ""), note=raw.get("note", "")))
        except KeyError as exc:
            raise ValueError(f"{path}: formula {raw.get('id', '?')} lacks {exc}") from None
    ids = [f.id for f in out]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path}: duplicate formula ids")
    return out


def check(formula: Formula, model=None) -> FormulaCheck:
    # lazy: sympy (only this path needs it)
    from derivations.paper.verify import verify
    try:
        res = verify(formula.text, formula.term, assume=formula.assume, model=model, stage=formula.stage)
        lres = (verify(formula.latex, formula.term, assume=formula.assume, model=model, stage=formula.stage)
                if formula.latex else None)
    except ConfigError as exc:
        return FormulaCheck(formula, None, None, str(exc))
    return FormulaCheck(formula, res, lres)


def run(path=None, model=None) -> List[FormulaCheck]:
    """Verify every printed formula against its term."""
    return [check(f, model) for f in load(path)]


def summary_lines(checks: List[FormulaCheck]) -> List[str]:
    """The lines ``memsym reproduce`` prints for the formula check."""
    lines = [f"printed formulas against the terms ({len(checks)}, paper/formulas.toml)",
             f"  {'place':<58}{'against':<22}{'read as':<12}status"]
    for c in checks:
        f = c.formula
        lines.append(f"  {f.place[:57]:<58}{f.term:<22}{c.readings:<12}{c.status}")
        if not c.ok:
            lines.append(f"    {c.detail()}")
    return lines
