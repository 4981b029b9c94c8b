"""Configuration search: every valid layout for a GPU count, every stage, one vectorised pass.

A configuration is a parallel layout (DP, TP, PP, EP, ETP, CP with DP*TP*PP*CP = GPUs;
SP = TP, sequence parallelism on as in the paper's Table 9), a ZeRO stage, a
recomputation policy, a micro-batch b and a sequence length s.  The search

1. enumerates the layouts over the divisor lattice of the GPU count (EP over the divisors
   of N, ETP over those of h_E, EP*ETP dividing DP*TP) and keeps those that pass
   :func:`derivations.config.validate_layout`, the one authority on validity; invalid
   combinations never reach evaluation, and the rejections are counted by constraint;
2. lists, per PP, the *distinct* stage compositions (L_d, L_m, e_E, e_H) of
   :func:`derivations.config.stages` (identical stages have identical memory);
3. evaluates every component term (weights/gradients/optimizer replicated or sharded,
   activations of every recomputation policy) for every (layout, s, b, composition) row
   in one vectorised pass of a lambdified function (:func:`symbolic.numeric.compile` of a
   tuple of expressions, model dimensions and bytes substituted, common subexpressions
   shared; on large grids in the :func:`factored` form), in cache-sized blocks (:func:`evaluate`);
4. picks the components of each (ZeRO stage, policy), takes the most-loaded stage of
   each configuration and applies the Sec. 6 peak ``(1 + f_frag) * total + M_buf``.

The component expressions and which of them each (ZeRO stage, policy) uses are given by
the caller (``derivations.totals``); the kernel is :mod:`symbolic.search`.  Numbers are float64
evaluations of exact rational expressions: integers below 2^53 come out exact after
rounding to the nearest byte, which is how rows report bytes.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from symbolic.search import FACTOR_ABOVE, divisors, evaluate, factored  # noqa: F401

from derivations import config as cfg
from derivations import notation as nt
from derivations.assembly.overheads import peak

#: Layout symbols in the order the search's row arrays are built.
LAYOUT_FIELDS = ("dp", "tp", "pp", "ep", "etp", "cp")


class Enumeration:
    """Valid layouts for a GPU count, and how many lattice candidates each rule rejected.

    ``arrays``: {dp, tp, pp, ep, etp, cp: int64 array} of the valid layouts, in the lattice's
    order (TP, then PP, CP, EP, ETP ascending); ``layouts`` the same as :class:`Layout` objects
    (built on first use)."""

    def __init__(self, gpus: int, layouts=None, rejected: Optional[Counter] = None, arrays=None):
        import numpy as np
        self.gpus = gpus
        self._distinct = None  # no layout twice (memo of _distinct)
        self.rejected = Counter() if rejected is None else rejected
        if arrays is None:
            layouts = list(layouts or [])
            arrays = {k: np.array([getattr(x, k) for x in layouts], dtype=np.int64) for k in LAYOUT_FIELDS}
            self._layouts = layouts
        else:
            self._layouts = None
        self.arrays = arrays

    @property
    def layouts(self) -> List[cfg.Layout]:
        if self._layouts is None:
            cols = [self.arrays[k].tolist() for k in LAYOUT_FIELDS]
            self._layouts = [cfg.Layout(dp=a, tp=b, pp=c, ep=d, etp=e, cp=f) for a, b, c, d, e, f in zip(*cols)]
        return self._layouts

    def __len__(self) -> int:
        return len(self.arrays["dp"])

    @property
    def candidates(self) -> int:
        return len(self) + sum(self.rejected.values())


#: The largest cluster searched (the largest training clusters are ~10^5 GPUs; a wide margin).
MAX_GPUS = 2 ** 20


def lattice(model: cfg.ModelSpec, gpus: int):
    """Every candidate layout of the divisor lattice as int64 columns {dp, tp, pp, ep, etp, cp}:
    DP*TP*PP*CP = ``gpus``, EP a divisor of gcd(N, DP*TP*CP), ETP of gcd(h_E, DP*TP*CP/EP), in the
    order of nested loops over TP, PP, CP, EP, ETP (ascending)."""
    import numpy as np
    D = np.array(divisors(gpus), dtype=np.int64)
    tp, pp = np.meshgrid(D, D, indexing="ij")
    ok = gpus % (tp * pp) == 0
    tp, pp = tp[ok], pp[ok]
    rest = gpus // (tp * pp)
    ok = rest[:, None] % D[None, :] == 0                     # CP divides what TP and PP leave
    i, j = np.nonzero(ok)
    tp, pp, cp = tp[i], pp[i], D[j]
    dp = gpus // (tp * pp * cp)
    dtc = dp * tp * cp
    E = np.array(divisors(model.N), dtype=np.int64)
    F = np.array(divisors(model.h_E), dtype=np.int64)
    ok = (dtc[:, None, None] % E[None, :, None] == 0) & \
        ((dtc[:, None, None] // E[None, :, None]) % F[None, None, :] == 0)
    t, e, f = np.nonzero(ok)
    return {"dp": dp[t], "tp": tp[t], "pp": pp[t], "ep": E[e], "etp": F[f], "cp": cp[t]}


def rejections(model: cfg.ModelSpec, lay: Mapping, seqs: Sequence[int] = (4096,),
               gpus_per_node: Optional[int] = None):
    """The rules of :func:`derivations.config.validate_layout` (and the node rule) as array predicates:
    an object array naming, per candidate of the lattice, the first rule it breaks (None: valid), in
    validate_layout's order.  The tests check that it rejects exactly what validate_layout rejects,
    constraint by constraint; the lattice's construction already satisfies positive integers,
    EP | N, EDP integer and ETP | h_E."""
    import numpy as np
    code, names = _rejection_codes(model, lay, seqs, gpus_per_node)
    return np.array([None] + list(names), dtype=object)[code]


def _rejection_codes(model: cfg.ModelSpec, lay: Mapping, seqs: Sequence[int] = (4096,),
                     gpus_per_node: Optional[int] = None):
    """:func:`rejections` as (int8 array: 0 valid, i the i-th name, names): small integers instead of
    Python objects, so the rules and the counts are array operations."""
    import numpy as np
    tp, pp, cp, ep, etp, dp = (lay[k] for k in ("tp", "pp", "cp", "ep", "etp", "dp"))
    out = np.zeros(len(tp), dtype=np.int8)
    names: List[str] = []

    def rule(name, bad):
        if name not in names:
            names.append(name)
        out[bad & (out == 0)] = names.index(name) + 1
    if gpus_per_node:
        rule("tp-inside-node", (gpus_per_node % tp != 0) | (gpus_per_node % etp != 0))
    rule("tp-divides-heads", model.n_h % tp != 0)
    rule("ep-divides-experts", model.N % ep != 0)
    rule("edp-integer", (dp * tp * cp) % (ep * etp) != 0)
    rule("etp-divides-expert", model.h_E % etp != 0)
    rule("tp-divides-ffn", model.h_F % tp != 0)
    rule("pp-layers", pp > model.l)
    for s in seqs:
        rule("cp-divides-seq", s % cp != 0)
        rule("sp-divides-seq", s % (tp * cp) != 0)
    return out, tuple(names)


def enumerate_layouts(model: cfg.ModelSpec, gpus: int, seqs: Sequence[int] = (4096,),
                      gpus_per_node: Optional[int] = None) -> Enumeration:
    """Every layout with DP*TP*PP*CP = ``gpus`` that passes ``validate_layout`` for every s in ``seqs``;
    with ``gpus_per_node``, tensor-parallel groups (TP and ETP) stay inside a node (each divides it).
    The lattice and the rules are arrays (:func:`lattice`, :func:`rejections`)."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise cfg.ConfigError("gpus", f"--gpus must be a positive integer, got {gpus!r}")
    if gpus > MAX_GPUS:
        raise cfg.ConfigError("gpus", f"--gpus must be at most 2^20 = {MAX_GPUS:,} (the search's ceiling), got {gpus}")
    from derivations.config.limits import OPTIONS  # bounded work: every s inside derivations/config/limits.py (floats stay in range)
    for s in seqs:
        OPTIONS["seq"].check(s, "--seq")
    import numpy as np
    lay = lattice(model, gpus)
    code, names = _rejection_codes(model, lay, seqs, gpus_per_node)
    valid = code == 0
    counts = np.bincount(code, minlength=len(names) + 1)
    rejected = Counter({k: int(counts[i + 1]) for i, k in sorted(enumerate(names), key=lambda x: x[1])
                        if counts[i + 1]})
    return Enumeration(gpus, rejected=rejected, arrays={k: lay[k][valid] for k in LAYOUT_FIELDS})


