"""The search under the options its numpy kernels do not print: a conventions preset or switches other than the
paper's, ``--offload-activations``, ``--linear-recipe`` (``--quantized-param-gather``) and ``--virtual-layers``.

The generated kernels (derivations/analyses/kernels.py) hold the terms of the default training only.  Under any of
these options every configuration's devices are evaluated by the one printed per-device assembly, exactly as
``memsym estimate`` evaluates them (derivations/assembly/device.py ``components``: the assembly of
derivations/assembly/device_terms.py with the options' terms, generated into derivations/generated/), and the
search's columns are those numbers as float64.  So a row is ``estimate`` of its configuration at its
most-loaded stage (device under a schedule), byte for byte.  In the paper's view (no schedule) every (layout,
distinct stage) is evaluated at once (:func:`_stage_view`: the generated trees and printed functions over numpy
arrays, what depends on few values exactly once per value; tests/test_search_options.py checks every row against
``device.components``).  Under a schedule each device's activations and step are evaluated
once per (layout, stage, b, s, policy) and its model states once per ZeRO stage; a (ZeRO stage, policy) the options
refuse (offloading under full recomputation, a linear recipe under ZeRO-3) is left out, and a layout they refuse
(a --virtual-layers list of another length than PP x V, or not the stage's counts; m not a multiple of PP) is
counted invalid.
"""
from __future__ import annotations

import types
from collections import Counter
from dataclasses import replace
from fractions import Fraction
from functools import lru_cache
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from derivations import config as cfg
from derivations import evaluate as ev
from derivations.activations.shape import check_options, of_model
from derivations.activations.view import View
from derivations.analyses.enumeration import Enumeration, distinct_stages
from derivations.assembly import device, offload, quantized, step_names
from derivations.assembly.runtime import buffers_bytes
from derivations.assembly.sides import check_mtp, device_component_ids, weight_side_of
from derivations.config.values import named

#: The columns the search's rows read (derivations/analyses/rows.py), as the kernels' paths fill them.
COMPONENTS = ("weights", "gradients", "optimizer", "activations")


def needed(training: cfg.Training) -> bool:
    """Whether ``training`` sets anything the generated kernels do not hold (then the search runs here)."""
    return (training.conventions != cfg.Conventions() or bool(training.offload) or training.linear_recipe is not None
            or training.quantized_params or training.virtual_layers is not None)


def choices(training: cfg.Training, pairs: Sequence[Tuple[int, str]]) -> List[Tuple[int, str]]:
    """The (ZeRO stage, policy) pairs ``training``'s options accept (config.validate_training); the first refusal
    is raised when they accept none."""
    out, first = [], None
    for z, r in pairs:
        try:
            cfg.validate_training(replace(training, zero=z, recompute=r, recompute_ops=()))
        except cfg.ConfigError as e:
            first = first or e
            continue
        out.append((z, r))
    if not out and first is not None:
        raise first
    return out


class _Devices:
    """Each device's exact bytes at one (layout, b, s, m, policy): the step's peak and its parts at the first ZeRO
    stage (device.components), the model states at the others (device.model_states), each computed once."""

    def __init__(self, model, training: cfg.Training):
        self.model, self.training = model, training
        self.memo: Dict = {}
        self.states: Dict = {}  # the model states read neither b, s nor the policy

    def at(self, layout: cfg.Layout, training: cfg.Training, index: int, zero: int) -> Dict[str, Fraction]:
        key = (layout, training.mbs, training.seq, training.microbatches, training.recompute, index)
        if key not in self.memo:
            self.memo[key] = {"zero": zero, **device.components(self.model, layout, replace(training, zero=zero),
                                                                 index)}
        got = self.memo[key]
        if got["zero"] == zero:
            return got
        key = (layout, training.schedule, training.vpp, index, zero)
        if key not in self.states:
            self.states[key] = device.model_states(self.model, layout, replace(training, zero=zero), index)
        states = self.states[key]
        out = dict(got, **states)
        out["step_total"] = got["step_total"] - sum(got[k] for k in states) + sum(states.values())
        return out


