"""The vocabulary a family's tensor inventory is written in (pure sympy): :class:`Group`, the storage indicators,
provenance labels and shared blocks (RMSNorm saves, a SwiGLU expert or dense FFN, the head and loss)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from derivations.notation import (  # noqa: F401
    B_IS_1, EP_GT_1, NOT_FP32, TOPK_GT_1, V_VIEW, B_a, B_k, CP, F, SP, TP, N, N_r, N_s, b, d_hr, h, h_E, h_F, s, v)
from derivations.constants import EXT
from symbolic.term import Part

MZ = "NVIDIA Megatron-MoE-ModelZoo DeepSeek estimator (--inventory modelzoo)"
CONV = "convention (not in the paper; see --help)"
HF = "transformers 5.24 models/deepseek_v3/modeling_deepseek_v3.py"
HF_MOE = "transformers 5.24 integrations/moe.py"
HF_V2 = "transformers 5.24 models/deepseek_v2/modeling_deepseek_v2.py"
MC = "megatron-core 0.16.1 megatron/core/"
TE = "Transformer Engine pytorch/module/rmsnorm.py (fused RMSNorm: saves its input and the FP32 rsigma)"

# The storage indicators (derivations/notation.py): NOT_FP32 (B_a != 4: else ``.to(float32)`` returns the same
# storage); B_IS_1 (b = 1: a view contiguous at b = 1 keeps its whole base, transformers' v and shifted labels);
# V_VIEW (b = 1 or n_h = TP: only then torch.matmul's reshape of a [b, n_h, s, d] view is a view keeping the whole base,
# aten/src/ATen/native/LinearAlgebra.cpp _matmul_impl); TOPK_GT_1 (N_r > 1: Megatron-Core normalises the top-k only
# then, ``probs = scores / scores.sum(...) if topk > 1 else scores``).
IS_FP32 = 1 - NOT_FP32


@dataclass(frozen=True)
class Group:
    """A row the paper prints as ``count x (tensors of one expert)`` (the routed experts ``(N/EP)(3 E_token h + 8
    E_token h_E)``, or the shared ones); ``subs``: (key, label, num, den, tags) of one expert."""

    key: str
    label: str
    count: object
    subs: Tuple[Tuple, ...]
    provenance: str
    tags: Tuple[str, ...]


def norm_parts(width, den, where, extra_tags=()):
    """An RMSNorm's saves (DeepseekV3RMSNorm.forward): FP32 input, FP32 rsqrt per row, pre-weight value."""
    tags = ("norm", "fp32_norm") + tuple(extra_tags)
    return (
        Part("norm_fp32", f"{where} RMSNorm: FP32 copy of its input (hidden_states.to(float32), saved by pow and "
                          "mul; the input itself when B_a = 4)", (4, b, s, width), den,
             HF + ": DeepseekV3RMSNorm.forward", tags),
        Part("norm_rstd", f"{where} RMSNorm: FP32 rsqrt of the mean square, one per row", (4, b, s), den,
             HF + ": DeepseekV3RMSNorm.forward", tags),
        Part("norm_pre", f"{where} RMSNorm: normalised value before the weight (saved by the weight multiply; "
                         "FP32 under --norm-storage torch)",
             (B_a, b, s, width), den,
             HF + ": DeepseekV3RMSNorm.forward; torch.rms_norm (CPU composite)", tags + ("pre_weight",)),
        Part("norm_rsigma", f"{where} RMSNorm: FP32 rsigma per row (Transformer Engine's fused RMSNorm)", (4, b, s),
             den, TE, ("norm", "te_norm") + tuple(extra_tags)),
    )


def expert_tensors(tokens, inter_den, routed=False, x_tags=()):
    """One SwiGLU expert's tensors for ``tokens`` tokens (3 t h + 8 t h_E; its output under kept)."""
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
                 ("combine",)),
                ("loop_idx", "int64 (top-k position, token) index pair of torch.where (transformers' expert loop)",
                 (16, tokens), (), ("loop",)),
                ("loop_weight", "FP32 routing weight of each token-copy (transformers' expert loop)", (4, tokens), (),
                 ("loop",)),
                ("loop_source", "index_add_'s source: the weighted output cast to B_a (transformers' expert loop)",
                 (B_a, tokens, h), (), ("loop",)),
                ("grouped_idx", "three int64 indices of grouped_mm_experts_forward: perm // top_k (the tokens' "
                                "gather), perm (the routing weights' gather) and inv_perm (the un-sort) (transformers' "
                                "grouped_mm experts)", (24, tokens), (), ("grouped",)),
                ("grouped_weight", "FP32 routing weight of each token-copy in expert order, kept by the weighting "
                                   "multiply (transformers' grouped_mm experts)", (4, tokens), (), ("grouped",)),
                ("weighted", "activation product kept by the probability multiply (Megatron-Core MLP.forward "
                             "per_token_scale)", (B_a, tokens, h_E), inter_den, ("a2a", "inter", "weighted")),
                ("probs_perm", "permuted routing probabilities per token-copy (the per_token_scale), in the router "
                               "dtype", (B_a, tokens), (), ("a2a", "router_dt")))
    return out


def dense_specs():
    """The dense FFN sublayer's tensors (extension), tagged."""
    return (
        Part("norm_in", "RMSNorm input (the sublayer input)", (B_a, b, s, h), (SP, CP), EXT,
             ("layer_input", "sublayer_input", "plain_norm"), row="x"),
        *norm_parts(h, (SP, CP), "the dense FFN's"),
        Part("ffn_in", "FFN input (RMSNorm output)", (B_a, b, s, h), (SP, CP), EXT, ("norm",), row="x"),
        Part("swiglu_in", "gate and up outputs, SwiGLU inputs (split by TP)", (2, B_a, b, s, h_F), (TP, CP), EXT,
             ("ffn",), row="inter"),
        Part("swiglu_out", "activation and product outputs, SwiGLU outputs (split by TP)", (2, B_a, b, s, h_F),
             (TP, CP), EXT, ("ffn", "swiglu"), row="inter"),
        Part("out_mask", "dropout mask after down_proj", (B_k, b, s, h), (SP, CP), EXT, ("mask",)),
        *op_sac_parts("dense"),
    )