def distinct_stages(model: cfg.ModelSpec, layout: cfg.Layout) -> List[cfg.StageComposition]:
    """The first stage of each distinct composition (L_d, L_m, e_E, e_H) of a layout's pipeline split."""
    seen, out = set(), []
    for st in cfg.stages(model, layout):
        key = (st.dense, st.moe, st.embedding, st.head)
        if key not in seen:
            seen.add(key)
            out.append(st)
    return out


@dataclass
class SearchResult:
    """Every evaluated configuration (columns of equal length) and the counts the command prints.

    columns: dp, tp, pp, ep, etp, cp, sp, edp, mbs, seq, zero, recompute (index into
    ``policies``), stage (index of the most-loaded stage), the four components, total,
    peak, headroom (bytes, float64), fits (bool).
    """

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
    #: without a schedule, the (s, b) groups of each layout: the rows are choices x layouts x groups, in
    #: order (:func:`layout_index`); None when the rows are laid out otherwise
    layout_groups: Optional[int] = None

    @property
    def considered(self) -> int:
        return len(self.columns["total"])

    @property
    def fitting(self) -> int:
        return int(self.columns["fits"].sum())


@lru_cache(maxsize=64)
def _stage_table(model, pps: Tuple[int, ...]):
    """((max PP + 1, K, 5) int64 table: per PP its distinct stage compositions L_d, L_m, e_E, e_H and
    stage index, padded to K by repeating the last; K), for the PP degrees ``pps``."""
    import numpy as np
    stage_of = {pp: distinct_stages(model, cfg.Layout(pp=pp)) for pp in pps}
    K = max((len(v) for v in stage_of.values()), default=1)
    table = np.zeros((max(stage_of, default=0) + 1, K, 5), dtype=np.int64)
    for pp, sts in stage_of.items():
        rows = [(s.dense, s.moe, int(s.embedding), int(s.head), s.index) for s in sts]
        table[pp] = rows + [rows[-1]] * (K - len(rows))
    table.setflags(write=False)
    return table, K


