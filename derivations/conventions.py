"""Other sources' conventions, reproduced exactly under their own assumptions (issue 8).

* ``conv.megatron.*``: Megatron-LM ``theoretical_memory_usage.py`` weight-and-optimizer
  estimate with expert parallelism.  Per layer A = MLA parameters including the q/kv
  latent norms, F_d = 3 h h_F, F_s = 3 h h_E N_s, F_r = 3 h h_E N.  Its "most-loaded
  shard" holds

    TP-split   ([(A + F_d) L_d + (A + F_s) L_m] / PP + (A + F_s) D + h v) / TP
    replicated (2h (L_d + L_m) + h N L_m + h) / PP + (2h + h N) D
    experts    F_r (L_m / PP + D) / (ETP EP)

  with L_d, L_m the model's dense and MoE layers and D the MTP layers; bytes are
  (TP-split + replicated) beta(DP) + experts beta(EDP), beta(d) = 6 + 12/d with the
  distributed optimizer, i.e. the Table 7 bytes with FP32 moments (2/4/4/4/4) and
  ZeRO-1: B_w + B_g + (B_m + B_1 + B_2)/d.

* ``conv.modelzoo.*``: the activation accounting of NVIDIA's Megatron-MoE-ModelZoo
  DeepSeek estimator, one MoE transformer layer and micro-batch, with
  t = b s N_r / TP routed token-copies per device; full recomputation keeps the layer
  input only.
"""
from __future__ import annotations

from symbolic.notation import (B_a, CP, D, EP, ETP, L_d, L_m, N, N_r, N_s, PP, TP, b, d_c, d_cq, d_h, d_hr, d_v,
                               h, h_E, h_F, n_h, s, v)
from symbolic.term import Part, Term

MEG = "Megatron-LM theoretical_memory_usage.py (2026, with expert parallelism)"
MZ = "NVIDIA Megatron-MoE-ModelZoo DeepSeek estimator"


def megatron_terms(reg, q_lora):
    norms = reg["params.norm"]
    latent_norms = sum((p.expr for p in norms.parts if p.key in ("q_norm", "kv_norm")), 0)
    A = reg["params.mla"].expr + latent_norms
    F_d = 3 * h * h_F
    F_s = 3 * h * h_E * N_s
    F_r = 3 * h * h_E * N
    params = Term("conv.megatron.params", "parameters of Megatron's most-loaded shard", "params", MEG, (
        Part("tp_split", "TP-split: ([(A + F_d) L_d + (A + F_s) L_m]/PP + (A + F_s) D + h v) / TP",
             ((A + F_d) * L_d / PP + (A + F_s) * L_m / PP + (A + F_s) * D + h * v,), (TP,), MEG, ("non_moe",)),
        Part("replicated", "replicated: (2h per layer + h N router per MoE layer + final norm h)/PP + MTP layers'",
             ((2 * h * (L_d + L_m) + h * N * L_m + h) / PP + (2 * h + h * N) * D,), (), MEG, ("non_moe",)),
        Part("experts", "routed experts: F_r (L_m/PP + D) / (ETP EP)", (F_r, L_m / PP + D), (ETP, EP), MEG,
             ("moe",)),
    ))
    yield params
    P_n = sum(p.expr for p in params.parts if "non_moe" in p.tags)
    P_m = params.part("experts").expr
    from .zero import sharding_terms
    yield from sharding_terms("conv.megatron", P_n, P_m, MEG)


def modelzoo_tensors():
    """The ModelZoo estimator's tensors of one MoE transformer layer (BF16 unless said)."""
    t = b * s * N_r / TP  # routed token-copies per device
    c = (CP,)
    rows = [
        ("layer_in", "layer input", (B_a, b, s, h), (TP,), ("layer_input",)),
        ("norm_out", "input-norm output", (B_a, b, s, h), (TP,), ("norm",)),
        ("q_down", "q down-projection output", (B_a, b, s, d_cq), (TP,), ("latent",)),
        ("q_norm", "q norm output", (B_a, b, s, d_cq), (TP,), ("latent", "norm")),
        ("kv_latent", "kv latent", (B_a, b, s, d_c), (TP,), ("latent",)),
        ("kv_norm", "kv norm output (not split)", (B_a, b, s, d_c), (), ("latent", "norm")),
        ("q", "q after RoPE", (B_a, b, s, n_h, d_h + d_hr), (TP,), ("mla_up",)),
        ("k", "k after RoPE", (B_a, b, s, n_h, d_h + d_hr), (TP,), ("mla_up",)),
        ("v", "v", (B_a, b, s, n_h, d_v), (TP,), ("mla_up",)),
        ("attn_out", "attention output", (B_a, b, s, n_h, d_v), (TP,), ()),
        ("softmax_stats", "softmax statistics (FP32)", (4, b, n_h, s), (TP,), ("score",)),
        ("residual", "residual after attention", (B_a, b, s, h), (TP,), ()),
        ("shared_in", "shared-expert input after all-gather", (B_a, b, s, h), (), ("shared",)),
        ("router_probs", "router probabilities", (B_a, b, s, N), (TP,), ("router",)),
        ("row_map", "permutation row map (int64)", (8, b, s, N), (TP,), ("router",)),
        ("shared_fc1", "shared fc1 output", (2, B_a, b, s, h_E, N_s), (TP,), ("shared",)),
        ("shared_act", "shared activation output", (B_a, b, s, h_E, N_s), (TP,), ("shared",)),
        ("permuted", "permuted tokens", (B_a, t, h), (), ("experts",)),
        ("fc1", "expert fc1 output", (2, B_a, t, h_E), (), ("experts",)),
        ("act", "expert activation output", (B_a, t, h_E), (), ("experts",)),
        ("unpermute", "un-permute all-to-all output", (B_a, t, h), (), ("experts",)),
    ]
    return tuple(Part(k, lab, num, den + c, MZ, tags) for k, lab, num, den, tags in rows)


def terms(reg, *, q_lora, routing_bias, tied):
    yield from megatron_terms(reg, q_lora)
    parts = modelzoo_tensors()
    if not q_lora:
        parts = tuple(p for p in parts if p.key not in ("q_down", "q_norm"))
    yield Term("conv.modelzoo.layer", "activation bytes of one MoE transformer layer, ModelZoo accounting", "bytes",
               MZ, parts)
    yield Term("conv.modelzoo.layer.full", "activation bytes of one MoE transformer layer, ModelZoo accounting, "
                                           "full recomputation (layer input only)", "bytes", MZ,
               tuple(p for p in parts if "layer_input" in p.tags))