TT = "pytorch/torchtitan@99fee810 "
TT_SAC = TT + "distributed/activation_checkpoint.py _apply_op_sac (derivations/activations/op_sac.py)"


def op_sac_parts(kind: str):
    """The op outputs torchtitan's op-level SAC saves in a MoE or dense FFN sublayer (op_sac.py)."""
    tags = ("sac_tt", "sac_saved")
    if kind == "dense":  # models/moe.py FeedForward: w1 (1st mm) and w2 (3rd) saved
        return (Part("sac_w1", "w1's matmul output (the FFN's 1st aten.mm: saved)", (B_a, b, s, h_F), (TP, CP), TT_SAC,
                     ("ffn",) + tags),
                Part("sac_w2", "w2's matmul output (the FFN's 3rd aten.mm: saved)", (B_a, b, s, h), (CP,), TT_SAC,
                     ("ffn",) + tags))
    moe = TT + "models/moe.py MoE.forward; distributed/expert_parallel.py ExpertParallel"
    return (
        Part("sac_gate", "router gate's matmul output, the logits (the MoE's 1st aten.mm: saved)", (B_a, b, s, N),
             (CP,), moe, ("router",) + tags),
        Part("sac_shared_w3", "shared experts' w3 matmul output (the 3rd aten.mm: saved)", (B_a, b, s, N_s, h_E),
             (CP,), moe, ("shared", "inter") + tags),
        Part("sac_dispatch", "all_to_all_single output of the token dispatch: the token-copies this rank's experts "
                             "receive (EP > 1; F on the busiest rank)", (B_a, F, b, s, N_r, h, EP_GT_1), (SP, CP), moe,
             ("experts",) + tags),
        Part("sac_combine", "all_to_all_single output of the combine: the experts' outputs back to their tokens "
                            "(EP > 1)", (B_a, b, s, N_r, h, EP_GT_1), (SP, CP), moe, ("experts",) + tags),
    )


def head_specs():
    """Final norm, output head and loss of the last stage (extension), tagged."""
    return (
        Part("norm_in", "final RMSNorm input", (B_a, b, s, h), (SP, CP), EXT,
             ("layer_input", "head", "plain_head_norm"), row="x"),
        *norm_parts(h, (SP, CP), "the final", ("head",)),
        Part("head_in", "head input (final RMSNorm output)", (B_a, b, s, h), (SP, CP), EXT, ("norm", "head"),
             row="x"),
        Part("logits", "logits (vocabulary split by TP)", (B_a, b, s, v), (TP, CP), EXT, ("head", "paper_head")),
        Part("loss", "FP32 softmax of the cross-entropy loss", (4, b, s, v), (TP, CP), EXT, ("head", "eager_loss")),
        Part("tt_loss", "compiled loss: FP32 row maximum and log-sum-exp of the logits, and the int64 labels (16 B "
                        "per token)", (16, b, s), (CP,), TT + "train.py: torch.compile(cross_entropy_loss) (the "
                        "partitioner recomputes the FP32 upcast from the B_a logits it saves)", ("head", "tt_head")),
        Part("loss_grad", "the cross-entropy backward's B_a gradient of the logits, cast from the FP32 softmax "
                          "(its in-place FP32 gradient) while that is still held: a transient of one micro-batch at "
                          "the last stage's peak (not kept for backward)", (B_a, b, s, v), (TP, CP),
             MC + "tensor_parallel/cross_entropy.py: _VocabParallelCrossEntropy.backward; fusions/fused_cross_entropy"
             ".py: calculate_gradients; measured on CPU (paper/transients/ce-backward.toml)", ("head", "ce_cast")),
        Part("labels", "int64 shifted labels (nll_loss target; at b = 1 a view of the padded b (s + 1) labels) and "
                       "the FP32 total weight (4 B)", (8 * b * s + 8 * B_IS_1 + 4,),
             (CP,), "transformers 5.24 loss/loss_utils.py: ForCausalLMLoss, fixed_cross_entropy", ("head", "hf_head")),
        Part("input_ids", "int64 input ids (the embedding's backward; counted with the head: one per micro-batch)",
             (8, b, s), (CP,), HF + ": DeepseekV3Model.forward (embed_tokens); " + MC +
             "models/common/embeddings/language_model_embedding.py", ("head", "ids")),
        Part("ce_target", "bool target mask and int64 masked targets of the vocab-parallel cross-entropy (9 B per "
                          "token)", (9, b, s), (CP,),
                          MC + "tensor_parallel/cross_entropy.py: VocabParallelCrossEntropy",
             ("head", "mcore_head")),
        Part("rope_freqs", "RoPE frequencies, one FP32 s d_h^R table cached by RotaryEmbedding.forward and kept by "
                           "every layer's fused RoPE (Transformer Engine)", (4, s, d_hr), (CP,),
             MC + "models/common/embeddings/rotary_pos_embedding.py: RotaryEmbedding.forward (lru_cache)",
             ("head", "rope_shared")),
        Part("rope", "RoPE cos and sin tables, B_a s d_h^R each, saved by every layer's rotary multiply (one "
                     "storage shared by all layers)", (2, B_a, s, d_hr), (CP,),
             HF + ": DeepseekV3RotaryEmbedding.forward, apply_rotary_pos_emb", ("head", "hf_head", "rope")),
    )