def _rows(model, enum: Enumeration, seqs, mbs):
    """The evaluation grid: one row per (layout, s, b) group, K stage compositions per row
    (padded by repeating the last).  Returns (columns of the groups, (n_g, K, 5) compositions:
    L_d, L_m, e_E, e_H, stage index)."""
    import numpy as np
    lay = enum.arrays
    table, K = _stage_table(model, tuple(sorted(set(lay["pp"].tolist()))))
    n_l = len(enum)
    per_layout = table[lay["pp"]]
    seq_a, mbs_a = np.array(seqs, dtype=np.int64), np.array(mbs, dtype=np.int64)
    n_s, n_b = len(seq_a), len(mbs_a)  # group index g = ((layout * n_s) + s) * n_b + b
    li = np.repeat(np.arange(n_l), n_s * n_b)
    si = np.tile(np.repeat(np.arange(n_s), n_b), n_l)
    bi = np.tile(np.arange(n_b), n_l * n_s)
    cols = {k: v[li] for k, v in lay.items()}
    cols["sp"] = cols["tp"]  # sequence parallelism on: SP = TP (Table 9)
    cols["seq"], cols["mbs"] = seq_a[si], mbs_a[bi]
    return cols, per_layout[li]


def _compile(model, training, exprs: Mapping[str, object], factor: bool):
    """(numpy function, its argument names, the keys of its outputs) of every expression (model
    dimensions and bytes substituted; in the :func:`factored` form when ``factor``)."""
    import sympy as sp

    from symbolic.numeric import compile as compile_fn
    row_symbols = (nt.DP, nt.TP, nt.PP, nt.EP, nt.ETP, nt.CP, nt.SP, nt.b, nt.s, nt.L_d, nt.L_m, nt.e_E, nt.e_H)
    fixed = {k: v for k, v in cfg.substitution(model, None, training or cfg.Training()).items()
             if k not in row_symbols}
    keys = list(exprs)
    tup = sp.Tuple(*[nt.expand_derived(sp.sympify(getattr(exprs[k], "expr", exprs[k]))).xreplace(fixed)
                     for k in keys])
    if factor:  # a large grid: the factored form evaluates ~2x faster, its extra compile pays
        tup = factored(tup)
    args = sorted(tup.free_symbols, key=lambda x: x.name)
    return compile_fn(tup, args), tuple(a.name for a in args), tuple(keys)


def _values(model, training, exprs: Mapping[str, object], cols, compo, kernel=None) -> Dict[str, object]:
    """{key: (n_g, K) float64 array}: every expression in one vectorised pass (model dimensions
    and bytes substituted, the layout, b, s and the compositions as arrays).  ``kernel``: a
    function of the factored flag giving what :func:`_compile` gives (a cached compilation)."""
    import numpy as np
    n_g, K = compo.shape[:2]
    factor = n_g * K > FACTOR_ABOVE
    fn, args, keys = kernel(factor) if kernel is not None else _compile(model, training, exprs, factor)
    flat = {nt.DP.name: cols["dp"], nt.TP.name: cols["tp"], nt.PP.name: cols["pp"], nt.EP.name: cols["ep"],
            nt.ETP.name: cols["etp"], nt.CP.name: cols["cp"], nt.SP.name: cols["sp"], nt.b.name: cols["mbs"],
            nt.s.name: cols["seq"]}
    comp_sym = {nt.L_d.name: 0, nt.L_m.name: 1, nt.e_E.name: 2, nt.e_H.name: 3}
    vals = []
    for a in args:
        if a in comp_sym:
            vals.append(compo[:, :, comp_sym[a]].astype(np.float64))
        elif a in flat:
            vals.append(flat[a].astype(np.float64)[:, None])
        else:
            raise cfg.ConfigError("missing-values", f"search: no value for {a} (not a layout, training or stage symbol)")
    outs = evaluate(fn, vals)
    return {k: np.broadcast_to(np.asarray(o, dtype=np.float64), (n_g, K)) for k, o in zip(keys, outs)}


