"""DeepSeek-V4's tensors kept for backward, per kind of sublayer, as transformers 5.24 keeps them
(models/deepseek_v4/modeling_deepseek_v4.py, eager attention, one device): derived in paper/traces/V4.md, checked to
the byte against autograd's saved tensors (memsym trace, paper/traces/hf-v4-*).  Kinds (family.toml layer_terms):

* ``attn``, every layer: the hyper-connection before the attention (attn_hc; the layer's input streams n_hc x b s h
  are its checkpoint), the sliding-window attention (S = s keys, one shared key-value head, FP32 softmax over S + 1
  logits with the sink, grouped output LoRA) and the stream mix after it;
* ``csa`` (L_C layers of a stage) and ``hca`` (L_H): a compressed layer's compressor over T = floor(s / m) entries and
  its attention over S = s + T keys (its lightning indexer keeps nothing: its scores feed only a top-k);
* ``moe``, every layer: the hyper-connection before the MoE (ffn_hc), the router, shared and routed experts (loop,
  grouped_mm or --experts paper) and the stream mix after it;
* ``head``: the input ids, the hyper-connection head, the final norm, the head's input, FP32 log-softmax and labels.

V4's tensors are transformers' whichever preset is named, except --experts, --attention flash (a fused kernel keeping
the shared key-value head, its output and the FP32 log-sum-exp instead of the softmax, the probabilities, the max
indices and eager's key/value copies), recomputation and --routed-tokens; parallel splits follow the paper's rules
(unchecked: transformers runs V4 on one device).  ``SPECIAL``: the non-polynomial counts, printed into the family's
generated module (derivations/generate.py)."""
from __future__ import annotations

from derivations.families.deepseek_v4.notation import (T_C, T_H, d_O, d_a, g_O, m_C, m_H, n_hc, t_S, u_cast, u_hca,
                                                      u_kv)
from derivations.notation import DEFINITIONS, B_a, CP, EP, SP, TP, N, N_r, b, d_cq, d_hr, h, h_E, n_h, s, u_sg, v
from derivations.tensors import B_IS_1
from symbolic.term import Part

SRC = "transformers 5.24 deepseek_v4"
#: The compressed entries (T_C, T_H: floor(s / m)) and an HCA layer's indicator (s >= m_H), as the generated modules
#: compute them (their definitions, derivations/families/deepseek_v4/notation.py; b = 1's and B_a = 4's indicators,
#: u_kv and u_cast, are the notation's storage indicators and already the shared modules')
SPECIAL = {"_T_C": DEFINITIONS[T_C], "_T_H": DEFINITIONS[T_H], "_hca_on": DEFINITIONS[u_hca]}


def _p(key, label, num, den, where, tags=()):
    return Part(key, label, num, den, f"{SRC}: {where}", tuple(tags))


def hyper_connection(which: str, input_tags):
    """One DeepseekV4HyperConnection (``attn_hc`` or ``ffn_hc``): its FP32 RMSNorm of the flattened streams, the
    mixing weights (pre, post, comb) and the 2 t_S - 1 Sinkhorn divisions, each keeping its FP32 numerator and
    denominator; and the block's input streams in B_a (the layer's input for attn_hc)."""
    where = f"DeepseekV4HyperConnection.forward ({which})"
    tok = (b, s)
    return (
        _p(f"{which}_fp32", f"{which}: FP32 copy of the flattened streams (its input norm's; the streams themselves "
                            "when B_a = 4)", (4, u_cast, *tok, n_hc, h), (SP, CP), where),
        _p(f"{which}_rstd", f"{which}: FP32 rsqrt per token", (4, *tok), (SP, CP), where),
        _p(f"{which}_normed", f"{which}: normalised streams, the projection's FP32 input", (4, *tok, n_hc, h), (SP, CP),
           where),
        _p(f"{which}_mix", f"{which}: FP32 projection to the (2 + n_hc) n_hc mixing weights", (4, *tok, 2 + n_hc, n_hc),
           (SP, CP), where),
        _p(f"{which}_gates", f"{which}: FP32 sigmoids of pre and post, and pre + eps", (12, *tok, n_hc), (SP, CP),
           where),
        _p(f"{which}_comb", f"{which}: FP32 softmax of comb", (4, *tok, n_hc, n_hc), (SP, CP), where),
        _p(f"{which}_sinkhorn", f"{which}: Sinkhorn's 2 t_S - 1 divisions, each its FP32 numerator (n_hc x n_hc) and "
                                "denominator (n_hc)", (4, 2 * t_S - 1, *tok, n_hc * n_hc + n_hc), (SP, CP), where),
        _p(f"{which}_streams", f"{which}: the block's input streams, n_hc x h in B_a (collapse and residual mix)",
           (B_a, *tok, n_hc, h), (SP, CP), where, input_tags),
    )


