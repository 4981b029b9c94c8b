"""The tensors of a released DeepSeek checkpoint by their Hugging Face names and shapes (transformers
models/deepseek_v3/modeling_deepseek_v3.py, the released model.safetensors.index.json): an inventory independent of
the symbolic terms, with what a model page also counts (the MTP modules' copies of the embedding and head, the FP8
scales)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Tuple

from derivations.families.deepseek.config import ModelSpec


@dataclass(frozen=True)
class Tensor:
    """One tensor (or ``count`` alike) of a checkpoint; kind 'linear' (FP8 with block scales in a block-quantised
    release), 'bias' (FP32) and 'proj' (BF16) among the rest; part 'main', 'mtp' or 'mtp_copy' (the embedding and
    head copies of the MTP modules)."""

    name: str
    shape: Tuple[int, ...]
    kind: str
    part: str = "main"
    count: int = 1

    @property
    def numel(self) -> int:
        return self.count * math.prod(self.shape)


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

    def mlp(prefix, inter, count=1):  # a SwiGLU MLP's gate, up and down projections
        for name, rows, cols in (("gate_proj", inter, m.h), ("up_proj", inter, m.h), ("down_proj", m.h, inter)):
            yield lin(f"{prefix}.{name}.weight", rows, cols, count)
    if not moe:
        yield from mlp("mlp", m.h_F)
        return
    yield Tensor(p + "mlp.gate.weight", (m.N, m.h), "router", part)
    if m.routing_bias:
        yield Tensor(p + "mlp.gate.e_score_correction_bias", (m.N,), "bias", part)
    yield from mlp("mlp.experts.{e}", m.h_E, m.N)
    if m.N_s:  # HF: the shared experts are one MLP of intermediate size N_s h_E
        yield from mlp("mlp.shared_experts", m.N_s * m.h_E)


def checkpoint_tensors(m: ModelSpec, mtp: bool = True) -> List[Tensor]:
    """Every tensor of the checkpoint: main model, then (``mtp``) the D MTP modules
    ``model.layers.{l + k}`` with their own copies of the embedding and head."""
    out = [Tensor("model.embed_tokens.weight", (m.v, m.h), "embedding")]
    for i, kind in enumerate(m.layer_kinds()):
        out.extend(_block(m, i, kind == "moe", "main"))
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
    """Tensor elements of the released files (what a model page sums up), with ``fp8_block`` one FP32
    ``weight_scale_inv`` per block of each linear; ``by_dtype`` under it: the linears F8_E4M3, scales and bias F32."""
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
