"""Budget solving for one configuration (``memsym fit``): the largest b or s whose Sec. 6 peak fits a budget, in
closed form (:func:`derivations.analyses.sensitivity.solve_budget`), checked exactly on the assembled device; and
the least ZeRO stage and recomputation policy that fit.  The integer answer alone needs no sympy
(:mod:`derivations.analyses.roots`)."""
from __future__ import annotations

from dataclasses import replace

from symbolic.search import divisors

from derivations import config as cfg
from derivations.assembly import device
from derivations.analyses import kernels, roots
from derivations.analyses.enumeration import distinct_stages
from derivations.assembly.overheads import named_values, overhead_values, peak
from derivations.config.training import with_global_batch  # noqa: F401  (fit applies it; re-exported)


def _ends(overheads):
    """(f_frag, M_buf) of overheads keyed by symbol or by name."""
    by_name = {getattr(k, "name", k): v for k, v in overheads.items()}
    return by_name["f_frag"], by_name["M_buf"]


def fits(model, layout, training, stages, hbm, overheads):
    """(fits every stage, [(stage, total, peak)]) exactly, for a configuration."""
    rows = []
    f, buf = _ends(overheads)
    for st in stages:
        total = device.components(model, layout, training, st.index)["step_total"]  # the step's peak
        rows.append((st, total, peak(total, f, buf)))
    return all(p <= hbm for _, _, p in rows), rows


def device_expressions(model, layout, training, index: int):
    """(model states, activations) of device ``index`` as expressions (b and s symbolic), as ``device.estimate``
    assembles them."""
    # lazy: sympy (the closed forms only)
    from derivations.assembly import totals
    comps = totals.device_components(model, layout, training, index)
    return (sum((getattr(comps[k], "expr", comps[k]) for k in ("weights", "gradients", "optimizer")), 0),
            getattr(comps["activations"], "expr", comps["activations"]))


