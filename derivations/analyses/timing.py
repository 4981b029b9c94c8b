"""The search's step time: every configuration's estimated step under the step-time model
(derivations/steptime), at its slowest pipeline stage, as lazy columns of a :class:`SearchResult`.

Columns added: ``step_time`` (seconds of one optimizer step, or of one micro-batch's period without a
schedule or global batch), ``time_<part>`` for each part of :data:`derivations.steptime.evaluate.PARTS`
(compute, recompute, exposed TP/EP/CP/PP/DP transfers, bubble, optimizer) and ``tokens_per_gpu_s``
(tokens the job trains per second per GPU: DP m b s over the step's time and the GPUs).  They are
computed only for the rows read (ranking reads the fitting ones).
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from derivations import config as cfg
from derivations.analyses.columns import take
from derivations.analyses.evaluation import SearchResult, _stage_table
from derivations.analyses.ranking import layout_index
from derivations.steptime import evaluate as timing

_LAYOUT = ("dp", "tp", "pp", "ep", "etp", "cp", "mbs", "seq", "zero")
#: rows timed at once: each row is K stage compositions, and the printed function keeps about 40 temporaries
BLOCK = 1 << 13


def add_time(result: SearchResult, model: cfg.ModelSpec, training: Optional[cfg.Training] = None, *, gpu=None,
             overlap: str = "megatron", efficiency=1, gpus_per_node: int = 8, vpp: Optional[int] = None,
             attention: Optional[str] = None, dispatcher: Optional[str] = None) -> None:
    """Add the time columns to ``result`` (in place); ``gpu``: the preset whose rates are used; ``training``: the
    search's own (``result.training``) unless given."""
    c = result.columns
    training = training or result.training or cfg.Training()
    attention = attention or training.attention
    g = timing.check(model, gpu, overlap, efficiency)
    names = cfg.composition_names(model.family)
    vpp = vpp or training.vpp or 2
    result.time = {"gpu": g, "overlap": overlap, "efficiency": efficiency, "gpus_per_node": gpus_per_node,
                   "dispatcher": timing.dispatcher_of(result.schedule, dispatcher)}

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
        out = timing.parts(model, training, flat, gpu=g, schedule=result.schedule, vpp=vpp, overlap=overlap,
                           efficiency=efficiency, gpus_per_node=gpus_per_node, attention=attention,
                           dispatcher=dispatcher)
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
        reads the ZeRO stage only as ZeRO-3 or not (derivations/steptime/evaluate.py ``parts``: one micro-batch's
        period, whose data-parallel traffic is ZeRO-3's alone), so configurations that differ only by ZeRO 0, 1
        or 2 are timed once; with a schedule every row is its own."""
        if result.schedule is not None or not len(idx):
            return idx, np.arange(len(idx))
        cols = [layout_index(result, idx)[0]] + [take(c, k, idx).astype(np.int64) for k in ("mbs", "seq")]
        cols += [take(c, "recompute", idx).astype(np.int64), (take(c, "zero", idx) == 3).astype(np.int64)]
        if "microbatches" in c:
            cols.append(take(c, "microbatches", idx).astype(np.int64))
        if min(int(x.min()) for x in cols) >= 0 and np.prod([float(x.max()) + 1 for x in cols]) < 2.0 ** 62:
            key = np.zeros(len(idx), dtype=np.int64)  # one integer per row (mixed radix)
            for x in cols:
                key = key * (int(x.max()) + 1) + x
            by = np.argsort(key, kind="stable")  # np.unique's inverse is ~10x slower (numpy 2.4, measured)
            new = np.r_[True, key[by][1:] != key[by][:-1]]
            inv = np.empty(len(idx), dtype=np.int64)
            inv[by] = np.cumsum(new) - 1
            return idx[by[new]], inv
        _, first, inv = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
        return idx[first], inv.reshape(-1)

    memo: Dict = {}

    def fitting():  # every part at the fitting rows, NaN elsewhere (ranking reads only those): computed once
        if "all" not in memo:
            n = len(c["fits"])
            idx = np.flatnonzero(c["fits"])
            timed, back = distinct(idx)
            got = {k: np.empty(len(timed)) for k in timing.PARTS + ("tokens_per_gpu_s",)}
            for i in range(0, len(timed), BLOCK):  # blocks: the printed function's temporaries stay small
                for k, v in at(timed[i:i + BLOCK]).items():
                    got[k][i:i + BLOCK] = v
            memo["all"] = {k: np.full(n, np.nan) for k in got}
            for k, v in got.items():
                memo["all"][k][idx] = v[back]
        return memo["all"]

    def column(key):
        def take_rows(idx):
            idx = np.asarray(idx, dtype=np.int64)
            out = fitting()[key][idx]
            missing = np.isnan(out)
            if missing.any():  # rows that do not fit, read by a caller: computed for them alone
                out[missing] = at(idx[missing])[key]
            return out
        return (lambda: fitting()[key]), take_rows

    for key in ("step_time", "tokens_per_gpu_s") + tuple("time_" + p for p in timing.PARTS if p != "step"):
        full, take_rows = column("step" if key == "step_time" else key[5:] if key.startswith("time_") else key)
        if hasattr(c, "set_lazy"):
            c.set_lazy(key, full, take_rows)
        else:
            c[key] = full()
