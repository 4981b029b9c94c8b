"""Per-device totals: Sections 3-6 assembled for one stage of one layout.  ``estimate`` gathers the inputs of one
device of a pipeline stage (its parameters P_n, P_m, Table 6; weights, gradients and optimizer states under the ZeRO
stage, Table 8; each activation kind's bytes under the view, Table 10 generalised; the Sec. 6 overheads) and
evaluates the printed per-device assembly (derivations/assembly/device_terms.py, in derivations/generated/) at them:
under a pipeline schedule (schedules.py) n_fl micro-batches of the stage(s) held at the peak, under DualPipe two
stages' parameters."""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from derivations import config as cfg
from derivations import families
from derivations.activations.naming import activation_ids as _view_ids
from derivations.activations import shape as shapes
from derivations.activations.shape import of_model
from derivations.activations.view import View
from derivations import evaluate as ev
from derivations.assembly import graphs, offload, overheads, quantized, schedules, step_names
from derivations.assembly.runtime import buffers_bytes, buffers_id
from derivations.assembly.sides import (check_mtp, device_component_ids, megatron_values, mtp_stage_shift,
                                       weight_side_of)
from derivations.config.switches import notes as convention_notes, switches_json
from derivations.config.values import named, symbol_keyed
from symbolic.exact import as_number


def activation_ids(model: cfg.ModelSpec, training: cfg.Training) -> Dict[str, str]:
    """{kind: term id} of the activation terms of ``training``'s view."""
    return dict(_view_ids(View.of(training), of_model(model)))


def _kinds(model, training, values: Mapping) -> Dict[str, Fraction]:
    """{kind: bytes} of one layer's kept tensors under ``training``'s view at ``values``."""
    return ev.activation_values(View.of(training), of_model(model), values)


def _assemble(training, holds: str, inputs: Mapping, chunks=(), all_stages=(), family: str = ev.FAMILY) -> Dict:
    """The printed assembly at ``inputs`` (:func:`_inputs`, :func:`_option_inputs`) and, with a schedule, at each
    chunk's composition and in-flight count; ``holds``: paper, schedule or given (``activations_held`` an input)."""
    _, n_chunks = ev.device_inputs(family)
    if len(chunks) > n_chunks:
        raise ValueError(f"the device assembly has {n_chunks} chunks, the schedule {len(chunks)}")
    v = dict(inputs)
    for c in range(n_chunks):
        comp = chunks[c].composition(all_stages[chunks[c].stage]).named() if c < len(chunks) else {}
        v.update({f"{k}_{c}": comp.get(k, 0) for k in cfg.composition_names(family)})
        v[f"n_fl_{c}"] = chunks[c].inflight if c < len(chunks) else 0
    view = View.of(training)  # the rows depend on the view through the MTP modules and full recomputation only
    return ev.device(view.conv.mtp_activations == "last-stage", view.recompute == "full", holds, v, family, True)


def _inputs(model, training, values: Mapping, states: Mapping, runtime) -> Dict:
    """The stage's ``values``, each kind's bytes as its symbol (M_A, M_E, ...), model states, runtime."""
    kinds, _ = ev.device_inputs(model.family)
    per_kind = _kinds(model, training, values)
    return {**values, **{sym: per_kind.get(kind, 0) for kind, sym in kinds.items()}, **states, "runtime": runtime}


def _option_inputs(model, training, values: Mapping, comp) -> Dict[str, Fraction]:
    """O_D, O_E, O_R (offload.py) and Q_D, Q_E, Q_H (quantized.py); 0 when the option is off."""
    out = dict.fromkeys(("O_D", "O_E", "O_R", "Q_D", "Q_E", "Q_H"), Fraction(0))
    if training.offload:
        off = offload.per_layer(model, training, values)
        out.update(O_D=off["dense"], O_E=off["moe"], O_R=offload.resident(model, training, comp, off))
    if training.linear_recipe:
        q = quantized.per_layer(model, training, values)
        out.update(Q_D=q["dense"], Q_E=q["moe"], Q_H=q["head"])
    return out


