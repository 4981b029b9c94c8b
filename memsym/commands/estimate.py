"""memsym estimate: the per-device memory of one stage (Tables 6, 8, 10; Sec. 6)."""
from __future__ import annotations

import argparse
import sys
from fractions import Fraction

from derivations import config as cfg
from derivations.analyses.budget import verdict as budget_verdict
from derivations.assembly import overheads_device
from derivations.assembly.device import activation_ids, estimate, estimate_all
from derivations.config import gpus
from derivations.config.frameworks import framework
from derivations.config.recipes import RECIPES
from symbolic.exact import fmt_gib, fmt_int

from . import common, launch
from .estimate_text import device_lines, policy, render_all, render_text
from .timeopts import time_lines, time_options


def add_parser(sub):
    common.build(sub, "estimate", run)


def _time(args, model, layout, training, every: bool = False):
    """The step-time model's result for ``--time`` and its lines (None and none without it); ``every``: each stage's
    too."""
    if not getattr(args, "time", False):
        return None, []
    from derivations.steptime import evaluate as steptime
    t = steptime.layout_time(model, layout, training, every=every, **time_options(args))
    return t, time_lines(t, gpus.gpu(t["gpu"]), training.attention)


def run(args) -> int:
    if args.explain:
        rc = launch.explain(args)
        if args.memory == "device":
            print("\n".join(_memory_rules()))
        return rc
    out, lines = _estimate(args)
    if not args.tensors:  # (after the work: a refused configuration is one error line)
        _warn_framework(args, common.configuration(args))
    if args.json:
        common.print_json(out)
        return 0
    print("\n".join(lines))
    if not args.tensors:
        common.print_defaults(args)
    return 0


def data(args) -> dict:
    """What ``estimate --json`` prints (with --all-stages or --tensors, what those print)."""
    return _estimate(args)[0]


def _estimate(args):
    """(what ``--json`` prints, the text's lines) of an estimate command line."""
    c = common.configuration(args)
    model, layout, training, notes = c.model, c.layout, c.training, list(c.assumptions)
    if args.tensors:
        return _tensors(c)
    device = RECIPES[args.recipe].device if getattr(args, "recipe", None) else None  # (name, bytes) of its GPU
    if args.all_stages:
        if training.imbalance != 1:  # the interval (:func:`_routing`) is the single stage's
            notes.append(f"routing skew: every stage at its upper end, F = {float(training.imbalance):g} (balanced "
                         "routing beside it: estimate without --all-stages)")
        every, worst = estimate_all(model, layout, training, notes)
        timed, time_text = _time(args, model, layout, training, every=True)
        memory = common.memory_json(args, every[worst])  # --memory: judged at the most-loaded stage
        out = {"most_loaded": worst, "stages": [e.to_json() for e in every],
               "assumptions": every[worst].assumptions, **_device_json(every[worst], device),
               **({"time": timed} if timed else {}), **({"memory": memory} if memory else {}),
               **common.defaults_used(args)}
        text = [render_all(every, worst, device, timed)] + common.memory_lines(memory, worst)
        return out, text + time_text
    est = estimate(model, layout, training, c.stage, notes)
    hbm, gpu = (None, None) if args.memory else common.budget_from_args(args)  # --memory: its kind is judged
    verdict = None if hbm is None else budget_verdict(model, layout, training, hbm, gpu)  # (derivations.budget)
    timed, time_text = _time(args, model, layout, training)
    memory = common.memory_json(args, est)
    out = {**est.to_json(), **_device_json(est, device), **(verdict.to_json() if verdict else {}),
           **common.defaults_used(args), **({"time": timed} if timed else {}), **({"memory": memory} if memory else {})}
    lines = [render_text(est)] + device_lines(est, device) + _verdict_lines(verdict)
    lines += common.memory_lines(memory, est.stage.index)
    routing, routing_text = _routing(args, out, training.imbalance)
    out.update(routing)
    lines += routing_text
    return out, lines + time_text + (_time_notes(args, verdict, memory) if timed else [])


