"""Hugging Face ``config.json`` of the DeepseekV2/DeepseekV3 architecture -> :class:`ModelSpec`.

The file is read as JSON data only: nothing is imported, executed or downloaded
(``trust_remote_code`` never enters).  Fields map onto the paper's notation (Table 1;
the released configs in ``derivations/models/``):

  hidden_size h, intermediate_size h_F, moe_intermediate_size h_E, num_hidden_layers l,
  num_attention_heads n_h, q_lora_rank d_c' (null: no query compression, one W^Q of
  n_h (d_h + d_h^R) x h and no query norm), kv_lora_rank d_c, qk_nope_head_dim d_h,
  qk_rope_head_dim d_h^R, v_head_dim d_v, n_routed_experts N, n_shared_experts N_s,
  num_experts_per_tok N_r, vocab_size v, num_nextn_predict_layers D (MTP modules),
  first_k_dense_replace and moe_layer_freq (which layers are MoE), topk_method (noaux_tc
  keeps a routing bias of N per MoE layer), tie_word_embeddings,
  quantization_config.weight_block_size (FP8 block scales; storage only).

Any problem raises :class:`~symbolic.errors.ConfigError` whose message names the file and
the field; the CLI prints it on one line and exits 2.

:func:`checkpoint_tensors` lists the tensors of the released checkpoint by their Hugging
Face names and shapes: an inventory independent of the symbolic terms (the tests check
that both count the same weights) that also gives what the model page counts: the MTP
module's own copies of the embedding and head and the FP8 scale tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from symbolic import jsonfile
from symbolic.errors import ConfigError

from derivations.config.limits import CONFIG_BYTES, CONFIG_DEPTH, CONFIG_DIGITS, FIELDS
from derivations.config.model import ModelSpec
from derivations.families.deepseek import FAMILY as DEEPSEEK
import hashlib

#: The DeepSeek family's mapping (derivations/families/deepseek/__init__.py): model_type values,
#: topk_method values, and config field -> (ModelSpec attribute, meaning) of its dimensions.
MODEL_TYPES, TOPK_METHODS, _DIMENSIONS = DEEPSEEK.model_types, DEEPSEEK.topk_methods, DEEPSEEK.dimensions
MAX_BYTES = CONFIG_BYTES  # a config.json is a few KiB; refuse to read anything absurd


def _err(path: str, field: str, message: str) -> ConfigError:
    return ConfigError(f"hf-config.{field}", f"{path}: {message}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


_type_name, _shown = jsonfile.type_name, jsonfile.shown


def _int(data: Mapping, path: str, field: str, meaning: str, minimum: int = 1, default=None, required=True):
    if field not in data:
        if required:
            raise _err(path, field, f"required field {field!r} ({meaning}) is missing")
        return default
    x = data[field]
    if not _is_int(x):
        raise _err(path, field, f"field {field!r} ({meaning}) must be an integer, got {_type_name(x)} {_shown(x)}")
    if x < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise _err(path, field, f"field {field!r} ({meaning}) must be {kind}, got {_shown(x)}")
    lim = FIELDS.get(field)
    if lim is not None and x > lim.high:
        raise _err(path, field, f"field {field!r} ({meaning}) must be at most {lim.domain.split('..')[1]} "
                                f"({lim.why}), got {_shown(x)}")
    return x


#: How much a config.json may hold (derivations/config/limits.py), for the bounded reader.
BOUNDS = jsonfile.Bounds(CONFIG_BYTES, CONFIG_DEPTH, CONFIG_DIGITS)


def _read_bounded(path: str) -> bytes:
    """At most CONFIG_BYTES bytes of the regular file ``path`` (symbolic/jsonfile.py: read_bounded)."""
    return jsonfile.read_bounded(path, BOUNDS, _err)


def read_json(path: str) -> Dict:
    """The parsed JSON object of ``path`` (a config.json, or a directory holding one), read as bounded
    data (symbolic/jsonfile.py: at most CONFIG_BYTES bytes, nesting at most CONFIG_DEPTH, numbers of at
    most CONFIG_DIGITS digits, no field twice); every error names the file and the byte offset or field."""
    return _parse_json(*_read_raw(path))


def _read_raw(path) -> Tuple[bytes, str]:
    return jsonfile.read_raw(path, BOUNDS, _err)


def _parse_json(raw: bytes, path: str) -> Dict:
    return jsonfile.parse(raw, path, BOUNDS, _err)


def shape_name(model_type: str, dims: Mapping) -> str:
    """The name of a model read from a file, from what it is (never from the file's name, so the
    same content under two names gives the same output): ``deepseek_v3 (h 7168, 61 layers, 256
    experts)``.  A file equal to a preset is called by the preset's name (:func:`derivations.presets.load_model`)."""
    return f"{model_type} (h {dims['h']}, {dims['l']} layers, {dims['N']} experts)"


