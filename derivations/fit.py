"""Budget solving for one configuration: the largest micro-batch b or sequence s whose Sec. 6
peak fits a memory budget, in closed form (:func:`derivations.sensitivity.solve_budget`),
checked exactly on the assembled device (:func:`derivations.device.components`); and the
least ZeRO stage and recomputation policy that fit."""
from __future__ import annotations

from dataclasses import replace

from . import config as cfg
from . import device, totals
from . import notation as nt
from . import search as SE
from . import sensitivity as S
from .overheads import overhead_values, peak


def fits(model, layout, training, stages, hbm, overheads):
    """(fits every stage, [(stage, total, peak)]) exactly, for a configuration."""
    rows = []
    for st in stages:
        total = device.components(model, layout, training, st.index)["total"]
        rows.append((st, total, peak(total, overheads[nt.f_frag], overheads[nt.M_buf])))
    return all(p <= hbm for _, _, p in rows), rows


def solve(model, layout, training, hbm, var_name="mbs", stage=None, overheads_end="high"):
    """Everything the command reports, as a dict of Python objects (exact Fractions)."""
    device.components(model, layout, training, stage if stage is not None else 0)  # validates the configuration
    over = overhead_values(overheads_end)
    comps = totals.components(model, training)
    states = sum((comps[k].expr for k in ("weights", "gradients", "optimizer")), 0)
    stages = [cfg.stage(model, layout, stage)] if stage is not None else SE.distinct_stages(model, layout)
    var = nt.b if var_name == "mbs" else nt.s
    field = "mbs" if var_name == "mbs" else "seq"
    multiple = 1 if var_name == "mbs" else layout.SP * layout.cp  # SP and CP split the sequence
    per_stage = []
    for st in stages:
        subs = cfg.substitution(model, layout, training, st)
        per_stage.append((st, S.solve_budget(states, comps["activations"], var, subs, over, hbm, multiple)))
    rank = lambda sr: (sr[1].integer, sr[1].root is not None, sr[1].root if sr[1].root is not None else 0,
                       sr[0].index)
    binding, root = min(per_stage, key=rank)
    answer = root.integer
    with_var = lambda v: replace(training, **{field: v})
    # exact checks: the answer fits on every stage, the next valid value does not (on the binding stage)
    check = {}
    if answer >= 1:
        ok, rows = fits(model, layout, with_var(answer), stages, hbm, over)
        check["value"] = {"value": answer, "fits": ok, "peak": max(p for _, _, p in rows)}
    nxt = answer + multiple
    ok_next, rows_next = fits(model, layout, with_var(nxt), [binding], hbm, over)
    check["next"] = {"value": nxt, "fits": ok_next, "peak": rows_next[0][2]}
    # least ZeRO stage (given policy) and least policy (given ZeRO stage) at the training's b and s
    least = {}
    zero_rows = []
    for z in sorted(cfg.ZERO_NAMES):
        ok, rows = fits(model, layout, replace(training, zero=z), stages, hbm, over)
        zero_rows.append((z, ok, max(rows, key=lambda r: r[2])))
    policy_rows = []
    # from the least recomputed to the most: none < selective (core attention only) < full
    rank = {"none": 0, "selective": 1, "full": 2}
    for r in sorted(totals.policies(), key=lambda p: rank.get(p, 1)):
        ok, rows = fits(model, layout, replace(training, recompute=r, recompute_ops=()), stages, hbm, over)
        policy_rows.append((r, ok, max(rows, key=lambda x: x[2])))
    least["zero"] = next((z for z, ok, _ in zero_rows if ok), None)
    least["recompute"] = next((r for r, ok, _ in policy_rows if ok), None)
    return {"var": var, "field": field, "answer": answer, "binding": binding, "root": root, "stages": per_stage,
            "check": check, "overheads": over, "overheads_end": overheads_end, "least": least,
            "zero_rows": zero_rows, "policy_rows": policy_rows, "multiple": multiple}


