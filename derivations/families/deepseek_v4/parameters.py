"""DeepSeek-V4's matrices (transformers 5.24 models/deepseek_v4/modeling_deepseek_v4.py), one term per module kind,
each tagged ``tp_split`` where tensor parallelism over the heads splits it (the paper's rule applied to V4's
head-indexed matrices; transformers' own TP plan shards the experts only) or ``replicated``.
"""
from __future__ import annotations

from derivations.families.deepseek_v4.notation import d_O, d_a, g_O, m_C, m_H, n_hc
from derivations.notation import SYMBOLS, N, d_cq, h, h_E, n_h, v
from symbolic.term import Part, Term

n_I, d_I = SYMBOLS["n_I"], SYMBOLS["d_I"]
SRC = "transformers 5.24 deepseek_v4"


def _p(key, label, shape, module, split=False):
    return Part(key, label, shape, provenance=f"{SRC}: {module}", tags=("tp_split",) if split else ("replicated",))


def attention_matrices():
    """DeepseekV4Attention: the query LoRA, the one key-value head, the grouped output projection and the sinks."""
    return [
        _p("q_a_proj", "q_a_proj: query down-projection, d_c' x h", (d_cq, h), "DeepseekV4Attention.q_a_proj"),
        _p("q_a_norm", "q_a_norm: RMSNorm of the compressed query", (d_cq,), "DeepseekV4Attention.q_a_norm"),
        _p("q_b_proj", "q_b_proj: query up-projection, n_h d_a x d_c'", (n_h, d_a, d_cq),
           "DeepseekV4Attention.q_b_proj", True),
        _p("kv_proj", "kv_proj: the one key-value head, d_a x h", (d_a, h), "DeepseekV4Attention.kv_proj"),
        _p("kv_norm", "kv_norm: RMSNorm of the key-value head", (d_a,), "DeepseekV4Attention.kv_norm"),
        _p("o_a_proj", "o_a_proj: grouped output projection, each of g_O groups n_h d_a / g_O -> d_O", (n_h, d_a, d_O),
           "DeepseekV4GroupedLinear", True),
        _p("o_b_proj", "o_b_proj: output mixing, h x g_O d_O", (h, g_O, d_O), "DeepseekV4Attention.o_b_proj", True),
        _p("sinks", "sinks: one attention sink per head", (n_h,), "DeepseekV4Attention.sinks", True),
    ]


def compressor_matrices(rate, width, module):
    """A compressor of every ``rate`` tokens into one entry of d_a (DeepseekV4CSACompressor: ``width`` 2, the two
    overlapping series C^a, C^b; DeepseekV4HCACompressor: ``width`` 1)."""
    return [
        _p("kv_proj", f"compressor.kv_proj: {width} d_a x h" if width != 1 else "compressor.kv_proj: d_a x h",
           (width, d_a, h), f"{module}.kv_proj"),
        _p("gate_proj", "compressor.gate_proj: the softmax gates, same shape", (width, d_a, h), f"{module}.gate_proj"),
        _p("position_bias", "compressor.position_bias: per position in a window", (rate, width, d_a),
           f"{module}.position_bias"),
        _p("kv_norm", "compressor.kv_norm: RMSNorm of a compressed entry", (d_a,), f"{module}.kv_norm"),
    ]


def indexer_matrices():
    """DeepseekV4Indexer of a CSA layer: its own compressor at d_I (two series), its query from the compressed query
    c_Q (q_b_proj) and the per-head weights of its scores (scorer.weights_proj)."""
    m = "DeepseekV4Indexer"
    return [
        _p("idx_kv_proj", "indexer.kv_proj: 2 d_I x h", (2, d_I, h), f"{m}.kv_proj"),
        _p("idx_gate_proj", "indexer.gate_proj: 2 d_I x h", (2, d_I, h), f"{m}.gate_proj"),
        _p("idx_position_bias", "indexer.position_bias: m_C x 2 d_I", (m_C, 2, d_I), f"{m}.position_bias"),
        _p("idx_kv_norm", "indexer.kv_norm: RMSNorm of a compressed key", (d_I,), f"{m}.kv_norm"),
        _p("idx_q_b_proj", "indexer.q_b_proj: indexer query, n_I d_I x d_c'", (n_I, d_I, d_cq), f"{m}.q_b_proj"),
        _p("idx_weights_proj", "indexer.scorer.weights_proj: per-head weights of the scores, n_I x h", (n_I, h),
           "DeepseekV4IndexerScorer.weights_proj"),
    ]