@dataclass
class Estimate:
    """One device of pipeline stage ``stage``; ``held``: the stages whose parameters it holds (two under DualPipe);
    ``chunks``: (stage, in-flight micro-batches) held at its peak; ``head_inflight``: the head's micro-batches when a
    schedule counts them apart (interleaved: 1 on the last stage), else None."""

    model: cfg.ModelSpec
    layout: cfg.Layout
    training: cfg.Training
    stage: cfg.StageComposition
    params: Dict[str, Fraction]
    bytes: Dict[str, Fraction]
    overheads: Dict[str, Dict[str, Fraction]]
    term_ids: Dict[str, str]
    values: Dict = field(repr=False, default_factory=dict)
    held: Tuple[cfg.StageComposition, ...] = ()
    chunks: Tuple[Tuple[cfg.StageComposition, Fraction], ...] = ()
    head_inflight: Optional[Fraction] = None
    #: chunks are Megatron virtual stages of their own layer counts (--virtual-layers): ``inflight`` is
    #: then in units of the stage's layers (sum of n_c x chunk layers / stage layers)
    virtual: bool = False
    assumptions: List[str] = field(default_factory=list)
    by_layer: Tuple[Tuple[int, str, Fraction], ...] = ()
    outside_layers: Fraction = Fraction(0)

    @property
    def subs(self) -> Dict:
        """The substitution by symbol (imports sympy)."""
        return symbol_keyed({k: v for k, v in self.values.items() if not k.startswith("_") and k not in ("EDP",
                                                                                                           "E_token")})

    @property
    def inflight(self) -> Optional[Fraction]:
        """Micro-batches in flight at the device's peak (None without a schedule)."""
        if not self.training.schedule:
            return None
        if self.virtual:
            return sum((n * len(c.layers) for c, n in self.chunks), Fraction(0)) / max(len(self.stage.layers), 1)
        return sum((n for _, n in self.chunks), Fraction(0))

    def to_json(self) -> Dict:
        num = as_number
        st, tr = self.stage, self.training
        out = {
            "model": self.model.name,
            "layout": {"dp": self.layout.dp, "tp": self.layout.tp, "pp": self.layout.pp, "ep": self.layout.ep,
                       "etp": self.layout.etp, "cp": self.layout.cp, "sp": self.layout.SP,
                       "edp": num(self.layout.edp)},
            "training": {"mbs": tr.mbs, "seq": tr.seq, "zero": tr.zero,
                         "zero_name": cfg.ZERO_NAMES[tr.zero], "recompute": tr.recompute_label,
                         "bytes_per_element": {k: num(Fraction(v)) for k, v in tr.bytes},
                         "attention": tr.attention, "fp8_activations": tr.fp8, "imbalance": num(Fraction(tr.imbalance)),
                         "schedule": tr.schedule, "microbatches": tr.microbatches, "vpp": tr.vpp,
                         **({"offload_activations": list(tr.offload)} if tr.offload else {}),
                         **({"linear_recipe": tr.linear_recipe, "quantized_param_gather": tr.quantized_params}
                            if tr.linear_recipe else {})},
            "stage": {"index": st.index, "layers": [st.layers.start, st.layers.stop - 1], "dense_layers": st.dense,
                      "moe_layers": st.moe, "embedding": st.embedding, "head": st.head},
            "params": {k: num(v) for k, v in self.params.items()},
            "bytes": {**{k: num(v) for k, v in self.bytes.items()},
                      "activations_by_layer": [{"layer": i, "kind": kind, "bytes": num(v)}
                                               for i, kind, v in self.by_layer],
                      "activations_outside_layers": num(self.outside_layers)},
            "gib": {k: float(v / cfg.GiB) for k, v in self.bytes.items()},
            "overheads": {end: {k: num(v) for k, v in d.items()} for end, d in self.overheads.items()},
            "terms": dict(self.term_ids), "assumptions": list(self.assumptions),
        }
        out["conventions"] = switches_json(tr)
        if len(self.held) > 1:
            out["stage"]["holds_stages"] = [c.index for c in self.held]
        if tr.schedule:
            out["inflight_microbatches"] = num(self.inflight)
            out["inflight_chunks"] = [{"stage": c.index, "layers": [c.layers.start, c.layers.stop - 1],
                                       "inflight": num(n)} for c, n in self.chunks]
            if self.head_inflight is not None:
                out["inflight_head"] = num(self.head_inflight)
        return out


def default_stage(layout: cfg.Layout) -> int:
    """The foundation's default without a schedule: stage 1 (a 4-MoE-layer stage, Tables 6, 8, 10)."""
    return 1 if layout.pp > 1 else 0


def estimate(model: cfg.ModelSpec, layout: cfg.Layout, training: cfg.Training, stage_index: Optional[int] = None,
             assumptions: Sequence[str] = ()) -> Estimate:
    """One stage's estimate; ``stage_index`` None: stage 1 without a schedule, the most-loaded with one."""
    if stage_index is None and training.schedule:
        every, worst = estimate_all(model, layout, training, assumptions)
        return every[worst]
    stage_index = default_stage(layout) if stage_index is None else stage_index
    return _estimate(model, layout, training, stage_index, assumptions)