def from_dict(data: Mapping, path: str = "<config>", name: Optional[str] = None,
              source: Optional[str] = None) -> ModelSpec:
    """Map a parsed config.json onto a :class:`ModelSpec`, validating every field it uses.

    ``source`` (default ``path``) records where the model came from (``"preset"`` for the
    presets of :mod:`derivations.presets`)."""
    mt = data.get("model_type")
    if mt is None:
        raise _err(path, "model_type", f"required field 'model_type' is missing (memsym covers "
                                       f"{', '.join(MODEL_TYPES)})")
    if mt not in MODEL_TYPES:
        raise _err(path, "model_type", f"model_type {_shown(mt)} is not an architecture memsym covers "
                                       f"(MLA + MoE: {', '.join(MODEL_TYPES)})")
    dims = {attr: _int(data, path, field, meaning) for field, attr, meaning in _DIMENSIONS}

    if "q_lora_rank" not in data:
        raise _err(path, "q_lora_rank", "required field 'q_lora_rank' (query compression rank d_c') is missing; "
                                        "write null for a model without query compression")
    d_cq = None if data["q_lora_rank"] is None else _int(data, path, "q_lora_rank", "query compression rank d_c'")

    n_shared = data.get("n_shared_experts")  # HF: null or absent = no shared experts
    N_s = 0 if n_shared is None else _int(data, path, "n_shared_experts", "shared experts N_s", minimum=0)
    first_k = _int(data, path, "first_k_dense_replace", "leading dense layers", minimum=0)
    freq = _int(data, path, "moe_layer_freq", "MoE layer frequency", default=1, required=False)
    mtp = _int(data, path, "num_nextn_predict_layers", "MTP modules D", minimum=0, default=0, required=False)

    default_topk = "noaux_tc" if mt in ("deepseek_v3", "kimi_k2") else "greedy"
    topk = data.get("topk_method", default_topk)
    if not isinstance(topk, str) or topk not in TOPK_METHODS:
        raise _err(path, "topk_method", f"field 'topk_method' must be one of {', '.join(TOPK_METHODS)}, "
                                        f"got {_type_name(topk)} {_shown(topk)}")
    n_group = _int(data, path, "n_group", "expert groups n_g", default=1, required=False)
    topk_group = _int(data, path, "topk_group", "expert groups kept k_g", default=1, required=False)
    tied = data.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise _err(path, "tie_word_embeddings", f"field 'tie_word_embeddings' must be true or false, "
                                                f"got {_type_name(tied)} {_shown(tied)}")
    for flag in ("attention_bias", "mlp_bias"):
        val = data.get(flag, False)
        if val is not False and val is not None:
            raise _err(path, flag, f"field {flag!r} = {_shown(val)}: projection biases are not covered "
                                   f"(DeepSeek checkpoints have none)")

    if dims["N_r"] > dims["N"]:
        raise _err(path, "num_experts_per_tok", f"num_experts_per_tok={dims['N_r']} exceeds "
                                                f"n_routed_experts={dims['N']}")
    if first_k > dims["l"]:
        raise _err(path, "first_k_dense_replace", f"first_k_dense_replace={first_k} exceeds "
                                                  f"num_hidden_layers={dims['l']}")
    return ModelSpec(name=name or shape_name(mt, dims), d_cq=d_cq, N_s=N_s, first_k_dense=first_k,
                     moe_layer_freq=freq, topk_method=topk, tie_word_embeddings=tied, mtp_layers=mtp,
                     fp8_block=_fp8_block(data, path), source=str(path) if source is None else source,
                     n_group=n_group, topk_group=topk_group, **dims)


