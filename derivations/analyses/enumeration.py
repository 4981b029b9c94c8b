"""The search's layouts: every valid parallel layout (DP, TP, PP, EP, ETP, CP; SP = TP as in the paper's Table 9)
of a GPU count, and its distinct pipeline stages.

The candidates are the divisor lattice of the GPU count (:func:`lattice`); the valid ones are those
:func:`derivations.config.validate_layout` accepts, its rules written as array predicates (:func:`rejections`)
so rejections are counted by constraint.  numpy is imported lazily: ``memsym estimate --global-batch`` imports
:func:`distinct_stages` (through derivations/analyses/fit.py) without needing numpy.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from math import gcd
from typing import Dict, List, Mapping, Optional, Sequence

from symbolic.search import divisors

from derivations import config as cfg
from derivations import families
from derivations.config.limits import OPTIONS

#: Layout symbols in the order the search's row arrays are built.
LAYOUT_FIELDS = ("dp", "tp", "pp", "ep", "etp", "cp")

#: The largest cluster searched (the largest training clusters are ~10^5 GPUs; a wide margin).
MAX_GPUS = 2 ** 20


@dataclass
class Enumeration:
    """Valid layouts for a GPU count (``arrays``: {dp, tp, pp, ep, etp, cp: int64 array} in the lattice's order) and
    how many candidates each rule rejected."""

    gpus: int
    rejected: Counter
    arrays: Dict

    @property
    def layouts(self) -> List[cfg.Layout]:
        return [cfg.Layout(*x) for x in zip(*(self.arrays[k].tolist() for k in LAYOUT_FIELDS))]

    def __len__(self) -> int:
        return len(self.arrays["dp"])

    @property
    def candidates(self) -> int:
        return len(self) + sum(self.rejected.values())


def lattice(model: cfg.ModelSpec, gpus: int):
    """Every candidate layout as int64 columns {dp, tp, pp, ep, etp, cp}: DP*TP*PP*CP = ``gpus``, EP a divisor of
    gcd(N, DP*TP*CP), ETP of gcd(h_E, DP*TP*CP/EP), in nested-loop order over TP, PP, CP, EP, ETP (ascending)."""
    import numpy as np  # lazy: see the module's docstring (memsym estimate --global-batch)
    axes, ok = _lattice_axes(model, gpus)
    at = np.nonzero(ok)
    return {k: _along(v, at) for k, v in axes.items()}


def _along(axis, at):
    """The values of a factored lattice's ``axis`` at the indices ``at`` (as ``np.nonzero`` gives them)."""
    import numpy as np  # lazy: see the module's docstring (memsym estimate --global-batch)
    d = [i for i, n in enumerate(axis.shape) if n > 1]
    return axis.reshape(-1)[at[d[0]]] if d else np.full(len(at[0]), axis.reshape(-1)[0], dtype=axis.dtype)


def _lattice_axes(model: cfg.ModelSpec, gpus: int):
    """The lattice factored: ({dp, tp, pp, cp: (triples, 1, 1), ep: (1, E, 1), etp: (1, 1, F) int64 arrays},
    (triples, E, F) bool: that (TP, PP, CP) triple with that EP and ETP is a candidate)."""
    import numpy as np  # lazy: see the module's docstring (memsym estimate --global-batch)
    D = np.array(divisors(gpus), dtype=np.int64)
    tp, pp = np.meshgrid(D, D, indexing="ij")
    ok = gpus % (tp * pp) == 0
    tp, pp = tp[ok], pp[ok]
    rest = gpus // (tp * pp)
    ok = rest[:, None] % D[None, :] == 0                     # CP divides what TP and PP leave
    i, j = np.nonzero(ok)
    tp, pp, cp = tp[i], pp[i], D[j]
    dp = gpus // (tp * pp * cp)
    dtc = (dp * tp * cp)[:, None, None]
    E = np.array(_axis_divisors(model, "ep"), dtype=np.int64)[None, :, None]
    F = np.array(_axis_divisors(model, "etp"), dtype=np.int64)[None, None, :]
    ok = (dtc % E == 0) & ((dtc // E) % F == 0)
    col = lambda a: a[:, None, None]
    return {"dp": col(dp), "tp": col(tp), "pp": col(pp), "ep": E, "etp": F, "cp": col(cp)}, ok


def _axis_divisors(model, axis: str) -> List[int]:
    """The degrees of layout ``axis`` that divide every dimension the family's rules split by it (EP | N,
    ETP | h_E for DeepSeek); 1 only when no rule names it (no experts to split)."""
    dims = model.named()
    sizes = [dims[d.symbol] for d in families.get(model.family).divides if d.axis == axis and d.symbol]
    return divisors(gcd(*sizes)) if sizes else [1]


def rejections(model: cfg.ModelSpec, lay: Mapping, seqs: Sequence[int] = (4096,),
               gpus_per_node: Optional[int] = None):
    """The rules of :func:`derivations.config.validate_layout` (and the node rule) as array predicates: per
    candidate the first rule it breaks (None: valid), in validate_layout's order."""
    import numpy as np  # lazy: see the module's docstring (memsym estimate --global-batch)
    code, names = _rejection_codes(model, lay, seqs, gpus_per_node)
    return np.array([None] + list(names), dtype=object)[code]


def _rejection_codes(model: cfg.ModelSpec, lay: Mapping, seqs: Sequence[int] = (4096,),
                     gpus_per_node: Optional[int] = None):
    """:func:`rejections` as (int8 array of the columns' broadcast shape: 0 valid, i the i-th name, names)."""
    import numpy as np  # lazy: see the module's docstring (memsym estimate --global-batch)
    names: List[str] = []
    broken = []  # (code, where the rule is broken), in validate_layout's order
    divides = [(d.rule, d.symbol, d.axis) for d in families.get(model.family).divides]
    for name, bad in layout_rules(model.named(), divides, model.l, lay, seqs, gpus_per_node):
        if name not in names:
            names.append(name)
        broken.append((names.index(name) + 1, bad))
    out = np.zeros(np.broadcast_shapes(*(np.shape(lay[k]) for k in LAYOUT_FIELDS)), dtype=np.int8)
    for code, bad in reversed(broken):  # the first rule broken is written last: its code stays
        np.copyto(out, code, where=bad)
    return out, tuple(names)


def layout_rules(dims, divides, layers, lay, seqs, gpus_per_node):
    """[(rule, where it is broken)] of validate_layout's rules in its order (after the node rule: TP and ETP inside a
    node of ``gpus_per_node``) at the degrees ``lay`` ({dp, tp, pp, ep, etp, cp}: the lattice's int arrays, or ints:
    the page prints this function); ``dims``: the model's named values, ``divides``: its family's (rule, symbol,
    axis) rules, ``layers``: its layer count."""
    out = []
    if gpus_per_node:
        out.append(("tp-inside-node", gpus_per_node % lay["tp"] != 0))
        out.append(("tp-inside-node", gpus_per_node % lay["etp"] != 0))
    for rule, symbol, axis in divides:
        out.append((rule, (lay["dp"] * lay["tp"] * lay["cp"]) % (lay["ep"] * lay["etp"]) != 0 if symbol is None
                    else dims[symbol] % lay[axis] != 0))
    out.append(("pp-layers", lay["pp"] > layers))
    for s in seqs:
        out.append(("cp-divides-seq", s % lay["cp"] != 0))
        out.append(("sp-divides-seq", s % (lay["tp"] * lay["cp"]) != 0))
    return out


def enumerate_layouts(model: cfg.ModelSpec, gpus: int, seqs: Sequence[int] = (4096,),
                      gpus_per_node: Optional[int] = None) -> Enumeration:
    """Every layout with DP*TP*PP*CP = ``gpus`` that passes ``validate_layout`` for every s in ``seqs``; with
    ``gpus_per_node``, TP and ETP divide it (tensor-parallel groups inside a node)."""
    import numpy as np  # lazy: see the module's docstring (memsym estimate --global-batch)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise cfg.ConfigError("gpus", f"--gpus must be a positive integer, got {gpus!r}")
    if gpus > MAX_GPUS:
        raise cfg.ConfigError("gpus", f"--gpus must be at most 2^20 = {MAX_GPUS:,} (the search's ceiling), got {gpus}")
    for s in seqs:
        OPTIONS["seq"].check(s, "--seq")
    axes, ok = _lattice_axes(model, gpus)  # the rules on the factored lattice: no array per candidate
    code, names = _rejection_codes(model, axes, seqs, gpus_per_node)
    code = np.broadcast_to(code, ok.shape)
    counts = np.bincount(code[ok], minlength=len(names) + 1)
    rejected = Counter({k: int(counts[i + 1]) for i, k in sorted(enumerate(names), key=lambda x: x[1])
                        if counts[i + 1]})
    at = np.nonzero(ok & (code == 0))  # the valid candidates' (triple, EP, ETP) indices, in the lattice's order
    return Enumeration(gpus, rejected=rejected, arrays={k: _along(axes[k], at) for k in LAYOUT_FIELDS})


def distinct_stages(model: cfg.ModelSpec, layout: cfg.Layout) -> List[cfg.StageComposition]:
    """The first stage of each distinct composition (L_d, L_m, e_E, e_H and the family's counts: DeepSeek's L_I)
    of a layout's pipeline split."""
    seen, out = set(), []
    for st in cfg.stages(model, layout):
        key = (st.dense, st.moe, st.embedding, st.head, st.extra)
        if key not in seen:
            seen.add(key)
            out.append(st)
    return out
