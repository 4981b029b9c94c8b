"""Search under a pipeline schedule: every device of every layout at its peak.

Under a schedule (derivations/assembly/schedules.py) device i of a pipeline holds the parameters of
its held stages (two under DualPipe) and n_fl micro-batches of each chunk it runs.  Every
per-device term is linear and homogeneous in the stage composition (L_d, L_m, e_E, e_H and the family's
counts; the tests check it), so a device is two compositions: the sum of its held stages' for the model
states, and the in-flight-weighted sum sum_c n_fl_c x composition_c for the activations (a
chunk may hold only a stage's layers or only its head: ``schedules.Chunk.composition``):
one vectorised evaluation covers every device, the same numbers as ``device.estimate``
(the tests check it).  With ``global_batch`` the micro-batch count of a configuration is
m = global_batch / (DP b); configurations where that is not a positive integer, or that a
schedule refuses (DualPipe: PP and m even, m >= 2 PP), are invalid and counted.
Evaluation runs in blocks of configurations, so memory stays bounded for any cluster.
"""
from __future__ import annotations

from collections import Counter
from fractions import Fraction
from functools import lru_cache
from typing import Dict, Mapping, Optional, Tuple

from symbolic.search import evaluate

from derivations import config as cfg
from derivations.analyses import kernels
from derivations.assembly import schedules

#: Configurations per evaluation block (each is up to PP device slots).
BLOCK = 4096
#: The layout's symbols, by name, and the columns holding them.
FLAT = {"DP": "dp", "TP": "tp", "PP": "pp", "EP": "ep", "ETP": "etp", "CP": "cp", "SP": "sp", "b": "mbs", "s": "seq"}


@lru_cache(maxsize=4096)
def slots(model: cfg.ModelSpec, pp: int, schedule: str, m: Optional[int], vpp: Optional[int]):
    """(state compositions, activation compositions, stage index) of the PP devices, as tuples:
    the held stages' summed composition, the in-flight-weighted one."""
    stages = cfg.stages(model, cfg.Layout(pp=pp))
    names = cfg.composition_names(model.family)  # L_d, L_m, e_E, e_H and the family's counts (DeepSeek's L_I)
    vec = lambda st: st.vector(names)
    state, act = [], []
    for i in range(pp):
        held = schedules.held_stages(schedule, pp, i)
        state.append(tuple(sum(vec(stages[j])[k] for j in held) for k in range(len(names))))
        chunks = schedules.chunks(schedule, pp, i, m, vpp)
        act.append(tuple(sum((c.inflight * vec(c.composition(stages[c.stage]))[k] for c in chunks), Fraction(0))
                         for k in range(len(names))))
    return tuple(state), tuple(act), tuple(range(pp))


