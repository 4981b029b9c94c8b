"""memsym sensitivity: closed-form derivatives, elasticities and finite differences of the per-device memory."""
from __future__ import annotations

import textwrap
from fractions import Fraction

from .timeopts import sensitivity_lines, time_options
from . import common
from derivations import config as cfg
from symbolic.exact import as_number as _num, exact_text as _exact, fmt_gib, fmt_int  # (JSON: number, exact text)

DEFAULT_WRT = "b,s,DP,TP,PP,EP,ETP,CP,N_r"


def add_parser(sub):
    common.build(sub, "sensitivity", run, DEFAULT_WRT=DEFAULT_WRT)


def _analyse(args):
    """((model, layout, training, the stage's composition, bytes, [Sensitivity]), the step time's slopes under --time,
    the stage's --memory KIND as ``estimate --memory`` counts it) of a sensitivity command line (None: not asked)."""
    from derivations.analyses import sensitivity as S
    from derivations.assembly.device import default_stage
    c = common.configuration(args)
    model, layout, training, stage = c.model, c.layout, c.training, c.stage
    wrt = S.parse_symbols(args.wrt)
    if args.wrt == DEFAULT_WRT:  # the default's model dimensions (N_r) only where the model has them
        from derivations import notation as nt
        defined = set(model.named())
        wrt = [x for x in wrt if nt.REGISTRY[x.name].role != "model" or x.name in defined]
    if stage is None:
        stage = default_stage(layout)
        if training.schedule:  # the most-loaded device under the schedule
            from derivations.assembly.device import estimate_all
            stage = estimate_all(model, layout, training)[1]
    values, comp, results = S.configuration(model, layout, training, stage, wrt, args.rows)
    timed = memory = None
    if getattr(args, "time", False):  # in the symbols of --wrt
        from derivations.steptime.sensitivity import time_sensitivity
        timed = time_sensitivity(model, layout, training, [r.name for r in results], **time_options(args))
    if args.memory:
        from derivations.assembly.device import estimate
        memory = common.memory_json(args, estimate(model, layout, training, comp.index))
    return (model, layout, training, comp, values, results), timed, memory


def data(args, got=None) -> dict:
    """What ``sensitivity --json`` prints (of ``got``, what :func:`_analyse` returned, if given)."""
    analysed, timed, memory = got or _analyse(args)
    return {**to_json(*analysed, args.latex), **({"time": timed} if timed else {}),
            **({"memory": memory} if memory else {}), **common.defaults_used(args)}


def run(args) -> int:
    got = _analyse(args)
    (model, layout, training, comp, values, results), timed, memory = got
    if args.plot:
        from ..plots import tornado
        tornado(tornado_items(results), args.plot,
                title=f"{model.name}, stage {comp.index}: elasticities of the per-device total")
    if args.json:
        common.print_json(data(args, got))
        return 0
    print("\n".join([render_text(*got[0], args.latex)] + common.memory_lines(memory, comp.index)))
    for line in sensitivity_lines(timed) if timed else ():
        print(line)
    common.print_defaults(args)
    return 0


def tornado_items(results):
    """(label, elasticity of the total): the derivative's, or the discrete one of the next valid value."""
    items = []
    for r in results:
        d = r.derivatives.get("total")
        if d is not None and r.in_expression and d.elasticity is not None:
            items.append((r.name, d.elasticity))
            continue
        fd = next((f for f in r.finite if f.direction == "next" and f.elasticity is not None), None)
        if fd is not None:
            items.append((f"{r.name} {fd.before}->{fd.after} (finite diff.)", fd.elasticity))
    return items


def _config_json(model, layout, training, comp):
    return {"model": model.name,
            "layout": {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "etp": layout.etp,
                       "cp": layout.cp, "sp": layout.SP, "sp_tied_to_tp": layout.sp is None},
            "training": {"mbs": training.mbs, "seq": training.seq, "zero": training.zero,
                         "zero_name": cfg.ZERO_NAMES[training.zero], "recompute": training.recompute_label,
                         **({"imbalance": _num(Fraction(training.imbalance))} if training.imbalance != 1 else {})},
            "stage": {"index": comp.index, "layers": [comp.layers.start, comp.layers.stop - 1],
                      "dense_layers": comp.dense, "moe_layers": comp.moe, "embedding": comp.embedding,
                      "head": comp.head}}


def to_json(model, layout, training, comp, values, results, with_latex=False) -> dict:
    from derivations import notation as nt
    from derivations.analyses import sensitivity as S
    out = _config_json(model, layout, training, comp)
    out["bytes"] = {k: _num(v) for k, v in values.items()}
    out["sensitivities"] = []
    for r in results:
        info = nt.REGISTRY[r.name]
        e = {"symbol": r.name, "latex": info.latex, "meaning": info.meaning, "value": _num(r.value),
             "in_expression": r.in_expression, "note": r.note, "derivative": None, "rows": [], "finite_differences": []}
        if r.derivatives:
            e["derivative"] = {}
            for k, d in r.derivatives.items():
                e["derivative"][k] = {
                    "paper": S.text(d.paper), "stage": S.text(d.stage), "general": S.text(d.general),
                    "value": _num(d.value), "value_exact": _exact(d.value), "unit": f"bytes per unit of {r.name}",
                    "bytes": _num(d.amount), "elasticity": d.elasticity, "share_of_total_elasticity": d.share}
                if with_latex:
                    e["derivative"][k]["latex"] = {"paper": S.latex(d.paper), "stage": S.latex(d.stage)}
        for row in r.rows:
            item = {"term": row.term, "row": row.row, "label": row.label, "multiplicity": S.text(row.multiplicity),
                    "derivative": S.text(row.paper), "value": _num(row.value), "value_exact": _exact(row.value)}
            if with_latex:
                item["latex"] = S.latex(row.paper)
            e["rows"].append(item)
        for f in r.finite:
            e["finite_differences"].append({
                "direction": f.direction, "from": f.before, "to": f.after,
                "delta": {k: _num(v) for k, v in f.delta.items()},
                "delta_exact": {k: _exact(v) for k, v in f.delta.items()},
                "total_before": _num(f.totals[0]), "total_after": _num(f.totals[1]),
                "relative_change": f.relative, "discrete_elasticity": f.elasticity,
                "stage_layers": {"before": f.stage[0], "after": f.stage[1]}})
        out["sensitivities"].append(e)
    return out