def _most_loaded(value, choices, compo):
    """Per (ZeRO stage, policy): each configuration's components at its most-loaded stage.
    Returns ({column: [block per choice]}, group index of every output row)."""
    import numpy as np
    n_g = compo.shape[0]
    zeros = sorted({z for z, _ in choices})
    policies = tuple(dict.fromkeys(r for _, r in choices))
    comps = list(next(iter(choices.values())))
    blocks = {c: [] for c in comps + ["total", "zero", "recompute", "stage"]}
    rows_g = []
    K = compo.shape[1]
    base = np.arange(n_g) * K
    stage = np.ascontiguousarray(compo[:, :, 4])

    def at(a, flat):  # a[g, j[g]] of each group (flat = g K + j); a column broadcast over the compositions is the column
        if a.strides[1] == 0:
            return a[:, 0]
        return np.ascontiguousarray(a).reshape(-1).take(flat)
    partial = {}  # the components but the last summed once per distinct (ids): the same additions in order
    for z in zeros:
        for ri, r in enumerate(policies):
            pick = choices.get((z, r))
            if pick is None:
                continue
            head = tuple(pick[c] for c in comps[:-1])
            if head not in partial:
                partial[head] = sum(value[k] for k in head)
            total = partial[head] + value[pick[comps[-1]]] if comps[:-1] else sum(value[pick[c]] for c in comps)
            flat = base + np.argmax(total, axis=1)  # first most-loaded composition
            for c in comps:
                blocks[c].append(at(value[pick[c]], flat))
            blocks["total"].append(at(total, flat))
            blocks["zero"].append(np.full(n_g, z, dtype=np.int64))
            blocks["recompute"].append(np.full(n_g, ri, dtype=np.int64))
            blocks["stage"].append(at(stage, flat))
            rows_g.append(np.arange(n_g))
    return blocks, (np.concatenate(rows_g) if rows_g else np.zeros(0, np.int64))


def search(model: cfg.ModelSpec, gpus: int, hbm: int, exprs: Mapping[str, object],
           choices: Mapping[Tuple[int, str], Mapping[str, str]], *, mbs: Sequence[int] = (1, 2, 4),
           seqs: Sequence[int] = (4096,), training: cfg.Training | None = None, overheads: Mapping | None = None,
           enumeration: Enumeration | None = None, global_batch: Optional[int] = None,
           progress: Optional[Callable[[int, int], None]] = None, kernel=None) -> SearchResult:
    """Evaluate every valid configuration for ``gpus`` GPUs against ``hbm`` bytes.

    exprs: {key: expression} of every component any choice uses (symbolic in everything).
    choices: {(zero, policy): {component: key of exprs}}, components in the order to report.
    training: the other training settings (bytes per element of Table 7 and any extension
        symbols); its b and s are replaced by ``mbs`` and ``seqs``.  Default: the paper's.
    overheads: {f_frag: f, M_buf: buf} (Sec. 6); default none.
    With ``training.schedule`` (or a ``global_batch``, sequences per step: m = global_batch /
    (DP b)) every device of every layout is judged at its peak under the schedule
    (:mod:`derivations.scheduled`); without, each layout's stages hold one micro-batch (the paper's view).
    kernel: without a schedule, a function of the factored flag giving the compiled ``exprs`` (what
    :func:`_compile` gives; :func:`configurations` passes one cached on disk).
    """
    import numpy as np
    for name, values in (("--mbs", mbs), ("--seq", seqs)):
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise cfg.ConfigError("positive-integer", f"{name} values must be positive integers, got {list(values)}")
    enum = enumeration or enumerate_layouts(model, gpus, seqs)
    over = dict(overheads or {nt.f_frag: 0, nt.M_buf: 0})
    training = training or cfg.Training()
    if training.schedule or global_batch is not None:
        from derivations.analyses import scheduled
        cols, _ = _rows(model, enum, seqs, mbs)
        out, invalid = scheduled.run(model, training, exprs, choices, cols, global_batch, progress)
        groups = None
    else:
        invalid = Counter()
        groups = len(seqs) * len(mbs)
        cols, compo = _rows(model, enum, seqs, mbs)
        blocks, g = _most_loaded(_values(model, training, exprs, cols, compo, kernel), choices, compo)
        cols["edp"] = cols["dp"] * cols["tp"] * cols["cp"] // (cols["ep"] * cols["etp"])
        n_c = len(g) // max(len(cols["dp"]), 1)  # g is arange(n_g) once per choice: a tile, not a gather
        out = {k: np.tile(v, n_c) for k, v in cols.items()}
        for k, v in blocks.items():
            out[k] = np.concatenate(v) if v else np.zeros(0)
    if "edp" not in out:
        out["edp"] = out["dp"] * out["tp"] * out["cp"] // (out["ep"] * out["etp"])
    out["peak"] = peak(out["total"], float(over[nt.f_frag]), float(over[nt.M_buf]))
    out["headroom"] = hbm - out["peak"]
    out["fits"] = out["peak"] <= hbm
    if "microbatches" in out:  # the pipeline bubble fraction (PP - 1) / (m + PP - 1) of each configuration
        m = np.where(out["microbatches"] > 0, out["microbatches"], 10 ** 9).astype(np.float64)
        out["bubble"] = (out["pp"] - 1) / (m + out["pp"] - 1)
    return SearchResult(gpus, hbm, enum, tuple(dict.fromkeys(r for _, r in choices)), over, out,
                        schedule=training.schedule, global_batch=global_batch, invalid=invalid,
                        layout_groups=groups)


