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
        rows["recompute"] = np.asarray(result.policies, dtype=object)[take(c, "recompute", idx).astype(np.int64)] \
            if len(idx) else np.zeros(0, dtype=object)
        rows["microbatches"] = take(c, "microbatches", idx).astype(np.int64) if "microbatches" in c \
            else np.ones(len(idx), dtype=np.int64)
        pps = tuple(sorted(set(rows["pp"].tolist()))) or (1,)
        table, K, count = _stage_table(model, pps)
        comp = table[rows["pp"]]  # (n, K, C + 1): every distinct composition of the row's pipeline
        flat = {k: np.repeat(v, K) for k, v in rows.items()}
        for j, name in enumerate(names):
            flat[name] = comp[:, :, j].reshape(-1)
        out = timing.parts(model, training, flat, gpu=g, schedule=result.schedule, vpp=vpp, overlap=overlap,
                           efficiency=efficiency, gpus_per_node=gpus_per_node, attention=attention,
                           dispatcher=dispatcher)
        step = out["step"].reshape(-1, K)
        slow = np.argmax(step, axis=1)  # the pipeline runs at its slowest stage's pace
        pick = {k: v.reshape(-1, K)[np.arange(len(idx)), slow] for k, v in out.items()}
        gpus = rows["dp"] * rows["tp"] * rows["pp"] * rows["cp"]
        tokens = rows["dp"] * rows["microbatches"] * rows["mbs"] * rows["seq"]
        pick["tokens_per_gpu_s"] = tokens / (np.where(pick["step"] > 0, pick["step"], np.inf) * gpus)
        return pick

    memo: Dict = {}

    def fitting():  # every part at the fitting rows, NaN elsewhere (ranking reads only those): computed once
        if "all" not in memo:
            n = len(c["fits"])
            idx = np.flatnonzero(c["fits"])
            memo["all"] = {k: np.full(n, np.nan) for k in timing.PARTS + ("tokens_per_gpu_s",)}
            for i in range(0, len(idx), BLOCK):  # blocks: the printed function's temporaries stay small
                part = idx[i:i + BLOCK]
                for k, v in at(part).items():
                    memo["all"][k][part] = v
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
