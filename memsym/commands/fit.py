"""memsym fit: the largest micro-batch or the longest sequence that fits a memory budget, in closed form."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from derivations import config as cfg
from derivations.analyses import fit
from derivations.analyses.allocator import largest
from derivations.assembly.device import components, estimate_all
from derivations.assembly.overheads import peak
from derivations.config import resolve as R
from symbolic.exact import fmt_gib, fmt_int
from symbolic.search import divisors

from . import common
from .sensitivity import _config_json, _exact, _num


def add_parser(sub):
    common.build(sub, "fit", run)


def run(args) -> int:
    solved = _solve_all(args)
    model, layout, training, hbm, res, ends = solved
    if args.plot:
        plot_memory_vs_seq(model, layout, training, hbm, res, args.plot)
    if args.json:
        common.print_json(data(args, solved))
        return 0
    print(render_text(model, layout, training, hbm, res, args.latex))
    print(f"{res['field']} at each end of the Sec. 6 ranges: " + ", ".join(
        f"{e} {ends[e]:,}" for e in ("high", "low", "none")) + " (high: 30% fragmentation + 2 GiB buffers; "
        "low: 5% + 0.8 GiB; none: no overheads)")
    if args.memory:
        m = res["memory"]
        print(f"--memory {m['judged']}: the largest {m['field']} whose {m['judged']} bytes fit on every stage: "
              f"{m['answer']:,}" + (f" ({common.memory_verdict(m['judged'], m['bytes'], hbm, m['capacity_of'])})"
                                    if m["bytes"] is not None else " (none fits)"))
        print(f"  (the least ZeRO stage and recomputation above judge the Sec. 6 peak at the {res['overheads_end']} "
              f"end, not the {m['judged']} bytes)")
    common.print_defaults(args)
    return 0


def _memory_answer(args, model, layout, training, hbm, res, upper) -> dict:
    """--memory KIND: the largest valid b (or s) at most the answer without overheads (allocated >= the terms)
    whose KIND bytes (derivations/analyses/allocator.py, through common.memory_of) fit on every stage solved."""
    field, gb = res["field"], args.global_batch
    if gb is not None and field == "mbs":
        candidates = [b for b in divisors(gb // layout.dp) if b <= upper]
    else:
        candidates = list(range(res["multiple"], upper + 1, res["multiple"]))

    def judged(x):
        every = estimate_all(model, layout, fit.with_global_batch(layout, replace(training, **{field: x}), gb))[0]
        return max(common.memory_of(args, e)[args.memory] for e in every
                   if args.stage is None or e.stage.index == args.stage)
    answer, at = largest(candidates, judged, hbm)
    gpu = common.budget_from_args(args)[1]
    return {"judged": args.memory, "field": field, "answer": answer, "bytes": at,
            "capacity_of": gpu.name if gpu else "--hbm"}


def _solve_all(args):
    """(model, layout, training, hbm, result, {overheads end: answer}) of a fit command line: every end of the Sec. 6
    ranges is solved, so a user sees how much the (unspecified) overheads decide the answer."""
    model, layout = common.model_from_args(args), R.layout_of(vars(args))
    # without --global-batch: fit applies it per b
    training, _ = R.training_with_capacity(vars(args), common.explicit(args))
    hbm, _ = common.budget_from_args(args, required=True)
    gb = args.global_batch
    res = fit.solve(model, layout, training, hbm, args.solve, args.stage, args.overheads, global_batch=gb)
    res["pipeline"] = _pipeline(training, gb)
    ends = {args.overheads: res["answer"]}
    for end in ("high", "low", "none"):
        if end not in ends:
            ends[end] = fit.solve(model, layout, training, hbm, args.solve, args.stage, end, global_batch=gb,
                                  answer_only=True)["answer"]
    if getattr(args, "memory", None):
        res["memory"] = _memory_answer(args, model, layout, training, hbm, res, ends["none"])
    return model, layout, training, hbm, res, ends


def data(args, solved=None) -> dict:
    """What ``fit --json`` prints (of ``solved``, what :func:`_solve_all` returned, if given)."""
    model, layout, training, hbm, res, ends = solved or _solve_all(args)
    out = to_json(model, layout, training, hbm, res, args.latex)
    out["by_overheads"] = {e: ends[e] for e in ("high", "low", "none")}
    if "memory" in res:
        out["memory"] = res["memory"]
    return {**out, **common.defaults_used(args)}


def plot_memory_vs_seq(model, layout, training, hbm, res, path):
    """Peak at the binding stage vs s (powers of two around the answer) for every recomputation policy."""
    from derivations import notation as nt
    from derivations.assembly import totals
    from ..plots import memory_vs_seq
    over = res["overheads"]
    top = max(2 * training.seq, 2 * res["answer"] if res["field"] == "seq" else 0, 8192)
    seqs = [x for x in (256 << k for k in range((top // 256).bit_length())) if x % (layout.SP * layout.cp) == 0]
    st = res["binding"]
    series = {r: (seqs, [peak(components(model, layout, replace(training, seq=x, recompute=r, recompute_ops=()),
                                         st.index)["total"], over[nt.f_frag], over[nt.M_buf]) for x in seqs])
              for r in totals.policies()}
    marks = {training.recompute: res["answer"]} if res["field"] == "seq" and res["answer"] else None
    memory_vs_seq(series, hbm, path, marks=marks,
                  title=f"{model.name} DP{layout.dp} TP{layout.tp} PP{layout.pp} EP{layout.ep}, stage {st.index}, "
                        f"ZeRO {training.zero}, b={training.mbs}: Sec. 6 peak ({res['overheads_end']} end)")


def to_json(model, layout, training, hbm, res, with_latex=False) -> dict:
    from derivations import notation as nt
    from derivations.analyses import sensitivity as S
    root, st, over, least, real = res["root"], res["binding"], res["overheads"], res["least"], res["root"].root
    out = _config_json(model, layout, training, st)
    out.pop("stage")
    forms = lambda form: {"structural": form(root.structural), "at_layout": form(root.at_layout)}

    def peaks(rows):
        return {str(k): {"fits": ok, "peak": _num(r[2]), "stage": r[0].index} for k, ok, r in rows}
    out.update({
        "hbm": hbm, "overheads": {"end": res["overheads_end"], "f_frag": float(Fraction(over[nt.f_frag])),
                                  "M_buf": _num(over[nt.M_buf]), "peak": "(1 + f_frag) * (weights + gradients + "
                                  "optimizer + activations + step) + M_buf"},
        "pipeline": res["pipeline"],
        **({"routing": {"judged_at": Fraction(training.imbalance), "balanced": 1}} if training.imbalance != 1 else {}),
        "step_moment": res.get("moment") or None,  # the backward moment the closed form adds (step_terms.py), or null
        "solve": res["field"], "symbol": res["var"].name, res["field"]: res["answer"], "fits": res["answer"] >= 1,
        "closed_form": {**forms(S.text), **({"latex": forms(S.latex)} if with_latex else {})},
        "degree": root.degree, "root": float(real) if real is not None else None,
        "root_exact": S.text(real) if real is not None else None, "multiple_of": res["multiple"],
        "binding_stage": {"index": st.index, "layers": [st.layers.start, st.layers.stop - 1]},
        "coefficients": {k: {"closed_form": S.text(f), "value": _num(v), "value_exact": _exact(v)}
                         for k, (f, v) in root.coefficients.items()},
        "check": {k: {"value": c["value"], "fits": c["fits"], "peak": _num(c["peak"])}
                  for k, c in res["check"].items()},
        "stages": [{"index": s.index, "layers": [s.layers.start, s.layers.stop - 1],
                    "root": float(r.root) if r.root is not None else None, res["field"]: r.integer}
                   for s, r in res["stages"]],
        "least_zero": {"at": {"mbs": training.mbs, "seq": training.seq, "recompute": training.recompute_label},
                       "zero": least["zero"], "zero_name": cfg.ZERO_NAMES.get(least["zero"]),
                       "peaks": peaks(res["zero_rows"])},
        "least_recompute": {"at": {"mbs": training.mbs, "seq": training.seq, "zero": training.zero},
                            "recompute": least["recompute"], "peaks": peaks(res["policy_rows"])}})
    return out


def _pipeline(training, global_batch=None) -> dict:
    """The pipeline view fit solved under (for its header and --json): a schedule with m micro-batches per
    step (m = G / (DP b) under --global-batch, so it changes with b), or the paper's one micro-batch per stage."""
    if global_batch is not None:
        return {"schedule": training.schedule or "1f1b", "global_batch": global_batch,
                "microbatches": "G / (DP * mbs)", "vpp": training.vpp}
    if training.schedule:
        return {"schedule": training.schedule, "microbatches": training.microbatches, "vpp": training.vpp}
    return {"schedule": None, "microbatches": None, "vpp": None}


