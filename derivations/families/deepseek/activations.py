"""DeepSeek-V2/V3's own tensor lists (Sec. 5): MLA (Sec. 5.1, M_1^A), the DeepSeekMoE sublayer
(Sec. 5.2, M_1^E) with the routers of transformers and Megatron-Core, and one MTP module; the dense
FFN and the head are the shared blocks of :mod:`derivations.tensors`.  ``SPECS`` gives each kind's
list, ``KEPT_FOR`` the operation whose backward keeps each tensor."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Dict


from derivations.notation import (B_a, B_k, CP, EP, ETP, E_token, N, N_r, N_s, SP, TP, b, d_c, d_cq, d_h, d_hr, d_v, h,
                                  n_h, s, u_eb, u_gk, u_lg, u_nt, u_sg, u_v2)
from derivations.constants import FLASH, MLA, MOE
from derivations.tensors import (CONV, HF, HF_MOE, HF_V2, IS_FP32, MC, MZ, NOT_FP32, TE, TOPK_GT_1, V_VIEW, Group,
                                 dense_specs, expert_tensors, head_specs, norm_parts, op_sac_parts)
from symbolic import tomlfile
from symbolic.term import Part


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
    lat_w = (d_cq + d_c if q_lora else d_c)
    hf_latent = (
        Part("latent_fp32", "latents' RMSNorms: FP32 copies of c_Q and c_KV (when B_a = 4 the kv copy is the "
                            "kv_a_proj output itself, with its RoPE part d_h^R)", (4, b, s, lat_w + IS_FP32 * d_hr),
             (CP,), HF + ": DeepseekV3Attention.forward, DeepseekV3RMSNorm.forward",
             ("latent", "norm", "fp32_norm")),
        Part("latent_rstd", "latents' RMSNorms: FP32 rsqrt per row, one per norm",
             (4 * (2 if q_lora else 1), b, s), (CP,), HF + ": DeepseekV3RMSNorm.forward",
             ("latent", "norm", "fp32_norm")),
        Part("latent_pre", "latents' RMSNorms: normalised values before the weight (FP32 under --norm-storage "
                           "torch)", (B_a, b, s, lat_w), (CP,),
             HF + ": DeepseekV3RMSNorm.forward; torch.rms_norm (CPU composite)",
             ("latent", "norm", "fp32_norm", "pre_weight")),
        Part("latent_rsigma", "latents' RMSNorms: FP32 rsigma per row, one per norm (Transformer Engine)",
             (4 * (2 if q_lora else 1), b, s), (CP,), TE, ("latent", "norm", "te_norm")),
    )
    return (
        Part("norm_in", "RMSNorm input (the layer input)", (B_a, b, s, h), (SP, CP), MLA,
             ("layer_input", "plain_norm"), row="x"),
        *norm_parts(h, (SP, CP), "the MLA's"),
        Part("down_in", "down-projection input (RMSNorm output)", (B_a, b, s, h), (SP, CP), MLA,
             ("norm",), row="x"),
        Part("latent", latent_label, latent, (CP,), MLA, ("latent", "paper_only", "plain_norm")),
        *hf_latent,
        Part("latent_norm", "RMSNorm outputs of the latents, the up-projections' input (not split)", latent, (CP,),
             CONV, ("latent", "norm", "latent_norm", "paper_only")),
        *mz_q,
        Part("mz_kv_latent", "c_KV, kv down-projection output (on the sequence-parallel shard)", (B_a, b, s, d_c),
             (TP, CP), MZ, ("latent", "modelzoo_only")),
        Part("mz_kv_norm", "kv norm output (not split)", (B_a, b, s, d_c), (CP,), MZ,
             ("latent", "norm", "latent_norm", "modelzoo_only")),
        Part("rope_layer", "RoPE cos and sin cast to B_a, for q and for k (4 tables of s d_h^R, every layer)",
             (4, B_a, s, d_hr), (CP,), MC + "models/common/embeddings/rope_utils.py: _apply_rotary_pos_emb_bshd",
             ("rope_layer",)),
        Part("q", "q with its RoPE part", (B_a, b, s, d_h + d_hr, n_h), (TP, CP), MLA, ("mla_up",), row="qk"),
        Part("k", "k with its RoPE part", (B_a, b, s, d_h + d_hr, n_h), (TP, CP), MLA, ("mla_up",), row="qk"),
        Part("v", "v", (B_a, b, s, d_v, n_h), (TP, CP), MLA, ("mla_up", "v_copy")),
        Part("v_kv", "v as P V keeps it: the whole kv_b_proj output (k_nope and v) when b = 1 or one head is "
                     "on the device (matmul's reshape of the v view is then a view), else a contiguous copy",
             (B_a, b, s, n_h, d_v + V_VIEW * d_h), (TP, CP),
             HF + ": DeepseekV3Attention.expand_kv, eager_attention_forward (torch.matmul: reshape to b n_h)",
             ("mla_up", "v_view")),
        Part("softmax", "softmax output", (B_a, b, n_h, s ** 2), (TP, CP), MLA, ("score", "eager", "softmax_out"),
             row="score"),
        Part("causal_mask", "bool causal mask s x s built each call (get_default_causal_mask), kept by masked_fill_",
             (1, s ** 2), (CP,), MC + "fusions/fused_softmax.py: FusedScaleMaskSoftmax.forward_torch_softmax",
             ("score", "eager", "causal_mask")),
        Part("ckpt_mask_type", "int32 attention-mask type the core-attention checkpoint saves with q, k, v "
                               "(torch.tensor([attn_mask_type.value], dtype=torch.int))", (4,), (),
             MC + "transformer/attention.py: Attention._checkpointed_attention_forward",
             ("score_recomputed", "mcore_ckpt")),
        Part("score_mask", "attention dropout mask", (B_k, b, n_h, s ** 2), (TP, CP), MLA,
             ("score", "mask", "eager"), row="score"),
        Part("score_dropout", "attention dropout output", (B_a, b, n_h, s ** 2), (TP, CP), MLA,
             ("score", "eager", "probs", "dropout_out"), row="score"),
        Part("softmax_stats", "softmax statistics: FP32 log-sum-exp per query row and head (fused attention)",
             (4, b, n_h, s), (TP, CP), FLASH, ("score", "flash")),
        Part("attn_out", "attention output before W^O (also the fused kernel's saved output)",
             (B_a, b, s, d_v, n_h), (TP, CP), MLA, ("e5m6",)),
        Part("out_mask", "dropout mask after W^O", (B_k, b, s, h), (SP, CP), MLA, ("mask",)),
    )


def hf_router_parts():
    """transformers' router, ``--router-state transformers``: DeepSeek-V3's code (DeepseekV3TopkRouter.forward;
    deepseek_v3, kimi_k2) or, for a ``deepseek_v2`` config (u_v2 = 1), DeepSeek-V2's (DeepseekV2TopkRouter.forward).
    Both keep the FP32 copy of the input, the FP32 scores (V3: sigmoid, whatever scoring_func says; V2: softmax)
    and the int64 top-k indices.  V3's group-limited top-k bookkeeping (each group's top-2 indices, the kept
    groups' indices, the bool mask of ``masked_fill``) is saved by nodes whose outputs are discarded (only the
    top-k *indices* are used; the weights are gathered from the scores), so autograd frees it during the forward
    at any n_group, one group included: not held at its end (memsym/trace/recorder.py), not counted; with
    ``norm_topk_prob`` (u_nt) it keeps the normaliser and the normalised weights.  V2's top-k values are the
    weights: ``greedy`` keeps nothing more; ``group_limited_greedy`` (u_lg) keeps ``masked_fill``'s bool mask
    (its groups' maxima and indices are freed); V2 never normalises (its code reads no norm_topk_prob).  The
    routed scaling multiplies by a Python number (nothing saved).  The router's weight is a parameter kept in
    FP32 (``_keep_in_fp32_modules_strict``, honoured by ``from_config``/``from_pretrained`` with a dtype), so
    ``self.weight.type(float32)`` is the parameter itself: no copy."""
    src, tags = HF + ": DeepseekV3TopkRouter.forward", ("router", "hf_router")
    src2 = HF_V2 + ": DeepseekV2TopkRouter.forward"
    return (
        Part("hf_router_in", "router: FP32 copy of its input (hidden_states.type(float32); none when B_a = 4)",
             (4, b, s, h, NOT_FP32), (CP,), src, tags),
        Part("hf_scores", "router: FP32 sigmoid scores", (4, b, s, N, 1 - u_v2), (CP,), src, tags),
        Part("hf_softmax", "router: FP32 softmax scores (DeepSeek-V2's code)", (4, b, s, N, u_v2), (CP,), src2, tags),
        Part("hf_topk_idx", "router: int64 top-N_r expert indices (topk and gather)", (8, b, s, N_r), (CP,),
             src + "; " + src2, tags + ("routing",)),
        Part("hf_group_mask", "router: bool mask of the experts outside the kept groups (masked_fill; DeepSeek-V2's "
                              "group_limited_greedy)", (1, b, s, N, u_v2 * u_lg), (CP,), src2, tags),
        Part("hf_topk_norm", "router: FP32 normaliser of the top-k weights (norm_topk_prob)",
             (4, b, s, (1 - u_v2) * u_nt), (CP,), src, tags),
        Part("hf_topk_w", "router: FP32 normalised top-k weights", (4, b, s, N_r, (1 - u_v2) * u_nt), (CP,), src, tags),
    )


def mcore_router_parts():
    """Megatron-Core's router and all-to-all dispatcher bookkeeping (``--router-state mcore``,
    ``--experts alltoall``), per token of the device's b s, with the routing Megatron-Bridge maps
    (memsym/trace/mcore.py ``routing_fields``: the config's scoring_func (u_sg), the expert bias for
    ``noaux_tc`` (u_eb), the group-limited top-k when topk_group is set (u_gk), moe_router_pre_softmax).
    Sigmoid: the FP32 sigmoid output; with the expert bias ``group_limited_topk`` (or the plain top-k) runs on
    the biased scores and only its indices are used (the probabilities are gathered from the B_a scores), so
    its bookkeeping (each group's top indices, the kept groups' indices, the bool mask) is freed during the
    forward; without the bias its top-k values are the probabilities and ``masked_fill``'s bool mask stays held
    (the group top-k indices are freed); the top-k scores are normalised when N_r > 1 (whatever norm_topk_prob
    says; at N_r = 1 the score is the probability, nothing kept).
    Softmax (pre-softmax top-k, the DeepSeek bridges' moe_router_pre_softmax): the FP32 softmax output, the
    group mask, the indices; the top-k values are the probabilities, not normalised: nothing else.  The
    routed scaling multiplies by a Python number (nothing saved)."""
    src = MC + "transformer/moe/moe_utils.py: topk_routing_with_score_function, group_limited_topk"
    tags = ("router", "mcore_router")
    perm = MC + "transformer/moe/moe_utils.py: permute (unfused), MoEAlltoAllTokenDispatcher"
    return (
        Part("mc_scores", "router: FP32 sigmoid output (sigmoid(logits.float()))", (4, b, s, N, u_sg), (CP,), src,
             tags),
        Part("mc_softmax", "router: FP32 softmax output (softmax(logits, dtype=float32), before the top-k)",
             (4, b, s, N, 1 - u_sg), (CP,), src, tags),
        Part("mc_scores_ba", "router: the sigmoid scores cast to B_a, kept by gather with the expert bias (the same "
                             "storage when B_a = 4; none with an FP32 router, whose logits are FP32)",
             (B_a, b, s, N, NOT_FP32, u_sg * u_eb), (CP,), src, tags + ("router_cast",)),
        Part("mc_group_mask", "router: bool mask of the experts outside the kept groups (masked_fill), held when the "
                              "group-limited top-k values are the probabilities (no expert bias)",
             (1, b, s, N, u_gk * (1 - u_sg * u_eb)), (CP,), src, tags),
        Part("mc_topk_idx", "router: int64 top-N_r indices (topk, gather, scatter)", (8, b, s, N_r), (CP,), src,
             tags + ("routing",)),
        Part("mc_topk", "router: the top-N_r scores and their normaliser (scores / scores.sum), in the router dtype; "
                        "none at N_r = 1 (no normalisation: topk > 1 only)",
             (B_a, b, s, N_r + 1, u_sg, TOPK_GT_1), (CP,), src, tags + ("router_dt",)),
        Part("a2a_map", "dispatcher: bool routing map, transposed N x b s (masked_select)", (1, b, s, N), (CP,), perm,
             ("routing", "router", "a2a")),
        Part("a2a_probs", "dispatcher: the routing probabilities transposed N x b s (masked_select), in the router "
                          "dtype", (B_a, b, s, N), (CP,), perm, ("routing", "router", "a2a", "router_dt")),
        Part("a2a_idx", "dispatcher: int64 sorted token indices, one per token-copy (index_select, unpermute)",
             (8, b, s, N_r), (CP,), perm, ("routing", "router", "a2a")),
    )


def aux_loss_parts():
    """Megatron-Core's load-balancing loss (``--aux-loss seq|global``; router.py TopKRouter.routing): the scores
    ``compute_routing_scores_for_aux_loss`` computes again from the logits: a sigmoid (u_sg = 1), in the router
    dtype, saved by the sigmoid and the division, with its per-token normaliser (scores.sum + 1e-20, saved by
    the division); or a softmax (u_sg = 0), FP32 whatever the router dtype (softmax(dtype=float32)), saved by
    the softmax, no normaliser; ``switch_load_balancing_loss_func``'s multiply keeps the tokens per expert: per
    sequence and expert, int64, for seq_aux_loss (the b s tokens reshaped to [s, b N]); FP32 averaged over the
    steps, per expert, for global_aux_loss; MoEAuxLossAutoScaler keeps the loss scalar (for seq the scores'
    dtype: the router's for the sigmoid, FP32 for the softmax; FP32 for global, the product with the FP32
    averages).  The per-expert tensors are whole on every rank (not divided by SP)."""
    src = MC + "transformer/moe/router.py: TopKRouter._apply_seq_aux_loss, _apply_global_aux_loss; moe_utils.py: "
    return (
        Part("aux_scores", "load-balancing loss: the sigmoid scores again, in the router dtype",
             (B_a, b, s, N, u_sg), (CP,), src + "compute_routing_scores_for_aux_loss", ("router", "aux", "router_dt")),
        Part("aux_softmax", "load-balancing loss: the FP32 softmax scores again",
             (4, b, s, N, 1 - u_sg), (CP,), src + "compute_routing_scores_for_aux_loss", ("router", "aux")),
        Part("aux_norm", "load-balancing loss: the scores' per-token normaliser, in the router dtype",
             (B_a, b, s, u_sg), (CP,), src + "compute_routing_scores_for_aux_loss", ("router", "aux", "router_dt")),
        Part("aux_seq_tokens", "seq_aux_loss: int64 tokens per sequence and expert (b N)", (8, b, N), (),
             src + "switch_load_balancing_loss_func", ("router", "aux_seq", "per_expert")),
        Part("aux_seq_loss", "seq_aux_loss: the loss scalar (MoEAuxLossAutoScaler), in the router dtype",
             (B_a, u_sg), (), src + "MoEAuxLossAutoScaler", ("router", "aux_seq", "router_dt", "per_expert")),
        Part("aux_seq_loss_fp32", "seq_aux_loss: the FP32 loss scalar (MoEAuxLossAutoScaler) of the softmax scores",
             (4, 1 - u_sg), (), src + "MoEAuxLossAutoScaler", ("router", "aux_seq", "per_expert")),
        Part("aux_global", "global_aux_loss: FP32 averaged tokens per expert and the FP32 loss scalar", (4, N + 1), (),
             src + "switch_load_balancing_loss_func, MoEAuxLossAutoScaler", ("router", "aux_global", "per_expert")),
    )


def moe_specs():
    """The MoE sublayer's tensors (Parts and Groups), the paper's and the other inventories', tagged."""
    shared = tuple((k, lab, num, den + (CP,), tags)
                   for k, lab, num, den, tags in expert_tensors(b * s, (), x_tags=("paper_only", "own_shared_input")))
    return (
        Part("norm_in", "RMSNorm input (the sublayer input)", (B_a, b, s, h), (SP, CP), MOE,
             ("layer_input", "sublayer_input", "plain_norm"), row="x"),
        *norm_parts(h, (SP, CP), "the MoE sublayer's"),
        Part("router_in", "router and expert input (RMSNorm output)", (B_a, b, s, h), (SP, CP), MOE,
             ("norm", "paper_only"), row="x"),
        Part("router", "router logits and probabilities (not split by SP)", (2, B_a, b, s, N), (CP,), MOE,
             ("router", "paper_only", "paper_router")),
        *hf_router_parts(),
        *mcore_router_parts(),
        *aux_loss_parts(),
        Part("mz_router_probs", "router probabilities", (B_a, b, s, N), (CP,), MZ, ("router", "modelzoo_only")),
        Part("routing", "routing choice / dispatch mask", (B_a, b, s, N_r), (CP,), MOE,
             ("routing", "dispatch_mask", "paper_router")),
        Part("row_map", "permutation row map (int64, one per token and expert)", (8, b, s, N), (CP,), CONV,
             ("routing", "router", "row_map")),
        Part("mz_shared_in", "shared experts' input after the all-gather, kept once (the N_s shared experts are "
                             "one fused MLP)", (B_a, b, s, h), (CP,), MZ, ("shared", "fp8", "modelzoo_only")),
        Group("routed", "routed experts on the device, N/EP of them: per expert its tokens' input and mask "
                        "(3 E_token h) and gate, up, activation and product outputs (8 E_token h_E)",
              N / EP, expert_tensors(E_token, (ETP,), routed=True, x_tags=("permuted",)), MOE, ("experts", "routed")),
        Part("grouped_offs", "int32 offsets of the local experts' token groups (cumsum of the histc counts), kept "
                             "by both grouped_mm calls (transformers' grouped_mm experts)", (4, N), (EP,),
             HF_MOE + ": grouped_mm_experts_forward, _grouped_mm", ("experts", "grouped")),
        Group("shared", "shared experts N_s: all b s tokens' input and mask (3bsh) and intermediate outputs (8bsh_E)",
              N_s, shared, MOE, ("shared",)),
        *op_sac_parts("moe"),
    )


MTP_SRC = (MC + "transformer/multi_token_prediction.py: MultiTokenPredictionLayer (_concat_embeddings, "
           "_postprocess), models/gpt/gpt_model.py: _postprocess")


def mtp_specs():
    """One multi-token-prediction module's own tensors (``--mtp-activations last-stage``; its transformer
    layer is counted as one more MoE layer): the enorm (the shifted tokens' embedding), hnorm (the main
    model's output) and final RMSNorms, each as the head's final norm under the norm-storage switch;
    eh_proj's input, the concatenated normalised [e, h] (2h); and its head and loss as the main head's
    under the head-state switch: its share of the output layer's input (Megatron concatenates the main
    and MTP hidden states before the output layer, so that storage is (1 + D) b s h), logits, loss, the
    rolled input ids and the cross-entropy targets.  Megatron-Core also keeps the loss mask (int64
    ones_like(labels), saved by ``loss_mask * mtp_loss``), the int64 token count (``/ num_tokens``) and
    the FP32 per-token loss (MTPLossAutoScaler).  Under full recomputation (``_checkpointed_forward``)
    the module keeps its checkpoint's two inputs instead of the norms, eh_proj input and layer."""
    head = {p.key: p for p in head_specs()}
    out = []
    for pre, where in (("mtp_enorm", "MTP enorm"), ("mtp_hnorm", "MTP hnorm"), ("mtp_norm", "MTP final")):
        inner = (Part("norm_in", f"{where} RMSNorm input", (B_a, b, s, h), (SP, CP), MTP_SRC, ("plain_head_norm",)),
                 *norm_parts(h, (SP, CP), where))
        out += [replace(p, key=f"{pre}_{p.key}", row="", tags=p.tags + ("mtp",)) for p in inner]
    out.append(Part("mtp_eh_in", "MTP eh_proj input: the concatenated normalised embedding and hidden state (2h)",
                    (B_a, b, s, 2 * h), (SP, CP), MTP_SRC, ("mtp",)))
    out.append(Part("mtp_ckpt", "MTP checkpoint inputs under full recomputation: the main model's output and the "
                                "shifted tokens' embedding", (2, B_a, b, s, h), (SP, CP), MTP_SRC,
                    ("mtp", "head", "mtp_ckpt")))
    labels = {"head_in": "MTP share of the output layer's input (its final norm output, concatenated with the "
                         "main model's)", "logits": "MTP logits (vocabulary split by TP)",
              "loss": "MTP FP32 softmax of the cross-entropy loss", "input_ids": "MTP rolled int64 input ids (its "
                      "embedding's backward)", "ce_target": "MTP bool target mask and int64 masked targets (9 B per "
                                                            "token)"}
    for key, label in labels.items():
        p = head[key]
        out.append(replace(p, key=f"mtp_{key}", label=label, row="", tags=p.tags + ("mtp",)))
    out.append(Part("mtp_loss_state", "MTP loss bookkeeping: int64 loss mask, FP32 per-token loss "
                                      "(MTPLossAutoScaler) and the int64 token count", (12 * b * s / CP + 8,), (),
                    MTP_SRC, ("mtp", "head", "mcore_head")))
    return tuple(out)


def deepseek_head_specs():
    """The shared head list (:func:`derivations.tensors.head_specs`) with transformers' RoPE tables as the code
    of the config's model_type makes them: DeepSeek-V3's cos and sin (2 B_a s d_h^R), or DeepSeek-V2's one
    complex64 table ``freqs_cis`` (s d_h^R / 2 complex numbers of 8 bytes, whatever B_a), each one storage
    shared by every layer's rotary multiply (u_v2: DeepSeek-V2's code)."""
    out = []
    for p in head_specs():
        if p.key != "rope":
            out.append(p)
            continue
        out.append(replace(p, num=tuple(p.num) + (1 - u_v2,)))
        out.append(Part("rope_complex", "RoPE table of DeepSeek-V2's code: complex64 freqs_cis, s d_h^R / 2 complex "
                                        "numbers of 8 B, saved by every layer's complex rotary multiply (one storage "
                                        "shared by all layers)", (4, s, d_hr, u_v2), p.den,
                        HF_V2 + ": DeepseekV2RotaryEmbedding.forward, apply_rotary_emb", p.tags))
    return tuple(out)


#: The tensor lists of each kind (q_lora -> specs), in the paper's order.
SPECS = {"mla": mla_specs, "moe": lambda q_lora=True: moe_specs(), "dense": lambda q_lora=True: dense_specs(),
         "head": lambda q_lora=True: deepseek_head_specs(), "mtp": lambda q_lora=True: mtp_specs()}

def specs(kind: str, flags):
    """The tensor list of ``kind`` for the structure ``flags`` (the interface every family's activations
    module offers: derivations/activations/shape.py)."""
    return SPECS[kind](flags["q_lora"])


with tomlfile.package_data(Path(__file__).with_name("kept_for.toml")) as _KEPT:
    #: The operation whose backward keeps each tensor (by tensor key; a group's tensors by their own key).
    KEPT_FOR: Dict[str, str] = dict(_KEPT)