WIDTH = 100


def _wrap(line: str, indent: int) -> str:
    """``line`` folded at WIDTH columns between words (a formula breaks at its spaces, around + and -), the
    continuation lines indented by ``indent``."""
    if len(line) <= WIDTH:
        return line
    return textwrap.fill(line, WIDTH, subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False, drop_whitespace=True)


def render_text(model, layout, training, comp, values, results, with_latex=False) -> str:
    from derivations import notation as nt
    from derivations.analyses import sensitivity as S
    form = S.latex if with_latex else S.text
    lines = [_wrap(f"memsym sensitivity: {model.name}, one device of stage {comp.index} of {layout.pp} ({comp.label}: "
                   f"L_d={comp.dense}, L_m={comp.moe}, e_E={int(comp.embedding)}, e_H={int(comp.head)}"
                   + "".join(f", {k}={v}" for k, v in comp.extra) + ")", 4),
             f"layout DP={layout.dp} TP={layout.tp} PP={layout.pp} EP={layout.ep} ETP={layout.etp} SP={layout.SP} "
             f"CP={layout.cp}; ZeRO {training.zero} ({cfg.ZERO_NAMES[training.zero]}); recompute "
             f"{training.recompute_label}; b={training.mbs} s={training.seq}"
             + (f"; imbalance F={float(training.imbalance):g}" if training.imbalance != 1 else ""),
             _wrap("M (GiB) = " + ", ".join(f"{k} {fmt_gib(v)}" for k, v in values.items() if k != "total")
                   + f"; total {fmt_gib(values['total'])} ({fmt_int(values['total'])} B)", 4)]
    for r in results:
        info = nt.REGISTRY[r.name]
        lines += ["", f"d/d{r.name}  ({info.meaning}; {r.name} = {fmt_int(r.value)})"]
        if r.note:
            lines.append(_wrap(f"  note: {r.note}", 8))
        if r.derivatives:
            lines.append(f"  {'component':<12}{'dM/d' + r.name + ' (B per unit of ' + r.name + ')':>34}"
                         f"{'elasticity':>12}{'share':>9}")
            for k, d in r.derivatives.items():
                el = f"{d.elasticity:+.4f}" if d.elasticity is not None else "-"
                sh = f"{d.share:+.4f}" if d.share is not None else "-"
                lines.append(f"  {k:<12}{fmt_int(d.value):>34}{el:>12}{sh:>9}")
            forms = [(k, form(d.paper)) for k, d in r.derivatives.items() if d.value != 0]
            if forms:
                lines.append(f"  closed forms of dM/d{r.name} (the paper's form at the layout's parallel degrees, B):")
                lines += [_wrap(f"    {k}: {f}", 8) for k, f in forms]
            tot = r.derivatives["total"]
            if tot.value != 0:
                lines.append(_wrap(f"    total, symbolic in the parallel degrees: {form(tot.stage)}", 8))
        if r.rows:
            lines.append(f"  rows of the paper carrying dM/d{r.name} (largest first; B):")
            tot = r.derivatives["total"].value
            for row in r.rows:
                pct = f" ({float(row.value / tot) * 100:.1f}%)" if tot else ""
                lines.append(_wrap(f"    {row.term} [{row.row}] x {form(row.multiplicity)}: {form(row.paper)} = "
                                   f"{fmt_int(row.value)}{pct}", 8))
                lines.append(_wrap(f"      {row.label}", 8))
        for f in r.finite:
            dt = f.delta["total"]
            rel = f" ({f.relative * 100:+.2f}%)" if f.relative is not None else ""
            comps = ", ".join(f"{k} {'+' if v >= 0 else ''}{fmt_int(v)}" for k, v in f.delta.items()
                              if k != "total" and v != 0) or "no component changes"
            moved = f"; the stage holds {f.stage[1]} (was {f.stage[0]})" if f.stage[0] != f.stage[1] else ""
            lines.append(_wrap(f"  finite difference to the {f.direction} valid value, {r.name} {f.before} -> "
                               f"{f.after}: total {'+' if dt >= 0 else ''}{fmt_int(dt)} B{rel} [{comps}]{moved}", 6))
        if not r.finite and r.name in ("DP", "TP", "PP", "EP", "ETP", "CP", "SP", "b", "s"):
            lines.append(f"  no other valid value of {r.name} nearby")
    return "\n".join(lines)