def _row(layout, b, s, z, ri, stage, got, m=None) -> Dict:
    out = {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "etp": layout.etp, "cp": layout.cp,
           "sp": layout.tp, "seq": s, "mbs": b, "edp": layout.dp * layout.tp * layout.cp // (layout.ep * layout.etp),
           "zero": z, "recompute": ri, "stage": stage}
    for k in ("weights", "gradients", "optimizer"):
        out[k] = got[k]
    out["activations"] = got["activations"] + got["step"]  # the step's peak, as the kernels' rows
    out["total"] = got["step_total"]
    if m is not None:
        out["microbatches"] = m
    return out


def _columns(rows: List[Dict], keys: Sequence[str]) -> Dict[str, np.ndarray]:
    ints = {"dp", "tp", "pp", "ep", "etp", "cp", "sp", "seq", "mbs", "edp", "zero", "recompute", "stage",
            "microbatches"}
    return {k: (np.array([r[k] for r in rows], dtype=np.int64) if k in ints else
                np.array([float(r[k]) for r in rows], dtype=np.float64)) for k in keys}


# ----------------------------------------------------------------------------- the paper's view, every stage at once
# Without a schedule each device holds one micro-batch of its stage, and its bytes are the printed assembly's
# (derivations/assembly/device_terms.py, variant ``.paper+options``) at inputs that are polynomials in the
# configuration (the kinds' bytes, the model states: the generated expression trees) or depend on few of its
# values (what one layer micro-batch offloads or changes under the linear recipe: a threshold, exact).  So every
# (layout, distinct stage) is evaluated at once: the trees and the printed functions over float64 arrays, the few
# exact values once per distinct substitution of the symbols they read (:class:`_Memo`), as estimate computes them.


def _tree(t, v, graph, memo=None):
    """derivations/evaluate.py ``_ev`` over numpy arrays: a generated expression tree at ``v`` ({name: float64 array
    or number}), term references through ``graph``; ``memo`` {id(tree): value} of the trees evaluated at ``v``."""
    kind = type(t)
    if kind is int:
        return t
    if kind is str:
        return v[t]
    if memo is not None and id(t) in memo:
        return memo[id(t)]
    op = t[0]
    if op == "*":
        out = 1
        for a in t[1:]:
            out = out * _tree(a, v, graph)
    elif op == "+":
        out = 0
        for a in t[1:]:
            out = out + _tree(a, v, graph)
    elif op == "^":
        base, k = _tree(t[1], v, graph), t[2]
        out = base ** k if k >= 0 else 1.0 / base ** -k
    elif op == "r":
        out = graph.term(t[1])
    elif op == "q":
        out = t[1] / t[2]
    else:
        raise ValueError(f"unknown node {op!r}")
    if memo is not None:
        memo[id(t)] = out
    return out


class _Terms:
    """derivations/evaluate.py ``Terms`` over numpy arrays: a model structure's terms at ``v``, each once."""

    def __init__(self, model, v: Mapping):
        self.parts_of = ev.Terms(model.structure, {}, model.family).parts_of
        self.v, self._memo = v, {}

    def __contains__(self, tid: str) -> bool:
        return tid in self.parts_of

    def term(self, tid: str):
        if tid not in self._memo:
            out = 0
            for part in self.parts_of[tid]:
                out = out + _tree(part[2], self.v, self)
            self._memo[tid] = out
        return self._memo[tid]


