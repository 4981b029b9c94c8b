"""Sec. 5's tensor lists (and the ModelZoo inventory's), one tagged :class:`Part` per tensor kept
for backward: MLA (Sec. 5.1, M_1^A), MoE (Sec. 5.2, M_1^E), the dense FFN sublayer and the
head (extensions).  :mod:`derivations.views` decides from the tags which are kept and how;
``KEPT_FOR`` names the operation whose backward keeps each."""
from __future__ import annotations

from derivations.notation import (B_a, B_k, CP, EP, ETP, E_token, N, N_r, N_s, SP, TP, b, d_c,
                               d_cq, d_h, d_hr, d_v, h, h_E, h_F, n_h, s, v)
from symbolic.term import Part

from .views import EXT, FLASH, MLA, MOE, PAPER, Group, View, apply

# ----------------------------------------------------------------------------- tensor lists
MZ = "NVIDIA Megatron-MoE-ModelZoo DeepSeek estimator (--inventory modelzoo)"
CONV = "convention (not in the paper; see --help)"


def mla_specs(q_lora: bool = True):
    """The MLA layer's tensors (Parts), the paper's and the other inventories', tagged."""
    latent = (B_a, b, s, d_cq + d_c) if q_lora else (B_a, b, s, d_c)
    latent_label = "c_Q and c_KV (not split: their weights are replicated)" if q_lora else \
        "c_KV (not split: its weight is replicated; no query compression)"
    mz_q = (
        Part("mz_q_down", "c_Q, q down-projection output (on the sequence-parallel shard)", (B_a, b, s, d_cq),
             (TP, CP), MZ, ("latent", "modelzoo_only")),
        Part("mz_q_norm", "q norm output (on the sequence-parallel shard)", (B_a, b, s, d_cq), (TP, CP), MZ,
             ("latent", "norm", "latent_norm", "modelzoo_only")),
    ) if q_lora else ()
    return (
        Part("norm_in", "RMSNorm input (the layer input)", (B_a, b, s, h), (SP, CP), MLA,
             ("layer_input",), row="x"),
        Part("down_in", "down-projection input (RMSNorm output)", (B_a, b, s, h), (SP, CP), MLA,
             ("norm",), row="x"),
        Part("latent", latent_label, latent, (CP,), MLA, ("latent", "paper_only")),
        Part("latent_norm", "RMSNorm outputs of the latents, the up-projections' input (not split)", latent, (CP,),
             CONV, ("latent", "norm", "latent_norm", "paper_only")),
        *mz_q,
        Part("mz_kv_latent", "c_KV, kv down-projection output (on the sequence-parallel shard)", (B_a, b, s, d_c),
             (TP, CP), MZ, ("latent", "modelzoo_only")),
        Part("mz_kv_norm", "kv norm output (not split)", (B_a, b, s, d_c), (CP,), MZ,
             ("latent", "norm", "latent_norm", "modelzoo_only")),
        Part("q", "q with its RoPE part", (B_a, b, s, d_h + d_hr, n_h), (TP, CP), MLA, ("mla_up",), row="qk"),
        Part("k", "k with its RoPE part", (B_a, b, s, d_h + d_hr, n_h), (TP, CP), MLA, ("mla_up",), row="qk"),
        Part("v", "v", (B_a, b, s, d_v, n_h), (TP, CP), MLA, ("mla_up",)),
        Part("softmax", "softmax output", (B_a, b, n_h, s ** 2), (TP, CP), MLA, ("score", "eager"), row="score"),
        Part("score_mask", "attention dropout mask", (B_k, b, n_h, s ** 2), (TP, CP), MLA,
             ("score", "mask", "eager"), row="score"),
        Part("score_dropout", "attention dropout output", (B_a, b, n_h, s ** 2), (TP, CP), MLA,
             ("score", "eager"), row="score"),
        Part("softmax_stats", "softmax statistics: FP32 log-sum-exp per query row and head (fused attention)",
             (4, b, n_h, s), (TP, CP), FLASH, ("score", "flash")),
        Part("attn_out", "attention output before W^O (also the fused kernel's saved output)",
             (B_a, b, s, d_v, n_h), (TP, CP), MLA, ("e5m6",)),
        Part("out_mask", "dropout mask after W^O", (B_k, b, s, h), (SP, CP), MLA, ("mask",)),
    )


