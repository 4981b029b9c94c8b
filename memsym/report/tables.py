"""The report's tables (Tables 1-10 of the paper, the estimate, Sec. 6, the comparison), each a function of a
Context returning a Table; :data:`TABLES` names them by key."""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Callable, Dict, Tuple

import sympy as sp

from derivations import config as cfg
from derivations import notation as nt
from derivations.analyses.compare import waterfall
from derivations.assembly.device import estimate, stage_params
from derivations.assembly.zero import component_terms
from derivations.paper.reproduce import run
from derivations.steptime import model as steptime
from memsym.trace import records
from symbolic import tomlfile
from symbolic.exact import exact_text
from symbolic.numeric import exact

from ..lines import one_line
from .blocks import C, G, I, M, T, Table
from .equations import breakable_latex, refs
from .text import braced

ZERO_ORDER = (0, 1, 2, 3)
#: The tables' prose, the step-time table's row labels, where each table is in the paper and each table's caption,
#: source, columns and alignments (tables.toml).
with tomlfile.package_data(Path(__file__).with_name("tables.toml")) as _data:
    NOTES, STEPTIME_ROWS, TABLE_SOURCES = dict(_data["notes"]), dict(_data["steptime"]), dict(_data["sources"])
    SPECS = dict(_data["tables"])


def _table(ctx, key: str, rows, note: str = None, **values) -> Table:
    """Table ``key`` holding ``rows``: its caption (formatted with ``ctx`` and ``values``), source, columns and
    alignments from tables.toml, its note from there too unless given."""
    spec = SPECS[key]
    return Table(key, spec["caption"].format(ctx=ctx, **values), spec["source"], tuple(spec["columns"]),
                 tuple(spec["align"].split()), tuple(rows), NOTES.get(key, "") if note is None else note)


def _gib_of_params(ctx, params):
    return None if params is None else params * Fraction(ctx.subs.get(nt.B_w, 2))


def table_notation(ctx) -> Table:
    rows = []
    family = getattr(ctx.model, "family", "deepseek")
    foreign = set().union(*[names for fam, names in nt.FAMILY_SYMBOLS.items() if fam != family])
    for name, info in nt.REGISTRY.items():
        if name in foreign:  # another family's own symbol (DeepSeek-V4's in a DeepSeek report)
            continue
        val = ctx.value_of(nt.SYMBOLS[name])
        if family != "deepseek" and info.role == "model" and val is None:  # a DeepSeek dimension this model lacks
            continue
        rows.append((M(braced(info.latex)), C(name), T(info.meaning), T(info.role), T(info.source), I(val)))
    return _table(ctx, "notation", rows)


def table_matrices(ctx) -> Table:
    rows = []
    for tid in ("params.mla", "params.expert", "params.router", "params.dense_ffn"):
        term = ctx.terms[tid]
        for p in term.parts:
            rule = "split by TP" if "tp_split" in p.tags else "replicated" if "replicated" in p.tags else ""
            shown = sp.latex(p.display(), order="none", symbol_names=ctx.names)
            rows.append((T(p.label), M(shown), I(ctx.exact(p.expr)), T(rule), C(tid)))
    return _table(ctx, "table2", rows)


def _layer_groups(model: cfg.ModelSpec):
    """Consecutive layers of the same kind and role (embedding / head), as Table 3 groups them."""
    kinds, groups = model.layer_kinds(), []
    for i, k in enumerate(kinds):
        key = (k, i == 0, i == model.l - 1)
        if groups and groups[-1][0] == key:
            groups[-1][2] = i
        else:
            groups.append([key, i, i])
    return groups


def table_layers(ctx) -> Table:
    term = ctx.terms["params.stage"]
    params_of = lambda comp: exact(term, cfg.substitution(ctx.model, None, ctx.training, comp))
    rows = []
    for (kind, first, last), a, b in _layer_groups(ctx.model):
        content = (["embedding"] if first else []) + ["MLA", "dense FFN" if kind == "dense" else
                                                       f"router + {ctx.model.N} + {ctx.model.N_s} experts", "LN"] + \
                  (["output head"] if last else [])
        p = params_of(cfg.layer_range(ctx.model, a, a))
        label = f"{a}" if a == b else f"{a}-{b} (each)"
        rows.append((T(label), T(" + ".join(content)), I(p), G(_gib_of_params(ctx, p))))
    total = params_of(cfg.whole_model(ctx.model))
    rows.append((T("total"), T(f"{ctx.model.l} layers"), I(total), G(_gib_of_params(ctx, total))))
    return _table(ctx, "table3", rows)


