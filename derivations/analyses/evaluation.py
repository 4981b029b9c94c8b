"""The search's evaluation: every configuration's per-device memory in one vectorised pass (no sympy).

Every component term is evaluated for every (s, b, layout, distinct stage composition) by the generated numpy
kernels (derivations/analyses/kernels.py); each configuration is judged at its most-loaded stage against the Sec. 6
peak ``(1 + f_frag) * total + M_buf``; under a schedule, conventions or options the printed assembly evaluates them
(exact.py).  float64 evaluations of exact expressions: integers below 2^53 come out exact.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from derivations import config as cfg
from derivations.analyses import exact, kernels
from derivations.analyses.columns import Columns
from derivations.analyses.enumeration import Enumeration, distinct_stages, enumerate_layouts
from derivations.assembly.overheads import named_values, peak
from derivations.assembly.sides import COMPONENTS


@dataclass
class SearchResult:
    """Every evaluated configuration (columns: the layout, edp, mbs, seq, zero, recompute (index into
    ``policies``), stage (the most-loaded), the four components, total, peak, headroom (bytes, float64), fits)
    and the counts the command prints."""

    gpus: int
    hbm: int
    enumeration: Enumeration
    policies: Tuple[str, ...]
    overheads: Dict
    columns: Dict = field(repr=False, default_factory=dict)
    schedule: Optional[str] = None
    global_batch: Optional[int] = None
    #: configurations refused after enumeration, by rule (global-batch: m not an integer; dualpipe)
    invalid: Counter = field(default_factory=Counter)
    #: without a schedule, the (s, b) groups of each layout (rows: choices x layouts x groups); else None
    layout_groups: Optional[int] = None
    training: Optional[cfg.Training] = None  #: what the configurations ran under (schedule, m, attention kernel)
    #: --memory: {kind, capacity, terms_fitting, bytes: {row: memory of its configuration}} (ranking.ranked_judged)
    judged: Optional[Dict] = None

    @property
    def considered(self) -> int:
        return len(self.columns["total"])

    @property
    def fitting(self) -> int:
        return int(self.columns["fits"].sum())


@lru_cache(maxsize=64)
def _stage_table(model, pps: Tuple[int, ...]):
    """((max PP + 1, K, C + 1) int64 table: per PP its distinct stage compositions (``composition_names``) and
    stage index (last), padded to K by repeating the last; K; each PP's count), for the PP degrees ``pps``."""
    names = cfg.composition_names(model.family)
    stage_of = {pp: distinct_stages(model, cfg.Layout(pp=pp)) for pp in pps}
    K = max((len(v) for v in stage_of.values()), default=1)
    table = np.zeros((max(stage_of, default=0) + 1, K, len(names) + 1), dtype=np.int64)
    count = np.zeros(len(table), dtype=np.int64)
    for pp, sts in stage_of.items():
        rows = [s.vector(names) + (s.index,) for s in sts]
        table[pp] = rows + [rows[-1]] * (K - len(rows))
        count[pp] = len(sts)
    table.setflags(write=False)
    count.setflags(write=False)
    return table, K, count


def _pairs(model, lay):
    """The (layout, distinct stage composition) pairs of the paper's view: block k holds the k-th composition of
    the layouts that have one, most compositions first, so each block is a prefix of the one before.  Returns
    (:func:`_stage_table`'s table, K, each layout's number of compositions, its position in a block, the blocks'
    (offset, length), the pairs' {composition symbol: float64 (P,)}, their layouts (P,))."""
    table, K, count = _stage_table(model, tuple(sorted(set(lay["pp"].tolist()))))
    pp = lay["pp"]
    n_k = count[pp]
    by = np.argsort(-n_k, kind="stable")
    pos = np.empty_like(by)
    pos[by] = np.arange(len(by))
    lens = [int(np.count_nonzero(n_k > k)) for k in range(K)]
    blocks = [(sum(lens[:k]), n) for k, n in enumerate(lens) if n]
    owner = np.concatenate([by[:n] for _, n in blocks]) if blocks else by
    comp = {}
    for j, name in enumerate(cfg.composition_names(model.family)):
        col = table[:, :, j].astype(np.float64)
        comp[name] = np.concatenate([col[pp[by[:n]], k] for k, (_, n) in enumerate(blocks)]) if blocks else \
            np.zeros(0)
    return table, K, n_k, pos, blocks, comp, owner


def _pair_values(lay, owner, comp, seq, mbs) -> Dict[str, object]:
    """{row symbol name: float64 array} broadcasting to (s, b, pairs): each pair's layout and composition."""
    sizes = {"DP": "dp", "TP": "tp", "PP": "pp", "EP": "ep", "ETP": "etp", "CP": "cp", "SP": "tp"}
    of = {v: lay[v].astype(np.float64)[owner] for v in dict.fromkeys(sizes.values())}
    out = {k: of[v] for k, v in sizes.items()}
    out.update(comp)
    out["s"] = np.asarray(seq, dtype=np.float64).reshape(-1, 1, 1)
    out["b"] = np.asarray(mbs, dtype=np.float64).reshape(1, -1, 1)
    return out


def _blocks(values_at, keys, rows, shape, size: int = 1 << 18) -> Dict[str, object]:
    """{key: float64 array of ``shape`` (..., pairs)}: ``values_at(rows)`` over blocks of about ``size`` values
    along the pairs (temporaries in the CPU cache, as :func:`symbolic.search.evaluate`); one block if it holds all."""
    P = shape[-1]
    chunk = max(1024, size // max(1, int(np.prod(shape[:-1]))))
    if P <= chunk:
        out = values_at(rows)
        return {k: np.broadcast_to(np.asarray(out[k], dtype=np.float64), shape) for k in keys}
    full = {k: np.empty(shape) for k in keys}
    for i in range(0, P, chunk):
        out = values_at({r: v[..., i:i + chunk] if np.ndim(v) and np.shape(v)[-1] == P else v
                         for r, v in rows.items()})
        for k in keys:
            full[k][..., i:i + chunk] = out[k]
    return full


def _values(model, training, keys, rows, shape):
    """{key: float64 array of ``shape``}: the terms ``keys`` at the pairs' ``rows`` (the generated kernels)."""
    groups = tuple(dict.fromkeys(kernels.group_of(model, [k], training.attention) for k in keys))

    def values_at(part):
        out = {}
        for group in groups:
            out.update(kernels.values(model, training, group, part, chunk=None))  # blocked by _blocks
        return out
    return _blocks(values_at, keys, rows, shape)


def _most_loaded(value, choices, blocks, pos, shape):
    """Per (ZeRO stage, policy) in ``choices``: each (layout, s, b) group's total at its most-loaded composition, a
    running ``np.maximum`` over :func:`_pairs`' ``blocks``.  ``value``: {key: array of ``shape`` (s, b, pairs), or
    (pairs,) for the model states}; ``pos``: each layout's position in a block.  Returns ([(zero, policy index,
    pick)], the totals (choices x groups), [(the sum of the components but the last, the last) per choice])."""
    zeros = sorted({z for z, _ in choices})
    policies = tuple(dict.fromkeys(r for _, r in choices))
    comps = list(next(iter(choices.values()))) if choices else []
    per = shape[0] * shape[1]
    present = [(z, ri, choices[z, r]) for z in zeros for ri, r in enumerate(policies) if (z, r) in choices]
    n_g = len(pos) * per
    totals = np.empty(len(present) * n_g)  # each choice's groups written in place: no copy of every row
    parts = []
    partial = {}  # the components but the last summed once per distinct (ids): the same additions in order
    for ci, (_, _, pick) in enumerate(present):
        head, last = tuple(pick[c] for c in comps[:-1]), pick[comps[-1]]
        if head not in partial:  # (no head: 0 + the last, as the sum of one component)
            partial[head] = sum((value[k] for k in head), np.zeros(shape[-1:]) if not head else 0)
        h, a = partial[head], value[last]
        best = np.zeros((per, 0))
        for i, (o, n) in enumerate(blocks):
            t = h[..., o:o + n] + a[..., o:o + n]
            if t.shape[:-1] != shape[:2]:  # both terms per pair: the same for every (s, b)
                t = np.broadcast_to(t, shape[:2] + (n,))
            t = t.reshape(per, n)
            if i:
                np.maximum(best[:, :n], t, out=best[:, :n])
            else:
                best = t if t.flags.writeable else t.copy()  # the sum is new: the running maximum
        totals[ci * n_g:(ci + 1) * n_g].reshape(-1, per)[...] = best[:, pos].T
        parts.append((h, a))
    return present, totals, parts


def _stage_view(model, training, choices, enum, seqs, mbs):
    """The paper's view (no schedule): every configuration at its most-loaded stage, one micro-batch per stage,
    as lazy :class:`Columns` (groups' columns tiled once per choice, then each choice's components).  The
    activations are evaluated over (s, b, pairs), the model states (independent of b and s: kernelgen checks it)
    once per pair; the most-loaded composition is found only for the rows read."""
    lay = enum.arrays
    n_l, n_s, n_b = len(enum), len(seqs), len(mbs)
    per, n_g = n_s * n_b, n_l * n_s * n_b  # group g = (layout * n_s + s) * n_b + b
    table, K, n_k, pos, blocks, comp, owner = _pairs(model, lay)
    P = len(owner)
    keys = sorted({k for pick in choices.values() for k in pick.values()})
    states = frozenset(k for pick in choices.values() for c, k in pick.items() if c != "activations")
    if states & {pick["activations"] for pick in choices.values()}:
        states = frozenset()  # every term over the grid
    rows = _pair_values(lay, owner, comp, seqs, mbs)
    value = _values(model, training, [k for k in keys if k not in states], rows, (n_s, n_b, P))
    step = kernels.step_keys(choices)
    if step:  # the step's peak: each recomputing policy's rebuilt layer (derivations/assembly/step_terms.py)
        moments = _values(model, training, sorted({k for p in step.values() for k in p}), rows, (n_s, n_b, P))
        kernels.add_step(value, step, moments, rows["L_d"], rows["L_m"])
    if states:  # at the first s and b
        rows.update(s=rows["s"][:1].reshape(1), b=rows["b"][:, :1].reshape(1))
        value.update(_values(model, training, sorted(states), rows, (P,)))
    present, totals, parts = _most_loaded(value, choices, blocks, pos, (n_s, n_b, P))
    n_c = len(present)
    seq_a, mbs_a = np.array(seqs, dtype=np.int64), np.array(mbs, dtype=np.int64)
    group = {k: lay[k] for k in ("dp", "tp", "pp", "ep", "etp", "cp")}
    group["sp"] = lay["tp"]  # sequence parallelism on: SP = TP (Table 9)
    group["edp"] = lay["dp"] * lay["tp"] * lay["cp"] // (lay["ep"] * lay["etp"])
    at = {k: (lambda v: lambda g: v[g // per])(v) for k, v in group.items()}  # by group index
    at["seq"], at["mbs"] = (lambda g: seq_a[(g // n_b) % n_s]), (lambda g: mbs_a[g % n_b])
    every = np.arange(n_g)
    lazy = {}
    for k in ("dp", "tp", "pp", "ep", "etp", "cp", "sp", "seq", "mbs", "edp"):
        lazy[k] = ((lambda f: lambda: np.tile(f(every), n_c))(at[k]),
                   (lambda f: lambda idx: f(idx % n_g) if n_g else np.zeros(0, np.int64))(at[k]))

    def of(a, p, pair):  # a term's values at pairs ``pair`` of the (s, b) groups ``p``
        return a[pair] if np.ndim(a) == 1 else np.broadcast_to(a, (n_s, n_b, P)).reshape(per, P)[p, pair]

    starts = np.array([o for o, _ in blocks], dtype=np.int64)
    memo = {}

    def pairs(g):  # (group indices g) -> the pairs of each group's layout (len(g), K), the last repeated
        l = g // per
        return starts[np.minimum(np.arange(K), n_k[l][:, None] - 1)] + pos[l][:, None]

    def argmax(ci, g):  # the first most-loaded composition of choice ci at groups g (its index in the layout)
        head, last = parts[ci]
        p, pair = (g % per)[:, None], pairs(g)
        return np.argmax(of(head, p, pair) + of(last, p, pair), axis=1)

    def most_loaded(ci, g):
        if ci not in memo and 4 * len(g) >= n_g:  # most of the rows: every row once, kept for the other columns
            memo[ci] = argmax(ci, every)
        return memo[ci][g] if ci in memo else argmax(ci, g)

    stage = table[:, :, -1]
    pp_a = lay["pp"]

    def component(c):
        def rows_of(ci, g):  # the values of choice ci at groups g
            return of(value[present[ci][2][c]], g % per, starts[most_loaded(ci, g)] + pos[g // per])

        def full():
            if not present:
                return np.zeros(0)
            return np.concatenate([rows_of(ci, every) for ci in range(n_c)])
        return full, _by_choice(rows_of, n_g, n_c, np.float64)

    # no choice (no ZeRO stage): no row, and the components of the composition, empty float64 columns
    comps = list(next(iter(choices.values()))) if choices else list(COMPONENTS)
    for c in comps:
        lazy[c] = component(c)
    per_choice = {"zero": np.array([z for z, _, _ in present], dtype=np.int64),
                  "recompute": np.array([ri for _, ri, _ in present], dtype=np.int64)}
    for k, v in per_choice.items():
        lazy[k] = ((lambda v: lambda: np.repeat(v, n_g))(v),  # int64 with no choice too
                   (lambda v: lambda idx: v[idx // n_g] if n_g else np.zeros(0, np.int64))(v))
    stage_at = lambda ci, g: stage[pp_a[g // per], most_loaded(ci, g)]
    lazy["stage"] = ((lambda: np.concatenate([stage_at(ci, every) for ci in range(n_c)]) if present
                      else np.zeros(0, dtype=stage.dtype)),
                     _by_choice(stage_at, n_g, n_c, stage.dtype))
    order = ["dp", "tp", "pp", "ep", "etp", "cp", "sp", "seq", "mbs", "edp"] + comps + ["total", "zero",
                                                                                          "recompute", "stage"]
    # the columns in their order as ever: the groups', then the components, total, ZeRO stage, policy, stage
    return Columns({"total": totals}, lazy, order)


def _by_choice(rows_of, n_g: int, n_c: int, dtype):
    """take(idx) of a per-choice column: ``rows_of(choice, groups)`` for the rows of each choice in ``idx``."""
    def take(idx):
        out = np.empty(len(idx), dtype=dtype)
        if not len(idx):
            return out
        ci, g = np.divmod(idx, n_g)
        for c in range(n_c):
            m = ci == c
            if m.any():
                out[m] = rows_of(c, g[m])
        return out
    return take


def search(model: cfg.ModelSpec, gpus: int, hbm: int,
           choices: Mapping[Tuple[int, str], Mapping[str, str]], *, mbs: Sequence[int] = (1, 2, 4),
           seqs: Sequence[int] = (4096,), training: cfg.Training | None = None, overheads: Mapping | None = None,
           enumeration: Enumeration | None = None, global_batch: Optional[int] = None,
           progress: Optional[Callable[[int, int], None]] = None) -> SearchResult:
    """Evaluate every valid configuration for ``gpus`` GPUs against ``hbm`` bytes.  ``choices``: {(zero, policy):
    {component: term id}} (:func:`derivations.analyses.kernels.choices`); ``training``: the other settings;
    ``overheads``: {f_frag, M_buf} (Sec. 6).  With ``training.schedule`` or a ``global_batch`` (m = global_batch /
    (DP b)) every device is judged under the schedule (exact.py); else each stage holds one micro-batch."""
    for name, values in (("--mbs", mbs), ("--seq", seqs)):
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise cfg.ConfigError("positive-integer", f"{name} values must be positive integers, got {list(values)}")
    enum = enumeration or enumerate_layouts(model, gpus, seqs)
    over = {getattr(k, "name", k): v for k, v in (overheads or {"f_frag": 0, "M_buf": 0}).items()}  # by name
    training = training or cfg.Training()
    scheduled = bool(training.schedule) or global_batch is not None
    if exact.needed(training) or scheduled:  # the printed assembly, every device at once
        accepted = exact.choices(training, list(choices))
        choices = {k: v for k, v in choices.items() if k in accepted}
        out, invalid, groups = exact.run(model, training, accepted, enum, seqs, mbs, global_batch, progress)
    else:
        invalid = Counter()
        groups = len(seqs) * len(mbs)
        out = _stage_view(model, training, choices, enum, seqs, mbs)
    if "edp" not in out:
        out["edp"] = out["dp"] * out["tp"] * out["cp"] // (out["ep"] * out["etp"])
    f, buf = float(over["f_frag"]), float(over["M_buf"])
    if isinstance(out, Columns):  # the peak and headroom of the rows read (ranking and formatting read a few)
        total = out["total"]
        at = lambda idx: peak(total[idx], f, buf)
        out.set_lazy("peak", lambda: peak(total, f, buf), at)
        out.set_lazy("headroom", lambda: hbm - out["peak"], lambda idx: hbm - at(idx))
        out["fits"] = _fits(total, f, buf, hbm)
    else:
        out["peak"] = peak(out["total"], f, buf)
        out["headroom"] = hbm - out["peak"]
        out["fits"] = out["peak"] <= hbm
    if "microbatches" in out:  # the pipeline bubble fraction (PP - 1) / (m + PP - 1) of each configuration
        m = np.where(out["microbatches"] > 0, out["microbatches"], 10 ** 9).astype(np.float64)
        out["bubble"] = (out["pp"] - 1) / (m + out["pp"] - 1)
    return SearchResult(gpus, hbm, enum, tuple(dict.fromkeys(r for _, r in choices)), over, out,
                        schedule=training.schedule, global_batch=global_batch, invalid=invalid,
                        layout_groups=groups, training=training)


def _fits(total, f: float, buf: float, hbm: int, chunk: int = 1 << 14):
    """``peak(total, f, buf) <= hbm`` in blocks of ``chunk`` rows (no temporary of a value per configuration)."""
    out = np.empty(len(total), dtype=bool)
    for i in range(0, len(total), chunk):
        out[i:i + chunk] = peak(total[i:i + chunk], f, buf) <= hbm
    return out


def pipeline(schedule=None, microbatches=None, vpp=None, global_batch=None, attention: str = "eager") -> cfg.Training:
    """The schedule part of a search or fit: with a global batch and no schedule, 1F1B (what
    Megatron-LM runs); a global batch and a fixed micro-batch count conflict."""
    if global_batch is not None:
        if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
            raise cfg.ConfigError("global-batch", f"--global-batch must be a positive integer, got {global_batch!r}")
        if microbatches is not None:
            raise cfg.ConfigError("global-batch", "give --global-batch (sequences per step: m = global / (DP mbs)) "
                                                  "or --microbatches, not both")
        schedule = schedule or "1f1b"
    cfg.validate_training(t := cfg.Training(schedule=schedule, microbatches=microbatches, vpp=vpp, attention=attention))
    return t


def _policies(recompute) -> Tuple[str, ...]:
    """The recomputation policies of ``recompute`` (a comma-separated text; None: every named policy)."""
    known = kernels.policies()
    if recompute is None:
        return known
    policies = tuple(dict.fromkeys(x.strip() for x in recompute.split(",") if x.strip()))
    bad = [x for x in policies if x not in known]
    if bad or not policies:
        raise cfg.ConfigError("recompute", f"--recompute must list policies among {', '.join(known)}, "
                                           f"got {recompute!r}")
    return policies


def configurations(model: cfg.ModelSpec, gpus: int, hbm: int, *, zeros=(0, 1, 2, 3), recompute=None,
                   mbs=(1, 2, 4), seqs=(4096,), overheads: str = "high", schedule=None, microbatches=None,
                   vpp=None, global_batch=None, gpus_per_node: Optional[int] = 8, progress=None,
                   attention: str = "eager", options: Optional[cfg.Training] = None) -> SearchResult:
    """Every configuration of ``gpus`` GPUs (layouts x ZeRO stages ``zeros`` x policies ``recompute``, a
    comma-separated text or None for every named one, x ``mbs`` x ``seqs``) against ``hbm`` bytes at one end of the
    Sec. 6 ranges, TP and ETP inside a node of ``gpus_per_node``.  ``options``: a Training whose conventions,
    offloading, linear recipe, quantized gather and virtual layers the configurations run under (exact.py)."""
    policies = _policies(recompute)
    bad = [z for z in zeros if z not in cfg.ZERO_NAMES]
    if bad:
        raise cfg.ConfigError("zero", f"--zero must list ZeRO stages among 0,1,2,3, got {bad}")
    training = pipeline(schedule, microbatches, vpp, global_batch, attention)
    if options is not None:
        training = replace(training, conventions=options.conventions, offload=options.offload,
                           linear_recipe=options.linear_recipe, quantized_params=options.quantized_params,
                           virtual_layers=options.virtual_layers)
        cfg.validate_training(training)
    if gpus_per_node is not None and (isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int)
                                      or not 1 <= gpus_per_node <= 1024):
        raise cfg.ConfigError("gpus-per-node", f"--gpus-per-node must be an integer in 1..1024, got {gpus_per_node!r}")
    zeros = tuple(dict.fromkeys(zeros))
    seqs = tuple(dict.fromkeys(seqs))
    enum = enumerate_layouts(model, gpus, seqs, gpus_per_node)
    return search(model, gpus, hbm, kernels.choices(model, zeros, policies, attention),
                  mbs=tuple(dict.fromkeys(mbs)),
                  seqs=seqs, training=training, overheads=named_values(overheads), enumeration=enum,
                  global_batch=global_batch, progress=progress)
