"""The model: :class:`ModelSpec`, a DeepSeek-family model in the paper's notation.

The dimensions of Table 1 plus the structural facts that decide which terms exist (query
compression or not, routing bias, tied embeddings, MTP).  A Hugging Face config.json
becomes a ModelSpec through :mod:`derivations.hfconfig`; the presets are such files
(:mod:`derivations.presets`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from derivations.config.values import symbol_keyed


@dataclass(frozen=True)
class ModelSpec:
    """A DeepSeek-family model in the paper's notation (Table 1; the released configs in ``derivations/models/``).

    ``d_cq`` is None for models without query compression (DeepSeek-v2-Lite): queries
    are then one matrix W^Q of shape n_h (d_h + d_hr) x h and there is no query norm.
    ``mtp_layers`` is D, the multi-token-prediction modules of the checkpoint (HF
    num_nextn_predict_layers; not counted by the paper).  ``fp8_block`` is the block of
    one FP32 scale in an FP8 block-quantised release (HF quantization_config
    weight_block_size, (128, 128) for DeepSeek-v3): storage only, scales are not weights.
    A Hugging Face config.json becomes a ModelSpec through :mod:`derivations.hfconfig`.
    """

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
    # group-limited routing (HF n_group, topk_group): only transformers' router tensors depend on them, so
    # they take no part in a model's identity (the dimensions the paper's Table 1 names)
    n_group: int = field(default=1, compare=False)
    topk_group: int = field(default=1, compare=False)

    # -- structure -----------------------------------------------------------------
    @property
    def q_lora(self) -> bool:
        return self.d_cq is not None

    @property
    def routing_bias(self) -> bool:
        """noaux_tc routing keeps a per-expert score-correction bias (N per MoE layer)."""
        return self.topk_method == "noaux_tc"

    @property
    def structure(self) -> Tuple:
        """What decides the *shape* of the terms (the dimensions stay symbols)."""
        return (self.q_lora, self.routing_bias, self.tie_word_embeddings)

    def is_moe_layer(self, i: int) -> bool:
        """HF DeepseekV2/V3 rule: MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0."""
        return i >= self.first_k_dense and i % self.moe_layer_freq == 0

    def layer_kinds(self) -> List[str]:
        """'moe' or 'dense' for each layer (a new list; computed once per model: a stage split asks often)."""
        return list(_layer_kinds(self.l, self.first_k_dense, self.moe_layer_freq))

    def named(self) -> Dict[str, int]:
        """{symbol name: value} of the model's symbols (derivations/notation.py)."""
        out = {"h": self.h, "h_F": self.h_F, "h_E": self.h_E, "l": self.l, "n_h": self.n_h, "d_c": self.d_c,
               "d_h": self.d_h, "d_hr": self.d_hr, "d_v": self.d_v, "N": self.N, "N_s": self.N_s, "N_r": self.N_r,
               "v": self.v, "D": self.mtp_layers, "n_g": self.n_group, "k_g": self.topk_group}
        if self.d_cq is not None:
            out["d_cq"] = self.d_cq
        return out

    def values(self) -> Dict:
        """Substitution for the model's symbols."""
        return symbol_keyed(self.named())


@lru_cache(maxsize=64)
def _layer_kinds(layers: int, first_k_dense: int, freq: int) -> Tuple[str, ...]:
    return tuple("moe" if i >= first_k_dense and i % freq == 0 else "dense" for i in range(layers))
