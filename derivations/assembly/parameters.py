"""Sec. 2: parameters per layer kind (Table 3) and per pipeline stage (Table 4): ``params.stage`` in the composition
symbols L_d, L_m, e_E, e_H (layer 0 = {L_d: 1, e_E: 1}; the whole model holds everything). Extensions (the released HF
checkpoints, derivations/models/; not in the paper): ``params.stage.checkpoint`` (every tensor: + final RMSNorm, + the
noaux_tc routing bias), ``params.activated*`` (what one token passes through: N_r routed + N_s shared experts; embedding
and head as separate rows) and ``params.mtp*`` (D MTP modules, DeepSeek-V3 report Sec. 2.2: a MoE block, eh_proj h x 2h,
enorm, hnorm, shared_head.norm; embedding and head shared)."""
from __future__ import annotations

from derivations.notation import SYMBOLS, D, L_d, L_m, N, N_r, N_s, e_E, e_H, h
from symbolic.term import Part, Term, combine


def terms(reg, family, flags):
    """The family's layers (derivations/families/<family>/parameters.py) composed per layer kind, per stage, as a
    checkpoint stores them and as a token passes through them."""
    routing_bias, tied = flags.get("routing_bias", False), flags["tied"]
    att, att_id = family.attention_label, "params." + family.attention
    attn, norm, dense_ffn = reg[att_id], reg["params.norm"], reg["params.dense_ffn"]
    moe_family = "moe" in family.kinds
    extra = [(key, label, 1, reg[tid]) for key, label, tid in family.layer_extra]
    dense = combine("params.layer.dense", f"parameters of one dense transformer layer ({att} + dense FFN + LN)",
                    "params", "Table 3, layers 1-2",
                    [(family.attention, att, 1, attn), ("ffn", "dense FFN", 1, dense_ffn), ("norm", "LN", 1, norm)]
                    + extra)
    yield dense
    moe = None
    if moe_family:
        router, expert = reg["params.router"], reg["params.expert"]
        moe = combine("params.layer.moe", f"parameters of one MoE transformer layer ({att} + router + N + N_s "
                                          f"experts + LN)", "params", "Table 3, layers 3-59",
                      [(family.attention, att, 1, attn), ("router", "router", 1, router),
                       ("experts", "routed and shared experts (N + N_s)", N + N_s, expert), ("norm", "LN", 1, norm)]
                      + extra)
        yield moe
    layers = "L_d dense and L_m MoE layers" if moe_family else "L_d layers"
    stage = combine("params.stage", f"parameters of a pipeline stage holding {layers} "
                                    "(+ embedding if e_E = 1, + head if e_H = 1)", "params", "Tables 3-4",
                    [("dense", "dense layers", L_d, dense)] + ([("moe", "MoE layers", L_m, moe)] if moe else [])
                    + [("embedding", "word embedding", e_E, reg["params.embedding"]),
                       ("head", "output head", e_H, reg["params.head"])]
                    + additions(reg, family, "stage"))
    yield stage
    final_norm = Term("params.final_norm", "final RMSNorm before the head (in real checkpoints; "
                                           "not counted by the paper)", "params", "digest sec. 12 (checkpoint)",
                      (Part("norm", "final RMSNorm", (h,)),))
    yield final_norm
    extra = [("final_norm", "final RMSNorm (checkpoint only)", e_H, final_norm)]
    bias = None
    if routing_bias:
        bias = Term("params.router_bias", "noaux_tc score-correction bias of one MoE layer, N "
                                          "(in real checkpoints; not counted by the paper)", "params",
                    "digest sec. 12 (checkpoint)", (Part("bias", "e_score_correction_bias", (N,)),))
        yield bias
        extra.append(("router_bias", "routing bias per MoE layer (checkpoint only)", L_m, bias))
    rows = [("paper", "as the paper counts (params.stage)", 1, stage)] + extra + additions(reg, family, "checkpoint")
    yield combine("params.stage.checkpoint", "parameters of a stage counting every tensor of a real checkpoint",
                  "params", "Tables 3-4 + digest sec. 12", rows)
    yield from activated_terms(reg, family, dense, moe, extra, tied)
    if "mtp" in family.kinds:
        yield from mtp_terms(reg, bias)


def additions(reg, family, where):
    """The family's ``additions`` rows (key, label, count, term) counted ``where`` that the structure has."""
    return [(key, label, SYMBOLS[count], reg[tid]) for key, label, count, tid, at in family.additions
            if at == where and tid in reg]


