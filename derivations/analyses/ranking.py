"""The search's ranking of the fitting configurations, and the best one of each layout.

The default puts the fewest pipeline bubbles first (the idle fraction (PP - 1)/(m + PP - 1), Huang et al.,
"GPipe", arXiv:1811.06965), then the most headroom; every order is deterministic.  :func:`ranked` gives the
indices of :func:`order` then :func:`first_per_layout` without sorting every row.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from derivations import config as cfg
from derivations.analyses.enumeration import LAYOUT_FIELDS
from derivations.analyses.columns import take
from derivations.analyses.evaluation import SearchResult

SORTS = ("time", "bubble", "peak", "headroom")

#: Tie-breaking columns of each sort, after its leading keys.
_BUBBLE_TIES = ("tp", "zero", "recompute", "pp", "cp", "ep", "etp", "mbs", "seq")
_PEAK_TIES = ("zero", "recompute", "tp", "pp", "cp", "ep", "etp", "mbs", "seq")


def order(result: SearchResult, only_fitting: bool = True, sort: str = "bubble"):
    """Row indices (fitting configurations only by default) sorted by :func:`_keys`."""
    idx = np.flatnonzero(result.columns["fits"]) if only_fitting else np.arange(len(result.columns["fits"]))
    return idx[_sort_by([k(idx) for k in _keys(result, sort)])]


def _keys(result: SearchResult, sort: str):
    """The sort keys, most significant first, as functions of row indices.  'bubble' (the default): the fewest
    pipeline bubbles first ((PP - 1)/(m + PP - 1) under a schedule; PP without one), then the most headroom;
    'time': the most tokens per second per GPU (derivations/analyses/timing.py), then as 'bubble'; 'peak': the
    largest peak first; 'headroom': the most headroom first.  Ties: ZeRO stage, recomputation and the layout."""
    c = result.columns
    if sort not in SORTS:
        raise cfg.ConfigError("sort", f"--sort must be one of {', '.join(SORTS)}, got {sort!r}")
    col = lambda k: _of_layout(lambda i: take(c, k, i), k in LAYOUT_FIELDS)  # rows of a column, never all of it
    if sort == "time":
        return [lambda i: _throughput(take(c, "tokens_per_gpu_s", i)), lambda i: -np.round(take(c, "headroom", i))] + \
            [col(k) for k in _BUBBLE_TIES]
    if sort == "bubble":
        first = (lambda i: np.round(c["bubble"][i], 12)) if "bubble" in c else \
            _of_layout(lambda i: take(c, "pp", i).astype(np.float64), True)
        return [first, lambda i: -np.round(take(c, "headroom", i))] + [col(k) for k in _BUBBLE_TIES]
    sign = -1 if sort == "peak" else 1
    return [lambda i: np.round(take(c, "peak", i)) * sign] + [col(k) for k in _PEAK_TIES]


def _throughput(x):
    """Tokens per second per GPU, most first, compared to a thousandth (float noise never reorders rows)."""
    return -np.round(x, 3)


def _of_layout(key, constant: bool):
    """``key`` marked ``per_layout`` when it is a function of the layout alone (it never narrows a layout's rows)."""
    key.per_layout = constant
    return key


def _mixed_radix(cols, n: int):
    """One int64 key per row of the integer columns ``cols`` (mixed radix), or None when they do not fit
    in 62 bits or hold a negative value."""
    radices = [int(col.max()) + 1 for col in cols]
    if min(int(col.min()) for col in cols) < 0 or np.prod([float(r) for r in radices]) >= 2.0 ** 62:
        return None
    key = np.zeros(n, dtype=np.int64)
    for col, r in zip(cols, radices):
        key = key * r + col
    return key


def layout_index(result: SearchResult, rows=None):
    """(int64 id of each row's layout (DP, TP, PP, EP, ETP, CP), number of ids), of the rows ``rows`` only when
    given.  Rows laid out as choices x (layout, s, b) groups: arithmetic; else numbered by the layouts' values."""
    c = result.columns
    n = len(c["total"] if "total" in c else c["dp"])  # a search's every column has a row per configuration
    n_l = len(result.enumeration)
    if result.layout_groups and n_l and n % (n_l * result.layout_groups) == 0 and result.enumeration.distinct():
        at = np.arange(n, dtype=np.int64) if rows is None else rows
        return (at % (n_l * result.layout_groups)) // result.layout_groups, n_l
    if rows is not None:
        ids, n_ids = layout_index(result)
        return ids[rows], n_ids
    if not n:
        return np.zeros(0, np.int64), 0
    cols = [c[k].astype(np.int64) for k in LAYOUT_FIELDS]
    key = _mixed_radix(cols, n)
    if key is None:
        key = np.stack(cols, axis=1)
    _, inv = np.unique(key, axis=None if key.ndim == 1 else 0, return_inverse=True)
    inv = inv.reshape(-1).astype(np.int64)
    return inv, int(inv.max()) + 1


def _group_min(values, ids, n_ids):
    """The minimum of ``values`` over the rows of each id (ids in 0..n_ids-1)."""
    fill = np.inf if values.dtype.kind == "f" else np.iinfo(values.dtype).max
    out = np.full(n_ids, fill, dtype=values.dtype)
    np.minimum.at(out, ids, values)
    return out


def _layout_minima(result: SearchResult, keys, cand):
    """Rows (ascending) of ``cand`` (ascending), one per layout: its first row in the order of ``keys`` (then row),
    narrowing to each layout's minimum key by key; None when a key compared holds a NaN."""
    g, n_ids = layout_index(result, cand)  # the candidates' layouts, g[i] of keep[i] below
    present = int(np.count_nonzero(np.bincount(g, minlength=n_ids))) if len(cand) else 0
    keep = cand
    for k in keys:
        if len(keep) == present:  # one candidate left per layout
            break
        if getattr(k, "per_layout", False):  # the same on every row of a layout: keeps them all
            continue
        x = k(keep)
        if x.dtype.kind == "f" and np.isnan(x).any():
            return None
        best = x == _group_min(x, g, n_ids)[g]
        keep, g = keep[best], g[best]
    # ties in every key: the lowest row of each layout (keep ascends)
    by = np.argsort(g, kind="stable")
    first = by[np.r_[True, g[by][1:] != g[by][:-1]]] if len(g) else by
    return keep[np.sort(first)]


def ranked(result: SearchResult, sort: str = "bubble", per_layout: bool = True, top: Optional[int] = None):
    """``order(result, sort=sort)``, with ``per_layout`` through :func:`first_per_layout`, its first ``top`` rows
    (all with None), without sorting every row: per layout the candidates are narrowed key by key to the layout's
    minimum (:func:`_layout_minima`), the first ``top`` picked by ``np.partition`` (:func:`_first`), and only those
    sorted.  A NaN where a key is compared takes the full sort."""
    keys = _keys(result, sort)
    if not per_layout and top is None:
        return order(result, sort=sort)
    if per_layout and top is not None and sort == "time":
        fast = _fastest_layouts(result, keys, top)
        if fast is not None:
            return fast
    if per_layout:
        minima = [_layout_minima(result, keys, rows) for rows in _candidates(result)]
        keep = None if any(m is None for m in minima) else \
            minima[0] if len(minima) == 1 else np.sort(np.concatenate(minima))  # layouts never share a block
        if keep is not None and top is not None:  # the first ``top`` winners only are sorted
            cut = _first(keys, keep, 0, top)
            keep = keep if cut is None else cut  # (a NaN: every winner sorted, as the full sort orders it)
    else:
        cand = np.flatnonzero(result.columns["fits"])
        keep = None if _has_nan(result.columns, cand) else _first(keys, cand, 0, top)
    if keep is None:
        idx = order(result, sort=sort)
        idx = first_per_layout(result, idx) if per_layout else idx
        return idx if top is None else idx[:top]
    out = keep[_sort_by([k(keep) for k in keys])]
    return out if top is None else out[:top]


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


def _fastest_layouts(result: SearchResult, keys, top: int):
    """``ranked(result, 'time', True, top)`` from the rows of a few layouts, or None (no bound, or a NaN compared).
    ``result.time['fastest']()`` (derivations/analyses/timing.py) bounds each layout's first key from below: layouts
    are taken most promising first, in doubling batches, until the ``top``-th winner's key is below every bound
    left."""
    fastest = (getattr(result, "time", None) or {}).get("fastest")
    bound = fastest() if fastest is not None else None
    if bound is None or top < 1:
        return None
    low = _throughput(bound)  # each layout's least first key: -inf without a bound, +inf where none fits
    by = np.argsort(low, kind="stable")
    by = by[:int(np.count_nonzero(low < np.inf))]  # the layouts with a fitting row
    fits, n_l, per = result.columns["fits"], len(result.enumeration), result.layout_groups
    n_g = n_l * per
    choice, group = np.arange(len(fits) // n_g, dtype=np.int64) * n_g, np.arange(per, dtype=np.int64)
    done, size, wins = 0, 4 * top, []
    while done < len(by):
        batch = np.sort(by[done:done + size])  # their fitting rows, ascending (choice, layout, group)
        rows = (choice[:, None, None] + batch[None, :, None] * per + group[None, None, :]).reshape(-1)
        win = _layout_minima(result, keys, rows[fits[rows]])
        if win is None:
            return None
        wins.append(win)
        done, size = done + len(batch), 2 * size
        if done < len(by) and sum(map(len, wins)) >= top:
            first = keys[0](np.concatenate(wins))
            if np.isnan(first).any():
                return None
            if np.partition(first, top - 1)[top - 1] < low[by[done]]:
                break
    keep = np.sort(np.concatenate(wins)) if wins else np.zeros(0, dtype=np.int64)
    return keep[_sort_by([k(keep) for k in keys])][:top]


def _has_nan(c, rows) -> bool:
    """Whether a float key column (bubble, headroom, peak) holds a NaN at ``rows``."""
    for k in ("bubble", "headroom", "peak"):
        if k in c:
            x = take(c, k, rows)
            if x.dtype.kind == "f" and np.isnan(x).any():
                return True
    return False


def _candidates(result: SearchResult, rows: int = 1 << 16):
    """The fitting rows (ascending int64) in blocks of about ``rows`` rows, each holding every row of a range of
    layouts when the rows are choices x (layout, s, b) groups (:func:`layout_index`); otherwise one block."""
    fits = result.columns["fits"]
    n, n_l, per = len(fits), len(result.enumeration), result.layout_groups
    if not (per and n_l and n % (n_l * per) == 0 and result.enumeration.distinct()):
        return [np.flatnonzero(fits)]
    n_g = n_l * per
    n_c = n // n_g
    edges = np.r_[np.arange(0, n_l, max(1, rows // max(1, n_c * per))), n_l] * per  # blocks of layouts
    parts = []
    for ci in range(n_c):  # each choice's candidates, cut at the blocks' edges
        c = np.flatnonzero(fits[ci * n_g:(ci + 1) * n_g])
        cut = np.searchsorted(c, edges)
        c += ci * n_g
        parts.append((c, cut))
    return [np.concatenate([c[cut[b]:cut[b + 1]] for c, cut in parts]) for b in range(len(edges) - 1)]


def _first(keys, rows, j, n):
    """Rows (ascending) among ``rows`` (ascending) holding the first ``n`` in the order of ``keys[j:]`` (then row);
    None when a key compared holds a NaN."""
    if len(rows) <= n:
        return rows
    if j == len(keys):
        return rows[:n]
    x = keys[j](rows)
    if x.dtype.kind == "f" and np.isnan(x).any():
        return None
    kth = np.partition(x, n - 1)[n - 1]
    less = rows[x < kth]
    tied = _first(keys, rows[x == kth], j + 1, n - len(less))
    return None if tied is None else np.sort(np.concatenate([less, tied]))


def _dense_rank(k):
    """(int64 dense rank of each value of ``k``, bits of the largest rank)."""
    if k.dtype.kind in "iu" and len(k) and k.min() >= 0 and k.max() < 1 << 22:  # small integers: O(n) ranks
        present = np.zeros(int(k.max()) + 1, dtype=bool)
        present[k] = True
        dense = np.cumsum(present) - 1
        return dense[k].astype(np.int64), int(dense[-1]).bit_length()
    if k.ndim == 1 and len(k) and not (k.dtype.kind == "f" and np.isnan(k).any()):
        by = np.argsort(k, kind="stable")  # dense ranks by one sort (np.unique's, without its set-up)
        new = np.r_[True, k[by][1:] != k[by][:-1]]
        rank = np.empty(len(k), dtype=np.int64)
        rank[by] = np.cumsum(new) - 1
        return rank, int(rank.max()).bit_length()
    u, inv = np.unique(k, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), int(len(u) - 1).bit_length()


def _sort_by(keys):
    """``np.lexsort(keys[::-1])``: by one sort of the keys' dense ranks packed into an int64 when they fit."""
    ranks, widths = zip(*(_dense_rank(np.asarray(k)) for k in keys))
    if sum(widths) > 62:
        return np.lexsort(keys[::-1])
    packed = np.zeros(len(keys[0]), dtype=np.int64)
    for r, w in zip(ranks, widths):
        packed = (packed << w) | r
    return np.argsort(packed, kind="stable")


def first_per_layout(result: SearchResult, idx):
    """``idx`` (ordered rows) keeping the first (best-ranked) row of each layout (DP, TP, PP, EP, ETP, CP)."""
    if len(idx) == 0:
        return idx
    cols = [take(result.columns, k, idx).astype(np.int64) for k in LAYOUT_FIELDS]
    key = _mixed_radix(cols, len(idx))
    _, first = np.unique(np.stack(cols, axis=1) if key is None else key, axis=None if key is not None else 0,
                         return_index=True)
    return idx[np.sort(first)]