def stream_mix(which: str):
    """The stream mix after a block (DeepseekV4DecoderLayer.forward): the block's output, post and comb in B_a."""
    return (_p(f"{which}_mix_out", f"stream mix after the {which}: the block's output, and post and comb cast to B_a",
               (B_a, b, s, h + n_hc + n_hc * n_hc), (SP, CP), "DeepseekV4DecoderLayer.forward"),)


def rms_norm(key, what, width, den, where, tags=()):
    """A DeepseekV4RMSNorm: the FP32 input copy, the FP32 rsqrt and the FP32 normalised value."""
    return (_p(key, f"{what} RMSNorm: FP32 input copy, rsqrt and normalised value (weight x normalised)",
               (4, b, s, 2 * width + 1), den, where, tags),)


def attention_keys(S, tags_eager, note):
    """What eager attention keeps of S keys: the shared key-value head (b S d_a), a view folding into both bmms when
    one head is on the device or b = 1, else K^T and V materialised per head; a fused kernel keeps the head once."""
    where = "eager_attention_forward (repeat_kv, matmul)"
    return (
        _p(f"kv{note}", f"the shared key-value head over {S} keys, one storage (b = 1 or one head on the device)",
           (u_kv, B_a, b, S, d_a), (CP,), where, tags_eager),
        _p(f"kv_copies{note}", f"K^T and V materialised for the n_h / TP heads over {S} keys (b > 1)",
           (1 - u_kv, 2, B_a, b, n_h, S, d_a), (TP, CP), where, tags_eager),
        _p(f"kv_flash{note}", f"the shared key-value head over {S} keys (a fused kernel's input)", (B_a, b, S, d_a),
           (CP,), "a fused attention kernel", ("flash",)),
        _p(f"kv_selective{note}", f"the shared key-value head over {S} keys (the recomputed core attention's input)",
           (B_a, b, S, d_a), (CP,), where, ("score_recomputed", "eager")),
    )


def scores(S, note):
    """Eager attention's s x S tensors: the FP32 softmax over S + 1 logits (the sink's column promotes them), the
    B_a probabilities (the softmax itself when B_a = 4) and the int64 max indices."""
    where = "eager_attention_forward (sinks, max, softmax)"
    return (
        _p(f"softmax{note}", f"FP32 softmax over the {S} logits and the sink", (4, b, n_h, s, S + 1), (TP, CP), where,
           ("score", "eager")),
        _p(f"probs{note}", f"probabilities cast to B_a, {S} columns", (u_cast, B_a, b, n_h, s, S), (TP, CP), where,
           ("score", "eager")),
    )


def attn_specs():
    """Every layer's attention sublayer with S = s keys, its hyper-connection and stream mix."""
    a = "DeepseekV4Attention.forward"
    return (
        *hyper_connection("attn_hc", ("layer_input",)),
        *rms_norm("in_norm", "input_layernorm", h, (SP, CP), "DeepseekV4DecoderLayer.input_layernorm"),
        _p("norm_out", "input_layernorm's output in B_a: q_a_proj's, kv_proj's and the compressors' input",
           (B_a, b, s, h), (SP, CP), a),
        *rms_norm("q_a_norm", "q_a_norm", d_cq, (CP,), a),
        _p("q_residual", "the compressed query c_Q in B_a (q_b_proj's input)", (B_a, b, s, d_cq), (CP,), a),
        _p("q_norm", "q_b_norm (unweighted): the FP32 query copy (q itself when B_a = 4), the FP32 rsqrt and its cast "
                     "(the rsqrt itself when B_a = 4)", (b, s, n_h, 4 * u_cast * d_a + 4 + u_cast * B_a), (TP, CP),
           "DeepseekV4UnweightedRMSNorm.forward"),
        _p("q", "the query in B_a (q_b_norm's input)", (B_a, b, s, n_h, d_a), (TP, CP), a),
        _p("rope", "cos and sin repeated to d_h^R for q, the key-value head and the output's inverse rotation "
                   "(6 tables, batch-independent)", (6, B_a, s, d_hr), (CP,), "apply_rotary_pos_emb"),
        *rms_norm("kv_norm", "kv_norm", d_a, (CP,), a),
        *attention_keys(s, ("score", "eager"), ""),
        _p("q_rope", "the rotated query in B_a (Q K^T's input)", (B_a, b, s, n_h, d_a), (TP, CP),
           "eager_attention_forward"),
        _p("max_idx", "int64 indices of the logits' row maxima", (8, b, n_h, s), (TP, CP),
           "eager_attention_forward", ("score", "eager")),
        *scores(s, ""),
        _p("lse", "a fused kernel's FP32 log-sum-exp per row and head", (4, b, n_h, s), (TP, CP),
           "a fused attention kernel", ("score", "flash")),
        _p("attn_kernel_out", "a fused kernel's output (before the inverse rotation)", (B_a, b, s, n_h, d_a), (TP, CP),
           "a fused attention kernel", ("score", "flash")),
        _p("o_a_in", "o_a_proj's input: the attention output per group, in B_a", (B_a, b, s, n_h, d_a), (TP, CP),
           "DeepseekV4GroupedLinear.forward"),
        _p("o_b_in", "o_b_proj's input: the g_O d_O grouped outputs in B_a", (B_a, b, s, g_O, d_O), (TP, CP), a),
        *stream_mix("attention"),
    )