def microbatches(dp, mbs, global_batch: Optional[int], fixed: Optional[int]):
    """(m per configuration as int64, valid mask): G / (DP b) when a global batch is given."""
    # lazy: numpy (only this path needs it)
    import numpy as np
    if global_batch is None:
        m = np.full(len(dp), -1 if fixed is None else fixed, dtype=np.int64)
        return m, np.ones(len(dp), dtype=bool)
    per = dp * mbs
    ok = (global_batch % per == 0)
    return np.where(ok, global_batch // np.maximum(per, 1), 0).astype(np.int64), ok


def _compile(model, training, exprs: Mapping[str, object], keys):
    """(numpy function, argument names) of caller-given expressions ``keys`` (lambdified with sympy;
    only for a search called with its own ``exprs``)."""
    # lazy: sympy (only a caller's own expressions need it; the command runs the generated kernels)
    import sympy as sp

    from symbolic.numeric import compile as compile_fn
    from derivations import notation as nt
    comp = cfg.composition_names(model.family)
    fixed = {k: v for k, v in cfg.substitution(model, None, training).items() if k.name not in FLAT and
             k.name not in comp}
    tup = sp.Tuple(*[nt.expand_derived(sp.sympify(getattr(exprs[k], "expr", exprs[k]))).xreplace(fixed) for k in keys])
    args = sorted(tup.free_symbols, key=lambda x: x.name)
    return compile_fn(tup, args), tuple(a.name for a in args)


def _rows(model, cols, comp):
    """{row symbol name: float64 array}: the layout, b and s per configuration (n, 1), the compositions (n, K)."""
    # lazy: numpy (only this path needs it)
    import numpy as np
    out = {name: cols[col].astype(np.float64)[:, None] for name, col in FLAT.items()}
    out.update({name: comp[:, :, i] for i, name in enumerate(cfg.composition_names(model.family))})
    return out


def _values(model, training, compiled, cols, comp):
    """[array (n, K) per key] of one group of keys at the compositions ``comp``: ``compiled`` is (keys, None)
    for the generated kernels or (keys, (function, argument names)) for caller-given expressions."""
    # lazy: numpy (only this path needs it)
    import numpy as np
    keys, fn = compiled
    rows = _rows(model, cols, comp)
    if fn is None:
        got = kernels.values(model, training, kernels.group_of(model, keys, training.attention), rows)
        out = [got[k] for k in keys]
    else:
        f, args = fn
        missing = [a for a in args if a not in rows]
        if missing:
            raise cfg.ConfigError("missing-values", f"search: no value for {missing[0]} (not a layout, training or "
                                                    f"stage symbol)")
        out = evaluate(f, [rows[a] for a in args])
    return [np.broadcast_to(np.asarray(o, dtype=np.float64), comp.shape[:2]) for o in out]


def evaluate_block(model, training, choices, compiled, cols, m, progress=None):
    """{column: array} of one block of configurations (rows = configurations x choices) at each
    configuration's most-loaded device under the schedule."""
    # lazy: numpy (only this path needs it)
    import numpy as np
    states, acts, steps = compiled
    n = len(cols["dp"])
    pps = cols["pp"]
    K = int(pps.max()) if n else 1
    names = cfg.composition_names(model.family)
    state = np.zeros((n, K, len(names)))
    act = np.zeros((n, K, len(names)))
    valid = np.zeros((n, K), dtype=bool)
    for key in set(zip(pps.tolist(), m.tolist())):
        pp, mm = key
        sel = np.flatnonzero((pps == pp) & (m == mm))
        st, ac, _ = slots(model, pp, training.schedule, None if mm < 0 else mm, training.vpp)
        state[sel, :pp] = np.array(st, dtype=np.float64)
        act[sel, :pp] = np.array([[float(x) for x in row] for row in ac])
        valid[sel, :pp] = True
    value = dict(zip(states[0], _values(model, training, states, cols, state)))
    value.update(dict(zip(acts[0], _values(model, training, acts, cols, act))))
    step = {a: p for a, p in kernels.step_keys(choices).items() if all(k in steps[0] for k in p)}
    if step:  # the step's peak: one micro-batch's rebuilt layer on a stage the device runs (step_terms.py)
        # its own stage, and under DualPipe the mirror stage it holds too (schedules.held_stages)
        held = len(schedules.held_stages(training.schedule, 1, 0))
        x = {}
        for h in range(held):
            comp = np.zeros((n, K, len(names)))
            for pp in set(pps.tolist()):
                sel = np.flatnonzero(pps == pp)
                every = cfg.stages(model, cfg.Layout(pp=pp))
                on = [every[schedules.held_stages(training.schedule, pp, i)[h]] for i in range(pp)]
                comp[sel, :pp] = np.array([s.vector(names) for s in on], dtype=np.float64)
            moments = dict(zip(steps[0], _values(model, training, steps, cols, comp)))
            for act, got in kernels.step_excess(step, moments, comp[:, :, 0], comp[:, :, 1]).items():
                x[act] = got if act not in x else np.maximum(x[act], got)
        for act, got in x.items():
            value[act] = value[act] + got
    zeros = sorted({z for z, _ in choices})
    policies = tuple(dict.fromkeys(r for _, r in choices))
    comps = list(next(iter(choices.values())))
    out = {c: [] for c in comps + ["total", "zero", "recompute", "stage", "g"]}
    for z in zeros:
        for ri, r in enumerate(policies):
            pick = choices.get((z, r))
            if pick is None:
                continue
            total = np.where(valid, sum(value[pick[c]] for c in comps), -np.inf)
            j = np.argmax(total, axis=1)[:, None]
            for c in comps:
                out[c].append(np.take_along_axis(value[pick[c]], j, axis=1)[:, 0])
            out["total"].append(np.take_along_axis(total, j, axis=1)[:, 0])
            out["zero"].append(np.full(n, z, dtype=np.int64))
            out["recompute"].append(np.full(n, ri, dtype=np.int64))
            out["stage"].append(j[:, 0].astype(np.int64))
            out["g"].append(np.arange(n))
    return {k: np.concatenate(v) if v else np.zeros(0) for k, v in out.items()}


def run(model, training, exprs, choices, cols, global_batch: Optional[int], progress=None) -> Tuple[Dict, Counter]:
    """({column: array} of every valid configuration x choice, rejections by rule)."""
    # lazy: numpy (only this path needs it)
    import numpy as np
    comps = list(next(iter(choices.values())))
    state_keys = sorted({ids[c] for ids in choices.values() for c in comps if c != "activations"})
    act_keys = sorted({ids["activations"] for ids in choices.values()})
    # the step's moments of the recomputing policies (the generated kernels', or the caller's when it gives them)
    step_keys = sorted({k for p in kernels.step_keys(choices).values() for k in p
                        if exprs is None or k in exprs})
    compiled = tuple((keys, None if exprs is None or not keys else _compile(model, training, exprs, keys))
                     for keys in (state_keys, act_keys, step_keys))
    m, ok = microbatches(cols["dp"], cols["mbs"], global_batch, training.microbatches)
    rejected = Counter()
    if global_batch is not None:
        rejected["global-batch"] = int((~ok).sum())
    if training.schedule == "dualpipe":
        bad = ok & ((cols["pp"] % 2 != 0) | ((m >= 0) & ((m % 2 != 0) | (m < 2 * cols["pp"]))))
        rejected["dualpipe"] = int(bad.sum())
        ok = ok & ~bad
    keep = np.flatnonzero(ok)
    cols = {k: v[keep] for k, v in cols.items()}
    m = m[keep]
    parts = []
    total = len(keep)
    for start in range(0, total, BLOCK):
        sl = slice(start, start + BLOCK)
        part = evaluate_block(model, training, choices, compiled, {k: v[sl] for k, v in cols.items()}, m[sl])
        part["g"] = part["g"] + start
        parts.append(part)
        if progress:
            progress(min(start + BLOCK, total), total)
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else \
        {k: np.zeros(0) for k in comps + ["total", "zero", "recompute", "stage", "g"]}
    g = out.pop("g").astype(np.int64)
    res = {k: v[g] for k, v in cols.items()}
    res["microbatches"] = m[g]
    res.update(out)
    return res, +rejected
