"""Sec. 3: static parameters held by one device of a stage (Tables 5-6). The paper's rules: RMSNorm weights replicated
over TP; W^UQ, W^UK, W^UV, W^O split by TP and W^DQ, W^DKV, W^QR, W^KR replicated; router replicated; routed experts
divided by EP (and ETP); the shared expert replicated. Extension: the dense FFN, embedding and head split by TP
(Megatron's parallel MLP, vocabulary-parallel)."""
from __future__ import annotations

from derivations.notation import SYMBOLS, EP, ETP, L_d, L_m, N, N_s, TP, e_E, e_H, h
from symbolic.term import Part, Term, combine


def _per_device(term: Term, term_id: str, meaning: str, provenance: str) -> Term:
    """Divide the tp_split parts of ``term`` by TP, keep the replicated ones."""
    parts = []
    for p in term.parts:
        split = "replicated" not in p.tags
        parts.append(Part(p.key, p.label + (" / TP" if split else " (replicated)"), p.num,
                          p.den + ((TP,) if split else ()), p.provenance, p.tags))
    return Term(term_id, meaning, "params", provenance, tuple(parts))


def terms(reg, family, flags):
    """Table 6's rows for the family's layers, and P_n, P_m per device of a stage (no P_m without experts)."""
    att, kind = family.attention_label, family.attention
    attn = _per_device(reg["params." + kind], "static.layer." + kind,
                       f"{att} parameters of one layer on one device (up/output projections split by TP)",
                       "Sec. 3, Table 6")
    yield attn
    norm = Term("static.layer.norm", "RMSNorm weights of one layer on one device (replicated)", "params",
                "Sec. 3, Table 6", tuple(Part(p.key, p.label + " (replicated)", p.num, p.den, p.provenance,
                                               ("replicated",)) for p in reg["params.norm"].parts))
    yield norm
    ffn = Term("static.layer.dense_ffn", "dense FFN parameters of one layer on one device (split by TP; "
                                         "extension, the paper tabulates MoE stages only)", "params",
               "extension of Sec. 3", tuple(Part(p.key, p.label + " / TP", p.num, p.den + (TP,), p.provenance,
                                                 ("tp_split",)) for p in reg["params.dense_ffn"].parts))
    yield ffn
    moe = None
    if "moe" in family.kinds:
        expert = reg["params.expert"]
        moe = Term("static.layer.moe", "MoE parameters of one layer on one device: router (replicated), N/EP "
                                       "routed experts (split by ETP), N_s shared experts (replicated)", "params",
                   "Sec. 3, Table 6",
                   (Part("router", "router N x h (replicated)", (N, h),
                         provenance="Sec. 3", tags=("replicated",)),
                    Part("routed", "routed experts N/EP, each 3 h h_E / ETP", (N, expert.expr), (EP, ETP),
                         provenance="Sec. 3", tags=("expert",)),
                    Part("shared", "shared experts N_s, each 3 h h_E (replicated)", (N_s, expert.expr),
                         provenance="Sec. 3", tags=("replicated",))))
        yield moe
    emb = Term("static.embedding", "word embedding on one device (vocabulary split by TP; extension)", "params",
               "extension of Sec. 3", (Part("embed", "v h / TP", reg["params.embedding"].parts[0].num, (TP,)),))
    head = Term("static.head", "output head on one device (vocabulary split by TP; extension)", "params",
                "extension of Sec. 3", (Part("head", "v h / TP", reg["params.head"].parts[0].num, (TP,)),))
    yield emb
    yield head
    layers = L_d + L_m if moe is not None else L_d
    yield combine("static.device.norm", "RMSNorm parameters on one device of a stage", "params", "Table 6, RMSNorm",
                  [("norm", "LN per layer", layers, norm)])
    yield combine(f"static.device.{kind}", f"{att} parameters on one device of a stage", "params", f"Table 6, {att}",
                  [(kind, f"{att} per layer", layers, attn)])
    own = []  # the family's terms beside the paper's: every layer's (layer_extra), the stage's (additions)
    for key, label, count, tid in ([(k, lab, layers, t) for k, lab, t in family.layer_extra]
                                   + [(k, lab, SYMBOLS[c], t) for k, lab, c, t, at in family.additions
                                      if at == "stage" and t in reg]):
        term = _per_device(reg[tid], "static." + tid[len("params."):], reg[tid].meaning + ", on one device",
                           "extension of Sec. 3")
        yield term
        own.append((key, label, count, term))
    non_moe = combine("static.device.non_moe", "non-MoE parameters on one device of a stage (P_n)", "params",
                      "Table 6, non-MoE part",
                      [("norm", "RMSNorm", layers, norm), (kind, att, layers, attn),
                       ("dense_ffn", "dense FFN", L_d, ffn), ("embedding", "embedding", e_E, emb),
                       ("head", "output head", e_H, head)] + own, symbol="P_n")
    yield non_moe
    rows = [("non_moe", "non-MoE", 1, non_moe)]
    if moe is not None:
        moe_dev = combine("static.device.moe", "MoE parameters on one device of a stage (P_m)", "params",
                          "Table 6, MoE", [("moe", "MoE per layer", L_m, moe)], symbol="P_m")
        yield moe_dev
        rows.append(("moe", "MoE", 1, moe_dev))
    yield combine("static.device.total", "parameters on one device of a stage (P_n + P_m)" if moe is not None else
                  "parameters on one device of a stage (P_n)", "params", "Table 6, total", rows)
