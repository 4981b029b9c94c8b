"""The DeepSeek family's model: :class:`ModelSpec` (the paper's Table 1 notation) and :func:`from_fields`, the
mapping of a config.json of transformers' DeepseekV2/V3 code (configuration_deepseek_v3.py DeepseekV3Config) onto
it, with DeepSeek Sparse Attention's indexer (deepseek_v32, glm_moe_dsa: :func:`_indexer`).  No sympy here."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, FrozenSet, List, Mapping, Optional, Tuple

from symbolic.errors import ConfigError

from derivations.families.deepseek import FAMILY


#: What a config leaves out of its routing, by model_type: the default of transformers' config class and code
#: (DeepseekV2Config / DeepseekV2TopkRouter: softmax scores, norm_topk_prob false, no groups; DeepseekV3Config /
#: DeepseekV3TopkRouter, also Kimi K2's: sigmoid scores, norm_topk_prob true, n_group 8, topk_group 4).
SCORING_DEFAULTS = {"deepseek_v2": "softmax"}
NORM_DEFAULTS = {"deepseek_v2": False}
#: (GlmMoeDsaConfig, transformers 5.24 models/glm_moe_dsa: n_group 1, topk_group 1)
GROUP_DEFAULTS = {"deepseek_v2": (None, None), "glm_moe_dsa": (1, 1)}
#: The scoring functions of the routers (config scoring_func; Megatron-Core's moe_router_score_function).
SCORING_FUNCS = ("sigmoid", "softmax")


@dataclass(frozen=True)
class ModelSpec:
    """A DeepSeek-family model in the paper's notation (Table 1).  ``d_cq`` None: no query compression
    (DeepSeek-v2-Lite); ``mtp_layers``: D, the checkpoint's MTP modules (not counted by the paper); ``fp8_block``:
    the block of one FP32 scale in an FP8 block-quantised release ((128, 128) for DeepSeek-v3; storage only)."""

    name: str
    h: int
    h_F: int
    h_E: int
    l: int
    n_h: int
    d_cq: Optional[int]
    d_c: int
    d_h: int
    d_hr: int
    d_v: int
    N: int
    N_s: int
    N_r: int
    v: int
    first_k_dense: int
    moe_layer_freq: int = 1
    topk_method: str = "greedy"
    tie_word_embeddings: bool = False
    mtp_layers: int = 0
    fp8_block: Optional[Tuple[int, int]] = None
    source: str = "preset"
    # the routing as the config gives it (the indicators of :meth:`routing`)
    model_type: str = "deepseek_v3"
    scoring_func: str = "sigmoid"
    norm_topk_prob: bool = True
    n_group: Optional[int] = None
    topk_group: Optional[int] = None
    # DeepSeek Sparse Attention's indexer (HF index_n_heads, index_head_dim, index_topk; 0: none)
    n_I: int = 0
    d_I: int = 0
    k_I: int = 0
    # GLM-5's indexer_types ("full": an indexer of its own; "shared": none); (): every layer's
    indexer_types: Tuple[str, ...] = ()
    # HF attention_dropout (read only as zero or not: :meth:`unread`)
    attention_dropout: float = 0.0

    #: The family whose terms describe this model (derivations/families/deepseek).
    family = FAMILY.name

    # -- structure -----------------------------------------------------------------
    @property
    def q_lora(self) -> bool:
        return self.d_cq is not None

    @property
    def indexer(self) -> bool:
        """DeepSeek Sparse Attention: the attention selects its keys with a lightning indexer."""
        return self.n_I > 0

    @property
    def routing_bias(self) -> bool:
        """noaux_tc routing keeps a per-expert score-correction bias (N per MoE layer)."""
        return self.topk_method == "noaux_tc"

    def groups(self) -> Tuple[Optional[int], Optional[int]]:
        """(n_group, topk_group): the config's, else its class's defaults (DeepseekV3Config: 8 and 4)."""
        n_group, topk_group = GROUP_DEFAULTS.get(self.model_type, (8, 4))
        return (n_group if self.n_group is None else self.n_group,
                topk_group if self.topk_group is None else self.topk_group)

    @property
    def group_limited(self) -> bool:
        """Megatron-Core runs its group-limited top-k (``moe_router_group_topk`` set)."""
        return self.groups()[1] is not None

    def routing(self) -> Dict[str, int]:
        """The routing indicators (0 or 1) the routers' tensor lists read (derivations/notation.py): u_v2
        (transformers runs DeepSeek-V2's code), u_nt (norm_topk_prob), u_lg (group_limited_greedy), u_sg
        (sigmoid scores), u_eb (the expert bias, noaux_tc), u_gk (Megatron-Core's group-limited top-k)."""
        return {"u_v2": int(self.model_type == "deepseek_v2"), "u_nt": int(self.norm_topk_prob),
                "u_lg": int(self.topk_method == "group_limited_greedy"), "u_sg": int(self.scoring_func == "sigmoid"),
                "u_eb": int(self.routing_bias), "u_gk": int(self.group_limited)}

    @property
    def structure(self) -> Tuple:
        """What decides the shape of the terms: FAMILY.flags, in order."""
        return (self.q_lora, self.routing_bias, self.tie_word_embeddings, self.indexer)

    def notes(self) -> List[str]:
        """What the terms leave out of this model (DSA's indexer), for an estimate's assumptions."""
        if not self.indexer:
            return []
        out = ["DSA indexer: its parameters are counted; as transformers 5.24 runs it (under no_grad) it keeps nothing "
               "for backward; its forward transients (FP32 b s n_I s scores in eager), a sparse kernel's b s k_I view "
               "and its own training are not modelled"]
        if self.model_type == "glm_moe_dsa":  # GlmMoeDsaModel.forward hands each layer the top-k before it
            out.append("GLM-5 under full recomputation: transformers' checkpoint of each layer keeps its "
                       "prev_topk_indices argument until the backward, int32 b s min(k_I, s) per full layer another "
                       "layer follows (not a saved tensor), not modelled")
        return out

    def unread(self, conventions) -> Optional[Tuple[str, str]]:
        """(field, why) of a config field the framework of ``conventions`` builds otherwise than the terms count, or
        None: ``moe_layer_freq`` (transformers 5.24's DeepseekV3DecoderLayer ignores it) and ``attention_dropout``
        above 0 under ``--dropout-masks none``."""
        every = list(_layer_kinds(self.l, self.first_k_dense, 1))  # what transformers builds
        if conventions.head_state == "transformers" and self.layer_kinds() != every:
            return ("moe_layer_freq", f"moe_layer_freq={self.moe_layer_freq}: transformers 5.24 ignores it and makes "
                                      f"every layer from first_k_dense_replace on MoE; the transformers conventions "
                                      f"do not cover it (write 1 for what transformers builds; the paper's and "
                                      f"Megatron's conventions read it)")
        if self.attention_dropout > 0 and conventions.dropout_masks == "none":
            return ("attention_dropout", f"attention_dropout={self.attention_dropout}: the attention then keeps a "
                                         f"dropout mask and output per score (2 B_a b n_h s^2 as ATen's CPU dropout "
                                         f"keeps its noise in the scores' dtype; a bool mask on a GPU), and "
                                         f"--dropout-masks none counts none: give --dropout-masks kept (the "
                                         f"paper's masks) or write attention_dropout 0")
        return None

    def layer_kinds(self) -> List[str]:
        """'moe' or 'dense' for each layer (a new list)."""
        return list(_layer_kinds(self.l, self.first_k_dense, self.moe_layer_freq))

    def layer_features(self) -> Tuple[FrozenSet[str], ...]:
        """Per layer what FAMILY.counts counts: ``indexer`` for a layer running a DSA indexer of its own (every
        layer of deepseek_v32; GLM-5's ``full`` layers)."""
        if self.indexer_types and len(self.indexer_types) != self.l:
            raise ConfigError("indexer_types", f"{self.name}: indexer_types lists {len(self.indexer_types)} layers, "
                                               f"the model has {self.l}")
        return _features(self.l, self.indexer, self.indexer_types)

    def mtp_layer_features(self) -> FrozenSet[str]:
        """What of FAMILY.counts' features an MTP module's block holds: DSA's indexer."""
        return frozenset({"indexer"}) if self.indexer else frozenset()

    def named(self) -> Dict[str, int]:
        """{symbol name: value} of the model's symbols (derivations/notation.py)."""
        out = {"h": self.h, "h_F": self.h_F, "h_E": self.h_E, "l": self.l, "n_h": self.n_h, "d_c": self.d_c,
               "d_h": self.d_h, "d_hr": self.d_hr, "d_v": self.d_v, "N": self.N, "N_s": self.N_s, "N_r": self.N_r,
               "v": self.v, "D": self.mtp_layers, "n_g": self.n_group or 1, "k_g": self.topk_group or 1,
               "u_tw": int(self.tie_word_embeddings), **self.routing()}
        if self.d_cq is not None:
            out["d_cq"] = self.d_cq
        if self.indexer:
            out.update(n_I=self.n_I, d_I=self.d_I, k_I=self.k_I)
        return out


@lru_cache(maxsize=64)
def _layer_kinds(layers: int, first_k_dense: int, freq: int) -> Tuple[str, ...]:
    """HF DeepseekV2/V3 rule: MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0."""
    return tuple("moe" if i >= first_k_dense and i % freq == 0 else "dense" for i in range(layers))


@lru_cache(maxsize=64)
def _features(layers: int, indexer: bool, types: Tuple[str, ...]) -> Tuple[FrozenSet[str], ...]:
    own = [indexer and (not types or types[i] == "full") for i in range(layers)]
    return tuple(frozenset({"indexer"}) if x else frozenset() for x in own)


def shape_name(model_type: str, dims: Mapping) -> str:
    """The name of a model read from a file, from what it is: ``deepseek_v3 (h 7168, 61 layers, 256 experts)``."""
    return f"{model_type} (h {dims['h']}, {dims['l']} layers, {dims['N']} experts)"


def from_fields(f, name: Optional[str] = None, source: Optional[str] = None) -> ModelSpec:
    """The :class:`ModelSpec` of a parsed config.json, validated through ``f`` (hfconfig.Fields)."""
    data, mt = f.data, f.data["model_type"]
    dims = {attr: f.int(name_, meaning) for name_, attr, meaning in FAMILY.dimensions}

    if "q_lora_rank" not in data:
        raise f.err("q_lora_rank", "required field 'q_lora_rank' (query compression rank d_c') is missing; "
                                   "write null for a model without query compression")
    d_cq = None if data["q_lora_rank"] is None else f.int("q_lora_rank", "query compression rank d_c'")

    n_shared = data.get("n_shared_experts")  # HF: null or absent = no shared experts
    N_s = 0 if n_shared is None else f.int("n_shared_experts", "shared experts N_s", minimum=0)
    first_k = f.int("first_k_dense_replace", "leading dense layers", minimum=0)
    freq = f.int("moe_layer_freq", "MoE layer frequency", default=1, required=False)
    mtp = f.int("num_nextn_predict_layers", "MTP modules D", minimum=0, default=0, required=False)

    topk = f.choice("topk_method", FAMILY.topk_methods,
                    "noaux_tc" if mt in ("deepseek_v3", "kimi_k2") + tuple(DSA) else "greedy")
    n_group = f.int("n_group", "expert groups n_g", required=False)
    topk_group = f.int("topk_group", "expert groups kept k_g", required=False)
    scoring = f.choice("scoring_func", SCORING_FUNCS, SCORING_DEFAULTS.get(mt, "sigmoid"))
    norm = f.bool("norm_topk_prob", NORM_DEFAULTS.get(mt, True))
    tied = f.bool("tie_word_embeddings")
    kv_heads = data.get("num_key_value_heads")
    if kv_heads is not None and (type(kv_heads) is not int or kv_heads != dims["n_h"]):  # (any other type too)
        raise f.err("num_key_value_heads", f"num_key_value_heads={f.shown(kv_heads)} with num_attention_heads="
                                           f"{dims['n_h']}: MLA's keys and values have a head per query head "
                                           f"(kv_b_proj), and transformers' eager attention repeats them "
                                           f"num_attention_heads / num_key_value_heads times (repeat_kv): "
                                           f"not covered; write {dims['n_h']} or leave it out")
    dropout = data.get("attention_dropout", 0.0)
    if not (type(dropout) in (int, float) and 0 <= dropout < 1):
        raise f.err("attention_dropout", f"field 'attention_dropout' must be a number in [0, 1), "
                                         f"got {f.type_name(dropout)} {f.shown(dropout)}")
    for flag in ("attention_bias", "mlp_bias"):
        val = data.get(flag, False)
        if val is not False and val is not None:
            raise f.err(flag, f"field {flag!r} = {f.shown(val)}: projection biases are not covered "
                              f"(DeepSeek checkpoints have none)")

    index = _indexer(f, mt, d_cq, first_k, freq, dims["l"], dims["d_hr"])
    if dims["N_r"] > dims["N"]:
        raise f.err("num_experts_per_tok", f"num_experts_per_tok={dims['N_r']} exceeds "
                                           f"n_routed_experts={dims['N']}")
    if first_k > dims["l"]:
        raise f.err("first_k_dense_replace", f"first_k_dense_replace={first_k} exceeds "
                                             f"num_hidden_layers={dims['l']}")
    return ModelSpec(name=name or shape_name(mt, dims), d_cq=d_cq, N_s=N_s, first_k_dense=first_k,
                     moe_layer_freq=freq, topk_method=topk, tie_word_embeddings=tied, mtp_layers=mtp,
                     fp8_block=f.fp8_block(), source=str(f.path) if source is None else source,
                     model_type=mt, scoring_func=scoring, norm_topk_prob=norm, n_group=n_group,
                     topk_group=topk_group, attention_dropout=dropout, **index, **dims)


#: The model types with DeepSeek Sparse Attention: their config classes' defaults of index_n_heads, index_head_dim,
#: index_topk (transformers 5.24 DeepseekV32Config, GlmMoeDsaConfig) and their attention class
DSA = {"deepseek_v32": ((64, 128, 2048), "DeepseekV32Attention"),
       "glm_moe_dsa": ((32, 128, 2048), "GlmMoeDsaAttention")}
#: (field, ModelSpec attribute, meaning) of the indexer's dimensions
INDEX_FIELDS = (("index_n_heads", "n_I", "indexer heads n_I"), ("index_head_dim", "d_I", "indexer head dimension d_I"),
                ("index_topk", "k_I", "tokens each query attends to k_I"))
#: GLM-5's per-layer indexer fields (GlmMoeDsaConfig.__post_init__): indexer_types, or the pattern it is built from
SHARING_FIELDS = ("indexer_types", "index_topk_pattern", "index_topk_freq", "index_skip_topk_offset")
INDEXER_TYPES = ("full", "shared")


def _indexer(f, mt: str, d_cq, first_k: int, freq: int, layers: int, d_hr: int) -> Dict:
    """The DSA indexer's dimensions and, for GLM-5, which layers run one ({} for a model without)."""
    if mt not in DSA:
        given = [k for k, *_ in INDEX_FIELDS if k in f.data] + [k for k in SHARING_FIELDS if k in f.data]
        if given:
            raise f.err(given[0], f"field {given[0]!r}: a DSA indexer is read for model_type {' or '.join(DSA)} "
                                  f"only (this config's transformers code, {mt}, builds none)")
        return {}
    defaults, attention = DSA[mt]
    if d_cq is None:
        raise f.err("q_lora_rank", f"q_lora_rank must be set for {mt} (its indexer reads the compressed query; "
                                   f"transformers' {attention} has no uncompressed form)")
    out = {attr: f.int(name, meaning, default=default, required=False)
           for (name, attr, meaning), default in zip(INDEX_FIELDS, defaults)}
    if out["d_I"] < d_hr:
        raise f.err("index_head_dim", f"index_head_dim={out['d_I']} is below qk_rope_head_dim: the indexer "
                                      "rotates its first qk_rope_head_dim dimensions")
    if freq != 1:  # DeepseekV32Config and GlmMoeDsaConfig build mlp_layer_types from first_k_dense_replace alone
        raise f.err("moe_layer_freq", f"moe_layer_freq={freq}: transformers' {mt} code makes every layer after "
                                      "first_k_dense_replace a MoE layer (write 1 or leave it out)")
    kinds = f.data.get("mlp_layer_types")
    want = ["dense"] * min(first_k, layers) + ["sparse"] * (layers - min(first_k, layers))
    if kinds is not None and kinds != want:
        raise f.err("mlp_layer_types", "field 'mlp_layer_types' must be first_k_dense_replace 'dense' entries "
                                       "then 'sparse' ones (other patterns are not covered)")
    layer_types = f.data.get("layer_types")
    if layer_types is not None and (not isinstance(layer_types, list) or len(layer_types) != layers
                                    or any(x != "indexed_attention" for x in layer_types)):
        raise f.err("layer_types", "field 'layer_types' must list 'indexed_attention' once per layer (other "
                                   "attention types are not covered)")
    if mt == "deepseek_v32":
        given = [k for k in SHARING_FIELDS if k in f.data]
        if given:
            raise f.err(given[0], f"field {given[0]!r}: shared indexer layers are read for model_type glm_moe_dsa "
                                  "only (transformers' deepseek_v32 code runs an indexer in every layer)")
        return out
    return {**out, "indexer_types": _indexer_types(f, layers)}


def _indexer_types(f, layers: int) -> Tuple[str, ...]:
    """GLM-5's indexer type of each layer, as transformers 5.24 GlmMoeDsaConfig.__post_init__ builds it (a freq
    below 1, which it reads as 1, refused); layer 0 must be ``full`` (GlmMoeDsaAttention raises otherwise)."""
    data = f.data
    if data.get("indexer_types") is not None:
        field, types = "indexer_types", data["indexer_types"]
    elif data.get("index_topk_pattern") is not None:
        field, pattern = "index_topk_pattern", data["index_topk_pattern"]
        if isinstance(pattern, str):
            if any(c not in "FS" for c in pattern):
                raise f.err(field, f"field 'index_topk_pattern' must be a string of F (full) and S (shared), "
                                   f"got {f.shown(pattern)}")
            types = ["full" if c == "F" else "shared" for c in pattern]
        else:
            types = pattern
    else:
        field = "index_skip_topk_offset"  # what makes layer 0 shared here (offset 0 with a freq above 1)
        freq = f.int("index_topk_freq", "layers per full indexer layer", default=1, required=False)
        offset = f.int("index_skip_topk_offset", "leading full indexer layers", minimum=0, default=2, required=False)
        types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or any(x not in INDEXER_TYPES for x in types):
        raise f.err(field, f"field {field!r} must give 'full' or 'shared' once per layer ({layers}), got "
                           f"{f.type_name(types)} {f.shown(types)}")
    if types[0] != "full":
        raise f.err(field, f"field {field!r}: layer 0 must be 'full' (a 'shared' layer reuses the top-k of the full "
                           "layer before it)")
    return tuple(types)


def fields_of(spec: ModelSpec) -> Dict:
    """The config.json fields of ``spec`` (what :func:`from_fields` reads back)."""
    data = {"model_type": spec.model_type, **{field: getattr(spec, attr) for field, attr, _ in FAMILY.dimensions},
            "q_lora_rank": spec.d_cq, "n_shared_experts": spec.N_s, "first_k_dense_replace": spec.first_k_dense,
            "moe_layer_freq": spec.moe_layer_freq, "num_nextn_predict_layers": spec.mtp_layers,
            "topk_method": spec.topk_method, "scoring_func": spec.scoring_func, "norm_topk_prob": spec.norm_topk_prob,
            "tie_word_embeddings": spec.tie_word_embeddings, "attention_dropout": spec.attention_dropout}
    data.update({k: x for k, x in (("n_group", spec.n_group), ("topk_group", spec.topk_group)) if x is not None})
    if spec.indexer:
        data.update({name: getattr(spec, attr) for name, attr, _ in INDEX_FIELDS})
    if spec.indexer_types:
        data["indexer_types"] = list(spec.indexer_types)
    if spec.fp8_block is not None:
        block = spec.fp8_block
        if not isinstance(block, tuple):
            raise ConfigError("model", f"ModelSpec.fp8_block must be a tuple of two integers or None, got {block!r}")
        data["quantization_config"] = {"quant_method": "fp8", "weight_block_size": list(block)}
    return data