def _global_batch_mbs(model, layout, training, hbm, over, stages, global_batch):
    """(largest b that fits, the next valid b) keeping the global batch: b divides G / DP."""
    if global_batch % layout.dp:
        raise cfg.ConfigError("global-batch", f"--global-batch {global_batch} is not a multiple of DP={layout.dp}")
    valid = divisors(global_batch // layout.dp)
    at = lambda b: replace(training, mbs=b, microbatches=global_batch // (layout.dp * b))
    best = 0
    for b in valid:
        if fits(model, layout, at(b), stages, hbm, over)[0]:
            best = b
        else:
            break
    above = [b for b in valid if b > best]
    return best, (above[0] if above else None), at


def solve(model, layout, training, hbm, var_name="mbs", stage=None, overheads_end="high", global_batch=None,
          answer_only=False):
    """Everything the command reports (exact Fractions), the most constrained device binding.  With
    ``global_batch`` m = global_batch / (DP b) and the answer is the largest b dividing G / DP that fits.
    ``answer_only``: just {"answer": ...} (fit's other ends of the ranges)."""
    training = with_global_batch(layout, training, global_batch)
    device.components(model, layout, training, stage if stage is not None else 0)  # validates the configuration
    if stage is not None:
        stages = [cfg.stage(model, layout, stage)]
    else:
        stages = cfg.stages(model, layout) if training.schedule else distinct_stages(model, layout)
    field = "mbs" if var_name == "mbs" else "seq"
    multiple = 1 if var_name == "mbs" else layout.SP * layout.cp  # SP and CP split the sequence
    if answer_only:
        over = named_values(overheads_end)
        answer = roots.largest(model, layout, training, stages, hbm, over, field, multiple, _solved_stage)
        if global_batch is not None and field == "mbs":  # m follows b: among the b that divide G / DP
            answer = _global_batch_mbs(model, layout, training, hbm, over, stages, global_batch)[0]
        return {"answer": answer}
    # lazy: sympy (the closed forms)
    from derivations import notation as nt
    over = overhead_values(overheads_end)
    var = nt.b if var_name == "mbs" else nt.s
    per_stage = [(st, _solved_stage(model, layout, training, st, var, over, hbm, multiple)) for st in stages]
    rank = lambda sr: (sr[1].integer, sr[1].root is not None, sr[1].root if sr[1].root is not None else 0,
                       sr[0].index)
    binding, root = min(per_stage, key=rank)
    answer = root.integer
    with_var = lambda v: replace(training, **{field: v})
    nxt = answer + multiple
    if global_batch is not None and field == "mbs":  # m follows b: the answer among the b that divide G / DP
        answer, nxt, with_var = _global_batch_mbs(model, layout, training, hbm, over, stages, global_batch)
    # the backward moment in the binding stage's closed form (the largest at the first value that does not fit)
    moment = device.estimate(model, layout, with_var(answer + multiple), binding.index).term_ids["step"]
    # exact checks: the answer fits on every stage, the next valid value does not (on the binding stage)
    check = {}
    if answer >= 1:
        ok, rows = fits(model, layout, with_var(answer), stages, hbm, over)
        check["value"] = {"value": answer, "fits": ok, "peak": max(p for _, _, p in rows)}
    if nxt is not None:
        ok_next, rows_next = fits(model, layout, with_var(nxt), [binding] if global_batch is None else stages, hbm,
                                  over)
        check["next"] = {"value": nxt, "fits": ok_next, "peak": max(p for _, _, p in rows_next)}
    # least ZeRO stage (given policy) and least policy (given ZeRO stage) at the training's b and s
    def row(name, t):  # (name, fits, the stage row of the largest peak)
        ok, rows = fits(model, layout, t, stages, hbm, over)
        return name, ok, max(rows, key=lambda r: r[2])
    zero_rows = [row(z, replace(training, zero=z)) for z in sorted(cfg.ZERO_NAMES)]
    # from the least recomputed to the most: none < selective (core attention only) < full
    rank = {"none": 0, "selective": 1, "full": 2}
    policy_rows = [row(r, replace(training, recompute=r, recompute_ops=()))
                   for r in sorted(kernels.policies(), key=lambda p: rank.get(p, 1))]
    least = {"zero": next((z for z, ok, _ in zero_rows if ok), None),
             "recompute": next((r for r, ok, _ in policy_rows if ok), None)}
    return {"var": var, "field": field, "answer": answer, "binding": binding, "root": root, "stages": per_stage,
            "moment": moment,
            "check": check, "overheads": over, "overheads_end": overheads_end, "least": least,
            "zero_rows": zero_rows, "policy_rows": policy_rows, "multiple": multiple}


def _solved_stage(model, layout, training, st, var, over, hbm, multiple):
    """:func:`derivations.analyses.sensitivity.solve_budget` at stage ``st`` (sympy: the closed forms)."""
    # lazy: sympy (the closed forms only)
    from derivations import notation as nt
    from derivations.analyses import sensitivity as S
    from derivations.assembly import totals
    if isinstance(var, str):
        var = nt.b if var == "mbs" else nt.s
    over = {getattr(nt, k) if isinstance(k, str) else k: v for k, v in over.items()}
    subs = cfg.substitution(model, layout, training, st)
    states, act = device_expressions(model, layout, training, st.index)
    field = "mbs" if var == nt.b else "seq"
    f, buf = over[nt.f_frag], over[nt.M_buf]
    answer = roots.monotone(model, layout, training, st.index, field, multiple, f, buf, hbm)
    # the step's peak is the largest of its moments: the one that binds is the largest at the first value
    # that does not fit (every moment fits at the answer), a polynomial there
    nxt = device.estimate(model, layout, replace(training, **{field: answer + multiple}), st.index)
    if nxt.bytes["step"]:
        act = act + totals.step_expression(model, training, st, nxt.term_ids["step"],
                                           answer + multiple if field == "mbs" else None)
    return S.solve_budget(states, act, var, subs, over, hbm, multiple, at=answer + multiple)