def _routing(args, out, imbalance) -> tuple:
    """({"routing": ...}, its text) under a stated routing skew (--imbalance F, --capacity-factor; issue 46 item 8):
    the worst EP rank's activations, total, reserved, buffers, device bytes and each verdict at balanced routing
    (F = 1; under --pad-to-capacity every expert holds its capacity: F exactly, one end) and at F, where every
    verdict above is judged.  No buffer scales with the received tokens: NCCL's are sized by channels and
    NCCL_BUFFSIZE, DeepEP's by its configs' chunked token counts (derivations/assembly/overheads_device.py)."""
    f = Fraction(imbalance)
    if f == 1:
        return {}, []
    cf = getattr(args, "capacity_factor", None)
    skew = f"--imbalance {float(f):g}" if not cf else f"--capacity-factor {float(cf):g}" + (
        " --pad-to-capacity (every expert padded to its capacity: F exact)" if args.pad_to_capacity else
        " (a bound: each expert keeps at most its capacity per source rank)")
    ends = [(f, out)] if cf and args.pad_to_capacity else [
        (Fraction(1), _estimate(argparse.Namespace(**{**vars(args), "imbalance": 1, "capacity_factor": None,
                                              "time": False}))[0]),
        (f, out)]
    mem = lambda o, k: o["memory"][k] if k != "buffers" else sum(b["bytes"] for b in o["memory"]["buffers"])  # noqa
    rows = {k: [o["bytes"][k] for _, o in ends] for k in ("activations", "total", "step_total")}
    rows.update({k: [mem(o, k) for _, o in ends] for k in ("reserved", "buffers", "device") if "memory" in out})
    fits = {**{f"sec6 {e}": [o["fits"][e] for _, o in ends] for e in ("none", "low", "high") if "fits" in out},
            **({"gpu": [o["device"]["fits"] for _, o in ends]} if "device" in out else {}),
            **({f"memory {args.memory}": [o["memory"]["fits"] for _, o in ends]} if "fits" in out.get("memory", {})
               else {})}
    fmt = lambda x: f"F = {float(x):g}"  # noqa: E731
    text = ["", f"routing skew {skew}: the worst EP rank's routed tokens "
                + (f"at {fmt(f)}" if len(ends) == 1 else f"from balanced routing (F = 1) to {fmt(f)}"),
            f"  {'GiB':<14}" + "".join(f"{fmt(x):>14}" for x, _ in ends)]
    text += [f"  {k:<14}" + "".join(f"{fmt_gib(x):>14}" for x in v) for k, v in rows.items()]
    text += [f"  {k:<14}" + "".join(f"{'fits' if x else 'DOES NOT FIT':>14}" for x in v) for k, v in fits.items()]
    if "buffers" in rows:
        text.append("  (no buffer scales with the received tokens: NCCL's by channels and NCCL_BUFFSIZE, DeepEP's "
                    "by its configs' chunked tokens)")
    text += [f"  {k}: {'fits' if v[0] else 'does not fit'} at balanced routing, {'fits' if v[-1] else 'does not fit'}"
             f" at {fmt(f)}" for k, v in fits.items() if v[0] != v[-1]]
    if fits and len(ends) == 2:
        text.append(f"  the verdicts above are judged at the upper end, {fmt(f)}")
    return {"routing": {"skew": skew, "F": [x for x, _ in ends], **rows, "fits": fits, "judged_at": f}}, text


def _memory_rules() -> list:
    """--explain --memory device: each buffer term with its library's size rule."""
    lines = ["", "device memory outside the caching allocator (--memory device), each term's size rule:"]
    for t in overheads_device.terms():
        lines.append(f"  {t.id}: {t.meaning} [{t.provenance}]")
        lines += [f"    {p.key}: {p.label} = {p.expr}" + (f" [{p.provenance}]" if p.provenance else "")
                  for p in t.parts]
    return lines


def _time_notes(args, verdict, memory) -> list:
    """What the time assumed untyped (a preset's attention, issue 45) and a layout that does not fit."""
    notes = []
    preset = getattr(args, "conventions", None)
    if preset and "attention" not in common.explicit(args) and "attention" in cfg.CONVENTION_PRESETS[preset]:
        notes.append(f"  attention {args.attention}: set by --conventions {preset} (type --attention to change it)")
    from derivations.steptime import evaluate as E
    recipe = getattr(args, "linear_recipe", None)
    if not getattr(args, "gpu", None) and E.RECIPE_RATES.get(recipe) not in (None, "bf16", "fp8"):
        rate = E.RECIPE_RATES[recipe].upper()
        notes.append(f"  timed on the {E.RECIPE_DEFAULT_GPU.upper()}: no --gpu, and the default "
                     f"{E.DEFAULT_GPU.upper()} has no {rate} rate for --linear-recipe {recipe}")
    if verdict is not None and not all(verdict.fits.values()):
        why = f"the budget above ({', '.join(e for e in ('none', 'low', 'high') if not verdict.fits[e])})"
    elif memory is not None and not memory.get("fits", True):
        why = f"(--memory {memory['judged']} above)"
    else:
        return notes
    return notes + [f"  this layout does not fit {why}: the time is of a job that would not run"]


def _warn_framework(args, c) -> None:
    """One warning line when the framework does not run this ZeRO stage, PP or schedule (config/frameworks.py)."""
    if getattr(args, "framework", None) is None and (args.from_megatron or args.from_torchtitan):
        return  # a launch file is what its framework ran (Megatron-FSDP's ZeRO 2 is Megatron's conventions too)
    fw = framework(getattr(args, "framework", None), getattr(args, "conventions", None))
    why = fw and fw.refusal(c.training.zero, c.layout.pp, c.training.schedule)
    if why:
        print(f"memsym: warning: {why}", file=sys.stderr)