def estimate_all(model: cfg.ModelSpec, layout: cfg.Layout, training: cfg.Training,
                 assumptions: Sequence[str] = ()) -> Tuple[List[Estimate], int]:
    """Every stage's estimate and the index of the most-loaded one (largest ``step_total``, first on ties)."""
    every = [_estimate(model, layout, training, i, assumptions) for i in range(layout.pp)]
    worst = max(range(len(every)), key=lambda i: (every[i].bytes["step_total"], -i))
    return every, worst


def _model_states(model, layout, training, comp, held) -> Tuple[Dict, Dict, Tuple[Fraction, Fraction], str]:
    """({component: term id}, {component: bytes}, (P_n, P_m), params id) of the weights, gradients and optimizer states
    of the stage(s) held, or of the whole model for Megatron's most-loaded shard."""
    side = weight_side_of(model, training.conventions)
    if side.rank == "megatron":
        dev = ev.derived(megatron_values(model, layout, training), model.family)
    else:
        names = cfg.composition_names(model.family)
        held_comp = {k: sum(c.named()[k] for c in held) for k in names}
        if training.conventions.mtp:  # the MTP modules' parameters on the last stage
            held_comp = mtp_stage_shift(model, layout.pp, held_comp)
        dev = ev.derived({**named(model, layout, training, comp), **held_comp}, model.family)
    terms = ev.Terms(model.structure, dev, model.family)
    if side.rank == "megatron":
        parts = terms.parts(side.params)
        P_n = sum((Fraction(v) for _, tags, v in parts if "non_moe" in tags), Fraction(0))
        P_m = sum((Fraction(v) for _, tags, v in parts if "moe" in tags), Fraction(0))
    else:
        P_n = Fraction(terms.term(side.non_moe))
        P_m = Fraction(terms.term(side.moe)) if side.moe in terms else Fraction(0)  # no experts: no P_m
    ids = device_component_ids(model, training, schedule_ok=True)
    ids = {k: ids[k] for k in ("weights", "gradients", "optimizer")}
    byts = {k: Fraction(terms.term(t)) for k, t in ids.items()}
    if training.linear_recipe:  # TE's cached quantized weight copies (state.quantized), beside the weights
        check_recipe_rank(model, training)
        byts["weights"] += quantized.copies(training, quantized.linear_params(terms, dev, side.params),
                                            dict(training.bytes)["B_w"])
        ids["weights"] += " + " + quantized.state_id(training)
    return ids, byts, (P_n, P_m), side.params


def check_recipe_rank(model, training) -> None:
    """--linear-recipe counts TE's weight copies on the device of a stage: ConfigError under another --rank."""
    rank = weight_side_of(model, training.conventions).rank
    if training.linear_recipe and rank != "stage":
        raise cfg.ConfigError("linear-recipe", f"--linear-recipe counts TE's weight copies on the device of a "
                                               f"stage (--rank stage), not --rank {rank}")


def _virtual_peak(model, layout, training, comp, inputs, chunks):
    """(bytes held at the peak less the resident layer's, ((chunk, in flight), ...), head in flight or None, bytes held
    before the backward of a chunk with layers) of rank ``comp.index`` under ``--virtual-layers``: the largest of its
    interleaved states (schedules.distinct_states, an enumeration), each chunk's bytes the printed assembly's one
    micro-batch at its composition."""
    at = lambda c: Fraction(_assemble(training, "paper", {**inputs, **c.named(), "O_R": 0},  # noqa: E731
                                      family=model.family)["activations"])
    layer_bytes = [at(schedules.part_composition(c, "layers")) for c in chunks]
    head = at(schedules.part_composition(chunks[-1], "head")) if chunks[-1].head else Fraction(0)
    m = training.microbatches or 4 * layout.pp  # steady state: the order repeats every PP V chunk-forwards
    best, best_state, before = schedules.interleaved_peak(layout.pp, m, comp.index, layer_bytes, head,
                                                          [bool(c.layers) for c in chunks])
    held = tuple((c, Fraction(n)) for c, n in zip(chunks, best_state))
    # --offload-activations: what is held before the backward of a chunk with (offloaded) layers
    return best, held, (Fraction(best_state[-1]) if chunks[-1].head else None), before if training.offload else None


