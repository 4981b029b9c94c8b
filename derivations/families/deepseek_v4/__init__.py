"""The DeepSeek-V4 family (transformers 5.24 models/deepseek_v4, DeepseekV4Config): shared-KV attention with
compressed sparse (CSA) and heavily compressed (HCA) key-values, a grouped low-rank output projection,
hyper-connections and DeepSeekMoE with hash-routed first layers, as data; ``DIMENSIONS`` maps the config's fields
onto memsym's symbols, config.py reads the rest.
"""
from derivations.families import MOE_DIVIDES, Family, Kind

#: model_type of transformers' DeepSeek-V4 code (models/deepseek_v4).
MODEL_TYPES = ("deepseek_v4",)
#: config field -> (ModelSpec attribute, meaning, DeepseekV4Config's default); all positive integers.
DIMENSIONS = (
    ("hidden_size", "h", "hidden size h", 4096),
    ("moe_intermediate_size", "h_E", "expert intermediate size h_E", 2048),
    ("num_hidden_layers", "l", "layers l", 43),
    ("num_attention_heads", "n_h", "attention heads n_h", 64),
    ("head_dim", "d_a", "head dimension d_a (of every query head and of the one shared key-value head)", 512),
    ("q_lora_rank", "d_cq", "query compression rank d_c'", 1024),
    ("o_groups", "g_O", "groups of the output projection g_O", 8),
    ("o_lora_rank", "d_O", "output projection rank per group d_O", 1024),
    ("n_routed_experts", "N", "routed experts N", 256),
    ("num_experts_per_tok", "N_r", "routed experts per token N_r", 6),
    ("vocab_size", "v", "vocabulary size v", 129280),
    ("hc_mult", "n_hc", "hyper-connection streams n_hc", 4),
    ("hc_sinkhorn_iters", "t_S", "Sinkhorn iterations of the hyper-connections t_S", 20),
    ("sliding_window", "w", "sliding window w", 128),
    ("index_n_heads", "n_I", "indexer heads n_I", 64),
    ("index_head_dim", "d_I", "indexer head dimension d_I", 128),
    ("index_topk", "k_I", "compressed entries each query attends to k_I", 512),
)

V4_SRC = "transformers 5.24 models/deepseek_v4 (paper/traces/V4.md)"
#: The kinds of sublayer: the attention (every layer's shared-KV attention with its sliding window), the MoE
#: sublayer, and the head.
LAYER_TERMS = (
    Kind("attn", "act.attn.layer", "one V4 attention sublayer (its hyper-connection, sliding-window attention over s "
         "keys and stream mix)", V4_SRC,
         full=("only the layer's input streams are kept", "only the layer's input streams are kept"),
         label="attention", per="layers"),
    Kind("csa", "act.csa.layer", "what a CSA layer adds (its compressor and T_C = floor(s / m_C) more keys)", V4_SRC,
         full=("nothing kept", "nothing kept"), label="CSA compressor and keys", per="L_C"),
    Kind("hca", "act.hca.layer", "what an HCA layer adds (its compressor and T_H = floor(s / m_H) more keys)", V4_SRC,
         full=("nothing kept", "nothing kept"), label="HCA compressor and keys", per="L_H"),
    Kind("moe", "act.moe.layer", "one V4 MoE sublayer (its hyper-connection, router, shared and routed experts and "
         "stream mix)", V4_SRC,
         full=("the mid-layer streams are kept", "nothing kept: the layer's one checkpoint is its input streams"),
         label="MoE", per="moe"),
    Kind("head", "act.head", "the input ids, hyper-connection head, final norm, head and loss on the last stage",
         V4_SRC, label="head and loss", per="last"),
)

DIVIDES = MOE_DIVIDES

class DeepSeekV4(Family):
    """DeepSeek-V4 (transformers 5.24 models/deepseek_v4; hooks: the modules of this folder)."""

    name = "deepseek_v4"
    title = "DeepSeek-V4 (CSA/HCA attention + mHC + DeepSeekMoE)"
    short = "CSA/HCA + mHC + MoE"
    model_types = MODEL_TYPES
    dimensions = tuple(d[:3] for d in DIMENSIONS)
    kinds = ("attn", "csa", "hca", "moe", "head")
    layer_terms = LAYER_TERMS
    layer = ("attn", "moe")
    divides = DIVIDES
    attention_label = "attention"
    layer_what = "V4 transformer layer (attention + MoE + hyper-connections)"
    layer_name = "one sliding layer"
    named_counts = ("CSA", "HCA")
    sections = ("parameters", "static", "zero", "activations", "overheads")
    flags = ("tied",)
    counts = (("L_C", "CSA", "layers with compressed sparse attention (CSA) held by the stage"),
              ("L_H", "HCA", "layers with heavily compressed attention (HCA) held by the stage"),
              ("L_R", "learned-router", "MoE layers with a learned router and its score-correction bias held by the "
                                        "stage (the hash-routed ones have none)"))
    layer_extra = (("hc", "hyper-connections (mHC)", "params.hc"),)
    additions = (("csa", "CSA compressors and indexers", "L_C", "params.compressor.csa", "stage"),
                 ("hca", "HCA compressors", "L_H", "params.compressor.hca", "stage"),
                 ("hc_head", "hyper-connection head", "e_H", "params.hc_head", "stage"),
                 ("router_bias", "routing bias, N per learned-router layer", "L_R", "params.router_bias",
                  "checkpoint"))


FAMILY = DeepSeekV4()