def _more_keys(T, note):
    """The attention over s + T keys instead of s: T more columns of the softmax and probabilities, T more keys."""
    return (
        _p(f"softmax_{note}", f"FP32 softmax: {T} more columns (the compressed keys)", (4, b, n_h, s, T), (TP, CP),
           "eager_attention_forward", ("score", "eager")),
        _p(f"probs_{note}", f"B_a probabilities: {T} more columns", (u_cast, B_a, b, n_h, s, T), (TP, CP),
           "eager_attention_forward", ("score", "eager")),
        *attention_keys(T, ("score", "eager"), f"_{note}"),
    )


def csa_specs():
    """What a compressed-sparse-attention layer adds: its compressor over T_C entries of 2 m_C overlapping slots
    (DeepseekV4CSACompressor.forward) and T_C more keys; its lightning indexer keeps nothing (top-k only)."""
    c = "DeepseekV4CSACompressor.forward"
    return (
        _p("csa_gates", "compressor: FP32 softmax of the gates over 2 m_C slots, and its B_a cast (the softmax "
                        "itself when B_a = 4)", (2, b, T_C, m_C, d_a, 4 + u_cast * B_a), (CP,), c),
        _p("csa_kv", "compressor: the 2 m_C overlapping key-value slots per entry (new_kv) in B_a",
           (2, B_a, b, T_C, m_C, d_a), (CP,), c),
        _p("csa_norm", "compressor kv_norm: FP32 input copy, rsqrt and normalised value", (4, b, T_C, 2 * d_a + 1),
           (CP,), c),
        _p("csa_rope", "compressor: cos and sin at the entries' positions, per batch row", (2, B_a, b, T_C, d_hr),
           (CP,), c),
        *_more_keys(T_C, "csa"),
    )


def hca_specs():
    """What a heavily-compressed-attention layer adds: its compressor over T_H entries of m_H tokens
    (DeepseekV4HCACompressor.forward; its kv_proj output kept whole, leftover tokens included, once T_H > 0) and
    T_H more keys."""
    c = "DeepseekV4HCACompressor.forward"
    return (
        _p("hca_kv", "compressor: kv_proj's output in B_a, all s tokens (its window view is kept)",
           (u_hca, B_a, b, s, d_a), (CP,), c),
        _p("hca_gates", "compressor: FP32 softmax of the gates over m_H tokens, and its B_a cast (the softmax itself "
                        "when B_a = 4)", (b, T_H, m_H, d_a, 4 + u_cast * B_a), (CP,), c),
        _p("hca_norm", "compressor kv_norm: FP32 input copy, rsqrt and normalised value", (4, b, T_H, 2 * d_a + 1),
           (CP,), c),
        _p("hca_rope", "compressor: cos and sin at the entries' positions, per batch row", (2, B_a, b, T_H, d_hr),
           (CP,), c),
        *_more_keys(T_H, "hca"),
    )


