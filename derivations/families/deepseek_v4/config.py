"""The DeepSeek-V4 family's model: :class:`ModelSpec` and :func:`from_fields`, the mapping of a config.json of
transformers 5.24 models/deepseek_v4 (DeepseekV4Config) onto it: ``FAMILY.dimensions``, the layer types, compression
rates, hash-routed layers and rotary part of a head (their legacy fields too), each defaulting as
DeepseekV4Config.__post_init__ does; what transformers builds otherwise than a field says is refused."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from fractions import Fraction
from typing import Dict, FrozenSet, List, Mapping, Optional, Tuple

from derivations.families.deepseek_v4 import FAMILY

#: layer_types values (DEEPSEEK_V4_LAYER_TYPES) and what memsym calls each
ATTENTION_TYPES = {"sliding_attention": "sliding", "compressed_sparse_attention": "csa",
                   "heavily_compressed_attention": "hca"}
#: legacy compress_ratios entries -> layer type (_COMPRESS_RATIO_TO_LAYER_TYPE)
_RATIO_TYPES = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
MLP_TYPES = ("hash_moe", "moe")
#: the router's score functions transformers' ACT2FN provides (DeepseekV4TopKRouter.score_fn; "softmax" fails there)
SCORING_FUNCS = ("sqrtsoftplus", "sigmoid")
#: DeepseekV4Config's defaults beside the dimensions
DEFAULT_RATES = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
DEFAULT_HASH_LAYERS = 3
DEFAULT_ROTARY_FACTOR = Fraction(64, 512)


@dataclass(frozen=True)
class ModelSpec:
    """A DeepSeek-V4 model in memsym's symbols (``FAMILY.dimensions``), its layer types and its routing.

    ``attention`` holds each layer's attention type (``sliding``, ``csa``, ``hca``), ``hashed`` whether each layer's
    experts are hash-routed; ``m_C``/``m_H`` are the compression rates, ``d_hr`` the rotary part of a head."""

    name: str
    h: int
    h_E: int
    l: int
    n_h: int
    d_a: int
    d_cq: int
    g_O: int
    d_O: int
    N: int
    N_r: int
    v: int
    n_hc: int
    t_S: int
    w: int
    n_I: int
    d_I: int
    k_I: int
    d_hr: int
    m_C: int
    m_H: int
    attention: Tuple[str, ...] = field(default=())
    hashed: Tuple[bool, ...] = field(default=())
    tie_word_embeddings: bool = False
    mtp_layers: int = 0
    scoring_func: str = "sqrtsoftplus"
    source: str = "preset"
    model_type: str = "deepseek_v4"
    #: one shared expert (DeepseekV4SparseMoeBlock.shared_experts), every layer MoE
    N_s = 1
    first_k_dense = 0
    family = FAMILY.name

    @property
    def structure(self) -> Tuple:
        """FAMILY.flags, in order."""
        return (self.tie_word_embeddings,)

    def notes(self) -> List[str]:
        """What the terms leave out of this model, for an estimate's assumptions."""
        return ["DeepSeek-V4: activations as transformers 5.24 keeps them (eager; paper/traces/V4.md); not modelled: "
                "the hash-routing table (an int64 v x N_r buffer per hash-routed layer), the MTP module, a kept "
                "generation cache (use_cache with the output held keeps the CSA indexer's compressor), the forward's "
                "transients (the indexer's FP32 b s n_I T scores); the step's peak uses the DeepSeek family's moments "
                "(a rebuilt layer is a sliding one: a CSA or HCA layer's compressor and T more keys are not added; "
                "not traced for V4)"]

    def layer_kinds(self) -> List[str]:
        """Every V4 layer is a MoE layer."""
        return ["moe"] * self.l

    def layer_features(self) -> Tuple[FrozenSet[str], ...]:
        """Per layer what FAMILY.counts counts: its attention type (``CSA``, ``HCA``) and ``learned-router`` for a
        learned router (DeepseekV4TopKRouter keeps e_score_correction_bias; DeepseekV4HashRouter does not)."""
        return _features(self.attention, self.hashed)

    def named(self) -> Dict[str, int]:
        """{symbol name: value} of the model's symbols."""
        out = {attr: getattr(self, attr) for _, attr, _ in FAMILY.dimensions}
        out.update(d_hr=self.d_hr, m_C=self.m_C, m_H=self.m_H, N_s=1, D=self.mtp_layers,
                   u_sg=int(self.scoring_func == "sigmoid"))
        return out