SORTS = ("bubble", "peak", "headroom")


def order(result: SearchResult, only_fitting: bool = True, sort: str = "bubble"):
    """Row indices, fitting configurations only by default.

    sort 'bubble' (the default): the fewest pipeline bubbles first ((PP - 1)/(m + PP - 1) under
    a schedule; PP without one), then the most headroom, then the smaller TP; 'peak': largest
    peak first (the configurations that use the memory best); 'headroom': most headroom first.
    Ties are broken by ZeRO stage, recomputation, TP, PP, CP, EP, ETP, b, s (ascending), so the
    order is deterministic.
    """
    import numpy as np
    c = result.columns
    if sort not in SORTS:
        raise cfg.ConfigError("sort", f"--sort must be one of {', '.join(SORTS)}, got {sort!r}")
    idx = np.flatnonzero(c["fits"]) if only_fitting else np.arange(len(c["peak"]))
    if sort == "bubble":
        bubble = c["bubble"][idx] if "bubble" in c else c["pp"][idx].astype(np.float64)
        keys = [np.round(bubble, 12), -np.round(c["headroom"][idx])] + \
            [c[k][idx] for k in ("tp", "zero", "recompute", "pp", "cp", "ep", "etp", "mbs", "seq")]
    else:
        keys = [np.round(c["peak"][idx]) * (-1 if sort == "peak" else 1)] + \
            [c[k][idx] for k in ("zero", "recompute", "tp", "pp", "cp", "ep", "etp", "mbs", "seq")]
    return idx[_sort_by(keys)]


def _keys(result: SearchResult, sort: str):
    """The sort keys of :func:`order`, most significant first, as functions of row indices."""
    import numpy as np
    c = result.columns
    if sort not in SORTS:
        raise cfg.ConfigError("sort", f"--sort must be one of {', '.join(SORTS)}, got {sort!r}")
    col = lambda k: lambda i: c[k][i]
    if sort == "bubble":
        first = (lambda i: np.round(c["bubble"][i], 12)) if "bubble" in c else (lambda i: c["pp"][i].astype(np.float64))
        return [first, lambda i: -np.round(c["headroom"][i])] + \
            [col(k) for k in ("tp", "zero", "recompute", "pp", "cp", "ep", "etp", "mbs", "seq")]
    sign = -1 if sort == "peak" else 1
    return [lambda i: np.round(c["peak"][i]) * sign] + \
        [col(k) for k in ("zero", "recompute", "tp", "pp", "cp", "ep", "etp", "mbs", "seq")]


