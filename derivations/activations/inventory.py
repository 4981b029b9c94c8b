"""The tensor lists of a model's kinds of sublayer (Sec. 5), as its family declares them (DeepSeek's:
derivations/families/deepseek/activations.py; the shared blocks: derivations/tensors.py)."""
from __future__ import annotations

from derivations.families.deepseek.activations import (KEPT_FOR, SPECS, hf_router_parts,  # noqa: F401
                                                        mcore_router_parts, mla_specs, moe_specs, mtp_specs)
from derivations.tensors import dense_specs, head_specs, norm_parts  # noqa: F401