def hyper_connection(module, prefix, rows):
    """A hyper-connection's projection of the n_hc streams (n_hc h) to ``rows`` mixing weights, its bias and scales
    (DeepseekV4HyperConnection: rows (2 + n_hc) n_hc, three scales; DeepseekV4HyperHead: rows n_hc, one scale)."""
    scales = 3 if module == "DeepseekV4HyperConnection" else 1
    return [
        _p(f"{prefix}fn", f"{prefix}fn: projection of the n_hc streams to the mixing weights", (rows, n_hc, h),
           f"{module}.fn"),
        _p(f"{prefix}base", f"{prefix}base: bias of the mixing weights", (rows,), f"{module}.base"),
        _p(f"{prefix}scale", f"{prefix}scale: scales of the mixing weights", (scales,), f"{module}.scale"),
    ]


def expert_matrices():
    """One SwiGLU expert (routed: gate_up_proj and down_proj slices; shared: DeepseekV4MLP), 3 h h_E."""
    return [Part("gate_proj", "gate_proj", (h, h_E), provenance=SRC),
            Part("up_proj", "up_proj", (h, h_E), provenance=SRC),
            Part("down_proj", "down_proj", (h_E, h), provenance=SRC)]


def terms(registry, family, flags):
    """The family's parameter terms for its structure ``flags`` (tied)."""
    mix = (2 + n_hc) * n_hc
    yield Term("params.attn", "parameters of one layer's attention (query LoRA, shared key-value head, grouped "
                              "output projection, sinks; its sliding window has none)", "params",
               SRC + ": DeepseekV4Attention", tuple(attention_matrices()))
    yield Term("params.compressor.csa", "parameters of a CSA layer's compressor, one key-value entry per m_C tokens, "
                                        "and its lightning indexer", "params",
                                        SRC + ": DeepseekV4CSACompressor, DeepseekV4Indexer",
               tuple(compressor_matrices(m_C, 2, "DeepseekV4CSACompressor") + indexer_matrices()))
    yield Term("params.compressor.hca", "parameters of an HCA layer's compressor, one key-value entry per m_H tokens",
               "params",
               SRC + ": DeepseekV4HCACompressor", tuple(compressor_matrices(m_H, 1, "DeepseekV4HCACompressor")))
    yield Term("params.norm", "RMSNorm weights of one layer (before the attention and before the MoE)", "params",
               SRC + ": DeepseekV4DecoderLayer",
               (_p("attn_norm", "input_layernorm", (h,), "DeepseekV4DecoderLayer.input_layernorm"),
                _p("ffn_norm", "post_attention_layernorm", (h,), "DeepseekV4DecoderLayer.post_attention_layernorm")))
    yield Term("params.hc", "parameters of one layer's two hyper-connections (before the attention and before the "
                            "MoE), each (2 + n_hc) n_hc x n_hc h + (2 + n_hc) n_hc + 3", "params",
               SRC + ": DeepseekV4HyperConnection (attn_hc, ffn_hc)",
               tuple(hyper_connection("DeepseekV4HyperConnection", "attn_hc.", mix)
                     + hyper_connection("DeepseekV4HyperConnection", "ffn_hc.", mix)))
    yield Term("params.hc_head", "parameters of the hyper-connection head collapsing the n_hc streams before the "
                                 "final norm", "params", SRC + ": DeepseekV4HyperHead",
               tuple(hyper_connection("DeepseekV4HyperHead", "hc_", n_hc)))
    yield Term("params.expert", "parameters of one MoE expert (routed or shared), 3 h h_E", "params", SRC,
               tuple(expert_matrices()))
    yield Term("params.dense_ffn", "DeepSeek-V4 has no dense FFN layer (every layer is MoE)", "params", SRC,
               (Part("none", "no dense FFN", (0,), provenance=SRC),))
    yield Term("params.router", "router (gate) weights of one MoE layer, N x h (learned and hash-routed layers "
                                "alike)", "params", SRC + ": DeepseekV4TopKRouter, DeepseekV4HashRouter",
               (Part("gate", "router gate, N x h", (N, h), provenance=SRC),))
    yield Term("params.router_bias", "score-correction bias of one learned-router layer, N (a buffer a checkpoint "
                                     "stores; hash-routed layers have none)", "params",
               SRC + ": DeepseekV4TopKRouter.e_score_correction_bias",
               (Part("bias", "e_score_correction_bias", (N,), provenance=SRC),))
    yield Term("params.embedding", "word embedding, v x h", "params", SRC,
               (Part("embed", "embedding v x h", (v, h), provenance=SRC),))
    tied = flags["tied"]
    yield Term("params.head", "output head, v x h" + (" (tied to the embedding: not counted again)" if tied else ""),
               "params", SRC, (Part("head", "output head v x h", (0,) if tied else (v, h), provenance=SRC),))
