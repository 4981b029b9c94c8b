"""The toy family's matrices, one term per module kind (the ``parameter_terms`` hook's module)."""
from derivations.notation import SymbolInfo, d_h, h, h_F, n_h, register, v
from symbolic.term import Part, Term

# the family's own symbol, registered beside the paper's (Table 1's h, h_F, n_h, d_h, v are shared)
n_kv = register([SymbolInfo("n_kv", "n_{kv}", "key-value heads (grouped-query attention)", "model", "toy")])["n_kv"]


def terms(registry, family, flags):
    yield Term("params.gqa", "grouped-query attention of one layer", "params", "toy",
               (Part("W_Q", "W^Q", (h, n_h, d_h), tags=("tp_split",)),
                Part("W_KV", "W^K and W^V", (2, h, n_kv, d_h), tags=("tp_split",)),
                Part("W_O", "W^O", (n_h, d_h, h), tags=("tp_split",))))
    yield Term("params.norm", "RMSNorms of one layer", "params", "toy",
               (Part("attn_norm", "input_layernorm", (h,)), Part("ffn_norm", "post_attention_layernorm", (h,))))
    yield Term("params.dense_ffn", "SwiGLU MLP", "params", "toy",
               (Part("gate_proj", "gate", (h, h_F)), Part("up_proj", "up", (h, h_F)),
                Part("down_proj", "down", (h_F, h))))
    yield Term("params.embedding", "embedding", "params", "toy", (Part("embed", "v x h", (v, h)),))
    yield Term("params.head", "head", "params", "toy", (Part("head", "v x h", (0,) if flags["tied"] else (v, h)),))