def layout_index(result: SearchResult):
    """(int64 id of each row's layout (DP, TP, PP, EP, ETP, CP), number of ids): the rows of one layout
    share an id.  Without a schedule the rows are the choices x (layout, s, b) groups in order, so the id
    is arithmetic; otherwise the layouts are numbered by their values."""
    import numpy as np
    c = result.columns
    n = len(c["dp"])
    n_l = len(result.enumeration)
    if result.layout_groups and n_l and n % (n_l * result.layout_groups) == 0 and _distinct(result.enumeration):
        return (np.arange(n, dtype=np.int64) % (n_l * result.layout_groups)) // result.layout_groups, n_l
    if not n:
        return np.zeros(0, np.int64), 0
    cols = [c[k].astype(np.int64) for k in LAYOUT_FIELDS]
    radices = [int(col.max()) + 1 for col in cols]
    if min(int(col.min()) for col in cols) >= 0 and np.prod([float(r) for r in radices]) < 2.0 ** 62:
        key = np.zeros(n, dtype=np.int64)  # one integer per layout (mixed radix)
        for col, r in zip(cols, radices):
            key = key * r + col
    else:
        key = np.stack(cols, axis=1)
    _, inv = np.unique(key, axis=None if key.ndim == 1 else 0, return_inverse=True)
    inv = inv.reshape(-1).astype(np.int64)
    return inv, int(inv.max()) + 1


def _distinct(enum: Enumeration) -> bool:
    """No layout twice in ``enum`` (true of :func:`enumerate_layouts`; a caller's list may repeat one)."""
    import numpy as np
    if enum._distinct is None:
        cols = [enum.arrays[k].astype(np.int64) for k in LAYOUT_FIELDS]
        if not len(cols[0]):
            enum._distinct = True
        elif min(int(c.min()) for c in cols) >= 0 and np.prod([float(c.max()) + 1 for c in cols]) < 2.0 ** 62:
            key = np.zeros(len(cols[0]), dtype=np.int64)  # one integer per layout (mixed radix)
            for c in cols:
                key = key * (int(c.max()) + 1) + c
            key = np.sort(key)
            enum._distinct = not np.any(key[1:] == key[:-1])
        else:
            enum._distinct = len(np.unique(np.stack(cols, axis=1), axis=0)) == len(cols[0])
    return enum._distinct


def _group_min(values, ids, n_ids):
    """The minimum of ``values`` over the rows of each id (ids in 0..n_ids-1)."""
    import numpy as np
    fill = np.inf if values.dtype.kind == "f" else np.iinfo(values.dtype).max
    out = np.full(n_ids, fill, dtype=values.dtype)
    np.minimum.at(out, ids, values)
    return out


def ranked(result: SearchResult, sort: str = "bubble", per_layout: bool = True, top: Optional[int] = None):
    """``order(result, sort=sort)``, with ``per_layout`` passed through :func:`first_per_layout`, its first
    ``top`` rows (all with None): the same indices, without sorting every row.

    Per layout, the first row in the order is the layout's minimum by the keys (then the row index, as
    the sort is stable): the candidates are narrowed key by key to each layout's minimum (one pass of
    ``np.minimum.at`` per key, usually a few keys), and only the winners, one per layout, are sorted.
    Across every configuration the first ``top`` rows are selected key by key with ``np.partition`` and
    only those sorted.  Keys with a NaN take the full sort."""
    import numpy as np
    keys = _keys(result, sort)
    cand = np.flatnonzero(result.columns["fits"])
    if not per_layout and top is None:
        return order(result, sort=sort)
    c = result.columns
    if any(c[k].dtype.kind == "f" and np.isnan(c[k][cand]).any() for k in ("bubble", "headroom", "peak") if k in c):
        idx = order(result, sort=sort)
        idx = first_per_layout(result, idx) if per_layout else idx
        return idx if top is None else idx[:top]
    if per_layout:  # rows (ascending) narrowed to each layout's minimum, key by key
        ids, n_ids = layout_index(result)
        present = int(np.count_nonzero(np.bincount(ids[cand], minlength=n_ids))) if len(cand) else 0
        keep = cand
        for k in keys:
            if len(keep) == present:  # one candidate left per layout
                break
            x, g = k(keep), ids[keep]
            keep = keep[x == _group_min(x, g, n_ids)[g]]
        g = ids[keep]  # ties in every key: the lowest row of each layout (keep ascends)
        by = np.argsort(g, kind="stable")
        first = by[np.r_[True, g[by][1:] != g[by][:-1]]] if len(g) else by
        keep = keep[np.sort(first)]
    else:
        keep = _first(keys, cand, 0, top)
    out = keep[_sort_by([k(keep) for k in keys])]
    return out if top is None else out[:top]


def _first(keys, rows, j, n):
    """Rows (ascending) among ``rows`` (ascending) holding at least the first ``n`` in the lexicographic
    order of ``keys[j:]`` (then row): those below the n-th smallest value of key j, and of those equal to
    it the first ones by the later keys."""
    import numpy as np
    if len(rows) <= n:
        return rows
    if j == len(keys):
        return rows[:n]
    x = keys[j](rows)
    kth = np.partition(x, n - 1)[n - 1]
    less = rows[x < kth]
    tied = _first(keys, rows[x == kth], j + 1, n - len(less))
    return np.sort(np.concatenate([less, tied]))


