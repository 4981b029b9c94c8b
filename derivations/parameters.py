"""Sec. 2: parameters per layer kind (Table 3) and per pipeline stage (Table 4).

A stage is described by the composition symbols L_d (dense layers), L_m (MoE layers),
e_E (holds the embedding) and e_H (holds the head); Table 3's rows and Table 4's stages
are substitutions of ``params.stage`` (layer 0 = {L_d: 1, e_E: 1}; a 4-MoE-layer stage =
{L_m: 4}); the whole model is the stage that holds everything.
"""
from __future__ import annotations

from symbolic.notation import L_d, L_m, N, N_s, e_E, e_H, h
from symbolic.term import Part, Term, combine


def terms(reg, *, q_lora, routing_bias, tied):
    mla, norm, dense_ffn = reg["params.mla"], reg["params.norm"], reg["params.dense_ffn"]
    router, expert = reg["params.router"], reg["params.expert"]
    dense = combine("params.layer.dense", "parameters of one dense transformer layer (MLA + dense FFN + LN)",
                    "params", "Table 3, layers 1-2",
                    [("mla", "MLA", 1, mla), ("ffn", "dense FFN", 1, dense_ffn), ("norm", "LN", 1, norm)])
    yield dense
    moe = combine("params.layer.moe", "parameters of one MoE transformer layer (MLA + router + N + N_s experts + LN)",
                  "params", "Table 3, layers 3-59",
                  [("mla", "MLA", 1, mla), ("router", "router", 1, router),
                   ("experts", "routed and shared experts (N + N_s)", N + N_s, expert), ("norm", "LN", 1, norm)])
    yield moe
    stage = combine("params.stage", "parameters of a pipeline stage holding L_d dense and L_m MoE layers "
                                    "(+ embedding if e_E = 1, + head if e_H = 1)", "params", "Tables 3-4",
                    [("dense", "dense layers", L_d, dense), ("moe", "MoE layers", L_m, moe),
                     ("embedding", "word embedding", e_E, reg["params.embedding"]),
                     ("head", "output head", e_H, reg["params.head"])])
    yield stage
    final_norm = Term("params.final_norm", "final RMSNorm before the head (in real checkpoints; "
                                           "not counted by the paper)", "params", "digest sec. 12 (checkpoint)",
                      (Part("norm", "final RMSNorm", (h,)),))
    yield final_norm
    extra = [("final_norm", "final RMSNorm (checkpoint only)", e_H, final_norm)]
    if routing_bias:
        bias = Term("params.router_bias", "noaux_tc score-correction bias of one MoE layer, N "
                                          "(in real checkpoints; not counted by the paper)", "params",
                    "digest sec. 12 (checkpoint)", (Part("bias", "e_score_correction_bias", (N,)),))
        yield bias
        extra.append(("router_bias", "routing bias per MoE layer (checkpoint only)", L_m, bias))
    rows = [("paper", "as the paper counts (params.stage)", 1, stage)] + extra
    yield combine("params.stage.checkpoint", "parameters of a stage counting every tensor of a real checkpoint",
                  "params", "Tables 3-4 + digest sec. 12", rows)