def _fp8_block(data: Mapping, path: str) -> Optional[Tuple[int, int]]:
    q = data.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict):
        raise _err(path, "quantization_config", f"field 'quantization_config' must be an object, got {_type_name(q)}")
    if q.get("quant_method") != "fp8" or q.get("weight_block_size") is None:
        return None
    blk = q["weight_block_size"]
    if not (isinstance(blk, list) and len(blk) == 2 and all(_is_int(x) and 0 < x <= FIELDS['weight_block_size'].high for x in blk)):
        raise _err(path, "quantization_config", f"quantization_config.weight_block_size must be two positive "
                                                f"integers (at most {FIELDS['weight_block_size'].high}), got {_shown(blk)}")
    return (blk[0], blk[1])


@dataclass(frozen=True)
class ConfigFile:
    """A config.json read once: the path as given, the bytes read (bounded: :func:`_read_bounded`),
    the parsed object (:func:`read_json`) and the :class:`ModelSpec` built from it (:func:`from_dict`)."""

    path: str
    raw: bytes
    data: Mapping
    model: ModelSpec

    @property
    def sha256(self) -> str:
        """SHA-256 of the bytes read (what a trace record keeps: memsym/trace/records.py)."""
        return hashlib.sha256(self.raw).hexdigest()


def read_config(path: str, name: Optional[str] = None, source: Optional[str] = None) -> ConfigFile:
    """A Hugging Face config.json (or a directory holding one) read and validated: what
    :func:`from_hf_config` builds, with the bytes and the parsed object it was built from."""
    raw, file = _read_raw(path)
    data = _parse_json(raw, file)
    return ConfigFile(str(path), raw, data, from_dict(data, path, name, source))