def _kinds(model, training, v: Mapping, memo: Dict) -> Dict[str, object]:
    """derivations/evaluate.py ``activation_values`` over numpy arrays: {kind: bytes} of one layer's kept tensors
    under ``training``'s view at ``v`` (``memo``: the tensors' trees evaluated at ``v``, shared between views)."""
    q_lora = of_model(model)
    _, exprs = ev._kinds(q_lora)
    out = {}
    for kind, rows in ev.kept(View.of(training), q_lora).items():
        total = 0
        for _, row in rows:
            if row is None:
                continue
            if isinstance(row, tuple):
                count, subs = row
                inner = 0
                for i in subs:
                    inner = inner + _tree(exprs[i], v, None, memo)
                total = total + _tree(exprs[count], v, None, memo) * inner
            else:
                total = total + _tree(exprs[row], v, None, memo)
        out[kind] = total
    return out


def _divide(a, b=1):
    return np.true_divide(a, b)


@lru_cache(maxsize=None)
def _printed(family: str) -> Dict[str, object]:
    """The namespace of the family's printed exact Python (derivations/generated/<family>.py: the per-device
    assembly and the step's moments) with ``fractions.Fraction``, ``min`` and ``floor`` bound to numpy's division,
    minimum and floor: the same functions, plain arithmetic on their inputs, evaluate float64 arrays element-wise
    (a value compared in a condition, b, must be a number)."""
    mod = ev._module(family)
    g = dict(vars(mod))
    g.update(_Q=_divide, min=np.minimum, _floor=np.floor)
    for name, obj in vars(mod).items():
        if isinstance(obj, types.FunctionType) and obj.__module__ == mod.__name__:
            g[name] = types.FunctionType(obj.__code__, g, name, obj.__defaults__, obj.__closure__)
    return g


class _Reads(dict):
    """A substitution that records the names read from it."""

    def __init__(self, values):
        super().__init__(values)
        self.read = set()

    def __getitem__(self, k):
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        self.read.add(k)
        return super().get(k, default)

    def __contains__(self, k):
        self.read.add(k)
        return super().__contains__(k)


class _Memo:
    """``fn(values)`` (exact) once per distinct substitution of the names it reads (recorded at its first call:
    the functions memoised here read the same names at every substitution, their trees evaluated whole)."""

    def __init__(self, fn):
        self.fn, self.reads, self.memo = fn, None, {}

    def __call__(self, values: Mapping):
        if self.reads is None:
            rec = _Reads(values)
            out = self.fn(rec)
            self.reads = tuple(sorted(rec.read))
            self.memo[tuple(values.get(k) for k in self.reads)] = out
            return out
        key = tuple(values.get(k) for k in self.reads)
        if key not in self.memo:
            self.memo[key] = self.fn(values)
        return self.memo[key]


def _number(x):
    return float(x) if isinstance(x, Fraction) else x


def _stack(dicts: Sequence[Mapping], owner: np.ndarray) -> Dict[str, object]:
    """{name: value}: the names of ``dicts`` (one per layout), a number where every layout has the same value, else
    a float64 array over the pairs (each pair its layout's, ``owner``)."""
    out = {}
    for k in dicts[0]:
        got = [d[k] for d in dicts]
        first = got[0]
        if all(x == first and type(x) is type(first) for x in got):
            out[k] = _number(first)
        else:
            out[k] = np.array([float(x) for x in got], dtype=np.float64)[owner]
    return out


def fast(model, training: cfg.Training) -> bool:
    """Whether :func:`_stage_view` evaluates ``training``'s configurations: the paper's view (no schedule) and the
    weight side of a stage's device without the MTP modules' parameters shifted (else one by one, :func:`run`)."""
    side = weight_side_of(model, training.conventions)
    return (not training.schedule and training.virtual_layers is None and side.rank == "stage"
            and not training.conventions.mtp and not training.expert_tokens)