def mla_tensors(q_lora: bool = True, view: View = PAPER):
    """Tensors one MLA layer keeps for backward, in the paper's order (``view``: see View)."""
    return apply(view, mla_specs(q_lora))


def _expert(tokens, inter_den, routed=False, x_tags=()):
    """The tensors of one SwiGLU expert for ``tokens`` tokens (the paper's 3 t h + 8 t h_E);
    a routed expert's output exists under ``--expert-outputs kept``."""
    out = (
        ("x", "tokens' input", (B_a, tokens, h), (), ("fp8",) + x_tags),
        ("mask", "mask", (B_k, tokens, h), (), ("mask",)),
        ("swiglu_in", "gate and up outputs (SwiGLU inputs)", (2, B_a, tokens, h_E), inter_den,
         ("fp8", "inter", "fc1")),
        ("swiglu_out", "activation and product outputs (SwiGLU outputs)", (2, B_a, tokens, h_E), inter_den,
         ("swiglu", "inter")),
    )
    if routed:
        out += (("out", "output, kept for the probability-weighted combine (un-permute)", (B_a, tokens, h), (),
                 ("combine",)),)
    return out


def moe_specs():
    """The MoE sublayer's tensors (Parts and Groups), the paper's and the other inventories', tagged."""
    shared = tuple((k, lab, num, den + (CP,), tags)
                   for k, lab, num, den, tags in _expert(b * s, (), x_tags=("paper_only",)))
    return (
        Part("norm_in", "RMSNorm input (the sublayer input)", (B_a, b, s, h), (SP, CP), MOE,
             ("layer_input", "sublayer_input"), row="x"),
        Part("router_in", "router and expert input (RMSNorm output)", (B_a, b, s, h), (SP, CP), MOE,
             ("norm", "paper_only"), row="x"),
        Part("router", "router logits and probabilities (not split by SP)", (2, B_a, b, s, N), (CP,), MOE,
             ("router", "paper_only")),
        Part("mz_router_probs", "router probabilities", (B_a, b, s, N), (CP,), MZ, ("router", "modelzoo_only")),
        Part("routing", "routing choice / dispatch mask", (B_a, b, s, N_r), (CP,), MOE,
             ("routing", "dispatch_mask")),
        Part("row_map", "permutation row map (int64, one per token and expert)", (8, b, s, N), (CP,), CONV,
             ("routing", "router", "row_map")),
        Part("mz_shared_in", "shared experts' input after the all-gather, kept once (the N_s shared experts are "
                             "one fused MLP)", (B_a, b, s, h), (CP,), MZ, ("shared", "fp8", "modelzoo_only")),
        Group("routed", "routed experts on the device, N/EP of them: per expert its tokens' input and mask "
                        "(3 E_token h) and gate, up, activation and product outputs (8 E_token h_E)",
              N / EP, _expert(E_token, (ETP,), routed=True, x_tags=("permuted",)), MOE, ("experts", "routed")),
        Group("shared", "shared experts N_s: all b s tokens' input and mask (3bsh) and intermediate outputs (8bsh_E)",
              N_s, shared, MOE, ("shared",)),
    )


def moe_tensors(view: View = PAPER):
    """Tensors one MoE sublayer keeps for backward, in the paper's order (``view``: see View)."""
    return apply(view, moe_specs())