def table_stages(ctx) -> Table:
    rows_, total = stage_params(ctx.model, ctx.layout)
    rows = []
    for comp, p, _ in rows_:
        content = ", ".join((["embedding"] if comp.embedding else []) + ([f"{comp.dense} dense"] if comp.dense else [])
                            + ([f"{comp.moe} MoE"] if comp.moe else []) + (["head"] if comp.head else []))
        rows.append((T(comp.index), T(comp.label), T(content), I(p), G(_gib_of_params(ctx, p))))
    rows.append((T("all"), T(""), T(""), I(total), G(_gib_of_params(ctx, total))))
    return _table(ctx, "table4", rows)


def table_layout(ctx) -> Table:
    lay = ctx.layout
    rows = [(M(braced(nt.REGISTRY[n].latex)), T(nt.REGISTRY[n].meaning), I(ctx.value_of(nt.SYMBOLS[n])))
            for n in ("DP", "TP", "PP", "EP", "ETP", "EDP", "SP", "CP")]
    rows.append((T("GPUs"), T("DP TP PP CP"), I(lay.world)))
    return _table(ctx, "table5", rows)


def table_static(ctx) -> Table:
    rows = []
    for tid, term in ctx.terms.items():
        if tid.startswith("static.device."):
            p = ctx.exact(term)
            rows.append((T(term.meaning), C(tid), I(p), I(_gib_of_params(ctx, p)), G(_gib_of_params(ctx, p))))
    return _table(ctx, "table6", rows)


def table_bytes(ctx) -> Table:
    rows = [(M(braced(nt.REGISTRY[k].latex)), T(nt.REGISTRY[k].meaning), I(v)) for k, v in ctx.training.bytes]
    return _table(ctx, "table7", rows)


def table_zero(ctx) -> Table:
    rows = []
    for z in ZERO_ORDER:
        ids = component_terms(z)
        vals = [ctx.exact(ctx.terms[ids[k]]) for k in ("weights", "gradients", "optimizer")]
        total = None if None in vals else sum(vals)
        rows.append((T(f"{z} ({cfg.ZERO_NAMES[z]})"), *[G(v) for v in vals], G(total), I(total)))
    return _table(ctx, "table8", rows)


def table_activation_setting(ctx) -> Table:
    rows = [(M(braced(nt.REGISTRY[n].latex)), T(nt.REGISTRY[n].meaning), I(ctx.value_of(nt.SYMBOLS[n])))
            for n in ("b", "s", "N_r", "N", "E_token", "SP", "CP", "EP", "ETP")]
    rows.append((T("AC"), T("activation recomputation (this configuration)"), T(ctx.training.recompute)))
    return _table(ctx, "table9", rows)


def table_activations(ctx) -> Table:
    """Table 10: each row of ``act.stage`` (and its variants) at the stage composition, as the
    paper prints it: the per-layer term a part names, at the layout, times its count, expanded (a part the stage
    does not hold left out)."""
    dsubs = ctx.display_subs(True)
    ident = dict(nt.PAPER_IDENTITIES) if ctx.model.d_v == ctx.model.d_h else {}
    rows = []
    for vid in [tid for tid in ctx.terms if tid == "act.stage" or tid.startswith("act.stage.")]:  # and later ones
        stage_term = ctx.terms[vid]
        policy = vid[len("act.stage"):].lstrip(".") or "none"
        for p in stage_term.parts:
            named = refs(p)
            if not named:
                continue
            sub = ctx.terms[named[0]]
            coef = sp.sympify(p.num[0]).xreplace(dsubs) if len(p.num) == 2 else sp.Integer(1)
            if coef == 0:
                continue
            per_layer = sp.Add(*[c * sp.Mul(*rest) / den for c, rest, den in sub.rows(dsubs, ctx.subs)])
            shown = breakable_latex(sp.expand((coef * per_layer).xreplace(ident)), ctx.names)
            v = ctx.exact(p.expr)
            rows.append((T(p.label), T(policy), M(shown), I(v), G(v)))
        total = ctx.exact(stage_term)
        rows.append((T("total"), T(policy), C(vid), I(total), G(total)))
    return _table(ctx, "table10", rows, note="d_v written d_h as the paper does." if ident else "")