def _sort_by(keys):
    """The stable order of rows by ``keys`` (most significant first), the order ``np.lexsort(keys[::-1])``
    gives: the keys become dense ranks packed into one int64 (one sort instead of one per key) when
    they fit in 62 bits."""
    import numpy as np
    ranks, widths = [], []
    for k in keys:
        k = np.asarray(k)
        if k.dtype.kind in "iu" and len(k) and k.min() >= 0 and k.max() < 1 << 22:  # small integers: O(n) ranks
            present = np.zeros(int(k.max()) + 1, dtype=bool)
            present[k] = True
            dense = np.cumsum(present) - 1
            ranks.append(dense[k].astype(np.int64))
            widths.append(int(dense[-1]).bit_length())
        elif k.ndim == 1 and len(k) and not (k.dtype.kind == "f" and np.isnan(k).any()):
            by = np.argsort(k, kind="stable")  # dense ranks by one sort (np.unique's, without its set-up)
            new = np.r_[True, k[by][1:] != k[by][:-1]]
            rank = np.empty(len(k), dtype=np.int64)
            rank[by] = np.cumsum(new) - 1
            ranks.append(rank)
            widths.append(int(rank.max()).bit_length())
        else:
            u, inv = np.unique(k, return_inverse=True)
            ranks.append(inv.reshape(-1).astype(np.int64))
            widths.append(int(len(u) - 1).bit_length())
    if sum(widths) > 62:
        return np.lexsort(keys[::-1])
    packed = np.zeros(len(keys[0]), dtype=np.int64)
    for r, w in zip(ranks, widths):
        packed = (packed << w) | r
    return np.argsort(packed, kind="stable")


def first_per_layout(result: SearchResult, idx):
    """``idx`` (ordered rows) keeping the first row of each layout (DP, TP, PP, EP, ETP, CP):
    one row per layout, its best-ranked fitting configuration, in the same order."""
    import numpy as np
    c = result.columns
    if len(idx) == 0:
        return idx
    cols = [c[k][idx].astype(np.int64) for k in ("dp", "tp", "pp", "ep", "etp", "cp")]
    radices = [int(col.max()) + 1 for col in cols]
    if np.prod([float(r) for r in radices]) < 2.0 ** 62:  # one integer key per layout (mixed radix)
        key = np.zeros(len(idx), dtype=np.int64)
        for col, r in zip(cols, radices):
            key = key * r + col
        _, first = np.unique(key, return_index=True)
        return idx[np.sort(first)]
    by = np.lexsort(cols[::-1])                      # rows grouped by layout, stable: positions ascend
    grouped = np.stack([col[by] for col in cols], axis=1)
    starts = np.flatnonzero(np.r_[True, np.any(grouped[1:] != grouped[:-1], axis=1)])
    first = by[starts]                               # the earliest position of each layout in ``idx``
    return idx[np.sort(first)]


ROW_KEYS = ("dp", "tp", "pp", "ep", "etp", "cp", "sp", "edp", "mbs", "seq", "zero", "recompute", "stage",
            "weights", "gradients", "optimizer", "activations", "total", "peak", "headroom")
BYTE_KEYS = ("weights", "gradients", "optimizer", "activations", "total", "peak", "headroom")


def row_keys(result: SearchResult) -> Tuple[str, ...]:
    """ROW_KEYS, and under a schedule the micro-batch count m of each configuration."""
    return ROW_KEYS + (("microbatches",) if "microbatches" in result.columns else ())


def columns(result: SearchResult, idx) -> Dict[str, list]:
    """The row keys as Python lists for the rows ``idx``: bytes rounded to the nearest byte, policies by name."""
    import numpy as np
    c = result.columns
    out = {}
    for k in row_keys(result):
        a = c[k][idx]
        out[k] = np.rint(a).astype(np.int64).tolist() if k in BYTE_KEYS else a.tolist()
    out["recompute"] = [result.policies[i] for i in out["recompute"]]
    return out


def rows(result: SearchResult, idx) -> List[Dict]:
    """Rows as dicts (bytes rounded to the nearest byte), lowercase layout keys."""
    cols, keys = columns(result, idx), row_keys(result)
    return [dict(zip(keys, vals)) for vals in zip(*(cols[k] for k in keys))]