def _pipeline_text(p: dict) -> str:
    if p["schedule"] is None:
        return "no --schedule: one micro-batch's activations per stage (the paper's view)"
    m = f"m = G/(DP b), G={p['global_batch']}" if "global_batch" in p else \
        f"m={p['microbatches'] if p['microbatches'] is not None else 'enough'}"
    return f"schedule {p['schedule']} ({m}" + (f", V={p['vpp']}" if p["vpp"] else "") + \
        "): activations held at the peak = in-flight micro-batches x one micro-batch"


def render_text(model, layout, training, hbm, res, with_latex=False) -> str:
    from derivations import notation as nt
    from derivations.analyses import sensitivity as S
    form = S.latex if with_latex else S.text
    root, st, var = res["root"], res["binding"], res["var"]
    over = res["overheads"]
    what = "micro-batch size b" if res["field"] == "mbs" else "sequence length s"
    fixed = f"s={training.seq}" if res["field"] == "mbs" else f"b={training.mbs}"
    lines = [
        f"memsym fit: {model.name}, DP={layout.dp} TP={layout.tp} PP={layout.pp} EP={layout.ep} ETP={layout.etp} "
        f"SP={layout.SP} CP={layout.cp}; ZeRO {training.zero} ({cfg.ZERO_NAMES[training.zero]}); recompute "
        f"{training.recompute_label}; {fixed}; budget {fmt_gib(hbm)} GiB per device",
        f"pipeline: {_pipeline_text(res['pipeline'])}",
        *common.routing_judged(training.imbalance),
        f"Sec. 6 peak = (1 + f_frag)(S + A({var})) + M_buf at the {res['overheads_end']} end of the paper's ranges: "
        f"f_frag = {float(Fraction(over[nt.f_frag])):.2f}, M_buf = {fmt_gib(over[nt.M_buf])} GiB",
        f"S = weights + gradients + optimizer states; A({var}) = activations"
        + (f" at the step's peak (the end of the forward + the backward moment that binds, {res['moment']})"
           if res.get("moment") else "") + f", {'linear' if root.degree == 1 else 'quadratic'} in {var}",
        "",
        f"largest {what} that fits: {var}* = {form(root.structural)}",
        f"  binding stage {st.index} ({st.label}), the most constrained of {len(res['stages'])} distinct stage"
        f"{'s' * (len(res['stages']) != 1)}:",
    ]
    lines += [f"    {k:<4}= {form(f)} = {fmt_int(v)}" for k, (f, v) in root.coefficients.items()]
    lines.append(f"  at the layout: {var}* = {form(root.at_layout)}")
    if root.root is not None:
        lines.append(f"               = {form(root.root)} = {float(root.root):,.4f}")
    else:
        lines.append("               no real root: the model states alone exceed the budget")
    if res["multiple"] > 1:
        lines.append(f"  s must be a multiple of SP*CP = {res['multiple']}")
    ans = res["answer"]
    if ans >= 1:
        lines.append(f"  => {res['field']} = {fmt_int(ans)}")
    else:
        lines.append(f"  => nothing fits: no {what} >= 1 fits at this layout ({res['field']} = 0)")
    for key, where, verdicts in (("value", "every stage", ("DOES NOT FIT", "fits")),
                                 ("next", f"stage {st.index}", ("does not fit", "FITS"))):
        if key in res["check"]:
            c = res["check"][key]
            lines.append(f"  check (exact): {var}={fmt_int(c['value'])} peak {fmt_gib(c['peak'])} GiB "
                         f"{'<=' if c['fits'] else '>'} {fmt_gib(hbm)} GiB on {where}: {verdicts[bool(c['fits'])]}")
    if len(res["stages"]) > 1:
        lines.append("  per stage: " + ", ".join(
            f"stage {s.index} {var}* = " + (f"{float(r.root):,.2f}" if r.root is not None else "none")
            + f" -> {fmt_int(r.integer)}" for s, r in res["stages"]))
    lines.append("")
    lz, lr = res["least"]["zero"], res["least"]["recompute"]
    at = f"b={training.mbs}, s={training.seq}"
    lines.append(f"least ZeRO stage that fits at {at}, recompute {training.recompute_label}: "
                 + (f"{lz} ({cfg.ZERO_NAMES[lz]})" if lz is not None else "no ZeRO stage fits"))
    lines.append("  " + ", ".join(f"ZeRO {z}: {fmt_gib(r[2])} GiB{'' if ok else ' (no)'}"
                                  for z, ok, r in res["zero_rows"]))
    lines.append(f"least recomputation that fits at {at}, ZeRO {training.zero}: "
                 + (lr if lr is not None else "no recomputation policy fits"))
    lines.append("  " + ", ".join(f"{p}: {fmt_gib(r[2])} GiB{'' if ok else ' (no)'}"
                                  for p, ok, r in res["policy_rows"]))
    return "\n".join(lines)