def _estimate(model, layout, training, stage_index, assumptions) -> Estimate:
    try:
        return _estimate_at(model, layout, training, stage_index, assumptions)
    except ev.MissingSymbol as e:
        raise missing_symbol(model, e.name) from None


def missing_symbol(model, name: str) -> cfg.ConfigError:
    """The refusal of a term that reads the symbol ``name``, which ``model``'s family does not define."""
    return cfg.ConfigError("values", f"{model.name}: a term of this configuration reads the symbol {name}, which the "
                                     f"model does not define (its family has no such dimension)")


def _estimate_at(model, layout, training, stage_index, assumptions) -> Estimate:
    """One device: its inputs gathered and the printed assembly evaluated at them."""
    check_mtp(model, training.conventions)
    cfg.validate_layout(model, layout, training.seq)
    cfg.validate_training(training)
    shapes.check_options(model, training)  # an option that changes none of its tensors, a field built otherwise
    comp = cfg.stage(model, layout, stage_index)
    all_stages = cfg.stages(model, layout)
    notes, held = list(assumptions), _held(all_stages, training, stage_index)
    chunks = ()
    if training.schedule:
        chunks = schedules.chunks(training.schedule, layout.pp, stage_index, training.microbatches, training.vpp)
        notes += schedules.assumptions(training.schedule, layout.pp, training.microbatches, training.vpp,
                                       training.virtual_layers is not None)
    values = ev.derived(named(model, layout, training, comp), model.family)
    act = activation_ids(model, training)
    ids, byts, (P_n, P_m), params_id = _model_states(model, layout, training, comp, held)
    notes += convention_notes(training)
    notes += model.notes() if hasattr(model, "notes") else []  # what the family says it leaves out of this model
    rb = training.conventions.runtime_buffers  # per-device runtime buffers (derivations/assembly/runtime.py)
    runtime = Fraction(buffers_bytes(rb)) if rb != "none" else Fraction(0)
    v_chunks = (schedules.rank_chunks(model, layout, training, comp)
                if training.schedule == "interleaved" and training.virtual_layers is not None else None)
    inputs = {**_inputs(model, training, values, byts, runtime), **_option_inputs(model, training, values, comp)}
    virtual = None
    if v_chunks is not None:
        virtual = _virtual_peak(model, layout, training, comp, inputs, v_chunks)
        v = _assemble(training, "given", {**inputs, "activations_held": virtual[0]}, family=model.family)
    else:
        v = _assemble(training, "schedule" if training.schedule else "paper", inputs, chunks, all_stages,
                      model.family)
    ids["activations"] = act["peak" if training.schedule else "stage"]
    byts["activations"] = Fraction(v["activations"])
    options = ((training.offload, offload, offload.term_id), (training.linear_recipe, quantized, quantized.act_id))
    for on, option, tid in options:
        if on:  # the activations with what the option changes (the term names both)
            notes.append(option.assumption(training))
            ids["activations"] += " + " + tid(training)
    if rb != "none":
        ids["runtime"], byts["runtime"] = buffers_id(rb), runtime
    byts["total"] = Fraction(v["total"])
    # one micro-batch's backward on any stage the device runs (DualPipe: its own and its mirror stage)
    byts["step"], ids["step"] = _held_step(model, layout, training, inputs, values, comp, held)
    if training.offload:  # an offloaded layer's core-attention backward (offload.MOMENT), when it holds more
        before = virtual[3] if virtual is not None else byts["activations"] - inputs["O_R"]
        x = offload.step_moment(model, training, values, before) - byts["activations"]
        if x > byts["step"]:
            byts["step"], ids["step"] = x, offload.MOMENT
    byts["step_total"] = byts["total"] + byts["step"]
    for name, kind in (("activations_per_microbatch", "stage"), ("activations_per_layer", "layer")):
        ids[name], byts[name] = act[kind], Fraction(v[name])
    attention = families.get(model.family).attention
    ids[f"activations_{attention}_layer"] = act[attention]  # DeepSeek's activations_mla_layer
    if "moe" in act:
        ids["activations_moe_layer"] = act["moe"]
    ids["params"] = params_id
    chunk_list = tuple((all_stages[ch.stage], ch.inflight) for ch in chunks if ch.part != "head")
    heads = [ch.inflight for ch in chunks if ch.part == "head" and all_stages[ch.stage].head]
    if virtual is not None:
        chunk_list, heads = virtual[1], ([virtual[2]] if virtual[2] is not None else [])
    rows = graphs.apply(model, training, values, inputs, byts, ids, notes, chunk_list or ((comp, Fraction(1)),),
                        layer_split(model, comp, v))  # CUDA graphs' terms (derivations/assembly/graphs.py), if any
    if training.schedule:
        values = dict(values, n_fl=chunks[0].inflight)
    return Estimate(model, layout, training, comp, {"non_moe": P_n, "moe": P_m, "total": P_n + P_m}, byts,
                    _ends(v, byts["step_total"]), ids, values, held, chunk_list, heads[0] if heads else None,
                    virtual is not None, notes, *rows)