def _verdict_lines(v) -> list:
    if v is None:
        return []
    what = v.gpu.name + " (its total less the CUDA context)" if v.gpu else "--hbm"
    f = v.fits
    lines = ["", f"budget: {fmt_int(v.hbm)} bytes ({fmt_gib(v.hbm)} GiB, {what}); judged at the most-loaded stage, "
                 f"stage {v.stage}"]
    for e in ("none", "low", "high"):
        head = v.hbm - v.peaks[e]
        lines.append(f"  {e:<5} peak {fmt_gib(v.peaks[e]):>9} GiB  headroom {fmt_gib(head):>9} GiB  "
                     f"{'fits' if f[e] else 'DOES NOT FIT'}")
    if not f["high"]:
        if v.change:
            lines.append(f"  cheapest single change that fits (high end): {v.change['option']} "
                         f"(peak {fmt_gib(v.change['peak_high'])} GiB)")
        else:
            lines.append("  no single change (recomputation, ZeRO, micro-batch, one layout step) fits at the high end")
    return lines


def _tensors(c):
    """(what ``estimate --tensors --json`` prints, its text's lines): one MoE layer's saved tensors."""
    import sympy as sp
    from derivations.assembly.conventions import SAVINGS, indicators, tensor_rows
    from derivations.notation import REGISTRY
    from symbolic.render import expr_latex
    model, layout, training = c.model, c.layout, c.training
    est = estimate(model, layout, training, c.stage)
    rows, saving = tensor_rows(model, layout, training, est.stage.index)
    total = sum(r.bytes for r in rows)
    assert total == est.bytes["activations_per_layer"], "the tensors do not add up to the layer's term"
    layer_id = activation_ids(model, training)["layer"]
    role = {k: REGISTRY[k.name].role for k in est.subs if k.name in REGISTRY}
    # bytes, unit parallel degrees and the model's indicators substituted, as the paper prints a tensor (4bsh/2)
    subs = {**{k: v for k, v in est.subs.items() if role.get(k) == "bytes" or (role.get(k) == "parallel" and v == 1)},
            **indicators(est.subs)}
    formulas = [sp.sstr(r.part.display(subs), order="none") for r in rows]
    out = {
        "model": model.name, "term": layer_id, "total": total, "conventions": est.to_json()["conventions"],
        "tensors": [{"sublayer": r.sublayer, "key": r.part.key, "name": r.part.label, "formula": f,
                     "latex": expr_latex(r.part.display(subs), ordered=False), "bytes": r.bytes,
                     "kept_for": r.kept_for, "tags": list(r.part.tags)} for r, f in zip(rows, formulas)],
        "savings": [{"option": name, "what": what, "bytes": saving[name]} for name, what, _ in SAVINGS]}
    return out, [render_tensors(est, rows, formulas, total, saving, layer_id)]


def render_tensors(est, rows, formulas, total, saving, layer_id) -> str:
    from derivations.assembly.conventions import SAVINGS
    lay, tr = est.layout, est.training
    wf = max([len(f) for f in formulas] + [30])
    lines = [f"memsym estimate --tensors: {est.model.name}, one MoE transformer layer (MLA + MoE), one micro-batch; "
             f"layout TP={lay.tp} SP={lay.SP} EP={lay.ep} ETP={lay.etp} CP={lay.cp}; {policy(tr)}; "
             f"b={tr.mbs} s={tr.seq}",
             f"conventions: {est.to_json()['conventions']['preset'] or 'custom'} (every switch: memsym estimate "
             f"--help)", "", f"  sub  {'bytes':>14}  {'formula at the layout':<{wf}}  tensor",
             f"  {'':<5}{'':>14}  {'':<{wf}}  kept for (the operation whose backward needs it)"]
    for r, f in zip(rows, formulas):
        lines.append(f"  {r.sublayer:<5}{fmt_int(r.bytes):>14}  {f:<{wf}}  {r.part.label}")
        lines.append(f"  {'':<5}{'':>14}  {'':<{wf}}    {r.kept_for}")
    lines.append(f"  {'total':<5}{fmt_int(total):>14}  {fmt_gib(total) + ' GiB':<{wf}}  {layer_id}")
    lines += ["", "what each option would save per layer (the recomputations: --recompute custom:OP):"]
    for name, what, _ in SAVINGS:
        share = f"{float(saving[name] / total):.1%}" if total else "-"
        lines.append(f"  {name:<20}{fmt_int(saving[name]):>16}  {share:>6}  {what}")
    changed = [a[len("convention "):] for a in est.assumptions if a.startswith("convention ")]
    if changed:
        lines += ["", "conventions not the paper's:"] + [f"  - {a}" for a in changed]
    return "\n".join(lines)


def _device_json(est, device) -> dict:
    if not device:
        return {}
    name, hbm = device
    return {"device": {"name": name, "hbm": hbm, "peak_low": est.overheads["low"]["peak"],
                       "peak_high": est.overheads["high"]["peak"], "fits": est.overheads["high"]["peak"] <= hbm,
                       "headroom_high": hbm - est.overheads["high"]["peak"]}}
