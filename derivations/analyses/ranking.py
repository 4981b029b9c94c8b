"""The search's ranking of the fitting configurations, and the best one of each layout.

The default puts the fewest pipeline bubbles first (the idle fraction (PP - 1)/(m + PP - 1), Huang et al.,
"GPipe", arXiv:1811.06965), then the most headroom; every order is deterministic.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from derivations import config as cfg
from derivations.analyses.evaluation import SearchResult

SORTS = ("time", "bubble", "peak", "headroom")

#: Tie-breaking columns of each sort, after its leading keys.
_BUBBLE_TIES = ("tp", "zero", "recompute", "pp", "cp", "ep", "etp", "mbs", "seq")
_PEAK_TIES = ("zero", "recompute", "tp", "pp", "cp", "ep", "etp", "mbs", "seq")


def order(result: SearchResult, only_fitting: bool = True, sort: str = "bubble", rows=None):
    """Row indices (fitting configurations only by default; ``rows``, ascending, among them when given) sorted by
    :func:`_keys` (stable: then by row)."""
    idx = rows if rows is not None else np.flatnonzero(result.columns["fits"]) if only_fitting else \
        np.arange(len(result.columns["fits"]))
    return idx[np.lexsort(_keys(result, sort, idx)[::-1])]


def _keys(result: SearchResult, sort: str, idx):
    """The sort keys (one value per row of ``idx``), most significant first. 'bubble' (the default): the fewest pipeline
    bubbles first ((PP - 1)/(m + PP - 1) under a schedule; PP without one), then the most headroom; 'time': the most
    tokens per second per GPU (derivations/analyses/timing.py, compared to a thousandth: float noise never reorders
    rows), then as 'bubble'; 'peak': the largest peak first; 'headroom': the most headroom first.  Ties: ZeRO stage,
    recomputation and the layout."""
    read = ("tokens_per_gpu_s", "bubble", "headroom", "peak") + _BUBBLE_TIES
    c = {k: result.columns.take(k, idx) for k in read if k in result.columns}
    if sort not in SORTS:
        raise cfg.ConfigError("sort", f"--sort must be one of {', '.join(SORTS)}, got {sort!r}")
    if sort in ("time", "bubble"):
        first = -np.round(c["tokens_per_gpu_s"], 3) if sort == "time" else \
            np.round(c["bubble"], 12) if "bubble" in c else c["pp"].astype(np.float64)
        return [first, -np.round(c["headroom"])] + [c[k] for k in _BUBBLE_TIES]
    return [np.round(c["peak"]) * (-1 if sort == "peak" else 1)] + [c[k] for k in _PEAK_TIES]


def ranked(result: SearchResult, sort: str = "bubble", per_layout: bool = True, top: Optional[int] = None):
    """``order(result, sort=sort)``, with ``per_layout`` through :func:`first_per_layout`, its first ``top`` rows
    (all with None).  Ranked by time with a bound of each layout's speed (timing.add_time ``lazy``): the layouts
    most promising first, in doubling batches, until the ``top``-th row's speed is below every bound left."""
    bound = (getattr(result, "time", None) or {}).get("bound")
    if sort != "time" or not top or bound is None:
        idx = order(result, sort=sort)
        idx = first_per_layout(result, idx) if per_layout else idx
        return idx if top is None else idx[:top]
    c = result.columns
    least = -np.round(bound, 3)  # each layout's least first key (+inf: none fits)
    by = np.argsort(least, kind="stable")
    by = by[:int(np.count_nonzero(least < np.inf))]
    n, fit = 4 * top, np.flatnonzero(c["fits"])
    layout = c.take("layout", fit)
    while True:
        result.time["time_layouts"](by[:n])
        idx = order(result, sort=sort, rows=fit[np.isin(layout, by[:n])])
        idx = (first_per_layout(result, idx) if per_layout else idx)[:top]
        if n >= len(by) or (len(idx) == top and -np.round(c["tokens_per_gpu_s"][idx[-1]], 3) < least[by[n]]):
            return idx
        n *= 2


def ranked_judged(result: SearchResult, judge, kind: str, capacity: int, sort: str = "bubble",
                  per_layout: bool = True, top: int = 20):
    """(:func:`ranked`'s first ``top`` rows of those whose ``judge(row)[kind]`` bytes fit ``capacity``, {row:
    ``judge(row)``} of every row judged).  ``judge`` costs a configuration's allocator run, and its bytes are never
    below the row's terms (the rows fitting already, by their total, are the only candidates): the rows ranked first
    are judged in rank order, those over ``capacity`` marked not fitting (``columns['fits']``) and the ranking redone,
    until the first ``top`` are all judged fitting."""
    fits, got = result.columns["fits"], {}
    while True:
        idx = ranked(result, sort=sort, per_layout=per_layout, top=top)
        new = [int(i) for i in idx if int(i) not in got]
        if not new:
            return idx, got
        for i in new:
            got[i] = judge(i)
            fits[i] = got[i][kind] <= capacity


def first_per_layout(result: SearchResult, idx):
    """``idx`` (ordered rows) keeping the first (best-ranked) row of each layout (DP, TP, PP, EP, ETP, CP)."""
    return idx[np.sort(np.unique(result.columns.take("layout", idx), return_index=True)[1])]