def table_comparison(ctx) -> Table:
    rows = []
    for r in run():
        unit = {"B": "", "GB": " GB", "params": "", "bytes": ""}[r.entry.unit]
        printed = r.entry.printed + ("" if r.entry.printed.endswith("B") or r.entry.unit != "GB" else unit)
        derived = r.derived_text() + ("B" if r.entry.unit == "B" else unit)
        rows.append((T(r.entry.place), T(printed), T(derived), T(r.status), T(r.entry.discrepancy),
                     C(", ".join(r.entry.terms))))
    return _table(ctx, "comparison", rows)


def table_traces(ctx) -> Table:
    """Each measured trace (paper/traces/*.toml) against its framework's preset and the paper's
    terms: the bytes one layer of each kind keeps, and outside the layers."""
    def by_kind(out):  # bytes of one layer of each kind, and outside the layers
        return {} if out is None else dict({r["kind"]: r["bytes"] for r in out["activations_by_layer"]},
                                           outside=out["activations_outside_layers"])
    rows = []
    for rec in records.load_all():
        try:
            pred, paper = records.predict(rec), records.predict(rec, "paper")
        except (cfg.ConfigError, OSError):
            pred = paper = None
        measured, pk, ak = by_kind(rec["measured"]), by_kind(pred), by_kind(paper)
        name = rec["_file"].removesuffix(".toml")
        for kind in ("dense", "moe", "outside"):
            if kind not in measured:
                continue
            got, want, base = measured[kind], pk.get(kind), ak.get(kind)
            status = ("unexplained" if "unexplained" in rec else "config not found" if want is None else
                      "exact" if want == got else "differs")
            rows.append((T(name), T(kind), I(got), I(want), I(base),
                         T(f"{got / base:.3f}" if base and kind != "outside" else "-"), T(status)))
            name = ""
    return _table(ctx, "traces", rows)


def shown_path(path: str) -> str:
    """A path as text: bytes that are not UTF-8 (kept by Python as surrogates) shown as ``\\xff``, control and
    bidirectional-format characters as their codes (``\\x1b``, ``\\u202e``: a terminal or a page would obey them)."""
    return one_line(str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))


def setting(ctx) -> Tuple[Tuple[str, str], ...]:
    """The report's configuration lines (model, layout, stage, training)."""
    lay, tr, st = ctx.layout, ctx.training, ctx.stage
    return (
        ("model", ctx.model.name if ctx.model.source == "preset" else
         f"{ctx.model.name} (read from {shown_path(ctx.model.source)})"),
        ("layout", f"DP={lay.dp} TP={lay.tp} PP={lay.pp} EP={lay.ep} ETP={lay.etp} SP={lay.SP} CP={lay.cp} "
                   f"(EDP={exact_text(lay.edp)}, {lay.world} GPUs)"),
        ("stage", f"{st.index} of {lay.pp} ({st.label}: {st.dense} dense, {st.moe} MoE"
                  f"{', embedding' if st.embedding else ''}{', head' if st.head else ''})"),
        ("training", f"b={tr.mbs} s={tr.seq} ZeRO {tr.zero} ({cfg.ZERO_NAMES[tr.zero]}) recompute {tr.recompute}"),
    )


@lru_cache(maxsize=4)
def _estimate(model, layout, training, stage: int):
    """The estimate of a stage, made once (the estimate and Sec. 6 tables show it)."""
    return estimate(model, layout, training, stage)