@lru_cache(maxsize=64)
def _features(attention: Tuple[str, ...], hashed: Tuple[bool, ...]) -> Tuple[FrozenSet[str], ...]:
    names = {"csa": "CSA", "hca": "HCA"}
    return tuple(frozenset({names[a]} if a in names else set()) | (set() if x else {"learned-router"})
                 for a, x in zip(attention, hashed))


def shape_name(model_type: str, dims: Mapping) -> str:
    """``deepseek_v4 (h 4096, 43 layers, 256 experts)``: what the model is, never the file's name."""
    return f"{model_type} (h {dims['h']}, {dims['l']} layers, {dims['N']} experts)"


def _rates(f) -> Dict[str, int]:
    given = f.data.get("compress_rates")
    rates = dict(DEFAULT_RATES) if given is None else {}  # DeepseekV4Config takes a given dict as it is
    if given is not None:
        if not isinstance(given, dict) or set(given) - set(DEFAULT_RATES):
            raise f.err("compress_rates", "field 'compress_rates' must be an object with keys "
                                          "'compressed_sparse_attention' and 'heavily_compressed_attention'")
        rates.update(given)
    for legacy, key in (("compress_rate_csa", "compressed_sparse_attention"),
                        ("compress_rate_hca", "heavily_compressed_attention")):
        if f.data.get(legacy) is not None:
            rates[key] = f.data[legacy]
    for key, val in rates.items():
        if not (isinstance(val, int) and not isinstance(val, bool) and 1 <= val <= 1 << 20):
            raise f.err("compress_rates", f"compress_rates[{key!r}] must be a positive integer, got {f.shown(val)}")
    return rates


def _rate(f, rates, layer_type: str, attention) -> int:
    """The compression rate of ``layer_type`` (0 when no layer has it); a layer of that type without its rate is refused
    (DeepseekV4Config takes a given compress_rates as it is, and its compressor then finds none)."""
    if layer_type not in rates:
        if ATTENTION_TYPES[layer_type] in attention:
            raise f.err("compress_rates", f"field 'compress_rates' has no rate for {layer_type!r}, which a layer uses")
        return DEFAULT_RATES[layer_type]  # unused: no layer of the type
    return rates[layer_type]


def _layer_types(f, layers: int) -> Tuple[str, ...]:
    given, legacy = f.data.get("layer_types"), f.data.get("compress_ratios")
    if given is None and legacy is not None:
        if not isinstance(legacy, list) or any(not isinstance(x, int) or isinstance(x, bool) or x not in _RATIO_TYPES
                                               for x in legacy):
            raise f.err("compress_ratios", "field 'compress_ratios' must list 0, 4 or 128 per layer")
        given = [_RATIO_TYPES[x] for x in legacy]
    if given is None:  # DeepseekV4Config.__post_init__: two HCA layers, then CSA and HCA alternating
        given = ["heavily_compressed_attention"] * min(layers, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
            for i in range(max(layers - 2, 0))]
    if not isinstance(given, list) or any(not isinstance(x, str) or x not in ATTENTION_TYPES for x in given):
        raise f.err("layer_types", "field 'layer_types' must list " + ", ".join(ATTENTION_TYPES) + " per layer")
    if len(given) < layers:
        raise f.err("layer_types", f"field 'layer_types' has {len(given)} entries for {layers} layers")
    return tuple(ATTENTION_TYPES[x] for x in given[:layers])  # transformers keeps the first num_hidden_layers


def _mlp_types(f, layers: int) -> Tuple[bool, ...]:
    given = f.data.get("mlp_layer_types")
    if given is None:
        n_hash = f.int("num_hash_layers", "hash-routed layers", minimum=0, default=DEFAULT_HASH_LAYERS, required=False)
        given = ["hash_moe"] * min(layers, n_hash) + ["moe"] * max(0, layers - n_hash)
    if not isinstance(given, list) or any(not isinstance(x, str) or x not in MLP_TYPES for x in given):
        raise f.err("mlp_layer_types", "field 'mlp_layer_types' must list 'hash_moe' or 'moe' per layer")
    if len(given) < layers:
        raise f.err("mlp_layer_types", f"field 'mlp_layer_types' has {len(given)} entries for {layers} layers")
    return tuple(x == "hash_moe" for x in given[:layers])


def _rotary(f, head_dim: int) -> int:
    """The rotary part of a head: head_dim x partial_rotary_factor (legacy qk_rope_head_dim / head_dim; default
    64/512), truncated to an integer as DeepseekV4Config does."""
    prf, legacy = f.data.get("partial_rotary_factor"), f.data.get("qk_rope_head_dim")
    if prf is None and legacy is not None:  # folded as DeepseekV4Config does: int(head_dim * (r / head_dim))
        return int(head_dim * (f.int("qk_rope_head_dim", "rotary dimensions d_h^R") / head_dim))
    if prf is None:
        return int(head_dim * DEFAULT_ROTARY_FACTOR)
    if not isinstance(prf, (int, float)) or isinstance(prf, bool) or not 0 < prf <= 1:
        raise f.err("partial_rotary_factor", f"field 'partial_rotary_factor' must be a number in (0, 1], got "
                                             f"{f.shown(prf)}")
    return int(head_dim * prf)


