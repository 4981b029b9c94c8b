"""The tensor lists of a model's kinds of sublayer (Sec. 5), as its family declares them (DeepSeek's:
derivations/families/deepseek/activations.py; the shared blocks: derivations/tensors.py), and the
paper's views of them (``mla_tensors``, ``moe_tensors``)."""
from __future__ import annotations

from derivations.activations.views import PAPER, View, apply
from derivations.families.deepseek.activations import (KEPT_FOR, SPECS, hf_router_parts,  # noqa: F401
                                                        mcore_router_parts, mla_specs, moe_specs, mtp_specs)
from derivations.tensors import dense_specs, head_specs, norm_parts  # noqa: F401


def mla_tensors(q_lora: bool = True, view: View = PAPER):
    """Tensors one MLA layer keeps for backward, in the paper's order (``view``: see View)."""
    return apply(view, mla_specs(q_lora))


def moe_tensors(view: View = PAPER):
    """Tensors one MoE sublayer keeps for backward, in the paper's order (``view``: see View)."""
    return apply(view, moe_specs())