def table_estimate(ctx) -> Table:
    est = _estimate(ctx.model, ctx.layout, ctx.training, ctx.stage.index)
    rows = [(T(k), C(est.term_ids[k]), I(est.bytes[k]), G(est.bytes[k]))
            for k in ("weights", "gradients", "optimizer", "activations")]
    rows.append((T("total"), T(""), I(est.bytes["total"]), G(est.bytes["total"])))
    rows += [(T("convention"), T(a[len("convention "):]), T(""), T(""))  # switches not at the paper's choice
             for a in est.assumptions if a.startswith("convention ")]
    return _table(ctx, "estimate", rows, zero_name=cfg.ZERO_NAMES[ctx.training.zero])


def table_overheads(ctx) -> Table:
    est = _estimate(ctx.model, ctx.layout, ctx.training, ctx.stage.index)
    rows = []
    for end in ("low", "high"):
        o = est.overheads[end]
        rows.append((T(end), T(f"{float(o['f_frag']) * 100:.0f}%"), G(est.bytes["total"]), G(o["fragmentation"]),
                     G(o["buffers"]), G(o["peak"])))
    return _table(ctx, "overheads", rows)


def table_implementation_waterfall(ctx) -> Table:
    """From the paper's tensor list to each implementation's, one switch at a time, for one MoE
    layer's activations at this configuration (``memsym compare --conventions paper,P``)."""
    rows = []
    for end in ("transformers", "mcore", "mcore-te"):
        wf, _, _ = waterfall(ctx.model, ctx.layout, ctx.training, end, stage=ctx.stage.index)
        q = "activations_per_layer"
        rows.append((T(end), T("paper"), T(""), T(""), I(wf.first[q]), T("")))
        for step in wf.steps:
            d = step.delta[q]
            if d:
                spec = cfg.CONVENTION_SWITCHES.get(step.name)
                rows.append((T(end), C(spec.option if spec else step.name), T(str(step.before)), T(str(step.after)),
                             I(step.values[q]), T(("+" if d > 0 else "") + f"{int(d):,}")))
    return _table(ctx, "implementations", rows)



def table_steptime(ctx) -> Table:
    """The step-time model (issue 29): derivations/steptime/model.py's expressions in LaTeX, no number (their values
    are ``memsym estimate --time``'s)."""
    F_mm, F_att, F_rs = (sp.Symbol(n, nonnegative=True) for n in ("F_mm", "F_att", "F_rs"))
    f, mem = steptime.flops(), steptime.memory_bytes()
    t = steptime.times({"layers": F_mm, "attention": F_att, "head": 0, "rescore": F_rs},
                 {k: sp.Symbol(k, positive=True) for k in mem})
    t_mb, t_B, t_W, m = (sp.Symbol(n, positive=True) for n in ("t_mb", "t_B", "t_W", "m"))
    exprs = {"F_mm": f["layers"] + f["head"], "F_att": f["attention"], "F_rs": f["rescore"], **mem, **t,
             "compute": m * (sp.Symbol("t_F") + t_B), "recompute": m * sp.Symbol("t_R"),
             "bubble": steptime.chi_mb * t_mb + steptime.chi_B * t_B - steptime.chi_W * t_W}
    # the model's own symbols print as sympy prints them (F_mm as F_{mm}, chi_mb as \chi_{mb})
    rows = tuple((T(label), C(sym), M(breakable_latex(exprs[sym], ctx.names)))
                 for sym, label in STEPTIME_ROWS.items())
    rows += ((T("step"), C("step"), M(r"m\,t_{mb} + \mathrm{bubble} + t_{DP}^{exposed} + t_{opt}")),)
    return _table(ctx, "steptime", rows)


TABLES: Dict[str, Callable[..., Table]] = {   # key -> table of a Context
    "notation": table_notation, "table2": table_matrices, "table3": table_layers, "table4": table_stages,
    "table5": table_layout, "table6": table_static, "table7": table_bytes, "table8": table_zero,
    "table9": table_activation_setting, "table10": table_activations, "estimate": table_estimate,
    "overheads": table_overheads, "comparison": table_comparison, "traces": table_traces,
    "implementations": table_implementation_waterfall, "steptime": table_steptime,
}
