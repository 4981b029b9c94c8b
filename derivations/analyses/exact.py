"""The search's one evaluator (the paper's view, a schedule or a global batch, any conventions and options): the
printed per-device assembly as ``memsym estimate`` evaluates it (derivations/assembly/device.py ``components``) over
numpy arrays, every device of every layout at one (s, b) at once; a row equals ``estimate`` at its most-loaded stage
(device, under a schedule) byte for byte (tests/test_search_options.py).  Refused choices are left out, refused
layouts counted invalid (in the paper's view the refusal is the search's, as estimate's).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import MutableMapping
from dataclasses import replace
from fractions import Fraction
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from derivations import config as cfg
from derivations import evaluate as ev
from derivations.activations.shape import check_options, of_model
from derivations.activations.view import View
from derivations.analyses.enumeration import LAYOUT_FIELDS, Enumeration, distinct_stages
from derivations.analyses.vectorized import Memo, Reads, derive, divide, printed
from derivations.assembly import device, offload, quantized, schedules, step_names
from derivations.assembly.runtime import buffers_bytes
from derivations.assembly.sides import check_mtp, megatron_values, mtp_stage_shift, weight_side_of
from derivations.config.values import named

#: The columns the search's rows read (derivations/analyses/rows.py), as the kernels' paths fill them.
COMPONENTS = ("weights", "gradients", "optimizer", "activations")


def with_policy(training: cfg.Training, zero: int, recompute: str, **kw) -> cfg.Training:
    """``training`` at a (ZeRO stage, policy) choice: the custom policy keeps ``training``'s operators (a recipe's),
    the named ones none."""
    return replace(training, zero=zero, recompute=recompute, **kw,
                   recompute_ops=training.recompute_ops if recompute == "custom" else ())


def choices(training: cfg.Training, pairs: Sequence[Tuple[int, str]]) -> List[Tuple[int, str]]:
    """The (ZeRO stage, policy) pairs ``training``'s options accept (config.validate_training); the first refusal
    is raised when they accept none."""
    out, first = [], None
    for z, r in pairs:
        try:
            cfg.validate_training(with_policy(training, z, r))
        except cfg.ConfigError as e:
            first = first or e
            continue
        out.append((z, r))
    if not out and first is not None:
        raise first
    return out


class _Slots:
    """The devices of one layout's pipeline split (in the paper's view its distinct stages): each one's stage, the
    summed composition of the stages whose parameters it holds (sides.mtp_stage_shift with ``--mtp``), DualPipe's
    mirror stage, the layer kind it keeps when offloading (offload.resident: 0 none, 1 dense, 2 MoE), its chunks
    per micro-batch count and, under ``--virtual-layers``, its chunks' compositions."""

    def __init__(self, model, training, layout, schedule: Optional[str], names, side):
        self.model, self.training, self.schedule, self.names = model, training, schedule, names
        self.every = cfg.stages(model, layout)
        self.pp = layout.pp
        own = self.every if schedule else distinct_stages(model, layout)
        self.index = np.array([st.index for st in own], dtype=np.int64)
        self.own = np.array([st.vector(names) for st in own], dtype=np.float64)
        held = []
        for st in own:
            comp = {k: sum(self.every[j].named()[k] for j in schedules.held_stages(schedule, layout.pp, st.index))
                    for k in names}
            if training.conventions.mtp and side.rank == "stage":
                comp = mtp_stage_shift(model, layout.pp, comp)
            held.append([comp[k] for k in names])
        self.held = np.array(held, dtype=np.float64)
        self.mirror = (np.array([self.every[layout.pp - 1 - st.index].vector(names) for st in own], dtype=np.float64)
                       if schedule == "dualpipe" else None)
        self.resident = np.array([int(offload.resident(model, training, st, {"dense": 1, "moe": 2})) for st in own])
        self._chunks: Dict = {}
        self.refused: Optional[cfg.ConfigError] = None
        if training.virtual_layers is not None:  # Megatron's pipeline layout: each rank's chunks (its parts)
            try:
                got = [schedules.rank_chunks(model, layout, replace(training, microbatches=None), st) for st in own]
            except cfg.ConfigError as e:
                self.refused = e
                return
            part = schedules.part_composition
            self.v_layers = np.array([[part(c, "layers").vector(names) for c in vc] for vc in got], dtype=np.float64)
            self.v_head = np.array([part(vc[-1], "head").vector(names) if vc[-1].head else [0] * len(names)
                                    for vc in got], dtype=np.float64)
            self.v_with_layers = [tuple(bool(c.layers) for c in vc) for vc in got]

    def chunks(self, m: Optional[int], n_chunks: int) -> Tuple[np.ndarray, np.ndarray]:
        """(compositions (devices, chunks, names), in flight (devices, chunks)) under the schedule at m."""
        if m not in self._chunks:
            comp = np.zeros((self.pp, n_chunks, len(self.names)))
            n_fl = np.zeros((self.pp, n_chunks))
            for i in range(self.pp if self.schedule else 0):
                got = schedules.chunks(self.schedule, self.pp, i, m, self.training.vpp)
                if len(got) > n_chunks:
                    raise ValueError(f"the device assembly has {n_chunks} chunks, the schedule {len(got)}")
                for c, ch in enumerate(got):
                    comp[i, c] = ch.composition(self.every[ch.stage]).vector(self.names)
                    n_fl[i, c] = float(ch.inflight)
            self._chunks[m] = comp, n_fl
        return self._chunks[m]


