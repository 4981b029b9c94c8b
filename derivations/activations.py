"""Sec. 5: activations kept for the backward pass (Tables 9-10), in bytes.

Each activation term is the paper's list of tensors, one :class:`Part` per tensor (or per
row where the paper prints a group, such as the routed experts), with bytes per element
as symbols (B_a = 2 for BF16, B_k = 1 for dropout masks) and the parallel degrees as
symbols: SP divides the tensors of the sequence-parallel region, TP those after the
split projections, CP the sequence held by each device (extension; the paper has CP = 1),
ETP the intermediate size inside an expert.

The paper's readings (digest sec. 7):
  M_1^A = 4bsh/SP + 2bs(d_c' + d_c) + 4bs(d_h + d_h^R)n_h/TP + 2bs d_h n_h/TP
          + 5 b n_h s^2/TP + 2bs d_h n_h/TP + bsh/SP
  M_1^E = 4bsh/SP + 4bsN + 2bsN_r + (N/EP)(3 E_token h + 8 E_token h_E) + N_s(3bsh + 8bsh_E)
  M_2^A = 2bsh/SP,  M_2^E = 2bsh/SP + 2bsN_r  (full recomputation)

Tags: ``layer_input`` (the checkpoint kept under full recomputation), ``routing`` (the
routing decision, also kept), ``score`` (the b n_h s^2 attention-score tensors).
"""
from __future__ import annotations

from symbolic.notation import (B_a, B_k, CP, EP, ETP, E_token, L_d, L_m, N, N_r, N_s, SP, TP, b, d_c, d_cq,
                               d_h, d_hr, d_v, e_H, h, h_E, h_F, n_h, s, v)
from symbolic.term import Part, Term, combine

MLA = "Sec. 5.1, M_1^A"
MOE = "Sec. 5.2, M_1^E"
EXT = "extension (not in the paper)"


def mla_tensors(q_lora: bool = True):
    """Tensors one MLA layer keeps for backward (no recomputation), in the paper's order."""
    latent = (B_a, b, s, d_cq + d_c) if q_lora else (B_a, b, s, d_c)
    latent_label = "c_Q and c_KV (not split: their weights are replicated)" if q_lora else \
        "c_KV (not split: its weight is replicated; no query compression)"
    return (
        Part("norm_in", "RMSNorm input (the layer input)", (B_a, b, s, h), (SP, CP), MLA,
             ("layer_input",), row="x"),
        Part("down_in", "down-projection input (RMSNorm output)", (B_a, b, s, h), (SP, CP), MLA,
             ("norm",), row="x"),
        Part("latent", latent_label, latent, (CP,), MLA, ("latent",)),
        Part("q", "q with its RoPE part", (B_a, b, s, d_h + d_hr, n_h), (TP, CP), MLA, ("mla_up",), row="qk"),
        Part("k", "k with its RoPE part", (B_a, b, s, d_h + d_hr, n_h), (TP, CP), MLA, ("mla_up",), row="qk"),
        Part("v", "v", (B_a, b, s, d_v, n_h), (TP, CP), MLA, ("mla_up",)),
        Part("softmax", "softmax output", (B_a, b, n_h, s ** 2), (TP, CP), MLA, ("score",), row="score"),
        Part("score_mask", "attention dropout mask", (B_k, b, n_h, s ** 2), (TP, CP), MLA, ("score",), row="score"),
        Part("score_dropout", "attention dropout output", (B_a, b, n_h, s ** 2), (TP, CP), MLA, ("score",),
             row="score"),
        Part("attn_out", "attention output before W^O", (B_a, b, s, d_v, n_h), (TP, CP), MLA, ()),
        Part("out_mask", "dropout mask after W^O", (B_k, b, s, h), (SP, CP), MLA, ("mask",)),
    )


def moe_tensors():
    """Tensors one MoE sublayer keeps for backward (no recomputation), in the paper's order."""
    routed = ((B_a + B_k) * E_token * h + 4 * B_a * E_token * h_E / ETP)
    shared = ((B_a + B_k) * b * s * h + 4 * B_a * b * s * h_E) / CP
    return (
        Part("norm_in", "RMSNorm input (the sublayer input)", (B_a, b, s, h), (SP, CP), MOE, ("layer_input",), row="x"),
        Part("router_in", "router and expert input (RMSNorm output)", (B_a, b, s, h), (SP, CP), MOE, ("norm",),
             row="x"),
        Part("router", "router logits and probabilities (not split by SP)", (2, B_a, b, s, N), (CP,), MOE,
             ("router",)),
        Part("routing", "routing choice / dispatch mask", (B_a, b, s, N_r), (CP,), MOE, ("routing",)),
        Part("routed", "routed experts on the device, N/EP of them: per expert its tokens' input and mask "
                       "(3 E_token h) and gate, up, activation and product outputs (8 E_token h_E)",
             (N / EP, routed), (), MOE, ("experts",), counts=(0,)),
        Part("shared", "shared experts N_s: all b s tokens' input and mask (3bsh) and intermediate outputs (8bsh_E)",
             (N_s, shared), (), MOE, ("shared",), counts=(0,)),
    )