def from_hf_config(path: str) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face config.json (or a directory holding one)."""
    return read_config(path).model


# ---------------------------------------------------------------------------------
# The released checkpoint's tensors (Hugging Face names), independent of the terms
# ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tensor:
    """One tensor (or ``count`` alike, e.g. the N routed experts) of a checkpoint.

    kind: 'linear' (a projection inside a transformer block: stored in FP8 with block
    scales in a block-quantised release), 'embedding', 'head', 'norm', 'router', 'bias'
    (noaux_tc score correction, FP32) or 'proj' (the MTP eh_proj, kept in BF16).
    part: 'main', 'mtp' (unique MTP weights) or 'mtp_copy' (the MTP module's own copies of
    the shared embedding and head, stored again in the released files).
    """

    name: str
    shape: Tuple[int, ...]
    kind: str
    part: str = "main"
    count: int = 1

    @property
    def numel(self) -> int:
        n = self.count
        for d in self.shape:
            n *= d
        return n


def _block(m: ModelSpec, i: int, moe: bool, part: str) -> Iterable[Tensor]:
    p = f"model.layers.{i}."
    lin = lambda name, rows, cols, count=1: Tensor(p + name, (rows, cols), "linear", part, count)
    norm = lambda name, n: Tensor(p + name, (n,), "norm", part)
    yield norm("input_layernorm.weight", m.h)
    if m.d_cq is None:
        yield lin("self_attn.q_proj.weight", m.n_h * (m.d_h + m.d_hr), m.h)
    else:
        yield lin("self_attn.q_a_proj.weight", m.d_cq, m.h)
        yield norm("self_attn.q_a_layernorm.weight", m.d_cq)
        yield lin("self_attn.q_b_proj.weight", m.n_h * (m.d_h + m.d_hr), m.d_cq)
    yield lin("self_attn.kv_a_proj_with_mqa.weight", m.d_c + m.d_hr, m.h)
    yield norm("self_attn.kv_a_layernorm.weight", m.d_c)
    yield lin("self_attn.kv_b_proj.weight", m.n_h * (m.d_h + m.d_v), m.d_c)
    yield lin("self_attn.o_proj.weight", m.h, m.n_h * m.d_v)
    yield norm("post_attention_layernorm.weight", m.h)
    if not moe:
        for name, rows, cols in (("gate_proj", m.h_F, m.h), ("up_proj", m.h_F, m.h), ("down_proj", m.h, m.h_F)):
            yield lin(f"mlp.{name}.weight", rows, cols)
        return
    yield Tensor(p + "mlp.gate.weight", (m.N, m.h), "router", part)
    if m.routing_bias:
        yield Tensor(p + "mlp.gate.e_score_correction_bias", (m.N,), "bias", part)
    for name, rows, cols in (("gate_proj", m.h_E, m.h), ("up_proj", m.h_E, m.h), ("down_proj", m.h, m.h_E)):
        yield lin(f"mlp.experts.{{e}}.{name}.weight", rows, cols, m.N)
    if m.N_s:  # HF: the shared experts are one MLP of intermediate size N_s h_E
        inter = m.N_s * m.h_E
        for name, rows, cols in (("gate_proj", inter, m.h), ("up_proj", inter, m.h), ("down_proj", m.h, inter)):
            yield lin(f"mlp.shared_experts.{name}.weight", rows, cols)


def checkpoint_tensors(m: ModelSpec, mtp: bool = True) -> List[Tensor]:
    """Every tensor of the checkpoint: main model, then (``mtp``) the D MTP modules
    ``model.layers.{l + k}`` with their own copies of the embedding and head."""
    out = [Tensor("model.embed_tokens.weight", (m.v, m.h), "embedding")]
    for i in range(m.l):
        out.extend(_block(m, i, m.is_moe_layer(i), "main"))
    out.append(Tensor("model.norm.weight", (m.h,), "norm"))
    if not m.tie_word_embeddings:
        out.append(Tensor("lm_head.weight", (m.v, m.h), "head"))
    if mtp:
        for k in range(m.mtp_layers):
            p = f"model.layers.{m.l + k}."
            out.append(Tensor(p + "embed_tokens.weight", (m.v, m.h), "embedding", "mtp_copy"))
            out.append(Tensor(p + "enorm.weight", (m.h,), "norm", "mtp"))
            out.append(Tensor(p + "hnorm.weight", (m.h,), "norm", "mtp"))
            out.append(Tensor(p + "eh_proj.weight", (m.h, 2 * m.h), "proj", "mtp"))
            out.extend(_block(m, m.l + k, True, "mtp"))
            out.append(Tensor(p + "shared_head.norm.weight", (m.h,), "norm", "mtp"))
            out.append(Tensor(p + "shared_head.head.weight", (m.v, m.h), "head", "mtp_copy"))
    return out


def fp8_scale_numel(t: Tensor, block: Tuple[int, int]) -> int:
    """Elements of the FP32 ``weight_scale_inv`` of an FP8 linear: one per block of the weight."""
    rows, cols = t.shape
    return t.count * (-(-rows // block[0])) * (-(-cols // block[1]))


def checkpoint_files(m: ModelSpec) -> Dict:
    """Tensor elements of the released files (what a model page sums up).

    The files hold the main model, the D MTP modules with their own copies of the
    embedding and head, and, for an FP8 block-quantised release (``fp8_block``), one FP32
    ``weight_scale_inv`` per block of each block projection.  ``by_dtype``: without
    ``fp8_block`` every tensor is BF16; with it (DeepSeek-v3's release) the block
    projections are F8_E4M3, their scales and the routing bias F32 and the rest
    (embedding, head, norms, routers, eh_proj) BF16.
    """
    parts = {"main": 0, "mtp": 0, "mtp_copy": 0}
    by = {"BF16": 0, "F8_E4M3": 0, "F32": 0}
    scales = 0
    for t in checkpoint_tensors(m, mtp=True):
        parts[t.part] += t.numel
        if m.fp8_block is None:
            by["BF16"] += t.numel
        elif t.kind == "linear":
            by["F8_E4M3"] += t.numel
            s = fp8_scale_numel(t, m.fp8_block)
            by["F32"] += s
            scales += s
        elif t.kind == "bias":
            by["F32"] += t.numel
        else:
            by["BF16"] += t.numel
    by = {k: v for k, v in by.items() if v}
    total = sum(by.values())
    assert total == sum(parts.values()) + scales
    return {"main": parts["main"], "mtp": parts["mtp"], "mtp_embedding_head_copies": parts["mtp_copy"],
            "fp8_scales": scales, "total": total, "by_dtype": by}
