"""Verify hand derivations: a formula typed in the paper's notation against a term.

:func:`verify` reads the formula (:mod:`symbolic.formula`: a whitelist parser, nothing is evaluated), applies the
assumptions to both sides and decides equality symbolically; when they differ it reports the difference (term minus
formula), the differing monomials and the term's tensors carrying them, and the difference in bytes at the paper's
configuration (Tables 5 and 9). ``--assume`` values always win; symbols the formula does not mention take the paper's
conventions (:func:`paper_defaults`); everything else stays symbolic."""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Dict, List, Optional, Tuple

import sympy as sp

from derivations import build

from derivations import config as cfg
from derivations import notation as nt
from symbolic.errors import ConfigError
from symbolic.exact import as_number
from symbolic.numeric import rational
from symbolic.formula import (Comparison, FormulaError, Leaf, carriers, compare, monomial_rank, multiples,
                              parse_assumptions, parse_formula, substitute, symbol_rank)
from symbolic.term import Term
from symbolic.units import GiB

#: where the symbols are listed for a user (cited by messages about unknown names)
SYMBOLS_HELP = "`memsym verify --help`"


def paper_defaults() -> Dict[sp.Symbol, sp.Expr]:
    """The paper's conventions for symbols a formula does not mention: Table 7's bytes (``PAPER_BYTES``),
    ``PAPER_IDENTITIES`` (d_v = d_h, ...), ``EXTENSION_DEFAULTS``, CP = ETP = 1."""
    out: Dict[sp.Symbol, sp.Expr] = {k: sp.Integer(v) for k, v in nt.PAPER_BYTES.items()}
    out.update({k: sp.sympify(v) for k, v in getattr(nt, "EXTENSION_DEFAULTS", {}).items()})
    out.update({k: sp.sympify(v) for k, v in nt.PAPER_IDENTITIES.items()})
    out.update({nt.CP: sp.Integer(1), nt.ETP: sp.Integer(1)})
    return out


@dataclass(frozen=True)
class Monomial:
    """One monomial whose coefficient differs between the term and the formula."""

    monomial: sp.Expr
    term_coeff: sp.Rational
    formula_coeff: sp.Rational
    parts: Tuple[str, ...]   # the term's tensors (part keys) that contribute to it


@dataclass
class VerifyResult:
    """The verdict of :func:`verify` and what explains it: ``difference`` term minus formula, ``monomials`` those whose
    coefficients differ, ``bytes_at_paper`` (``value_at_paper`` in the term's unit) at the paper's configuration or
    None, ``explanation`` the tensors the difference is a multiple of, ``display`` the term per row."""

    formula_text: str
    against: str
    term_meaning: str
    provenance: str
    unit: str
    formula: sp.Expr
    term_side: sp.Expr
    formula_side: sp.Expr
    equal: bool
    difference: sp.Expr
    monomials: List[Monomial]
    assumptions: Dict[sp.Symbol, sp.Expr]
    defaults: Dict[sp.Symbol, sp.Expr]
    value_at_paper: Optional[Fraction]
    bytes_at_paper: Optional[Fraction]
    paper_config: str
    explanation: List[str] = field(default_factory=list)
    hints: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    display: Optional[sp.Expr] = None

    @property
    def verdict(self) -> str:
        return "EQUAL" if self.equal else "NOT EQUAL"

    @property
    def exit_code(self) -> int:
        return 0 if self.equal else 1

    @property
    def gib_at_paper(self) -> Optional[float]:
        # (a float within its range, the exact "p/q" beyond: a user's formula may be 2^1100 bytes)
        return None if self.bytes_at_paper is None else as_number(Fraction(self.bytes_at_paper) / GiB)


# ------------------------------------------------------------------------- the term
def resolve_term(against, terms) -> Tuple[str, Term, list]:
    """(label, term, selected parts) of a term id, ``id:part`` or ``id:part+part``, or a Term."""
    if isinstance(against, Term):
        return against.id, against, list(against.parts)
    if not isinstance(against, str) or not against.strip():
        raise FormulaError(f"--against needs a term id (list them with `memsym terms`), got {against!r}", "term")
    tid, _, keys = against.strip().partition(":")
    try:
        term = terms[tid]
    except KeyError as exc:
        raise FormulaError(str(exc.args[0]), "term") from None
    if not keys:
        return tid, term, list(term.parts)
    parts = []
    for key in keys.split("+"):
        try:
            parts.append(term.part(key.strip()))
        except KeyError as exc:
            raise FormulaError(str(exc.args[0]), "term") from None
    return against.strip(), term, parts


def leaves(parts, terms, subs) -> List[Leaf]:
    """The tensors behind ``parts`` (one level into combined terms) expanded at ``subs``."""
    out = []
    for p in parts:
        ref = next((t[4:] for t in p.tags if t.startswith("ref:")), None)
        if ref and ref in terms and len(p.num) in (1, 2):
            coef = p.num[0] if len(p.num) == 2 else 1
            rows = [(f"{p.key}.{q.key}", q.label, f"{p.key}.{q.row}" if q.row else "", sp.sympify(coef) * q.expr)
                    for q in terms[ref].parts]
        else:
            rows = [(p.key, p.label, p.row, p.expr)]
        out += [Leaf(k, label, row, sp.expand(substitute(e, subs)).as_coefficients_dict())
                for k, label, row, e in rows]
    return out


