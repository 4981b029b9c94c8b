"""Sec. 1: the MLA and expert matrices (the paper's Table 2), each a :class:`Part` of its shape (rows x cols) tagged
with the paper's tensor-parallel rule (Sec. 3): ``tp_split`` (W^UQ, W^UK, W^UV, W^O) or ``replicated``.
"""
from __future__ import annotations

from derivations.notation import SYMBOLS, N, d_c, d_cq, d_h, d_hr, d_v, h, h_E, h_F, n_h, v
from symbolic.term import Part, Term


def _p(key, label, shape, split, provenance="Table 2"):
    return Part(key, label, shape, provenance=provenance, tags=("tp_split",) if split else ("replicated",))


def mla_matrices(q_lora: bool = True):
    """The MLA projection matrices as parts ``rows x cols`` (Table 2); without query compression (DeepSeek-v2-Lite)
    the three query matrices are one W^Q of n_h (d_h + d_hr) x h, split by TP like the up-projections."""
    q = [_p("W_DQ", "W^{DQ}: query down-projection, d_c' x h", (d_cq, h), False),
         _p("W_UQ", "W^{UQ}: query up-projection, d_h n_h x d_c'", (d_h, n_h, d_cq), True),
         _p("W_QR", "W^{QR}: RoPE query projection, d_h^R n_h x d_c'", (d_hr, n_h, d_cq), False)] if q_lora else \
        [_p("W_Q", "W^{Q}: query projection without compression, n_h (d_h + d_h^R) x h", (n_h, d_h + d_hr, h), True,
            "HF config q_lora_rank = null")]
    return q + [
        _p("W_DKV", "W^{DKV}: key-value down-projection, d_c x h", (d_c, h), False),
        _p("W_UK", "W^{UK}: key up-projection, d_h n_h x d_c", (d_h, n_h, d_c), True),
        _p("W_KR", "W^{KR}: shared RoPE key projection, d_h^R x h", (d_hr, h), False),
        _p("W_UV", "W^{UV}: value up-projection, d_v n_h x d_c (the paper's d_h)", (d_v, n_h, d_c), True),
        _p("W_O", "W^{O}: output projection, h x d_v n_h (the paper's d_h)", (h, d_v, n_h), True),
    ]


DSA = ("transformers 5.24 models/deepseek_v32: DeepseekV32Indexer (DeepSeek-V3.2-Exp's lightning indexer; GLM-5's "
       "models/glm_moe_dsa GlmMoeDsaIndexer subclasses it)")


def indexer_matrices():
    """DeepSeek Sparse Attention's lightning indexer of one layer: wq_b (n_I d_I x d_c'), wk (d_I x h) with a
    LayerNorm, weights_proj (n_I x h); replicated over TP; a stage holds L_I of them."""
    n_I, d_I = SYMBOLS["n_I"], SYMBOLS["d_I"]
    return [
        _p("W_IQ", "indexer.wq_b: indexer query projection, n_I d_I x d_c'", (n_I, d_I, d_cq), False, DSA),
        _p("W_IK", "indexer.wk: indexer key projection, d_I x h", (d_I, h), False, DSA),
        _p("I_norm", "indexer.k_norm: LayerNorm of the indexer key, weight and bias", (2, d_I), False, DSA),
        _p("W_Iw", "indexer.weights_proj: per-head weights of the index scores, n_I x h", (n_I, h), False, DSA),
    ]


def norm_weights(q_lora: bool = True):
    """RMSNorm weights of one layer ("LN" of Table 3): 2h + d_c' + d_c."""
    parts = [
        Part("attn_norm", "RMSNorm before MLA", (h,), provenance="Table 3, LN"),
        Part("ffn_norm", "RMSNorm before the FFN / MoE", (h,), provenance="Table 3, LN"),
    ]
    if q_lora:
        parts.append(Part("q_norm", "RMSNorm on c_Q", (d_cq,), provenance="Table 3, LN"))
    parts.append(Part("kv_norm", "RMSNorm on c_KV", (d_c,), provenance="Table 3, LN"))
    return parts


def expert_matrices(inter=h_E):
    """One SwiGLU expert (or dense FFN): gate_proj, up_proj (h x inter) and down_proj (inter x h)."""
    return [
        Part("gate_proj", "gate_proj", (h, inter), provenance="Table 2"),
        Part("up_proj", "up_proj", (h, inter), provenance="Table 2"),
        Part("down_proj", "down_proj", (inter, h), provenance="Table 2"),
    ]


def terms(registry, family, flags):
    """The family's parameter terms (Table 2) for its structure ``flags`` (q_lora, routing_bias, tied)."""
    q_lora, tied = flags["q_lora"], flags["tied"]
    yield Term("params.mla", "parameters of the MLA projection matrices of one layer", "params",
               "Table 2; Sec. 2", tuple(mla_matrices(q_lora)))
    if flags.get("indexer", False):  # DSA: the layers with an indexer of their own hold it beside their MLA (L_I)
        yield Term("params.indexer", "parameters of the DSA lightning indexer of one layer that runs its own", "params",
                   DSA, tuple(indexer_matrices()))
    yield Term("params.norm", "RMSNorm weights of one layer (LN)", "params", "Table 3", tuple(norm_weights(q_lora)))
    yield Term("params.expert", "parameters of one MoE expert (routed or shared), 3 h h_E", "params", "Table 2",
               tuple(expert_matrices(h_E)))
    yield Term("params.dense_ffn", "parameters of the dense SwiGLU FFN of one dense layer, 3 h h_F", "params",
               "Table 2", tuple(expert_matrices(h_F)))
    yield Term("params.router", "router (gate) weights of one MoE layer, N x h", "params", "Table 2",
               (Part("gate", "router gate, N x h", (N, h), provenance="Table 2"),))
    yield Term("params.embedding", "word embedding, v x h", "params", "Table 3",
               (Part("embed", "embedding v x h", (v, h), provenance="Table 3, layer 0"),))
    yield Term("params.head", "output head, v x h" + (" (tied to the embedding: not counted again)" if tied else ""),
               "params", "Table 3",
               (Part("head", "output head v x h", (0,) if tied else (v, h), provenance="Table 3, layer 60"),))