ACT = "digest sec. 12 (activated parameters; extension)"
MTP = "DeepSeek-V3 report Sec. 2.2, README_WEIGHTS (MTP; extension, not in the paper)"


def activated_terms(reg, family, dense, moe, checkpoint_rows, tied):
    """Parameters a token passes through: top-k routed + shared experts + everything dense (every layer of a
    family without experts); ``checkpoint_rows``: what only a checkpoint holds (final norm, routing bias)."""
    att = family.attention_label
    layer = None
    if moe is not None:
        layer = combine("params.activated.layer.moe", f"parameters of one MoE layer one token passes through: "
                                                      f"{att}, LN, router and its N_r routed + N_s shared experts",
                        "params", ACT,
                        [(family.attention, att, 1, reg["params." + family.attention]),
                         ("router", "router", 1, reg["params.router"]),
                         ("experts", "chosen routed and shared experts (N_r + N_s)", N_r + N_s, reg["params.expert"]),
                         ("norm", "LN", 1, reg["params.norm"])]
                        + [(key, label, 1, reg[tid]) for key, label, tid in family.layer_extra])
        yield layer
    emb, head = reg["params.embedding"], reg["params.head"]
    if tied:  # one v x h matrix: used by every token as the head; the lookup row is then empty
        emb, head = head, emb
    layers = "L_d dense and L_m MoE layers" if moe is not None else "L_d layers"
    act = combine("params.activated", f"parameters one token passes through in a stage holding {layers} "
                                      "(+ embedding if e_E = 1, + head if e_H = 1)", "params", ACT,
                  [("dense", "dense layers", L_d, dense)]
                  + ([("moe", "MoE layers, activated part", L_m, layer)] if layer is not None else [])
                  + [("embedding", "word embedding" + (" (tied: counted as the head)" if tied else ""), e_E, emb),
                     ("head", "output head", e_H, head)]
                  + additions(reg, family, "stage"))
    yield act
    rows = [("paper", "as the paper counts (params.activated)", 1, act)] + checkpoint_rows
    yield combine("params.activated.checkpoint", "activated parameters counting every tensor of a real checkpoint",
                  "params", ACT, rows + additions(reg, family, "checkpoint"))


def _mtp_module(term_id, meaning, block_id, block, bias, indexer=None):
    parts = [Part("block", f"one MoE transformer block ({block_id})", (block.expr,), provenance=block.provenance,
                  tags=("ref:" + block_id,))]
    if indexer is not None:  # DSA: the block's attention runs an indexer of its own (a layer L_I counts)
        parts.append(Part("indexer", "the block's DSA lightning indexer (params.indexer)", (indexer.expr,),
                          provenance=indexer.provenance, tags=("ref:params.indexer",)))
    if bias is not None:
        parts.append(Part("router_bias", "routing bias of the block (noaux_tc)", (N,), provenance=MTP))
    parts += [
        Part("eh_proj", "eh_proj: projection of [RMSNorm(h); RMSNorm(embedding)], h x 2h", (2, h, h), provenance=MTP),
        Part("enorm", "enorm: RMSNorm of the next token's embedding", (h,), provenance=MTP),
        Part("hnorm", "hnorm: RMSNorm of the previous depth's hidden state", (h,), provenance=MTP),
        Part("head_norm", "shared_head.norm: RMSNorm before the shared output head", (h,), provenance=MTP),
    ]
    return Term(term_id, meaning, "params", MTP, tuple(parts))


def mtp_terms(reg, bias):
    """D MTP modules (embedding and head shared); with DSA each block holds an indexer."""
    indexer = reg["params.indexer"] if "params.indexer" in reg else None
    module = _mtp_module("params.mtp.module", "parameters of one multi-token-prediction module: one MoE block, "
                                              "eh_proj (h x 2h), enorm, hnorm and shared_head.norm (embedding and "
                                              "head shared, not counted)", "params.layer.moe", reg["params.layer.moe"],
                         bias, indexer)
    yield module
    yield combine("params.mtp", "parameters of the D MTP modules (embedding and head shared, not counted again)",
                  "params", MTP, [("modules", "MTP modules", D, module)])
    active = _mtp_module("params.mtp.module.activated", "parameters of one MTP module one token passes through "
                                                        "(activated MoE block; shared embedding and head not counted)",
                         "params.activated.layer.moe", reg["params.activated.layer.moe"], bias, indexer)
    yield active
    yield combine("params.mtp.activated", "parameters of the D MTP modules one token passes through (shared "
                                          "embedding and head not counted)", "params", MTP,
                  [("modules", "MTP modules", D, active)])
