"""How a device's parameters arise, in words (``memsym estimate``'s text): the pipeline split and P_n, P_m from the
per-layer terms (Sec. 3's rules), or Megatron's shard and the ModelZoo rank's parts, from derivations/evaluate.py."""
from __future__ import annotations

from fractions import Fraction
from itertools import groupby
from types import SimpleNamespace

from symbolic.exact import fmt_int

from derivations import config as cfg
from derivations import evaluate as ev
from derivations import families
from derivations.assembly.sides import megatron_values, mtp_stage_shift


def stage_content(c, family: str = "deepseek") -> str:
    """What a stage holds, in words, with its family's own counts (DeepSeek-V4: ``3 MoE (1 CSA, 2 HCA)``)."""
    fam = families.get(family)
    own = {sym: feature for sym, feature, _ in fam.counts if feature in fam.named_counts}
    kinds = ", ".join(f"{n} {own[sym]}" for sym, n in c.extra if sym in own and n)
    return ", ".join((["embedding"] if c.embedding else []) + ([f"{c.dense} dense"] if c.dense else []) +
                     ([f"{c.moe} MoE" + (f" ({kinds})" if kinds else "")] if c.moe else []) +
                     (["head"] if c.head else []))


def explain_split(est) -> list:
    """Every stage's layers (runs of alike stages grouped), the reported stage marked."""
    m, lay = est.model, est.layout
    all_stages = cfg.stages(m, lay)
    kinds = m.layer_kinds()
    sizes = ",".join(str(len(c.layers)) for c in all_stages)
    lines = [f"pipeline split of the {m.l} layers ({kinds.count('dense')} dense, {kinds.count('moe')} MoE) over "
             f"PP={lay.pp} stages: {sizes} layers"
             + (" (--layers-per-stage)" if lay.layers_per_stage else " (change with --layers-per-stage)")]
    for _, run in groupby(all_stages, key=lambda c: (len(c.layers), c.dense, c.moe, c.embedding, c.head, c.extra)):
        cs = list(run)
        first, last = cs[0], cs[-1]
        name = f"stage {first.index}" if len(cs) == 1 else f"stages {first.index}-{last.index}"
        start, stop = first.layers.start, last.layers.stop - 1
        layers = f"layer {start}" if start == stop else f"layers {start}-{stop}"
        mark = f"  <- stage {est.stage.index}, this device" if first.index <= est.stage.index <= last.index else ""
        lines.append(f"  {name:<13}{layers:<16}{stage_content(first, m.family)}{' each' if len(cs) > 1 else ''}{mark}")
    return lines


def _terms(est, values=None):
    """The device's terms at ``values`` (default: the estimate's), from the generated evaluators."""
    family = est.model.family
    return ev.Terms(est.model.structure, ev.derived(dict(est.values if values is None else values), family), family)


