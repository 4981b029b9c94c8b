"""A Hugging Face ``config.json`` read as bounded data and handed to the family that reads its ``model_type``.

The file is read as JSON data only: nothing is imported, executed or downloaded
(``trust_remote_code`` never enters): at most CONFIG_BYTES bytes, bounded nesting and number
digits (symbolic/jsonfile.py).  :func:`from_dict` finds the family (derivations/families/) whose
``model_types`` hold the file's ``model_type`` and calls its ``config.from_fields`` with
:class:`Fields`, the checks of one field (types, ranges, the limits of derivations/config/limits.py);
the DeepSeek family's mapping onto the paper's notation (Table 1) is
derivations/families/deepseek/config.py.

Any problem raises :class:`~symbolic.errors.ConfigError` whose message names the file and
the field; the CLI prints it on one line and exits 2.

:func:`checkpoint_tensors` lists the tensors of a released DeepSeek checkpoint by their Hugging
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
from derivations import families
import hashlib

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


class Fields:
    """The fields of one parsed config.json, each checked as it is read (what a family's reader is handed:
    derivations/families/<family>/config.py ``from_fields``); every error names the file and the field."""

    type_name, shown = staticmethod(_type_name), staticmethod(_shown)

    def __init__(self, data: Mapping, path: str):
        self.data, self.path = data, path

    def err(self, field: str, message: str) -> ConfigError:
        return _err(self.path, field, message)

    def int(self, field: str, meaning: str, minimum: int = 1, default=None, required=True):
        """The integer ``field`` (at least ``minimum``, at most its limit in derivations/config/limits.py)."""
        return _int(self.data, self.path, field, meaning, minimum, default, required)

    def fp8_block(self) -> Optional[Tuple[int, int]]:
        """quantization_config.weight_block_size of an FP8 block-quantised release, or None."""
        return _fp8_block(self.data, self.path)


def _covered() -> str:
    return "; ".join(f"{f.short}: {', '.join(f.model_types)}" for f in families.all())


def from_dict(data: Mapping, path: str = "<config>", name: Optional[str] = None,
              source: Optional[str] = None):
    """Map a parsed config.json onto the model of the family that reads its ``model_type``
    (derivations/families/<family>/config.py ``from_fields``), validating every field it uses.

    ``source`` (default ``path``) records where the model came from (``"preset"`` for the
    presets of :mod:`derivations.config.presets`)."""
    mt = data.get("model_type")
    if mt is None:
        raise _err(path, "model_type", f"required field 'model_type' is missing (memsym covers "
                                       f"{', '.join(families.model_types())})")
    family = families.for_model_type(mt) if isinstance(mt, str) else None
    if family is None:
        raise _err(path, "model_type", f"model_type {_shown(mt)} is not an architecture memsym covers "
                                       f"({_covered()})")
    return family.module("config").from_fields(Fields(data, path), name, source)


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
