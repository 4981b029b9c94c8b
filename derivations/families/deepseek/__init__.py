"""The DeepSeek-V2/V3 family (the paper's models): MLA attention and DeepSeekMoE, read from configs of transformers'
DeepseekV2/V3 code (models/deepseek_v2, models/deepseek_v3; Kimi K2's ``kimi_k2`` too).  ``DIMENSIONS`` maps their
fields onto the paper's notation (Table 1); parameters: parameters.py (Table 2); tensors kept: activations.py (Sec. 5).
"""
from derivations.constants import EXT, MLA, MOE
from derivations.families import MOE_DIVIDES, Divides, Family, Kind

#: model_type values of the DeepseekV2/V3 modelling code, of DeepSeek-V3.2's (deepseek_v32: V3 plus DeepSeek
#: Sparse Attention's lightning indexer, transformers models/deepseek_v32) and of GLM-5's (glm_moe_dsa: V3.2 whose
#: ``shared`` layers reuse the previous layer's top-k and have no indexer, transformers models/glm_moe_dsa).
MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa")
#: topk_method values of the DeepseekV2/V3 modelling code ("gready" is the HF default's spelling).
TOPK_METHODS = ("greedy", "gready", "group_limited_greedy", "noaux_tc")
#: config field -> (ModelSpec attribute, meaning); all required, positive integers.
DIMENSIONS = (
    ("hidden_size", "h", "hidden size h"),
    ("intermediate_size", "h_F", "dense FFN intermediate size h_F"),
    ("moe_intermediate_size", "h_E", "expert intermediate size h_E"),
    ("num_hidden_layers", "l", "layers l"),
    ("num_attention_heads", "n_h", "attention heads n_h"),
    ("kv_lora_rank", "d_c", "key-value compression rank d_c"),
    ("qk_nope_head_dim", "d_h", "per-head q/k content dimension d_h"),
    ("qk_rope_head_dim", "d_hr", "per-head RoPE dimension d_h^R"),
    ("v_head_dim", "d_v", "per-head value dimension d_v"),
    ("n_routed_experts", "N", "routed experts N"),
    ("num_experts_per_tok", "N_r", "routed experts per token N_r"),
    ("vocab_size", "v", "vocabulary size v"),
)

#: The kinds with activation terms of their own (derivations/activations/kinds.py builds them): the paper's
#: M_1^A / M_2^A (Sec. 5.1) and M_1^E / M_2^E (Sec. 5.2), and the extensions' dense FFN and head.
LAYER_TERMS = (
    Kind("mla", "act.mla.layer", "one MLA layer", MLA, (("", "M_1^A"), (".full", "M_2^A")),
         ("only the layer input is kept", "only the layer input is kept"), "Sec. 5.1, M_2^A", "MLA", "layers"),
    Kind("moe", "act.moe.layer", "one MoE layer", MOE, (("", "M_1^E"), (".full", "M_2^E")),
         ("layer input and routing decision kept", "nothing kept: the layer's one checkpoint is the MLA input"),
         "Sec. 5.2, M_2^E", "MoE", "moe"),
    Kind("dense", "act.dense.layer", "one dense FFN sublayer (extension)", EXT, (),
         ("only the layer input is kept", "nothing kept: the layer's one checkpoint is its input"), "", "dense FFN",
         "dense"),
    Kind("head", "act.head", "the final norm, head and loss on the last stage (extension)", EXT,
         label="head and loss", per="last"),
)

#: The paper's divisibility rules (Sec. 3), the dense FFN's split by TP last.
DIVIDES = MOE_DIVIDES + (Divides("tp-divides-ffn", "h_F", "tp", "TP={TP} must divide h_F={h_F} (dense FFN)"),)

class DeepSeek(Family):
    """DeepSeek-V2/V3 and the configs read as them (Table 1's notation; hooks: the modules of this folder)."""

    name = "deepseek"
    title = "DeepSeek-V2/V3 (MLA + DeepSeekMoE)"
    short = "MLA + MoE"
    model_types = MODEL_TYPES
    dimensions = DIMENSIONS
    topk_methods = TOPK_METHODS
    kinds = ("mla", "moe", "dense", "head", "mtp")
    layer_terms = LAYER_TERMS
    layer = ("mla", "moe")
    divides = DIVIDES
    attention_label = "MLA"
    layer_what = "MoE transformer layer (MLA + MoE)"
    structure_letters = "qbti"
    activation_flags = ("q_lora",)
    flags = ("q_lora", "routing_bias", "tied", "indexer")
    late_flags = ("indexer",)
    requires = (("indexer", "q_lora"),)
    # DeepSeek Sparse Attention's lightning indexer: L_I of a stage's layers hold one (ModelSpec.layer_features: every
    # layer of deepseek_v32, GLM-5's 'full' ones), its parameters (params.indexer) counted per stage beside the layers
    counts = (("L_I", "indexer", "layers with a DSA lightning indexer of their own held by the stage"),)
    additions = (("indexer", "DSA lightning indexers", "L_I", "params.indexer", "stage"),)
    # Kimi K2.5 (transformers 5.24 models/kimi_k25, Kimi_K25Config): the language model is text_config, a DeepSeek-V3
    # (its sub-config's default model_type; kimi_k2 read as it is)
    wrappers = (("kimi_k25", "text_config", "deepseek_v3"),)


FAMILY = DeepSeek()
