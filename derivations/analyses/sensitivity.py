"""Sensitivity and budget solving on the per-device terms.

Derivatives dM/dx of the total and each component (Tables 8 and 10), integers as continuous, in three forms:
``general``, ``stage`` (at the stage's composition and bytes, Table 7) and ``paper`` (also at the parallel degrees,
as Table 10's ``10 b n_h s^2`` at TP = 2); SP tied to TP; PP and l act through the composition (finite differences
only, to the nearest valid values).  Budget: sympy solves the Sec. 6 peak ``(1 + f_frag)(S + A(x)) + M_buf = M_HBM``
for b (linear) or s (quadratic) in closed form, the root floored to a valid integer.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from fractions import Fraction
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import sympy as sp

from symbolic.sensitivity import _exact, closed_form, dominant_form, latex, text  # noqa: F401

from derivations import config as cfg
from derivations import notation as nt
from derivations import variant
from derivations.assembly import device, totals
from derivations.assembly.overheads import peak

#: Symbols that act on a stage only through its composition (config.stages), never in its expression.
COMPOSITION_SYMBOLS = ("PP", "l")
#: Where each integer configuration quantity lives: (object, field).  Model dimensions are the
#: ModelSpec field of the same name.
LAYOUT_FIELDS = {"DP": "dp", "TP": "tp", "PP": "pp", "EP": "ep", "ETP": "etp", "CP": "cp", "SP": "sp"}
TRAINING_FIELDS = {"b": "mbs", "s": "seq"}
M_HBM = sp.Symbol("M_HBM", positive=True)  # the device memory budget, bytes


def parse_symbols(names: str) -> List[sp.Symbol]:
    """``'b,s,TP'`` -> symbols, by registry name or alias (never evaluated as Python)."""
    out = []
    for raw in str(names).split(","):
        name = raw.strip()
        if not name:
            continue
        info = nt.REGISTRY.get(name) or next((i for i in nt.REGISTRY.values() if name in i.aliases), None)
        if info is None:
            close = [n for n in nt.REGISTRY if n.lower() == name.lower()]
            hint = f" (did you mean {close[0]}?)" if close else ""
            known = ", ".join(n for n, i in nt.REGISTRY.items() if i.role not in ("derived",))
            raise cfg.ConfigError("wrt", f"--wrt: unknown symbol {name!r}{hint}; symbols: {known}")
        if info.role == "derived":
            raise cfg.ConfigError("wrt", f"--wrt: {name} is derived ({nt.DEFINITIONS[info.symbol]}); differentiate "
                                         f"with respect to the symbols it is made of")
        if info.role == "overhead":
            raise cfg.ConfigError("wrt", f"--wrt: {name} enters only the Sec. 6 peak, not the per-device total")
        if info.name == "z":
            raise cfg.ConfigError("wrt", "--wrt: the ZeRO stage is a choice, not a quantity: compare with --zero")
        if info.symbol not in out:
            out.append(info.symbol)
    if not out:
        raise cfg.ConfigError("wrt", f"--wrt: no symbol given in {names!r}")
    return out


def level_subs(subs: Mapping, x: sp.Symbol, level: str) -> Dict:
    """The part of ``subs`` a display level substitutes ('stage': all but model dimensions, b, s and
    the parallel degrees; 'paper': also the parallel degrees).  ``x`` is always kept."""
    roles = ("model", "parallel") if level == "stage" else ("model",)
    keep = {i.symbol for i in nt.REGISTRY.values() if i.role in roles} | {nt.b, nt.s, x}
    return {k: v for k, v in subs.items() if k not in keep}


def local_form(expr, x: sp.Symbol, subs: Mapping):
    """``expr`` polynomial in ``x`` around the configuration ``subs``: an indicator (Piecewise) by its value there, a
    floor (DeepSeek-V4's floor(s / m_C)) by its argument less its fractional part there (s / m_C - r / m_C)."""
    expr = sp.sympify(expr)
    pieces = [a for a in expr.atoms(sp.Piecewise, sp.floor) if x in a.free_symbols]
    if not pieces:
        return expr
    rep = {}
    for a in pieces:
        if isinstance(a, sp.floor):
            arg = a.args[0]
            at = sp.nsimplify(arg.xreplace(dict(subs)))
            rep[a] = arg - (at - sp.floor(at))
        else:
            rep[a] = sp.Integer(_exact(a, subs))
    return expr.xreplace(rep)


@dataclass
class Derivative:
    """dM_c/dx of one component c (or the total) in its three forms, its value, the elasticity (x / M_c) dM_c/dx
    and its share (x / M) dM_c/dx of the total's elasticity."""

    component: str
    general: sp.Expr
    stage: sp.Expr
    paper: sp.Expr
    value: Fraction
    amount: Fraction
    elasticity: Optional[float]
    share: Optional[float]


@dataclass
class RowDerivative:
    """The derivative of one row of the paper (a tensor or group of tensors) times its multiplicity."""

    term: str
    row: str
    label: str
    multiplicity: sp.Expr
    expr: sp.Expr
    paper: sp.Expr
    value: Fraction


@dataclass
class FiniteDifference:
    """Exact change of every component when ``symbol`` goes from ``before`` to ``after``."""

    direction: str
    before: int
    after: int
    delta: Dict[str, Fraction]
    totals: Tuple[Fraction, Fraction]
    stage: Tuple[str, str]

    @property
    def relative(self) -> Optional[float]:
        return float(self.delta["total"] / self.totals[0]) if self.totals[0] else None

    @property
    def elasticity(self) -> Optional[float]:
        """Discrete elasticity (dM / M) / (dx / x)."""
        if not self.totals[0] or self.after == self.before:
            return None
        return float((self.delta["total"] / self.totals[0]) / Fraction(self.after - self.before, self.before))


@dataclass
class Sensitivity:
    symbol: sp.Symbol
    value: Fraction
    in_expression: bool
    note: str
    derivatives: Dict[str, Derivative] = field(default_factory=dict)
    rows: List[RowDerivative] = field(default_factory=list)
    finite: List[FiniteDifference] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.symbol.name


def leaf_rows(term, terms) -> List[Tuple[str, str, str, sp.Expr, sp.Expr]]:
    """The paper's rows under ``term``: (term id, row key, label, multiplicity, row expression), following parts
    that reference another term (``combine``'s ``ref:<id>``); consecutive parts sharing a ``row`` are one row."""
    out: List = []

    def walk(t, mult):
        for p in t.parts:
            ref = next((g[4:] for g in p.tags if g.startswith("ref:")), None)
            if ref is not None and ref in terms and p.num and p.num[-1] == terms[ref].expr and len(p.num) <= 2:
                coef = p.num[0] if len(p.num) == 2 else sp.Integer(1)
                walk(terms[ref], mult * coef)
                continue
            key = p.row or p.key
            if out and out[-1][0] == t.id and out[-1][1] == key and p.row and out[-1][3] == mult:
                tid, k, label, m, e = out[-1]
                out[-1] = (tid, k, label + "; " + p.label, m, e + p.expr)
            else:
                out.append((t.id, key, p.label, mult, p.expr))

    walk(term, sp.Integer(1))
    return out


def analyse(components: Mapping[str, object], x: sp.Symbol, subs: Mapping, *, tie: Mapping | None = None,
            terms=None, row_limit: int = 8) -> Sensitivity:
    """Derivatives of each component (Terms or expressions) and their total with respect to ``x`` at ``subs``;
    ``tie``: symbols replaced first unless ``x`` is one (``{SP: TP}``); ``terms``: the registry, for the rows."""
    tie = {k: v for k, v in (tie or {}).items() if k != x}
    exprs = {k: local_form(nt.expand_derived(sp.sympify(getattr(c, "expr", c))).xreplace(tie), x, subs)
             for k, c in components.items()}
    exprs["total"] = sp.Add(*exprs.values())
    xv = Fraction(subs[x]) if x in subs else None
    if xv is None:
        raise cfg.ConfigError("wrt", f"--wrt: {x} has no value in this configuration")
    in_expr = x in exprs["total"].free_symbols
    note = ""
    if not in_expr and x.name in COMPOSITION_SYMBOLS:
        return Sensitivity(x, xv, False, f"{x} does not appear in the per-device expression of a stage: it acts "
                                         f"only through the stage composition (L_d, L_m, e_E, e_H), so no derivative "
                                         f"is reported; see the finite difference")
    if not in_expr:
        note = f"{x} does not appear in the per-device expression at this configuration: dM/d{x} = 0"
    elif tie and x in set(tie.values()):
        tied = ", ".join(f"{k} = {v}" for k, v in tie.items() if v == x)
        note = f"{tied} (sequence parallelism on): d/d{x} includes the {', '.join(map(str, tie))}-split tensors"
    res = Sensitivity(x, xv, in_expr, note)
    stage_s, paper_s = level_subs(subs, x, "stage"), level_subs(subs, x, "paper")
    values = {k: _exact(e, subs) for k, e in exprs.items()}
    total = values["total"]
    for k, e in exprs.items():
        d = sp.diff(e, x)
        dv = _exact(d, subs) if d != 0 else Fraction(0)
        stage = closed_form(d.xreplace(stage_s)) if d != 0 else sp.Integer(0)
        paper = dominant_form(d.xreplace(paper_s), subs) if d != 0 else sp.Integer(0)
        el = float(xv * dv / values[k]) if values[k] else None
        share = float(xv * dv / total) if total else None
        res.derivatives[k] = Derivative(k, d, stage, paper, dv, values[k], el, share)
    if terms is not None and in_expr:
        rows = []
        for k, c in components.items():
            if not hasattr(c, "parts"):
                continue
            for tid, key, label, mult, e in leaf_rows(c, terms):
                e = local_form(nt.expand_derived(mult * e).xreplace(tie), x, subs)
                d = sp.diff(e, x)
                if d == 0:
                    continue
                dv = _exact(d, subs)
                if dv == 0:
                    continue
                rows.append(RowDerivative(tid, key, label, mult.xreplace(stage_s), d,
                                          dominant_form(d.xreplace(paper_s), subs), dv))
        rows.sort(key=lambda r: (-abs(r.value), r.term, r.row))
        res.rows = rows[:row_limit]
    return res


def configuration_value(model, layout, training, name: str):
    """The current value of an integer configuration quantity (SP: TP when tied)."""
    if name in LAYOUT_FIELDS:
        return layout.SP if name == "SP" else getattr(layout, LAYOUT_FIELDS[name])
    if name in TRAINING_FIELDS:
        return getattr(training, TRAINING_FIELDS[name])
    val = getattr(model, name, None)
    return val if isinstance(val, int) and not isinstance(val, bool) else None


def with_value(model, layout, training, name: str, value: int):
    """(model, layout, training) with one quantity changed (no validation)."""
    if name in LAYOUT_FIELDS:
        return model, replace(layout, **{LAYOUT_FIELDS[name]: value}), training
    if name in TRAINING_FIELDS:
        return model, layout, replace(training, **{TRAINING_FIELDS[name]: value})
    return replace(model, **{name: value}), layout, training


def step(model, layout, training, name: str, direction: int, stage_index: int, limit: int = 4096):
    """The nearest value of ``name`` in ``direction`` (+1/-1) at which the configuration is valid
    (validate_layout, validate_training, the stage index exists); None if there is none within ``limit``."""
    v = configuration_value(model, layout, training, name)
    if v is None:
        return None
    for k in range(1, limit + 1):
        w = v + direction * k
        if w < 1:
            return None
        m2, l2, t2 = with_value(model, layout, training, name, w)
        try:
            cfg.validate_layout(m2, l2, t2.seq)
            cfg.validate_training(t2)
            cfg.stage(m2, l2, stage_index)
        except (cfg.ConfigError, ValueError, TypeError):
            continue
        return w, (m2, l2, t2)
    return None


def finite_differences(evaluate: Callable, model, layout, training, stage_index: int,
                       name: str) -> List[FiniteDifference]:
    """Exact finite differences of every component to the next and previous valid value of ``name``;
    ``evaluate(model, layout, training, stage_index)`` -> {component: Fraction, 'total': Fraction}."""
    v = configuration_value(model, layout, training, name)
    if v is None:
        return []
    base = evaluate(model, layout, training, stage_index)
    label0 = cfg.stage(model, layout, stage_index).label
    out = []
    for direction, word in ((1, "next"), (-1, "previous")):
        found = step(model, layout, training, name, direction, stage_index)
        if found is None:
            continue
        w, (m2, l2, t2) = found
        new = evaluate(m2, l2, t2, stage_index)
        out.append(FiniteDifference(word, v, w, {k: new[k] - base[k] for k in base}, (base["total"], new["total"]),
                                    (label0, cfg.stage(m2, l2, stage_index).label)))
    return out


@dataclass
class BudgetRoot:
    """The largest x with (1 + f_frag)(S + A(x)) + M_buf <= M_HBM at one stage: the ``structural`` root (in S, A_k,
    f_frag, M_buf, M_HBM), ``coefficients`` {name: (closed form, value)}, ``at_layout`` (M_HBM, f_frag, M_buf
    symbolic), the exact ``root`` (None: no real root) and the largest valid ``integer`` below it."""

    var: sp.Symbol
    degree: int
    structural: sp.Expr
    raw: Dict[str, Tuple[sp.Expr, Fraction]]
    at_layout_unsimplified: sp.Expr
    root: sp.Expr
    integer: int

    @cached_property
    def at_layout(self) -> sp.Expr:
        return sp.simplify(self.at_layout_unsimplified)

    @cached_property
    def coefficients(self) -> Dict[str, Tuple[sp.Expr, Fraction]]:
        return {k: (closed_form(e), v) for k, (e, v) in self.raw.items()}


#: The budget's generic symbols: S the model states, A_k the coefficient of x^k in the activations.
_S = sp.Symbol("S", positive=True)


def _A(k: int) -> sp.Symbol:
    return sp.Symbol(f"A_{k}", positive=True)


@lru_cache(maxsize=None)
def _generic_roots(var: sp.Symbol, powers: Tuple[int, ...]) -> List[sp.Expr]:
    """The roots in ``var`` of (1 + f_frag)(S + sum_k A_k var^k) + M_buf = M_HBM: one generic solve per
    degree and set of nonzero powers (every stage and every end of the Sec. 6 ranges shares it)."""
    A = {k: _A(k) for k in powers}
    return sp.solve(sp.Eq(peak(_S + sum(a * var ** k for k, a in A.items()), nt.f_frag, nt.M_buf), M_HBM), var)


def solve_budget(states, activations, var: sp.Symbol, subs: Mapping, overheads: Mapping, hbm: int,
                 multiple: int = 1, at=None) -> BudgetRoot:
    """Solve the Sec. 6 budget for ``var`` (b or s) at one stage: ``states`` independent of var, ``activations`` of
    degree 1 or 2 in it (local form at ``at`` when given), the answer a multiple of ``multiple``."""
    sub_wo = {k: v for k, v in subs.items() if k != var}
    stage_s = level_subs(sub_wo, var, "stage")
    act = nt.expand_derived(sp.sympify(getattr(activations, "expr", activations)))
    if at is not None:  # pieces not polynomial in var (indicators, floors): their local form at var = at
        act = local_form(act, var, {**subs, var: at})
    st_expr = nt.expand_derived(sp.sympify(getattr(states, "expr", states)))
    if var in st_expr.free_symbols:
        raise cfg.ConfigError("solve", f"model states depend on {var}: cannot solve the budget in closed form")
    poly = sp.Poly(sp.expand(act.xreplace(stage_s)), var)
    deg = poly.degree()
    if not 1 <= deg <= 2:
        raise cfg.ConfigError("solve", f"activations are of degree {deg} in {var}: the budget is solved for "
                                       f"degree 1 or 2 only")
    S = _S
    forms = {"S": (st_expr.xreplace(stage_s), _exact(st_expr, sub_wo))}  # closed forms when read
    coeff = dict(zip(range(deg, -1, -1), poly.all_coeffs()))
    A, numbers = {}, {S: forms["S"][1]}
    for k in range(deg, -1, -1):
        c = coeff.get(k, sp.Integer(0))
        if c == 0:
            continue
        A[k] = _A(k)
        forms[f"A_{k}"] = (c, _exact(c, sub_wo))
        numbers[A[k]] = forms[f"A_{k}"][1]
    if numbers[A[deg]] <= 0:
        raise cfg.ConfigError("solve", f"activations do not grow with {var}: nothing to solve")
    f, buf = nt.f_frag, nt.M_buf
    roots = _generic_roots(var, tuple(sorted(A)))
    q = lambda v: sp.Rational(Fraction(v).numerator, Fraction(v).denominator)
    layout_subs = {k: q(v) for k, v in numbers.items()}
    budget_subs = {f: q(overheads[f]), buf: q(overheads[buf]), M_HBM: sp.Integer(hbm)}
    best = best_val = None
    for r in roots:  # the boundary is the largest real root at the configuration
        val = r.xreplace(layout_subs).xreplace(budget_subs)
        if val.is_real and (best_val is None or val > best_val):
            best, best_val = r, val
    if best is None:  # no real root: even at x = 0 the model states exceed the budget
        if not roots:
            raise cfg.ConfigError("solve", f"the budget has no root in {var}")
        best = roots[-1]
    root = best_val
    fl = int(sp.floor(root)) if root is not None and root > 0 else 0
    return BudgetRoot(var, deg, best, forms, best.xreplace(layout_subs), root,
                      max(0, fl - fl % multiple))


def _at_step(c: Mapping) -> Dict:
    """The assembled device's components at the step's peak (the step's moment only when there is one)."""
    out = {k: c[k] for k in ("weights", "gradients", "optimizer", "activations")}
    if c["step"]:
        out["step"] = c["step"]
    out["total"] = c["step_total"]
    return out


def configuration(model, layout, training, stage_index, wrt, rows=5):
    """(bytes per component, stage, [Sensitivity]) at a configuration: derivatives of the components
    (derivations/assembly/totals.py) and finite differences of the assembled device (device.components)."""
    values = _at_step(device.components(model, layout, training, stage_index))  # validates
    comp = cfg.stage(model, layout, stage_index)
    subs = cfg.substitution(model, layout, training, comp)
    components = totals.device_components(model, layout, training, stage_index)
    est = device.estimate(model, layout, training, stage_index)
    if est.bytes["step"]:  # the step's peak: the backward moment that binds at this configuration
        components["step"] = totals.step_expression(model, training, comp, est.term_ids["step"])
    terms = None if training.schedule else variant(model, training).terms  # rows: the paper's tensors
    tie = {nt.SP: nt.TP} if layout.sp is None else {}
    out = []
    for x in wrt:
        res = analyse(components, x, subs, tie=tie, terms=terms, row_limit=rows)
        res.finite = finite_differences(lambda *a: _at_step(device.components(*a)), model, layout, training,
                                        stage_index, x.name)
        out.append(res)
    return values, comp, out
