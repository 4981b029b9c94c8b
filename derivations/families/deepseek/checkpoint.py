"""The tensors of a released DeepSeek checkpoint, by their Hugging Face names and shapes.

:func:`checkpoint_tensors` is an inventory independent of the symbolic terms (both count the same
weights) that also gives what the model page counts: the MTP
module's own copies of the embedding and head and the FP8 scale tensors (:func:`checkpoint_files`).
Names: transformers models/deepseek_v3/modeling_deepseek_v3.py and the released
model.safetensors.index.json.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Tuple

from derivations.families.deepseek.config import ModelSpec


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