def pipeline(schedule=None, microbatches=None, vpp=None, global_batch=None) -> cfg.Training:
    """The schedule part of a search or fit: with a global batch and no schedule, 1F1B (what
    Megatron-LM runs); a global batch and a fixed micro-batch count conflict."""
    if global_batch is not None:
        if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
            raise cfg.ConfigError("global-batch", f"--global-batch must be a positive integer, got {global_batch!r}")
        if microbatches is not None:
            raise cfg.ConfigError("global-batch", "give --global-batch (sequences per step: m = global / (DP mbs)) "
                                                  "or --microbatches, not both")
        schedule = schedule or "1f1b"
    t = cfg.Training(schedule=schedule, microbatches=microbatches, vpp=vpp)
    cfg.validate_training(t)
    return t


def configurations(model: cfg.ModelSpec, gpus: int, hbm: int, *, zeros=(0, 1, 2, 3), recompute=None,
                   mbs=(1, 2, 4), seqs=(4096,), overheads: str = "high", schedule=None, microbatches=None,
                   vpp=None, global_batch=None, gpus_per_node: Optional[int] = 8, progress=None) -> SearchResult:
    """Every configuration of ``gpus`` GPUs (layouts x ZeRO stages ``zeros`` x recomputation
    policies ``recompute``, a comma-separated text or None for every named policy, x ``mbs``
    x ``seqs``) evaluated against ``hbm`` bytes at one end of the Sec. 6 ranges; under a
    schedule (or a global batch) at each configuration's most-loaded device, TP and ETP inside
    a node of ``gpus_per_node`` GPUs."""
    from derivations.assembly import totals
    from derivations.assembly.overheads import overhead_values
    known = totals.policies()
    if recompute is None:
        policies = known
    else:
        policies = tuple(dict.fromkeys(x.strip() for x in recompute.split(",") if x.strip()))
        bad = [x for x in policies if x not in known]
        if bad or not policies:
            raise cfg.ConfigError("recompute", f"--recompute must list policies among {', '.join(known)}, "
                                               f"got {recompute!r}")
    bad = [z for z in zeros if z not in cfg.ZERO_NAMES]
    if bad:
        raise cfg.ConfigError("zero", f"--zero must list ZeRO stages among 0,1,2,3, got {bad}")
    training = pipeline(schedule, microbatches, vpp, global_batch)
    if gpus_per_node is not None and (isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int)
                                      or not 1 <= gpus_per_node <= 1024):
        raise cfg.ConfigError("gpus-per-node", f"--gpus-per-node must be an integer in 1..1024, got {gpus_per_node!r}")
    zeros = tuple(dict.fromkeys(zeros))
    seqs = tuple(dict.fromkeys(seqs))
    enum = enumerate_layouts(model, gpus, seqs, gpus_per_node)
    kw = dict(mbs=tuple(dict.fromkeys(mbs)), seqs=seqs, training=training, overheads=overhead_values(overheads),
              enumeration=enum, global_batch=global_batch, progress=progress)
    if training.schedule or global_batch is not None:
        choices = totals.choices(model, zeros, policies)
        return search(model, gpus, hbm, totals.choice_terms(model, choices), choices, **kw)
    _, K = _stage_table(model, tuple(sorted(set(enum.arrays["pp"].tolist()))))
    expected = len(enum) * len(kw["seqs"]) * len(kw["mbs"]) * K > FACTOR_ABOVE  # what _values will decide

    def kernel(factor):
        k = _kernel(model, training, zeros, policies, factor)
        return _function(k["source"]), k["args"], k["keys"]
    return search(model, gpus, hbm, None, _kernel(model, training, zeros, policies, expected)["choices"],
                  kernel=kernel, **kw)


@lru_cache(maxsize=64)
def _kernel(model, training, zeros, policies, factor: bool) -> Dict:
    """{choices, keys, args, source}: the (ZeRO stage, policy) choices of a search and the source of the
    compiled function of their terms (:func:`_compile`), kept on disk (:mod:`symbolic.cache`) keyed by
    the model, the training, the choices, ``factor`` and the sources of derivations/ and symbolic/ (and
    sympy's and Python's versions): a search of a configuration seen before skips building the terms,
    substituting them and sympy's printing.  The source is the one lambdify generated, so the numbers
    are the same.  Memoised in the process too."""
    import sys

    import sympy

    import symbolic
    from symbolic import cache, digests

    def make():
        from symbolic.numeric import source

        from derivations.assembly import totals
        choices = totals.choices(model, zeros, policies)
        fn, args, keys = _compile(model, training, totals.choice_terms(model, choices), factor)
        return {"choices": choices, "source": source(fn), "args": args, "keys": keys}
    parts = ("search-kernel", repr(model), repr(training), zeros, policies, factor, sympy.__version__,
             sys.version_info[:2], digests.source_digest(sys.modules["derivations"], symbolic))
    return cache.pickled("search", parts, make)


@lru_cache(maxsize=64)
def _function(src: str):
    from symbolic.numeric import from_source
    return from_source(src)