def _stage_view(model, training: cfg.Training, present, layouts, seqs, mbs) -> Dict[str, np.ndarray]:
    """The columns of the paper's view (choices x layouts x s x b, each configuration at its most-loaded stage, the
    first on ties) with every (layout, distinct stage) evaluated at once; ``device._estimate_at``'s steps for one
    micro-batch per stage, in the same order."""
    family = model.family
    pairs = [(li, st) for li, layout in enumerate(layouts) for st in distinct_stages(model, layout)]
    owner = np.array([li for li, _ in pairs], dtype=np.int64)
    names = cfg.composition_names(family)
    comp = {k: np.array([st.named()[k] for _, st in pairs], dtype=np.float64) for k in names}
    first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]]) if len(pairs) else np.zeros(0, np.int64)
    kinds_sym, n_chunks = ev.device_inputs(family)
    g = _printed(family)
    rb = training.conventions.runtime_buffers
    runtime = float(buffers_bytes(rb)) if rb != "none" else 0
    off, quant = bool(training.offload), bool(training.linear_recipe)
    # the resident layer of each pair (offload.resident's rule): 0 none, 1 dense, 2 MoE
    resident = np.array([int(offload.resident(model, training, st, {"dense": 1, "moe": 2})) for _, st in pairs])
    side = weight_side_of(model, training.conventions)
    n_l, n_s, n_b = len(layouts), len(seqs), len(mbs)
    keys = ("weights", "gradients", "optimizer", "activations", "total", "stage")
    cols = {k: [] for k in keys}
    memos: Dict = {}
    for z, ri, r in present:
        block = {k: np.empty((n_l, n_s, n_b)) for k in keys}
        for si, s in enumerate(seqs):
            for bi, b in enumerate(mbs):
                tr = replace(training, mbs=b, seq=s, zero=z, recompute=r, recompute_ops=())
                check_mtp(model, tr.conventions)
                cfg.validate_training(tr)
                check_options(of_model(model), tr)
                exact = [ev.derived(named(model, layout, tr, pairs[first[li]][1]), family)
                         for li, layout in enumerate(layouts)]
                values = _stack(exact, owner)
                values.update(comp)
                # the model states (device._model_states: the held stage is the stage)
                ids = device_component_ids(model, tr, schedule_ok=True)
                terms = _Terms(model, values)
                states = {k: terms.term(ids[k]) for k in ("weights", "gradients", "optimizer")}
                if quant:
                    per_weight = quantized.copies(tr, Fraction(1), dict(tr.bytes)["B_w"])
                    states["weights"] = states["weights"] + float(per_weight) * quantized.linear_params(
                        terms, values, side.params)
                key = (s, b, r)
                if key not in memos:
                    memos[key] = {"kinds": {}, "off": _Memo(lambda v, t=tr: offload.per_layer(model, t, v)),
                                  "quant": _Memo(lambda v, t=tr: quantized.per_layer(model, t, v)),
                                  "moment": _Memo(lambda v, t=tr: offload.moment_parts(model, t, v))}
                memo = memos[key]
                trees: Dict = {}
                kinds_of = lambda t: _kinds(model, t, values, trees)  # noqa: E731
                kinds = kinds_of(tr)
                inputs = {**values, **{sym: kinds.get(kind, 0) for kind, sym in kinds_sym.items()}, **states,
                          "runtime": runtime}
                opts = dict.fromkeys(("O_D", "O_E", "O_R", "Q_D", "Q_E", "Q_H"), 0)
                if off:
                    got = [memo["off"](d) for d in exact]
                    O = {k: np.array([float(x[k]) for x in got])[owner] for k in ("dense", "moe")}
                    opts.update(O_D=O["dense"], O_E=O["moe"],
                                O_R=np.where(resident == 1, O["dense"], np.where(resident == 2, O["moe"], 0.0)))
                if quant:
                    got = [memo["quant"](d) for d in exact]
                    opts.update({f"Q_{c}": np.array([float(x[k]) for x in got])[owner]
                                 for c, k in (("D", "dense"), ("E", "moe"), ("H", "head"))})
                inputs.update(opts)
                v = dict(inputs)
                for c in range(n_chunks):
                    v.update({f"{k}_{c}": 0 for k in names})
                    v[f"n_fl_{c}"] = 0
                view = View.of(tr)
                mtp, full = view.conv.mtp_activations == "last-stage", view.recompute == "full"
                v = g[g["DEVICE"][(mtp, full, "paper", True)].__name__](v)
                activations, total = v["activations"], v["total"]
                step = _step(g, model, tr, inputs, values, kinds_of)
                if off:
                    got = [memo["moment"](d) for d in exact]
                    has = np.array([bool(p) for p in got])[owner]
                    parts = np.array([float(sum((x[2] for x in p), Fraction(0))) for p in got])[owner]
                    x = np.where(has, activations - opts["O_R"] + parts, 0.0) - activations
                    step = np.maximum(step, x)
                step_total = total + step
                shape = (len(pairs),)
                full_cols = {"weights": states["weights"], "gradients": states["gradients"],
                             "optimizer": states["optimizer"], "activations": activations + step,
                             "total": step_total}
                full_cols = {k: np.broadcast_to(np.asarray(x, dtype=np.float64), shape) for k, x in full_cols.items()}
                pick = _first_largest(full_cols["total"], owner, first, n_l)
                for k, x in full_cols.items():
                    block[k][:, si, bi] = x[pick]
                block["stage"][:, si, bi] = np.array([st.index for _, st in pairs])[pick]
        for k in keys:
            cols[k].append(block[k].reshape(-1))
    return {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}