def explain_params(est) -> list:
    """How P_n and P_m of the device arise from the per-layer terms (Sec. 3 rules), or the parts of Megatron's
    most-loaded shard (--rank megatron) and of the ModelZoo script's rank (--rank modelzoo)."""
    tid = est.term_ids.get("params", "")
    if tid.startswith("conv.megatron"):
        values = megatron_values(est.model, est.layout, est.training)
        terms = _terms(est, values)
        labels = terms.labels(tid)
        lines = [f"  Megatron-LM's most-loaded shard ({tid}; whole model over PP={est.layout.pp}, "
                 f"D={values['D']} MTP layer{'s' * (values['D'] != 1)}):"]
        for key, tags, value in terms.parts(tid):
            side = "P_m, over EDP" if "moe" in tags else "P_n, over DP"
            lines.append(f"    {key:<11}{fmt_int(value):>16}  {labels[key]} ({side})")
        return lines
    if tid.startswith("conv.modelzoo"):
        terms = _terms(est)
        lines = ["  the ModelZoo script's rank (every layer of the stage counted as a MoE layer; no embedding, head, "
                 "norms or router):"]
        for tid, over in (("conv.modelzoo.params.non_moe", "P_n, over DP CP"),
                          ("conv.modelzoo.params.moe", "P_m, over EDP")):
            labels = terms.labels(tid)
            for key, _, value in terms.parts(tid):
                lines.append(f"    {key:<11}{fmt_int(value):>16}  {labels[key]} ({over})")
        return lines
    m, lay, st = est.model, est.layout, est.stage
    shared_tp = est.training.conventions.shared_expert == "tp"
    if len(est.held) > 1:  # DualPipe: the device holds two stages' parameters
        st = SimpleNamespace(dense=sum(c.dense for c in est.held), moe=sum(c.moe for c in est.held),
                             embedding=any(c.embedding for c in est.held), head=any(c.head for c in est.held),
                             named=lambda: {k: sum(c.named()[k] for c in est.held)
                                            for k in cfg.composition_names(m.family)})
    t = _terms(est)
    val = lambda tid: fmt_int(t.term(tid))
    n = st.dense + st.moe
    fam = families.get(m.family)
    att, kind = fam.attention_label, fam.attention  # DeepSeek's MLA, static.layer.mla, params.mla
    extra = "".join(f" + {label} {val('static.' + tid[len('params.'):])}" for _, label, tid in fam.layer_extra)
    pn = [f"{n} layer{'s' * (n != 1)} x ({att} {val('static.layer.' + kind)} + LN {val('static.layer.norm')}{extra})"]
    if st.dense:
        pn.append(f"{st.dense} dense FFN x {val('static.layer.dense_ffn')} (split by TP={lay.tp})")
    for _, label, count, tid, at in fam.additions:  # the family's per-stage terms (DeepSeek's L_I indexers)
        n_add = st.named()[count]
        if at == "stage" and "static." + tid[len("params."):] in t and n_add:
            pn.append(f"{label}: {n_add} x {val('static.' + tid[len('params.'):])} (replicated)")
    if st.embedding:
        pn.append(f"embedding {val('static.embedding')} (v h / TP)")
    if st.head:
        pn.append(f"head {val('static.head')} (v h / TP)")
    mats = lambda tag: ", ".join(key.replace("_", "^", 1) for key, tags, _ in t.parts("params." + kind) if tag in tags)
    mtp_note = []
    if est.training.conventions.mtp and st.head and m.mtp_layers:  # conventions.mtp_stage_shift
        emb2 = mtp_stage_shift(m, lay.pp, {**st.named(), "e_H": 1})["e_E"]
        mtp_note = [f"  --mtp: + {m.mtp_layers} MTP module{'s' * (m.mtp_layers != 1)} on this last stage, each counted "
                    f"as one more MoE layer ({att} + LN" + (" + its DSA indexer" if m.mtp_layer_features() else "")
                    + " in P_n, experts in P_m)"
                    + (f", + the embedding copy {val('static.embedding')} (v h / TP) Megatron-Core keeps there"
                       if emb2 > int(st.embedding) else "")]
    lines = ["  P_n = " + " + ".join(pn),
             f"        {att}: {mats('tp_split')} split by TP={lay.tp}; "
             + (f"{mats('replicated')} and LN replicated" if mats("replicated") else "LN replicated")]
    if st.moe:
        expert = Fraction(t.term("params.expert"))
        moe_id = "static.layer.moe.shared-tp" if shared_tp else "static.layer.moe"
        lines.append(f"  P_m = {st.moe} MoE layer{'s' * (st.moe != 1)} x {val(moe_id)}: router N h = "
                     f"{fmt_int(m.N * m.h)} (replicated)")
        shared = (f"{fmt_int(expert / lay.tp)} (split by TP={lay.tp}: --shared-expert tp)" if shared_tp
                  else f"{fmt_int(expert)} (replicated on every EP rank)")
        lines.append(f"        + N/EP = {m.N}/{lay.ep} = {m.N // lay.ep} routed experts x 3 h h_E / ETP = "
                     f"{fmt_int(expert / lay.etp)} + N_s = {m.N_s} shared expert{'s' * (m.N_s != 1)} x {shared}")
    else:
        lines.append("  P_m = 0 (no MoE layer on this stage)")
    return lines + mtp_note