def dense_ffn_tensors():
    """Dense FFN sublayer (layers 0..first_k_dense-1), read as the paper reads M_1^A (extension)."""
    return (
        Part("norm_in", "RMSNorm input (the sublayer input)", (B_a, b, s, h), (SP, CP), EXT, ("layer_input",),
             row="x"),
        Part("ffn_in", "FFN input (RMSNorm output)", (B_a, b, s, h), (SP, CP), EXT, ("norm",), row="x"),
        Part("inter", "gate, up, activation and product outputs (split by TP)", (4, B_a, b, s, h_F), (TP, CP), EXT,
             ()),
        Part("out_mask", "dropout mask after down_proj", (B_k, b, s, h), (SP, CP), EXT, ("mask",)),
    )


def head_tensors():
    """Final norm, output head and loss on the last stage (extension; the paper stops at the layers)."""
    return (
        Part("norm_in", "final RMSNorm input", (B_a, b, s, h), (SP, CP), EXT, ("layer_input",), row="x"),
        Part("head_in", "head input (final RMSNorm output)", (B_a, b, s, h), (SP, CP), EXT, (), row="x"),
        Part("logits", "logits (vocabulary split by TP)", (B_a, b, s, v), (TP, CP), EXT, ()),
        Part("loss", "FP32 softmax of the cross-entropy loss", (4, b, s, v), (TP, CP), EXT, ()),
    )


def _kept(term_id, meaning, provenance, parts, tags, symbol=""):
    return Term(term_id, meaning, "bytes", provenance, tuple(p for p in parts if set(p.tags) & set(tags)), symbol)


def terms(reg, *, q_lora, routing_bias, tied):
    mla = Term("act.mla.layer", "activation bytes of one MLA layer, no recomputation", "bytes", MLA,
               mla_tensors(q_lora), symbol="M_1^A")
    mla_full = _kept("act.mla.layer.full", "activation bytes of one MLA layer, full recomputation "
                                           "(only the layer input is kept)", "Sec. 5.1, M_2^A",
                     mla.parts, {"layer_input"}, symbol="M_2^A")
    moe = Term("act.moe.layer", "activation bytes of one MoE layer, no recomputation", "bytes", MOE,
               moe_tensors(), symbol="M_1^E")
    moe_full = _kept("act.moe.layer.full", "activation bytes of one MoE layer, full recomputation "
                                           "(layer input and routing decision kept)", "Sec. 5.2, M_2^E",
                     moe.parts, {"layer_input", "routing"}, symbol="M_2^E")
    dense = Term("act.dense.layer", "activation bytes of one dense FFN sublayer, no recomputation (extension)",
                 "bytes", EXT, dense_ffn_tensors())
    dense_full = _kept("act.dense.layer.full", "activation bytes of one dense FFN sublayer, full recomputation "
                                               "(extension)", EXT, dense.parts, {"layer_input"})
    head = Term("act.head", "activation bytes of the final norm, head and loss on the last stage (extension)",
                "bytes", EXT, head_tensors())
    yield from (mla, mla_full, moe, moe_full, dense, dense_full, head)
    for suffix, m, e, d in (("", mla, moe, dense), (".full", mla_full, moe_full, dense_full)):
        policy = "full recomputation" if suffix else "no recomputation"
        yield combine(f"act.layer{suffix}", f"activation bytes of one MoE transformer layer (MLA + MoE), {policy}",
                      "bytes", "Sec. 5", [("mla", "MLA", 1, m), ("moe", "MoE", 1, e)])
        yield combine(f"act.stage{suffix}", f"activation bytes of one micro-batch on one device of a stage, {policy}",
                      "bytes", "Table 10",
                      [("mla", "MLA", L_d + L_m, m), ("moe", "MoE", L_m, e), ("dense", "dense FFN", L_d, d),
                       ("head", "head and loss", e_H, head)])