def _first_largest(total: np.ndarray, owner: np.ndarray, first: np.ndarray, n: int) -> np.ndarray:
    """Each layout's pair of the largest ``total`` (the first on ties), as indices into the pairs."""
    if not len(total):
        return np.zeros(0, dtype=np.int64)
    top = np.maximum.reduceat(total, first)
    at = np.flatnonzero(total == top[owner])
    _, where = np.unique(owner[at], return_index=True)
    return at[where]


def _step(g, model, training, inputs: Mapping, values: Mapping, kinds_of) -> np.ndarray:
    """device.step_excess over arrays (the largest moment of the step, 0 when none is positive), the printed
    moments' functions (derivations/assembly/step_terms.py) evaluated at every pair at once."""
    framework, policy = step_names.framework_of(training.conventions), step_names.policy_of(training.recompute)
    kinds, _ = ev.device_inputs(model.family)
    plain, bare = step_names.trainings(training)
    at = None if plain is training else kinds_of(plain)
    none = kinds_of(bare) if bare != plain else (at or {k: inputs.get(s, 0) for k, s in kinds.items()})
    v = dict(inputs)
    if at is not None:
        v.update({sym: at.get(kind, 0) for kind, sym in kinds.items()})
    v.update({step_names.NONE_OF[sym]: none.get(kind, 0) for kind, sym in kinds.items() if sym in step_names.NONE_OF})
    v.update(step_names.indicators(training))
    cast = values.get("e_H", 0) * (inputs.get("M_H", 0) - v.get("M_H", 0))
    fn = g[g["STEP"][(framework, policy)].__name__]
    out = 0.0
    for x in fn({**dict.fromkeys(g["STEP_INPUTS"], 0), **v}).values():
        out = np.maximum(out, x - cast)
    return out