def _ends(v: Mapping, step_total) -> Dict[str, Dict[str, Fraction]]:
    """{low, high: {f_frag, fragmentation, buffers, peak, step_peak}}: the Sec. 6 ends of the assembly."""
    out = {}
    for end in ("low", "high"):
        o = overheads.named_values(end)
        out[end] = {"f_frag": o["f_frag"], "fragmentation": Fraction(v[f"fragmentation_{end}"]), "buffers": o["M_buf"],
                    "peak": Fraction(v[f"peak_{end}"])}
        out[end]["step_peak"] = Fraction(overheads.peak(step_total, Fraction(o["f_frag"]), Fraction(o["M_buf"])))
    return out


def _held_step(model, layout, training, inputs: Mapping, values: Mapping, comp, held) -> Tuple[Fraction, str]:
    """The first largest :func:`step_excess` over the stages the device runs (DualPipe: also its mirror)."""
    kind_of = model.layer_kinds() if training.expert_tokens else None  # a traced routing is read layer by layer
    if kind_of:
        dims = model.named()
        _check_expert_tokens(training.expert_tokens, kind_of, dims.get("N", 0),
                             Fraction(training.mbs * training.seq * dims.get("N_r", 0), layout.cp))
    stage = lambda st: tuple((i, kind_of[i]) for i in st.layers) if kind_of else None  # noqa: E731
    best = step_excess(model, training, inputs, values, stage(comp))
    for st in held:
        if st.index == comp.index:
            continue
        at = ev.derived(named(model, layout, training, st), model.family)
        got = step_excess(model, training, {**inputs, **at}, at, stage(st))
        if got[0] > best[0]:
            best = got
    return best


def _check_expert_tokens(tokens, kind_of, n_experts, copies) -> None:
    """Each expert_tokens entry a MoE layer, once, with N counts summing to b s N_r / CP."""
    seen = set()
    for entry in tokens:
        layer, counts = entry if isinstance(entry, tuple) and len(entry) == 2 else (None, None)
        ok = (isinstance(layer, int) and not isinstance(layer, bool) and 0 <= layer < len(kind_of)
              and kind_of[layer] == "moe" and layer not in seen and isinstance(counts, tuple)
              and len(counts) == n_experts
              and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
              and sum(counts) == copies)
        if not ok:
            raise cfg.ConfigError("expert-tokens",
                                  f"expert_tokens entry {str(entry)[:80]}: each entry must be (a MoE layer of the "
                                  f"model, named once, {n_experts} non-negative counts summing to b s N_r / CP = "
                                  f"{copies})")
        seen.add(layer)


def step_excess(model, training, inputs: Mapping, values: Mapping, layers=None) -> Tuple[Fraction, str]:
    """(X, the moment's term id; '' when X = 0) of one micro-batch's backward above its end-of-forward activations
    (derivations/assembly/step_terms.py, printed); ``layers``: ((layer, kind), ...) of the stage, which a traced routing
    (step_names.routing) is read against."""
    framework, policy = step_names.framework_of(training.conventions), step_names.policy_of(training.recompute)
    v, cast = step_inputs(training, inputs, values, lambda t: _kinds(model, t, values), model.family)
    moments = {name: Fraction(x) - cast for name, x in ev.step(framework, policy, v, model.family).items()}
    # a traced routing (Training.expert_tokens): the routed moments layer by layer at the router's counts
    rows = step_names.routing(training.expert_tokens, layers) if layers is not None else None
    if rows is not None:
        got = [{n: Fraction(x) - cast for n, x in ev.step(framework, policy, {**v, **r}, model.family).items()
                if n in step_names.ROUTED} for r in rows]
        for n in step_names.ROUTED:
            if n in moments:
                moments[n] = max((g[n] for g in got), default=None)
        moments = {n: x for n, x in moments.items() if x is not None}
    name = max(moments, key=lambda k: moments[k], default=None)  # the first largest
    if name is None or moments[name] <= 0:
        return Fraction(0), ""
    return moments[name], step_names.term_id(framework, policy, name)