def from_fields(f, name: Optional[str] = None, source: Optional[str] = None) -> ModelSpec:
    """The :class:`ModelSpec` of a parsed config.json, every field it uses checked through ``f``."""
    data, mt = f.data, f.data["model_type"]
    dims = {attr: f.int(field_, meaning, default=FAMILY.dimension_defaults[attr], required=False)
            for field_, attr, meaning in FAMILY.dimensions}
    if "intermediate_size" in data:  # DeepseekV4Config.attribute_map: it sets moe_intermediate_size, given or not
        dims["h_E"] = f.int("intermediate_size", "expert intermediate size h_E (DeepseekV4Config's alias of "
                                                 "moe_intermediate_size)")
    dropout = data.get("attention_dropout", 0.0)
    if dropout not in (0, None):
        raise f.err("attention_dropout", f"attention_dropout={f.shown(dropout)}: transformers' DeepSeek-V4 eager "
                                         "attention then keeps a dropout mask and output per score, not modelled "
                                         "(write 0 or leave it out)")
    for field_, want, why in (("num_key_value_heads", 1, "one key-value head shared by every query head"),
                              ("n_shared_experts", 1, "one shared expert of moe_intermediate_size")):
        val = data.get(field_, want)
        if not isinstance(val, int) or isinstance(val, bool) or val != want:
            raise f.err(field_, f"field {field_!r} = {f.shown(val)}: transformers' DeepSeek-V4 code builds {why}; "
                                f"write {want} or leave it out")
    if (dims["n_h"] * dims["d_a"]) % dims["g_O"]:
        raise f.err("o_groups", f"o_groups={dims['g_O']} must divide num_attention_heads x head_dim = "
                                f"{dims['n_h'] * dims['d_a']} (the grouped output projection)")
    if dims["N_r"] > dims["N"]:
        raise f.err("num_experts_per_tok", f"num_experts_per_tok={dims['N_r']} exceeds n_routed_experts={dims['N']}")
    for flag in ("attention_bias", "mlp_bias"):
        if data.get(flag, False) not in (False, None):
            raise f.err(flag, f"field {flag!r} = {f.shown(data[flag])}: projection biases are not covered "
                              f"(DeepSeek-V4 has none)")
    scoring = f.choice("scoring_func", SCORING_FUNCS, "sqrtsoftplus")
    rates = _rates(f)
    attention = _layer_types(f, dims["l"])
    d_hr = _rotary(f, dims["d_a"])
    if not 1 <= d_hr <= dims["d_a"] or d_hr % 2 or d_hr > dims["d_I"]:
        raise f.err("partial_rotary_factor", f"the rotary part of a head ({d_hr}) must be even, at least 2 and at "
                                             f"most head_dim and index_head_dim")
    mtp = f.int("num_nextn_predict_layers", "MTP modules D", minimum=0, default=1, required=False)
    return ModelSpec(name=name or shape_name(mt, dims), d_hr=d_hr,
                     m_C=_rate(f, rates, "compressed_sparse_attention", attention),
                     m_H=_rate(f, rates, "heavily_compressed_attention", attention), attention=attention,
                     hashed=_mlp_types(f, dims["l"]), tie_word_embeddings=f.bool("tie_word_embeddings"),
                     mtp_layers=mtp, scoring_func=scoring, source=str(f.path) if source is None else source,
                     model_type=mt, **dims)


def fields_of(spec: ModelSpec) -> Dict:
    """The config.json fields of ``spec`` (what :func:`from_fields` reads back)."""
    inverse = {v: k for k, v in ATTENTION_TYPES.items()}
    data = {"model_type": spec.model_type, **{field_: getattr(spec, attr) for field_, attr, _ in FAMILY.dimensions}}
    data.update(layer_types=[inverse[a] for a in spec.attention],
                mlp_layer_types=["hash_moe" if x else "moe" for x in spec.hashed],
                compress_rates={"compressed_sparse_attention": spec.m_C, "heavily_compressed_attention": spec.m_H},
                qk_rope_head_dim=spec.d_hr, tie_word_embeddings=spec.tie_word_embeddings,
                num_nextn_predict_layers=spec.mtp_layers, scoring_func=spec.scoring_func)
    return data