def run(model, training: cfg.Training, pairs: Sequence[Tuple[int, str]], enum: Enumeration, seqs, mbs,
        global_batch: Optional[int] = None, progress=None) -> Tuple[Dict, Counter, Optional[int]]:
    """({column: array}, invalid configurations by rule, (s, b) groups per layout or None): every configuration of
    the layouts ``enum`` x ``seqs`` x ``mbs`` x the accepted ``pairs`` at its most-loaded stage (first on ties), or
    under a schedule (``training.schedule`` or ``global_batch``) its most-loaded device."""
    pairs = choices(training, pairs)
    zeros = sorted({z for z, _ in pairs})
    policies = tuple(dict.fromkeys(r for _, r in pairs))
    present = [(z, ri, r) for z in zeros for ri, r in enumerate(policies) if (z, r) in pairs]
    devices = _Devices(model, training)
    invalid: Counter = Counter()
    scheduled = bool(training.schedule) or global_batch is not None
    keys = ["dp", "tp", "pp", "ep", "etp", "cp", "sp", "seq", "mbs", "edp", *COMPONENTS, "total", "zero",
            "recompute", "stage"] + (["microbatches"] if scheduled else [])
    rows: List[Dict] = []
    layouts = enum.layouts
    if not scheduled and fast(model, training):  # every stage at once
        got = _stage_view(model, training, present, layouts, seqs, mbs)
        if progress:
            progress(len(layouts), len(layouts))
        n_g = len(layouts) * len(seqs) * len(mbs)
        lay = {k: np.repeat(np.array([getattr(x, k) for x in layouts], dtype=np.int64), len(seqs) * len(mbs))
               for k in ("dp", "tp", "pp", "ep", "etp", "cp")}
        out = {k: np.tile(v, len(present)) for k, v in lay.items()}
        out["sp"] = out["tp"]
        out["seq"] = np.tile(np.repeat(np.array(seqs, dtype=np.int64), len(mbs)), len(layouts) * len(present))
        out["mbs"] = np.tile(np.array(mbs, dtype=np.int64), len(layouts) * len(seqs) * len(present))
        out["edp"] = out["dp"] * out["tp"] * out["cp"] // (out["ep"] * out["etp"])
        out.update({k: got[k] for k in COMPONENTS})
        out["total"] = got["total"]
        out["zero"] = np.repeat(np.array([z for z, _, _ in present], dtype=np.int64), n_g)
        out["recompute"] = np.repeat(np.array([ri for _, ri, _ in present], dtype=np.int64), n_g)
        out["stage"] = got["stage"].astype(np.int64)
        return {k: out[k] for k in keys}, invalid, len(seqs) * len(mbs)
    if not scheduled:  # the paper's view: choices x layouts x (s, b) groups, in the kernels' order
        for z, ri, r in present:
            for li, layout in enumerate(layouts):
                stages = distinct_stages(model, layout)
                for s in seqs:
                    for b in mbs:
                        tr = replace(training, mbs=b, seq=s, recompute=r, recompute_ops=())
                        got = [devices.at(layout, tr, st.index, z) for st in stages]
                        k = max(range(len(got)), key=lambda i: (got[i]["step_total"], -i))
                        rows.append(_row(layout, b, s, z, ri, stages[k].index, got[k]))
                if progress:
                    progress(li + 1, len(layouts))
        return _columns(rows, keys), invalid, len(seqs) * len(mbs)
    schedule = training.schedule or "1f1b"
    for li, layout in enumerate(layouts):
        for s in seqs:
            for b in mbs:
                m = training.microbatches
                if global_batch is not None:
                    if global_batch % (layout.dp * b):
                        invalid["global-batch"] += 1
                        continue
                    m = global_batch // (layout.dp * b)
                tr = replace(training, schedule=schedule, microbatches=m, mbs=b, seq=s)
                done = []
                try:
                    for z, ri, r in present:
                        t = replace(tr, recompute=r, recompute_ops=())
                        got = [devices.at(layout, t, i, z) for i in range(layout.pp)]
                        k = max(range(len(got)), key=lambda i: (got[i]["step_total"], -i))
                        done.append(_row(layout, b, s, z, ri, k, got[k], -1 if m is None else m))
                except cfg.ConfigError as e:  # a layout or m the schedule or the virtual stages refuse
                    invalid[e.constraint] += 1
                    continue
                rows += done
        if progress:
            progress(li + 1, len(layouts))
    return _columns(rows, keys), +invalid, None