def step_inputs(training, inputs: Mapping, values: Mapping, kinds_of, family: str) -> Tuple[Dict, object]:
    """(the moments' inputs, the head's cross-entropy transient they replace): ``inputs`` with the kinds' bytes
    (``kinds_of``) without the transient and without recomputation (step_names.trainings) and the indicators."""
    kinds, _ = ev.device_inputs(family)
    plain, bare = step_names.trainings(training)
    # the kinds the inputs hold already when the training is ``plain`` (no cross-entropy transient); the same
    # ones without recomputation when there is none
    at = None if plain is training else kinds_of(plain)
    none = kinds_of(bare) if bare != plain else (at or {k: inputs.get(s, 0) for k, s in kinds.items()})
    v = dict(inputs)  # (a name a family lacks reads as 0: derivations/evaluate.py step)
    if at is not None:
        v.update({sym: at.get(kind, 0) for kind, sym in kinds.items()})
    v.update({step_names.NONE_OF[sym]: none.get(kind, 0) for kind, sym in kinds.items() if sym in step_names.NONE_OF})
    v.update(step_names.indicators(training))
    return v, values.get("e_H", 0) * (inputs.get("M_H", 0) - v.get("M_H", 0))


def layer_split(model, comp, v: Mapping) -> Tuple[Tuple[Tuple[int, str, Fraction], ...], Fraction]:
    """((layer, 'dense' | 'moe', bytes), ...) of one micro-batch's activations of the stage (the assembly's derivatives
    of ``act.stage`` in L_d and L_m, plus a counted feature's) and what is outside the layers."""
    kinds = {"dense": Fraction(v["activations_dense_layer"]), "moe": Fraction(v["activations_moe_layer"])}
    kind_of = model.layer_kinds()
    counts = families.get(model.family).counts  # a layer with a counted feature adds its own (DeepSeek-V4's CSA)
    features = model.layer_features() if counts else None
    extra = lambda i: sum((Fraction(v.get(f"activations_{sym}_layer", 0)) for sym, feature, _ in counts  # noqa: E731
                           if feature in features[i]), Fraction(0))
    rows = tuple((i, kind_of[i], kinds[kind_of[i]] + (extra(i) if counts else 0)) for i in comp.layers)
    return rows, Fraction(v["activations_outside_layers"])


def components(model: cfg.ModelSpec, layout: cfg.Layout, training: cfg.Training, stage_index: int) -> Dict:
    """Exact bytes of the model states, activations, total, step excess and step total of one stage."""
    b = _estimate(model, layout, training, stage_index, ()).bytes
    return {k: b[k] for k in ("weights", "gradients", "optimizer", "activations", "total", "step", "step_total")}


def model_states(model: cfg.ModelSpec, layout: cfg.Layout, training: cfg.Training, stage_index: int) -> Dict:
    """Exact bytes of weights, gradients and optimizer states on one device of stage ``stage_index``."""
    comp = cfg.stage(model, layout, stage_index)
    return _model_states(model, layout, training, comp, _held(cfg.stages(model, layout), training, stage_index))[1]


def _held(all_stages, training, index: int) -> Tuple[cfg.StageComposition, ...]:
    """The stages whose parameters device ``index`` holds (schedules.held_stages: two under DualPipe)."""
    return tuple(all_stages[i] for i in schedules.held_stages(training.schedule, len(all_stages), index))


def stage_params(model: cfg.ModelSpec, layout: cfg.Layout, accounting: str = "paper"):
    """Parameters of every stage (Table 4 for PP=16) and of the whole model (Table 3)."""
    if accounting not in ("paper", "checkpoint"):
        raise cfg.ConfigError("accounting", f"accounting must be paper or checkpoint, got {accounting!r}")
    tid = "params.stage" if accounting == "paper" else "params.stage.checkpoint"
    rows = []
    for comp in cfg.stages(model, layout):
        terms = ev.Terms(model.structure, ev.derived(named(model, None, None, comp), model.family), model.family)
        parts = {key: Fraction(v) for key, _, v in terms.parts(tid)}
        rows.append((comp, Fraction(terms.term(tid)), parts))
    whole = cfg.whole_model(model)
    total = Fraction(ev.Terms(model.structure, ev.derived(named(model, None, None, whole), model.family),
                              model.family).term(tid))
    assert total == sum(r[1] for r in rows), "stage split does not add up to the model"
    return rows, total
