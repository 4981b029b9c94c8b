"""The search's step time (derivations/steptime) at each configuration's slowest pipeline stage, as lazy columns:
``step_time`` (one optimizer step, or one micro-batch's period without a schedule or global batch),
``time_<part>`` per part of :data:`derivations.steptime.evaluate.PARTS` and ``tokens_per_gpu_s`` (DP m b s over
the step's time and the GPUs), computed only for the rows read, each once.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from derivations import config as cfg
from derivations.analyses.columns import take
from derivations.analyses.evaluation import SearchResult, _stage_table
from derivations.analyses.ranking import _mixed_radix, layout_index
from derivations.steptime import evaluate as timing

_LAYOUT = ("dp", "tp", "pp", "ep", "etp", "cp", "mbs", "seq", "zero")
#: rows timed at once: each row is K stage compositions, and the printed function keeps about 40 temporaries
BLOCK = 1 << 13


def add_time(result: SearchResult, model: cfg.ModelSpec, training: Optional[cfg.Training] = None, *, gpu=None,
             overlap: str = "megatron", efficiency=1, gpus_per_node: Optional[int] = None, vpp: Optional[int] = None,
             attention: Optional[str] = None, dispatcher: Optional[str] = None) -> None:
    """Add the time columns to ``result`` (in place); ``gpu``: the preset whose rates are used; ``training``: the
    search's own (``result.training``) unless given."""
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
        rows = {k: take(c, k, idx).astype(np.int64) for k in _LAYOUT}
        # the policies' names as a string array (not objects): the step's inputs compare them per row in C
        rows["recompute"] = np.asarray(result.policies)[take(c, "recompute", idx).astype(np.int64)] \
            if len(idx) else np.zeros(0, dtype=object)
        rows["microbatches"] = take(c, "microbatches", idx).astype(np.int64) if "microbatches" in c \
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
        cols = [layout_index(result, idx)[0]] + [take(c, k, idx).astype(np.int64) for k in ("mbs", "seq")]
        cols += [take(c, "recompute", idx).astype(np.int64), (take(c, "zero", idx) == 3).astype(np.int64)]
        if "microbatches" in c:
            cols.append(take(c, "microbatches", idx).astype(np.int64))
        key = _mixed_radix(cols, len(idx))
        if key is not None:
            by = np.argsort(key, kind="stable")  # np.unique's inverse is ~10x slower (numpy 2.4, measured)
            new = np.r_[True, key[by][1:] != key[by][:-1]]
            inv = np.empty(len(idx), dtype=np.int64)
            inv[by] = np.cumsum(new) - 1
            return idx[by[new]], inv
        _, first, inv = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
        return idx[first], inv.reshape(-1)

    n = len(c["fits"])
    keys = timing.PARTS + ("tokens_per_gpu_s",)
    got: Dict[str, np.ndarray] = {}  # {part: every row's value, set where ``done``}
    done = np.zeros(n, dtype=bool)

    def compute(idx) -> Dict[str, np.ndarray]:
        """Every part, computed at the rows of ``idx`` not computed yet, in blocks (element-wise)."""
        if not got:
            got.update({k: np.empty(n) for k in keys})
        todo = np.sort(idx[~done[idx]])
        if len(todo):
            todo = todo[np.r_[True, todo[1:] != todo[:-1]]]  # each once (np.unique would import numpy.ma)
            timed, back = distinct(todo)
            vals = {k: np.empty(len(timed)) for k in keys}
            for i in range(0, len(timed), BLOCK):
                for k, v in at(timed[i:i + BLOCK]).items():
                    vals[k][i:i + BLOCK] = v
            for k, v in vals.items():
                got[k][todo] = v[back]
            done[todo] = True
        return got

    def column(key):
        def full():  # every part at the fitting rows, NaN elsewhere (ranking reads only those)
            return np.where(c["fits"], compute(np.flatnonzero(c["fits"]))[key], np.nan)

        def take_rows(idx):
            idx = np.asarray(idx, dtype=np.int64)
            return compute(idx)[key][idx]
        return full, take_rows

    def fastest() -> Optional[np.ndarray]:
        """Per layout (ranking.layout_index's ids), an upper bound of the tokens per second per GPU of its fitting
        rows (-inf where none fits), or None under a schedule: a row's step is never less than the micro-batch
        period at any one of its stages, which reads no ZeRO stage (derivations/steptime/model.py ``step_time``),
        taken at one composition per pipeline degree (:func:`probe_stages`).  Computed once."""
        if "fastest" not in bounds:
            bounds["fastest"] = layout_bounds()
        return bounds["fastest"]

    bounds: Dict[str, Optional[np.ndarray]] = {}

    def layout_bounds() -> Optional[np.ndarray]:
        enum, per = result.enumeration, result.layout_groups
        n_l = len(enum)
        if result.schedule is not None or "microbatches" in c or not (per and n_l and n % (n_l * per) == 0
                                                                       and enum.distinct()):
            return None
        n_g = n_l * per
        policy = take(c, "recompute", np.arange(n // n_g, dtype=np.int64) * n_g).astype(np.int64)
        used = sorted(set(policy.tolist()))
        fits = c["fits"].reshape(-1, n_g)
        need = np.zeros((len(used), n_g), dtype=bool)  # (policy, group): fits at some ZeRO stage
        for ci, p in enumerate(policy.tolist()):
            need[used.index(p)] |= fits[ci]
        need = need.reshape(len(used), n_l, per).transpose(1, 0, 2)  # (layout, policy, group)
        some = np.flatnonzero(need.any(axis=(1, 2)))  # the layouts timed: those with a fitting row
        most = np.full(n_l, -np.inf)
        if not len(some):
            return most
        lay = {k: enum.arrays[k][some].astype(np.int64) for k in _LAYOUT[:6]}
        groups = np.arange(per, dtype=np.int64)
        grid = {k: v[:, None, None] for k, v in lay.items()}  # (layout, policy, group)
        grid.update(mbs=take(c, "mbs", groups).astype(np.int64)[None, None, :],
                    seq=take(c, "seq", groups).astype(np.int64)[None, None, :],
                    recompute=np.asarray(result.policies)[used][None, :, None],
                    zero=np.zeros((1, 1, 1), dtype=np.int64), microbatches=np.ones((1, 1, 1), dtype=np.int64))
        table, _, _ = _stage_table(model, tuple(sorted(set(lay["pp"].tolist()))))
        comp = table[lay["pp"], probe_stages(lay, grid, table)[lay["pp"]]]
        for j, name in enumerate(names):
            grid[name] = comp[:, j, None, None]
        period = timing.parts(model, training, grid, **options)["microbatch"]
        gpus = grid["dp"] * grid["tp"] * grid["pp"] * grid["cp"]
        tokens = grid["dp"] * grid["microbatches"] * grid["mbs"] * grid["seq"]
        bound = np.where(period > 0, tokens / (np.where(period > 0, period, np.inf) * gpus), np.inf)
        most[some] = np.where(need[some], bound, -np.inf).reshape(len(some), -1).max(axis=1)
        return most

    def probe_stages(lay, grid, table) -> np.ndarray:
        """Per pipeline degree (indexed by it), the composition whose period is the longest at its first layout."""
        pps = sorted(set(lay["pp"].tolist()))
        first = np.array([int(np.argmax(lay["pp"] == pp)) for pp in pps])
        probe = {k: np.repeat(v[first][:, None], table.shape[1], axis=1) for k, v in lay.items()}  # (degree, stage)
        probe.update({k: v.reshape(-1)[:1][:, None] for k, v in grid.items() if k not in lay})
        for j, name in enumerate(names):
            probe[name] = table[lay["pp"][first]][:, :, j]
        period = timing.parts(model, training, probe, **options)["microbatch"]
        out = np.zeros(len(table), dtype=np.int64)
        out[pps] = np.argmax(period, axis=1)
        return out

    result.time = {"gpu": g, "overlap": overlap, "efficiency": efficiency,
                   "gpus_per_node": gpus_per_node or g.nvlink_domain,
                   "dispatcher": timing.dispatcher_of(result.schedule, dispatcher), "fastest": fastest}
    for key in ("step_time", "tokens_per_gpu_s") + tuple("time_" + p for p in timing.PARTS if p != "step"):
        full, take_rows = column("step" if key == "step_time" else key[5:] if key.startswith("time_") else key)
        if hasattr(c, "set_lazy"):
            c.set_lazy(key, full, take_rows)
        else:
            c[key] = full()