def _layout(arrays: Mapping, i: int) -> cfg.Layout:
    """The ``i``-th layout of an enumeration's arrays."""
    return cfg.Layout(**{k: int(arrays[k][i]) for k in LAYOUT_FIELDS})


def _refusal(model, training: cfg.Training, present, pp: int, m: Optional[int],
             schedule: Optional[str]) -> Optional[cfg.ConfigError]:
    """The first refusal of a (layout, s, b) at m (device._estimate_at's checks in order, at each accepted (ZeRO
    stage, policy)), or None."""
    for z, _, r in present:
        t = with_policy(training, z, r, schedule=schedule, microbatches=m)
        try:
            check_mtp(model, t.conventions)
            cfg.validate_training(t)
            check_options(model, t)
            if schedule:
                schedules.validate(schedule, pp, m, t.vpp)
            device.check_recipe_rank(model, t)
        except cfg.ConfigError as e:  # the schedule's own refusals (DualPipe's PP, m) counted under its name
            return cfg.ConfigError(schedule, str(e)) if schedule and e.constraint.startswith(schedule + "-") else e
    return None


def _vector(model, training: cfg.Training, present, enum: Enumeration, seqs, mbs, global_batch: Optional[int],
            scheduled: bool):
    """({column: array (choices, layouts, s, b)}, valid (layouts, s, b), m (layouts, s, b), invalid by rule): each
    configuration at its most-loaded device (first on ties), ``device._estimate_at`` of every device of every
    layout at once per (s, b) and choice; under --virtual-layers each rank's peak is the largest state of its
    interleaved order (device._virtual_peak)."""
    family = model.family
    schedule = (training.schedule or "1f1b") if scheduled else None
    names = cfg.composition_names(family)
    kinds_sym, n_chunks = ev.device_inputs(family)
    g = printed(family)
    rb = training.conventions.runtime_buffers
    runtime = float(buffers_bytes(rb)) if rb != "none" else 0
    off, quant = bool(training.offload), bool(training.linear_recipe)
    side = weight_side_of(model, training.conventions)
    arrays = enum.arrays
    n_l, n_s, n_b, n_p = len(enum), len(seqs), len(mbs), len(present)
    keys = ("weights", "gradients", "optimizer", "activations", "total", "stage")
    cols = {k: np.zeros((n_p, n_l, n_s, n_b), dtype=np.int64 if k == "stage" else np.float64) for k in keys}
    valid = np.zeros((n_l, n_s, n_b), dtype=bool)
    ms = np.full((n_l, n_s, n_b), -1, dtype=np.int64)
    invalid: Counter = Counter()
    dp, pp = arrays["dp"], arrays["pp"]
    # one pipeline split per PP (a layout's split reads its PP alone): its devices' rows, taken by every layout
    splits = {p: _Slots(model, training, _layout(arrays, int(np.argmax(pp == p))), schedule, names, side)
              for p in sorted(set(pp.tolist()))}
    size_of, start_of = np.zeros(pp.max() + 1, dtype=np.int64), np.zeros(pp.max() + 1, dtype=np.int64)
    size_of[list(splits)] = [len(sl.index) for sl in splits.values()]
    start_of[list(splits)] = np.cumsum(size_of[list(splits)]) - size_of[list(splits)]
    sizes = size_of[pp]
    rows = np.repeat(start_of[pp] - (np.cumsum(sizes) - sizes), sizes) + np.arange(sizes.sum())
    devices = {"sizes": sizes, **{k.upper(): arrays[k] for k in LAYOUT_FIELDS}, "SP": arrays["tp"],
               **{k: np.concatenate([getattr(sl, k) for sl in splits.values()])[rows]
                  for k in ("own", "held", "index", "resident")}}
    refusals: Dict = {}
    memos: Dict = {}
    for si, s in enumerate(seqs):
        for bi, b in enumerate(mbs):
            at = np.arange(n_l)
            m_all = np.full(n_l, -1, dtype=np.int64)  # -1: the training's own m (None: as many as fill the pipe)
            if global_batch is not None:  # m = G / (DP b), counted invalid where not an integer
                ok = global_batch % (dp * b) == 0
                invalid["global-batch"] += int(n_l - ok.sum())
                at, m_all = at[ok], global_batch // (dp * b)
                if not len(at):  # no layout's DP b divides the global batch at this b
                    continue
            groups, inv = np.unique((m_all[at] + 1) * (pp.max() + 1) + pp[at], return_inverse=True)
            why_of = []  # each (PP, m)'s refusal: device._estimate_at's checks, then the virtual groups'
            for p, m in zip((groups % (pp.max() + 1)).tolist(), (groups // (pp.max() + 1) - 1).tolist()):
                m = training.microbatches if m < 0 else m
                rkey = (p if schedule else 0, m, s, b)  # PP is read by the schedule's checks alone
                if rkey not in refusals:
                    refusals[rkey] = _refusal(model, replace(training, mbs=b, seq=s), present, p, m, schedule)
                virtual = None
                if training.virtual_layers is not None:
                    try:
                        schedules.virtual_groups(p, m)
                    except cfg.ConfigError as e:
                        virtual = e
                why_of.append((refusals[rkey], virtual))
            inv = inv.reshape(-1)
            why = [w or splits[p].refused or v for (w, v), p in zip(why_of, (groups % (pp.max() + 1)).tolist())]
            bad = np.array([w is not None for w in why])[inv]
            if bad.any() and not scheduled:  # the paper's view refuses the search (one configuration's refusal)
                raise why[inv[np.argmax(bad)]]
            # counted by rule, the rules in the order of the layouts first refused by them
            first_bad = {j: i for i, j in reversed(list(enumerate(inv[bad].tolist())))}
            for j in sorted(first_bad, key=first_bad.get):
                invalid[why[j].constraint] += int(np.count_nonzero(inv == j))
            live = at[~bad]
            if not len(live):
                continue
            m_of = [None if m < 0 else m for m in m_all[live].tolist()] if global_batch is not None else \
                [training.microbatches] * len(live)
            got = _at(model, training, present, live, arrays, [splits[p] for p in pp[live].tolist()],
                      devices, m_of, s, b, schedule, memos, (g, kinds_sym, n_chunks, names, runtime, off, quant, side))
            where = slice(None) if len(live) == n_l else live
            for k in keys if n_p else ():
                cols[k][:, where, si, bi] = np.stack([got[pi][k] for pi in range(n_p)])
            valid[live, si, bi] = True
            ms[live, si, bi] = [-1 if m is None else m for m in m_of]
    return cols, valid, ms, invalid


def _at(model, training, present, live, arrays, slots, devices, m_of, s: int, b: int, schedule, memos: Dict,
        setting):
    """[{column: array over the layouts ``live``} per choice]: the columns of :func:`_vector` at one (s, b), ``live``
    the layouts' indices into ``arrays`` (Enumeration.arrays) and ``devices`` (every layout's devices, concatenated)."""
    if not present:  # no choice left: no column
        return []
    g, kinds_sym, n_chunks, names, runtime, off, quant, side = setting
    family = model.family
    sizes = devices["sizes"][live]
    owner = np.repeat(np.arange(len(live)), sizes)
    lay0 = _layout(arrays, int(live[0]))
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
    every = len(live) == len(devices["sizes"])  # else the live layouts' devices only
    mask = None if every else np.repeat(np.isin(np.arange(len(devices["sizes"])), live), devices["sizes"])
    own, held, index, resident = (devices[k] if every else devices[k][mask] for k in ("own", "held", "index",
                                                                                      "resident"))
    base = replace(training, mbs=b, seq=s)
    # each layout's substitution at its first device (named, derived): what differs between layouts is its degrees,
    # m and what is derived from them
    common = named(model, lay0, base, slots[0].every[int(slots[0].index[0])])
    derived = ev._module(family).derived  # evaluate.derived, its module looked up once
    degrees = {k: devices[k][live] for k in lay0.named()}
    if m_of[0] is not None:
        degrees["n_mb"] = np.array(m_of, dtype=np.int64)
    mb = lambda m: {"n_mb": m} if m is not None else {}  # noqa: E731
    layout_values = derive(family, derived({**common, **lay0.named(), **mb(m_of[0])}), degrees)
    # each layout's exact substitution, only for what the options compute exactly (offload, quantized)
    exact = [derived({**common, **layout.named(), **sl.every[int(sl.index[0])].named(), **mb(m)})
             for layout, sl, m in zip(map(lambda i: _layout(arrays, i), live.tolist()), slots, m_of)] if off or quant \
        else None
    stage_values = {k: x[owner] if isinstance(x, np.ndarray) else x for k, x in layout_values.items()}
    stage_values.update({k: own[:, j] for j, k in enumerate(names)})
    virtual = training.virtual_layers is not None
    chunk_v: Dict[str, object] = {}
    for c in range(n_chunks):
        if schedule and not virtual:
            got = [sl.chunks(m, n_chunks) for sl, m in zip(slots, m_of)]
            comp, n_fl = cat([x[0][:, c] for x in got]), cat([x[1][:, c] for x in got])
            chunk_v.update({f"{k}_{c}": comp[:, j] for j, k in enumerate(names)})
            chunk_v[f"n_fl_{c}"] = n_fl
        else:
            chunk_v.update({f"{k}_{c}": 0 for k in names})
            chunk_v[f"n_fl_{c}"] = 0
    if side.rank == "megatron":  # Megatron's most-loaded shard: the whole model's (its formula divides by PP)
        whole = derived({**megatron_values(model, lay0, base), **lay0.named(), **mb(m_of[0])})
        states_values = {k: x[owner] if isinstance(x, np.ndarray) else x
                         for k, x in derive(family, whole, degrees).items()}
    else:
        states_values = dict(stage_values, **{k: held[:, j] for j, k in enumerate(names)})
    mirror_values = None
    if schedule == "dualpipe":
        mirror = cat([sl.mirror for sl in slots])
        mirror_values = dict(stage_values, **{k: mirror[:, j] for j, k in enumerate(names)})
    n = len(owner)
    trees: Dict = {}  # the kinds' expressions at the layouts' values, shared by every view
    zeros = list(dict.fromkeys(z for z, _, _ in present))
    # the model states of every ZeRO stage, stacked (ZeRO stages, devices): they read neither b nor s nor the ZeRO
    # stage's value (sides.WeightSide.component_ids picks the terms), so once for every (s, b) and stage
    terms, stacked = _once(memos.setdefault(("states", quant and (s, b)), []), states_values,
                           lambda v: _states(model, v, [side.component_ids(z) for z in zeros], n))
    if quant:  # the linear layers' quantized copies (they read the recipe, not the ZeRO stage)
        per_weight = float(quantized.copies(base, Fraction(1), dict(base.bytes)["B_w"]))
        stacked = dict(stacked, weights=stacked["weights"] + per_weight * quantized.linear_params(terms, terms.v,
                                                                                                   side.params))
    out: Dict = {}
    for r in dict.fromkeys(r for _, _, r in present):  # each policy once, its ZeRO stages' states stacked
        zs = [z for z, _, q in present if q == r]
        rows = [zeros.index(z) for z in zs]
        states = stacked if rows == list(range(len(zeros))) else {k: x[rows] for k, x in stacked.items()}
        first_z = {k: x[0] for k, x in states.items()}  # the step reads the first ZeRO stage's
        tr = with_policy(base, zs[0], r, schedule=schedule)
        values = dict(stage_values, z=zs[0])
        # what reads no model state (the kinds, the options' inputs, the step): once per policy
        kinds, opts, kinds_of = _policy(model, tr, memos, (s, b, r), exact, layout_values, trees, owner, resident)
        inputs = {**values, **{sym: kinds.get(kind, 0) for kind, sym in kinds_sym.items()}, **states,
                  "runtime": runtime, **opts}
        view = View.of(tr)
        mtp, full = view.conv.mtp_activations == "last-stage", view.recompute == "full"
        fn = lambda holds, v: g[g["DEVICE"][(mtp, full, holds, True)].__name__](v)  # noqa: E731
        if virtual:
            held, before = _virtual_held(slots, m_of, training.vpp or 2, lambda comp: fn(
                "paper", {**inputs, **chunk_v, **{k: comp[:, j] for j, k in enumerate(names)}, "O_R": 0})[
                    "activations"], n, off)
            v = fn("given", {**inputs, **chunk_v, "activations_held": held})
        else:
            v = fn("schedule" if schedule else "paper", {**inputs, **chunk_v})
            before = v["activations"] - opts["O_R"]
        activations = np.broadcast_to(np.asarray(v["activations"], dtype=np.float64), (n,))
        total = np.broadcast_to(np.asarray(v["total"], dtype=np.float64), (len(zs), n))
        step = _step(g, model, tr, {**inputs, **first_z}, values, kinds_of)
        if mirror_values is not None:  # DualPipe: the backward of its mirror stage too (device._held_step)
            at = dict(mirror_values, z=zs[0])
            step = np.maximum(step, _step(g, model, tr, {**inputs, **first_z, **at}, at, kinds_of))
        if off:
            got = [memos[(s, b, r)]["moment"](d) for d in exact]
            has = np.array([bool(p) for p in got])[owner]
            parts = np.array([float(sum((x[2] for x in p), Fraction(0))) for p in got])[owner]
            step = np.maximum(step, np.where(has, before + parts, 0.0) - activations)
        held_step = activations + step
        total = total + step
        picks = _first_largest(total, owner, first)
        for zi, z in enumerate(zs):
            pick = picks[zi]
            out[(z, r)] = {**{k: np.broadcast_to(states[k][zi], (n,))[pick] for k in states},
                           "activations": np.broadcast_to(held_step, (n,))[pick], "total": total[zi][pick],
                           "stage": index[pick]}
    return [out[(z, r)] for z, _, r in present]


def _once(memo: List, values: Mapping, fn):
    """``fn(values)`` once per distinct substitution of the names it reads (recorded at its first call, arrays compared
    by value): the model states, which read neither b nor s, once for every (s, b)."""
    for seen, out in memo:
        if all(np.array_equal(values.get(k), x) for k, x in seen.items()):
            return out
    rec = Reads(values)
    out = fn(rec)
    memo.append(({k: values.get(k) for k in rec.read}, out))
    return out


def _states(model, values: Mapping, ids: Sequence[Mapping[str, str]], n: int):
    """(the terms at ``values``, {weights, gradients, optimizer: array (ZeRO stages, n devices)}) of the component
    terms ``ids`` of each ZeRO stage; one Terms, so the stages share their subterms (the parameters)."""
    terms = ev.Terms(model.structure, values, model.family, q=divide)
    return terms, {k: np.stack([np.broadcast_to(np.asarray(terms.term(i[k]), dtype=np.float64), (n,)) for i in ids])
                   for k in COMPONENTS[:3]}


def _policy(model, training, memos: Dict, key, exact, layout_values, trees: Dict, owner, resident):
    """(kinds, the options' inputs, kinds of a view) of one policy at one (s, b): the assembly's inputs that read no
    model state; the options' exact values once per distinct substitution of what they read (``memos[key]``)."""
    if key not in memos:
        memos[key] = {"off": Memo(lambda v: offload.per_layer(model, training, v)),
                      "quant": Memo(lambda v: quantized.per_layer(model, training, v)),
                      "moment": Memo(lambda v: offload.moment_parts(model, training, v))}
    memo = memos[key]
    kinds_of = lambda t: _kinds(model, t, layout_values, trees, owner)  # noqa: E731
    opts = dict.fromkeys(("O_D", "O_E", "O_R", "Q_D", "Q_E", "Q_H"), 0)
    if training.offload:
        got = [memo["off"](d) for d in exact]
        O = {k: np.array([float(x[k]) for x in got])[owner] for k in ("dense", "moe")}
        opts.update(O_D=O["dense"], O_E=O["moe"],
                    O_R=np.where(resident == 1, O["dense"], np.where(resident == 2, O["moe"], 0.0)))
    if training.linear_recipe:
        got = [memo["quant"](d) for d in exact]
        opts.update({f"Q_{c}": np.array([float(x[k]) for x in got])[owner]
                     for c, k in (("D", "dense"), ("E", "moe"), ("H", "head"))})
    return kinds_of(training), opts, kinds_of


def _kinds(model, training, values: Mapping, memo: Dict, owner: np.ndarray) -> Dict[str, object]:
    """{kind: bytes} of one layer's kept tensors under ``training``'s view (evaluate.activation_values over numpy
    arrays) at ``values`` (one entry per layout: the kinds read no composition), each device its layout's."""
    got = ev.activation_values(View.of(training), of_model(model), values, q=divide, memo=memo)
    return {k: x[owner] if isinstance(x, np.ndarray) else x for k, x in got.items()}


def _virtual_held(slots, m_of, v: int, activations, n: int, off: bool) -> Tuple[np.ndarray, np.ndarray]:
    """(held at the peak less the resident layer's, held before the backward of a chunk with layers, or 0 without
    offloading) of every device under --virtual-layers: device._virtual_peak at once, ``activations(comp)`` the
    printed assembly's one micro-batch at the compositions ``comp`` (devices x names) with the options' terms but
    the resident layer's; the devices of one (PP, m, rank) share their states (schedules.distinct_states)."""
    chunks = [np.broadcast_to(np.asarray(activations(np.concatenate([sl.v_layers[:, c] for sl in slots])),
                                         dtype=np.float64), (n,)) for c in range(v)]
    head = np.broadcast_to(np.asarray(activations(np.concatenate([sl.v_head for sl in slots])), dtype=np.float64),
                           (n,))
    by_chunk = np.stack(chunks + [head], axis=1)  # the head weighs with the last chunk's in-flight count
    groups: Dict = {}
    pos = 0
    for sl, m in zip(slots, m_of):
        for j, i in enumerate(sl.index.tolist()):
            groups.setdefault((sl.pp, m or 4 * sl.pp, i, sl.v_with_layers[j]), []).append(pos + j)
        pos += len(sl.index)
    held, before = np.zeros(n), np.zeros(n)
    for (pp, m, i, with_layers), at in groups.items():
        states = np.array(schedules.distinct_states(pp, v, m, i), dtype=np.float64)
        weigh = lambda st: np.concatenate([st, st[:, -1:]], axis=1) @ by_chunk[at].T  # noqa: E731
        held[at] = weigh(states).max(axis=0)
        if off:
            back = [st for st, c in schedules.backward_states(pp, v, m, i) if with_layers[c]]
            if back:
                before[at] = weigh(np.array(back, dtype=np.float64)).max(axis=0)
    return held, before


def _first_largest(total: np.ndarray, owner: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Each layout's device of the largest ``total`` (the first on ties) per row of ``total`` (choices, devices), as
    indices into the devices (``owner``: each device's layout, ascending; ``first``: each layout's first device)."""
    if not total.shape[-1]:
        return np.zeros(total.shape[:-1] + (0,), dtype=np.int64)
    top = np.maximum.reduceat(total, first, axis=-1)
    at = np.where(total == top[..., owner], np.arange(total.shape[-1]), total.shape[-1])
    return np.minimum.reduceat(at, first, axis=-1)


def _step(g, model, training, inputs: Mapping, values: Mapping, kinds_of) -> np.ndarray:
    """device.step_excess over arrays (the largest moment of the step, 0 when none is positive), the printed
    moments' functions (derivations/assembly/step_terms.py) evaluated at every pair at once."""
    framework, policy = step_names.framework_of(training.conventions), step_names.policy_of(training.recompute)
    v, cast = device.step_inputs(training, inputs, values, kinds_of, model.family)
    fn = g[g["STEP"][(framework, policy)].__name__]
    out = 0.0
    for x in fn({**dict.fromkeys(g["STEP_INPUTS"], 0), **v}).values():
        out = np.maximum(out, x - cast)
    return out


class Columns(MutableMapping):
    """The search's columns, one value per row, in order: an array, or a function of row indices computing the
    column at the rows asked (:meth:`take`; ranking and printing read few rows), computed whole when read whole."""

    def __init__(self, n: int):
        self.n, self._cols = n, {}

    def take(self, k: str, idx) -> np.ndarray:
        col = self._cols[k]
        return col(np.asarray(idx, dtype=np.int64)) if callable(col) else col[idx]

    def __getitem__(self, k: str) -> np.ndarray:
        if callable(self._cols[k]):
            self._cols[k] = self.take(k, np.arange(self.n))
        return self._cols[k]

    def __setitem__(self, k: str, col) -> None:
        self._cols[k] = col

    def __delitem__(self, k: str) -> None:
        del self._cols[k]

    def __contains__(self, k) -> bool:
        return k in self._cols

    def __iter__(self):
        return iter(self._cols)

    def __len__(self) -> int:
        return len(self._cols)


def run(model, training: cfg.Training, pairs: Sequence[Tuple[int, str]], enum: Enumeration, seqs, mbs,
        global_batch: Optional[int] = None) -> Tuple[Columns, Counter, Optional[int]]:
    """(columns, invalid configurations by rule, (s, b) groups per layout or None): every configuration of the
    layouts ``enum`` x ``seqs`` x ``mbs`` x the accepted ``pairs`` at its most-loaded stage (first on ties), or under
    a schedule (``training.schedule`` or ``global_batch``) its most-loaded device.  The rows: choices outermost in
    the paper's view, innermost under a schedule (its configurations refused or not dividing the global batch left
    out); the total whole, the other columns at the rows read."""
    pairs = choices(training, pairs)
    zeros = sorted({z for z, _ in pairs})
    policies = tuple(dict.fromkeys(r for _, r in pairs))
    present = [(z, ri, r) for z in zeros for ri, r in enumerate(policies) if (z, r) in pairs]
    scheduled = bool(training.schedule) or global_batch is not None
    got, valid, ms, invalid = _vector(model, training, present, enum, seqs, mbs, global_batch, scheduled)
    n_p, n_sb = len(present), len(seqs) * len(mbs)
    cells = np.flatnonzero(valid.reshape(-1)) if scheduled else np.arange(len(enum) * n_sb)

    def at(idx):  # the rows' (choice, (layout, s, b) cell)
        if scheduled:
            cell, choice = np.divmod(idx, n_p)
            return choice, cells[cell]
        return np.divmod(idx, max(len(cells), 1))

    per = {k: enum.arrays[k].astype(np.int64) for k in LAYOUT_FIELDS}
    per["edp"] = per["dp"] * per["tp"] * per["cp"] // (per["ep"] * per["etp"])
    per["sp"], per["layout"] = per["tp"], np.arange(len(enum))
    by = {k: (lambda a: lambda idx: a[at(idx)[1] // n_sb])(v) for k, v in per.items()}
    by["seq"] = lambda idx: np.array(seqs, dtype=np.int64)[at(idx)[1] // len(mbs) % len(seqs)]
    by["mbs"] = lambda idx: np.array(mbs, dtype=np.int64)[at(idx)[1] % len(mbs)]
    for j, k in enumerate(("zero", "recompute")):
        by[k] = (lambda a: lambda idx: a[at(idx)[0]])(np.array([x[j] for x in present], dtype=np.int64))
    grid = {k: v.reshape(n_p, len(enum) * n_sb) for k, v in got.items()}
    by.update({k: (lambda a: lambda idx: a[at(idx)])(v) for k, v in grid.items()})
    by["microbatches"] = lambda idx: ms.reshape(-1)[at(idx)[1]]
    out = Columns(n_p * len(cells))
    for k in ["dp", "tp", "pp", "ep", "etp", "cp", "sp", "seq", "mbs", "edp", *COMPONENTS, "total", "zero",
              "recompute", "stage"] + (["microbatches"] if scheduled else []) + ["layout"]:
        out[k] = by[k]
    out["total"] = grid["total"].reshape(-1) if not scheduled else out.take("total", np.arange(out.n))
    return out, +invalid, None if scheduled else len(seqs) * len(mbs)