def moe_specs():
    """Every layer's MoE sublayer (DeepseekV4SparseMoeBlock; hash-routed and learned routers keep the same), its
    hyper-connection and stream mix."""
    m = "DeepseekV4SparseMoeBlock.forward"
    copies = (b, s, N_r)
    return (
        *hyper_connection("ffn_hc", ("layer_input", "sublayer_input")),
        *rms_norm("post_norm", "post_attention_layernorm", h, (SP, CP), "DeepseekV4DecoderLayer"),
        _p("moe_in", "post_attention_layernorm's output in B_a: the router's and the shared expert's input",
           (B_a, b, s, h), (SP, CP), m),
        _p("router", "router: the logits (softplus's input; not kept under sigmoid scores) and the scores, N per "
                     "token in B_a", (2 - u_sg, B_a, b, s, N), (CP,), "DeepseekV4TopKRouter / DeepseekV4HashRouter"),
        _p("routing", "router: int64 expert indices (top-k or the hash table's), the gathered weights and their sum "
                      "in B_a", (b, s, 8 * N_r + B_a * (N_r + 1)), (CP,), "DeepseekV4TopKRouter / HashRouter",
           ("routing",)),
        _p("shared", "shared expert: gate and up outputs (clamped), SiLU input and output, product and down_proj's "
                     "input in B_a", (6, B_a, b, s, h_E), (CP,), "DeepseekV4MLP.forward (swiglu_limit clamps)"),
        _p("routed", "routed experts, per token copy: the token's input, the gate-up output, the four SwiGLU tensors "
                     "and the down output in B_a", (*copies, B_a, 2 * h + 6 * h_E), (EP, CP),
           "DeepseekV4Experts.forward", ("routed",)),
        _p("loop_book", "expert loop, per token copy: torch.where's int64 (position, token) pair, the routing weight "
                        "and index_add_'s weighted source in B_a", (*copies, 16 + B_a * (h + 1)), (EP, CP),
           "DeepseekV4Experts.forward", ("routed", "loop")),
        _p("grouped_book", "grouped_mm, per token copy: three int64 gather indices and the sorted routing weight in "
                           "B_a", (*copies, 24 + B_a), (EP, CP), "integrations/moe.py grouped_mm_experts_forward",
           ("routed", "grouped")),
        _p("grouped_offs", "grouped_mm: int32 offsets of the local experts", (4, N), (EP,),
           "integrations/moe.py grouped_mm_experts_forward", ("grouped", "per_expert")),
        *stream_mix("MoE"),
    )


def head_specs():
    """Outside the layers, on the last stage: the input ids, the hyper-connection head (DeepseekV4HyperHead) with
    the last layer's output streams, the final norm, the head's input, the FP32 log-softmax and the labels (the
    embedding's n_hc streams are layer 0's input, counted there)."""
    return (
        _p("input_ids", "int64 input ids (the embedding's backward)", (8, b, s), (CP,), "DeepseekV4Model.forward",
           ("head",)),
        _p("hc_head", "hc_head: FP32 copy of the last streams (the streams themselves when B_a = 4), rsqrt, the "
                      "normalised streams, the mixes, their sigmoid and pre + eps",
           (b, s, 4 * u_cast * n_hc * h + 4 + 4 * n_hc * h + 12 * n_hc), (SP, CP), "DeepseekV4HyperHead.forward",
           ("head",)),
        _p("last_streams", "the last layer's output streams in B_a (hc_head's collapse)", (B_a, b, s, n_hc, h),
           (SP, CP), "DeepseekV4HyperHead.forward", ("head",)),
        *rms_norm("final_norm", "final", h, (SP, CP), "DeepseekV4Model.norm", ("head",)),
        _p("head_in", "the head's input in B_a", (B_a, b, s, h), (SP, CP), "DeepseekV4ForCausalLM.lm_head",
           ("head",)),
        _p("loss", "FP32 log-softmax of the loss", (4, b, s, v), (TP, CP), "loss/loss_utils.py ForCausalLMLoss",
           ("head",)),
        _p("labels", "int64 shifted labels (at b = 1 a view of the padded b (s + 1) labels) and the FP32 total weight",
           (8 * b * s + 8 * B_IS_1 + 4,), (CP,), "loss/loss_utils.py ForCausalLMLoss, fixed_cross_entropy",
           ("head",)),
    )


SPECS = {"attn": attn_specs, "csa": csa_specs, "hca": hca_specs, "moe": moe_specs, "head": head_specs}


def specs(kind: str, flags):
    """The tensor list of ``kind`` (the interface every family's activations module offers)."""
    return SPECS[kind]()
