"""The search's step time (derivations/steptime) at each fitting configuration's slowest pipeline stage, as columns:
``step_time`` (one optimizer step, or one micro-batch's period without a schedule or global batch),
``time_<part>`` per part of :data:`derivations.steptime.evaluate.PARTS` and ``tokens_per_gpu_s`` (DP m b s over
the step's time and the GPUs); NaN where a configuration does not fit.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Dict, Optional, Tuple

import numpy as np

from derivations import config as cfg
from derivations.analyses.enumeration import distinct_stages
from derivations.analyses.evaluation import SearchResult
from derivations.steptime import evaluate as timing

_LAYOUT = ("dp", "tp", "pp", "ep", "etp", "cp", "mbs", "seq", "zero")
#: rows timed at once: each row is K stage compositions, and the printed function keeps about 40 temporaries
BLOCK = 1 << 13


@lru_cache(maxsize=64)
def _stage_table(model, pps: Tuple[int, ...]):
    """((max PP + 1, K, C + 1) int64 table: per PP its distinct stage compositions (``composition_names``) and
    stage index (last), padded to K by repeating the last; K; each PP's count), for the PP degrees ``pps``."""
    names = cfg.composition_names(model.family)
    stage_of = {pp: distinct_stages(model, cfg.Layout(pp=pp)) for pp in pps}
    K = max(len(v) for v in stage_of.values())
    table = np.zeros((max(stage_of) + 1, K, len(names) + 1), dtype=np.int64)
    count = np.zeros(len(table), dtype=np.int64)
    for pp, sts in stage_of.items():
        rows = [s.vector(names) + (s.index,) for s in sts]
        table[pp] = rows + [rows[-1]] * (K - len(rows))
        count[pp] = len(sts)
    return table, K, count


def add_time(result: SearchResult, model: cfg.ModelSpec, training: Optional[cfg.Training] = None, *, gpu=None,
             overlap: str = "megatron", efficiency=1, gpus_per_node: Optional[int] = None, vpp: Optional[int] = None,
             attention: Optional[str] = None, dispatcher: Optional[str] = None, lazy: bool = False) -> None:
    """Add the time columns to ``result`` (in place); ``gpu``: the preset whose rates are used; ``training``: the
    search's own (``result.training``) unless given.  ``lazy`` (no schedule): each layout's tokens per second per
    GPU bounded from above (``result.time['bound']``), its rows timed when ranking.ranked asks
    (``result.time['time_layouts'](layouts)``)."""
    c = result.columns
    training = training or result.training or cfg.Training()
    attention = attention or training.attention
    g = timing.check(model, gpu, overlap, efficiency, training)
    names = cfg.composition_names(model.family)
    vpp = vpp or training.vpp or 2
    options = dict(gpu=g, schedule=result.schedule, vpp=vpp, overlap=overlap, efficiency=efficiency,
                   gpus_per_node=gpus_per_node, attention=attention, dispatcher=dispatcher)

    def at(idx) -> Dict[str, np.ndarray]:
        idx = np.asarray(idx, dtype=np.int64)
        rows = {k: c.take(k, idx).astype(np.int64) for k in _LAYOUT}
        # the policies' names as a string array (not objects): the step's inputs compare them per row in C
        rows["recompute"] = np.asarray([p.partition(":")[0] for p in result.policies])[
            c.take("recompute", idx).astype(np.int64)] \
            if len(idx) else np.zeros(0, dtype=object)
        rows["microbatches"] = c.take("microbatches", idx).astype(np.int64) if "microbatches" in c \
            else np.ones(len(idx), dtype=np.int64)
        pps = tuple(sorted(set(rows["pp"].tolist()))) or (1,)
        table, K, count = _stage_table(model, pps)
        # each row at its pipeline's distinct compositions only (the table's padding repeats the last): a (row,
        # stage) pair per composition, rows in order
        per = count[rows["pp"]]
        row = np.repeat(np.arange(len(idx)), per)
        start = np.cumsum(per) - per
        stage = np.arange(len(row)) - start[row]
        comp = table[rows["pp"][row], stage]  # (pairs, C + 1)
        flat = {k: v[row] for k, v in rows.items()}
        for j, name in enumerate(names):
            flat[name] = comp[:, j]
        out = timing.parts(model, training, flat, **options)
        step = np.full((len(idx), K), -np.inf)
        step[row, stage] = out["step"]
        slow = start + np.argmax(step, axis=1)  # the pipeline runs at its slowest stage's pace (the first, on a tie)
        pick = {k: v[slow] for k, v in out.items()}
        gpus = rows["dp"] * rows["tp"] * rows["pp"] * rows["cp"]
        tokens = rows["dp"] * rows["microbatches"] * rows["mbs"] * rows["seq"]
        pick["tokens_per_gpu_s"] = tokens / (np.where(pick["step"] > 0, pick["step"], np.inf) * gpus)
        return pick

    def distinct(idx):
        """(rows of ``idx`` to time, for each row of ``idx`` the one timed for it): without a schedule the step
        reads the ZeRO stage only as ZeRO-3 or not (derivations/steptime/evaluate.py ``parts``)."""
        if result.schedule is not None or not len(idx):
            return idx, np.arange(len(idx))
        n_g = len(result.enumeration) * result.layout_groups  # rows: choices x (layout, s, b) groups
        _, first, inv = np.unique(idx % n_g + n_g * (2 * c.take("recompute", idx) + (c.take("zero", idx) == 3)),
                                  return_index=True, return_inverse=True)
        return idx[first], inv

    keys = ("step_time", "tokens_per_gpu_s") + tuple("time_" + p for p in timing.PARTS if p != "step")
    # the rows timed: each one's slot in the values (0: not timed, NaN), the values of every part by slot
    store = {"slot": np.zeros(c.n, dtype=np.int64), **{key: np.full(1, np.nan) for key in keys}}

    def column(key):
        return lambda idx: store[key][store["slot"][idx]]
    for key in keys:
        c[key] = column(key)

    def time_rows(fit) -> None:
        """Every part at the fitting rows ``fit`` (not timed before), in blocks."""
        timed, back = distinct(fit)
        vals = {k: np.empty(len(timed)) for k in timing.PARTS + ("tokens_per_gpu_s",)}
        for i in range(0, len(timed), BLOCK):
            for k, v in at(timed[i:i + BLOCK]).items():
                vals[k][i:i + BLOCK] = v
        store["slot"][fit] = len(store["step_time"]) + np.arange(len(fit))
        for key in keys:
            got = vals["step" if key == "step_time" else key[5:] if key.startswith("time_") else key][back]
            store[key] = np.concatenate([store[key], got])
            c[key] = column(key)

    result.time = {"gpu": g, "overlap": overlap, "efficiency": efficiency,
                   "gpus_per_node": gpus_per_node or g.nvlink_domain,
                   "dispatcher": timing.dispatcher_of(result.schedule, dispatcher)}
    if not lazy or result.schedule is not None or "microbatches" in c or not result.layout_groups or \
            not c["fits"].any():
        time_rows(np.flatnonzero(c["fits"]))
        return
    # no schedule: a row's step is its slowest stage's micro-batch period plus ZeRO-3's traffic (steptime.evaluate
    # ``parts``), never less than the period at any one stage, which reads no ZeRO stage: each fitting (layout, s,
    # b, policy) at one stage (per PP, the longest at its first such row) bounds its layout's tokens/s/GPU from above
    fit = np.flatnonzero(c["fits"])
    n_l, n_g = len(result.enumeration), len(result.enumeration) * result.layout_groups
    # rows: choices x (layout, s, b) groups
    fits, policy = c["fits"].reshape(-1, n_g), c.take("recompute", np.arange(0, c.n, n_g))
    ps = sorted(set(policy.tolist()))
    first = np.concatenate([np.flatnonzero(policy == p)[0] * n_g + np.flatnonzero(fits[policy == p].any(axis=0))
                            for p in ps])  # one row of each fitting ((layout, s, b), policy)
    pps = sorted(set(c.take("pp", first).tolist()))  # the probes' PP degrees; the table has every layout's
    table, K, _ = _stage_table(model, tuple(sorted(set(result.enumeration.arrays["pp"].tolist()))))
    top = np.repeat(first[[int(np.argmax(c.take("pp", first) == p)) for p in pps]], K)  # each PP's first such row
    probe = {k: c.take(k, top).astype(np.int64) for k in _LAYOUT}
    probe.update(recompute=np.asarray(result.policies)[c.take("recompute", top)],
                 microbatches=np.ones(len(top), dtype=int),
                 **{n: table[pps, :, j].reshape(-1) for j, n in enumerate(names)})
    longest = np.zeros(len(table), dtype=np.int64)
    longest[pps] = np.argmax(timing.parts(model, training, probe, **options)["microbatch"].reshape(-1, K), axis=1)
    # the period of every (policy, layout, s, b) at once, broadcast: what reads the layout alone once per layout
    lay = {k: result.enumeration.arrays[k].reshape(1, -1, 1, 1) for k in ("dp", "tp", "pp", "ep", "etp", "cp")}
    n_b = len(set(c.take("mbs", np.arange(result.layout_groups)).tolist()))
    at_p = [int(np.flatnonzero(policy == p)[0]) for p in ps]  # each policy's first choice
    rep = dict(lay, mbs=c.take("mbs", np.arange(n_b)).reshape(1, 1, 1, -1), seq=c.take(
        "seq", np.arange(0, result.layout_groups, n_b)).reshape(1, 1, -1, 1),
        zero=c.take("zero", np.multiply(at_p, n_g)).reshape(-1, 1, 1, 1), microbatches=1,
        recompute=np.asarray(result.policies)[ps].reshape(-1, 1, 1, 1))
    comp = table[lay["pp"].reshape(-1), longest[lay["pp"].reshape(-1)]]
    rep.update({n: comp[:, j].reshape(1, -1, 1, 1) for j, n in enumerate(names)})
    period = timing.parts(model, training, rep, **options)["microbatch"]
    gpus = lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"]  # tokens per GPU and second as at(), of the period
    tokens = lay["dp"] * rep["mbs"] * rep["seq"]
    speed = np.where(period > 0, tokens / (np.where(period > 0, period, 1.0) * gpus), np.inf)
    fitting = np.stack([fits[policy == p].any(axis=0) for p in ps]).reshape(period.shape)
    bound = np.where(fitting, speed, -np.inf).max(axis=(0, 2, 3)) if n_l else np.zeros(0)  # -inf: none fits
    timed, fit_layout = np.zeros(len(bound), dtype=bool), c.take("layout", fit)

    def time_layouts(chosen) -> None:
        new = chosen[~timed[chosen]]  # (not np.setdiff1d: its np.unique imports numpy.ma, 0.04 s)
        timed[new] = True
        time_rows(fit[np.isin(fit_layout, new)])

    result.time.update(bound=bound, time_layouts=time_layouts)