def dense_specs():
    """The dense FFN sublayer's tensors (extension), tagged."""
    return (
        Part("norm_in", "RMSNorm input (the sublayer input)", (B_a, b, s, h), (SP, CP), EXT,
             ("layer_input", "sublayer_input"), row="x"),
        Part("ffn_in", "FFN input (RMSNorm output)", (B_a, b, s, h), (SP, CP), EXT, ("norm",), row="x"),
        Part("swiglu_in", "gate and up outputs, SwiGLU inputs (split by TP)", (2, B_a, b, s, h_F), (TP, CP), EXT,
             ("ffn",), row="inter"),
        Part("swiglu_out", "activation and product outputs, SwiGLU outputs (split by TP)", (2, B_a, b, s, h_F),
             (TP, CP), EXT, ("ffn", "swiglu"), row="inter"),
        Part("out_mask", "dropout mask after down_proj", (B_k, b, s, h), (SP, CP), EXT, ("mask",)),
    )


def head_specs():
    """Final norm, output head and loss of the last stage (extension), tagged."""
    return (
        Part("norm_in", "final RMSNorm input", (B_a, b, s, h), (SP, CP), EXT, ("layer_input", "head"), row="x"),
        Part("head_in", "head input (final RMSNorm output)", (B_a, b, s, h), (SP, CP), EXT, ("norm", "head"),
             row="x"),
        Part("logits", "logits (vocabulary split by TP)", (B_a, b, s, v), (TP, CP), EXT, ("head",)),
        Part("loss", "FP32 softmax of the cross-entropy loss", (4, b, s, v), (TP, CP), EXT, ("head",)),
    )


#: The tensor lists of each kind (q_lora -> specs), in the paper's order.
SPECS = {"mla": mla_specs, "moe": lambda q_lora=True: moe_specs(), "dense": lambda q_lora=True: dense_specs(),
         "head": lambda q_lora=True: head_specs()}

#: The operation whose backward keeps each tensor (by tensor key; a group's tensors by their own key).
KEPT_FOR = {
    "norm_in": "RMSNorm backward (its input)",
    "down_in": "down-projections W^DQ, W^DKV, W^KR: weight gradients (their input)",
    "latent": "latent RMSNorms and up-projections W^UQ, W^QR, W^UK, W^UV (their input)",
    "latent_norm": "up-projections W^UQ, W^QR, W^UK, W^UV: weight gradients (their input)",
    "mz_q_down": "q RMSNorm backward (its input)",
    "mz_q_norm": "up-projections W^UQ, W^QR: weight gradients (their input)",
    "mz_kv_latent": "kv RMSNorm backward (its input)",
    "mz_kv_norm": "up-projections W^UK, W^UV: weight gradients (their input)",
    "q": "core attention Q K^T (its input)", "k": "core attention Q K^T (its input)",
    "v": "core attention P V (its input)",
    "softmax": "softmax backward (its output)", "score_mask": "attention dropout (its mask)",
    "score_dropout": "core attention P V (its input P)",
    "softmax_stats": "fused attention backward (recomputes the scores from q, k and these statistics)",
    "attn_out": "W^O weight gradient (its input); fused attention backward (its output)",
    "out_mask": "dropout after the output projection (its mask)",
    "router_in": "router weight gradient (its input, also the experts' input)",
    "router": "router softmax / sigmoid backward (logits and probabilities)",
    "mz_router_probs": "combine: weights of the expert outputs (router probabilities)",
    "routing": "dispatch and combine (which experts each token went to)",
    "row_map": "permute / un-permute backward (token-to-expert row map)",
    "mz_shared_in": "shared experts' gate_proj and up_proj: weight gradients (their input)",
    "x": "gate_proj and up_proj: weight gradients (their input)",
    "mask": "dropout after the expert (its mask)",
    "swiglu_in": "SwiGLU backward (its inputs, the gate and up outputs)",
    "swiglu_out": "SwiGLU product and down_proj weight gradient (activation and product outputs)",
    "out": "combine: gradient of the router probabilities (the expert outputs)",
    "ffn_in": "gate_proj and up_proj: weight gradients (their input)",
    "head_in": "output head: weight gradient (its input)", "logits": "cross-entropy backward (the logits)",
    "loss": "cross-entropy backward (FP32 softmax)",
}


