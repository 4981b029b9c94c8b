"""Closed-form sensitivity of the step time (``memsym sensitivity --time``; imports sympy): dT/dx and (x/T) dT/dx
of derivations/steptime/model.py :func:`step_time` with P_n, P_m as their terms (static.device.non_moe, .moe) and
the bubble's coefficients as functions of PP, at the configuration's slowest stage.  Held: the links a group uses
(crossing a node boundary is a step, not a slope) and the layers per stage; without a schedule, one micro-batch's
period.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence

import sympy as sp

from derivations import config as cfg
from derivations import notation as nt
from derivations import terms as T
from derivations.steptime import evaluate as E
from derivations.steptime import model as M
from derivations.steptime import placement


def _bubble(schedule, vpp: int) -> Dict:
    """The schedule's bubble coefficients as functions of PP (placement.schedule_coefficients, symbolic)."""
    PP, half = nt.PP, nt.PP / 2 - 1
    table = {None: (0, 0, 0), "1f1b": (PP - 1, 0, 0), "interleaved": ((PP - 1) / vpp, 0, 0),
             "zb": (PP - 1, 0, 2 * (PP - 1)), "dualpipe": (half, half, 3 * half)}
    return dict(zip((M.chi_mb, M.chi_B, M.chi_W), table[schedule]))


def _dispatch(model, layout, per_node: int, g, dispatcher: str):
    """tau_EP (placement.dispatch_time) as a function of EP and ETP, its case held: the n = EP ETP ranks inside
    one node (q = n) or across nodes (q = N per node)."""
    n = nt.EP * nt.ETP
    q = n if layout.ep * layout.etp <= per_node else per_node
    return placement.dispatch_time(n, q, model.N_r * nt.ETP, E._groups_kept(model), sp.Float(g.rate("nvlink")),
                                   sp.Float(g.rate("network")), dispatcher, sp.Min, sp.Max)


def time_sensitivity(model: cfg.ModelSpec, layout: cfg.Layout, training: cfg.Training, wrt: Sequence[str], *,
                     gpu=None, overlap: str = "megatron", efficiency=1, gpus_per_node: Optional[int] = None,
                     dispatcher=None) -> Dict:
    """{'step': seconds, 'stage': index, 'efficiency': layout_time's, 'wrt': {name: {'derivative': s per unit,
    'elasticity': float}}}; the efficiencies are held at the configuration's (published: the tables read at its
    b, s and degrees, their change with those not differentiated)."""
    t = E.layout_time(model, layout, training, gpu=gpu, overlap=overlap, efficiency=efficiency,
                      gpus_per_node=gpus_per_node, dispatcher=dispatcher, with_inputs=True)
    name = E.variant(training.schedule, overlap)
    parts = M.step_time(name.removesuffix("_dualpipe"), name.endswith("_dualpipe"))
    # what the evaluator reports as the step: without a schedule one micro-batch's period (ZeRO-3's traffic in it)
    step = parts["step"] if training.schedule else \
        parts["microbatch"] + sp.Piecewise((parts["DP"], sp.Eq(nt.z, 3)), (0, True))
    step = nt.expand_derived(step)
    reg = T.build(model)
    comp = {nt.SYMBOLS[k]: v for k, v in t["composition"].items()}
    dims = {nt.SYMBOLS[k]: v for k, v in cfg.named(model).items() if k in nt.SYMBOLS}
    device = {sp.Symbol(name, nonnegative=True): reg[tid].base_expr for name, tid in E.DEVICE_TERMS}
    expr = step.xreplace({k: e.xreplace(comp).xreplace(dims) for k, e in device.items()})
    expr = expr.xreplace(_bubble(training.schedule, training.vpp or 2))
    g = E.check(model, gpu, overlap, efficiency, training)
    tau = _dispatch(model, layout, gpus_per_node or g.nvlink_domain, g, E.dispatcher_of(training.schedule, dispatcher))
    expr = expr.xreplace({M.tau_EP: tau})
    point = {s: sp.Float(t["inputs"][s.name]) for s in expr.free_symbols if s.name in t["inputs"]}
    out = {}
    for w in wrt:
        x = nt.SYMBOLS.get(w)
        if x is None or x not in expr.free_symbols:
            out[w] = {"derivative": 0.0, "elasticity": 0.0}
            continue
        d = float(sp.diff(expr, x).xreplace(point).evalf().replace(sp.Heaviside, lambda a, *h: sp.Heaviside(a, 1)))
        val = float(point[x])
        T_ = t["parts"]["step"]
        out[w] = {"derivative": d, "elasticity": d * val / T_ if T_ else 0.0}
    return {"step": t["parts"]["step"], "stage": t["stage"], "efficiency": t["efficiency"], "wrt": out}