# ------------------------------------------------------------------------- the paper's setting
def _at_paper(model, term: Term, cmp: Comparison, assumptions) -> Tuple[Optional[Fraction], Optional[Fraction], str]:
    """(value, bytes, description) of term - formula at the paper's configuration (Tables 5 and 9, stage 1)."""
    layout, training = cfg.Layout(), cfg.Training()
    try:
        comp = cfg.stage(model, layout, 1)
        paper = cfg.substitution(model, layout, training, comp)
    except ConfigError as exc:
        return None, None, f"unavailable: {exc}"
    desc = (f"{model.name}, b={training.mbs} s={training.seq} DP{layout.dp} TP{layout.tp} SP{layout.SP} "
            f"PP{layout.pp} EP{layout.ep} ETP{layout.etp} CP{layout.cp}, stage 1 (L_d={comp.dense}, L_m={comp.moe})")
    at = paper_defaults()
    at.update(paper)
    at.update(assumptions)
    value = rational(substitute(sp.sympify(cmp.difference), at) if not cmp.equal else sp.Integer(0), {})
    if value is None:
        return None, None, desc
    return value, value * (1 if term.unit == "bytes" else int(paper[nt.B_w])), desc


# ------------------------------------------------------------------------- the verdict
def _hints(cmp: Comparison) -> List[str]:
    """What to assume when the sides keep different symbols."""
    hints = []
    lfree, rfree = cmp.left.free_symbols, cmp.right.free_symbols
    only_term = sorted((x.name for x in lfree - rfree), key=symbol_rank)
    only_formula = sorted((x.name for x in rfree - lfree), key=symbol_rank)
    if only_term:
        hints.append(f"the term depends on {', '.join(only_term)}, which the formula does not contain: if the "
                     f"formula is at particular values give them, e.g. --assume "
                     f"{' '.join(n + '=...' for n in only_term)}")
        if {"L_d", "L_m", "e_E", "e_H"} & set(only_term):
            hints.append("for one device of a pipeline stage, --stage N substitutes that stage's L_d, L_m, "
                         "e_E, e_H (stage 1: 4 MoE layers, Table 10); TERM:PART selects parts (act.stage:mla; list "
                         "them with `memsym terms --parts`)")
    if only_formula:
        hints.append(f"the formula has {', '.join(only_formula)}, which the term (after the assumptions) does "
                     f"not contain")
    return hints


def _display(term: Term, parts, subs) -> Optional[sp.Expr]:
    """The term (or its one selected part) in per-row form at ``subs``; a courtesy: None on failure."""
    try:
        if len(parts) == len(term.parts):
            return term.display(subs)
        return parts[0].display(subs) if len(parts) == 1 else None
    except Exception:  # the verdict never depends on it
        return None


def verify(formula: str, against, assume=None, model=None, stage: Optional[int] = None) -> VerifyResult:
    """Is ``formula`` (plain text or LaTeX) equal to ``against`` (a term id, ``id:part+part`` or a Term) under
    ``assume`` (a dict, ``["TP=2"]`` or ``"TP=2 SP=2"``)? ``model``: preset name or ModelSpec; ``stage``: that stage's
    L_d, L_m, e_E, e_H. FormulaError (a ConfigError) on unreadable input."""
    model = cfg.PRESETS["deepseek-v3"] if model is None else cfg.load_model(model) if isinstance(model, str) else model
    parsed = parse_formula(formula, symbols_help=SYMBOLS_HELP)
    # --stage: L_d, L_m, e_E, e_H of that stage of the paper's layout (Table 4)
    assumptions = ({k: sp.Integer(v) for k, v in cfg.stage(model, cfg.Layout(), stage).values().items()}
                   if stage is not None else {})
    assumptions.update(parse_assumptions(assume, SYMBOLS_HELP))
    terms = build(model)
    label, term, parts = resolve_term(against, terms)
    cmp = compare(sp.Add(*[p.expr for p in parts]), parsed.expr, assumptions, paper_defaults(),
                  {nt.SYMBOLS[n] for n in parsed.mentioned}, sides=("the term", "the formula"))
    monomials, explanation = [], []
    if not cmp.equal:  # the differing monomials (with the term's tensors carrying them), the difference's multiples
        found = leaves(parts, terms, cmp.substitution)
        monomials = sorted((Monomial(m, tc, fc, carriers(m, found)) for m, (tc, fc) in cmp.coefficients.items()),
                           key=lambda m: monomial_rank(m.monomial))
        explanation = [f"term - formula = {n} x ({' + '.join(keys)}) of the term: {'; '.join(labels)}"
                       for n, keys, labels in multiples(cmp.delta, found)]
    value, nbytes, paper_desc = _at_paper(model, term, cmp, assumptions)
    return VerifyResult(
        formula_text=formula, against=label, term_meaning=term.meaning,
        provenance=term.provenance, unit=term.unit, formula=parsed.expr, term_side=cmp.left,
        formula_side=cmp.right, equal=cmp.equal, difference=cmp.difference, monomials=monomials,
        assumptions=assumptions, defaults=cmp.conventions, value_at_paper=value, bytes_at_paper=nbytes,
        paper_config=paper_desc, explanation=explanation, hints=[] if cmp.equal else _hints(cmp),
        warnings=list(parsed.warnings), display=_display(term, parts, cmp.substitution))

