"""Transformer Engine's low-precision recipes as byte symbols (``--linear-recipe``; issue 28 item 3): what a quantized
tensor of te.Linear, LayerNormLinear or GroupedLinear costs per element, values plus scales (:data:`FORMATS`).  Read
from NVIDIA/TransformerEngine d0067d0d (2.20.0.dev0), transformer_engine/common/recipe/__init__.py and
transformer_engine/pytorch/tensor/*.py, and Megatron-LM d98e8a64 megatron/core/fp8_utils.py ``get_fp8_recipe``.

**Directions.**  A GEMM's forward reads a tensor row-wise, the weight gradient column-wise.  Float8 tensors
(delayed, tensorwise) on Hopper keep the column-wise copy as a transpose (float8_tensor.py: ``_data`` and
``_transpose``); the block recipes quantize each direction apart, each with its own scales.  So a weight kept for
forward and backward costs two directions (``Format.weight_bytes``), a saved input one (``Format.input_bytes``:
linear.py ``_linear_forward`` keeps only the column-wise data).  The per-tensor FP32 scales and the block formats'
padding of scale tensors (a few KiB per device) are not counted.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Dict

from symbolic.errors import ConfigError

TE = "Transformer Engine d0067d0d (2.20.0.dev0)"
RECIPE_SRC = TE + " transformer_engine/common/recipe/__init__.py"


@dataclass(frozen=True)
class Format:
    """One recipe's quantized tensors: ``values`` bytes per element; ``input_scale`` and ``weight_scale`` bytes of
    scale per element of a saved input and of a weight (one direction); ``per_tensor`` FP32 bytes per tensor (not
    counted); ``directions`` the copies a weight used forward and backward keeps on Hopper."""

    name: str
    te: str
    megatron: str
    values: Fraction
    input_scale: Fraction
    weight_scale: Fraction
    per_tensor: int
    directions: int
    source: str

    @property
    def input_bytes(self) -> Fraction:
        """Bytes per element of a linear layer's saved quantized input (one direction, with its scales)."""
        return self.values + self.input_scale

    @property
    def weight_bytes(self) -> Fraction:
        """Bytes per weight element of every copy TE keeps (both directions)."""
        return self.directions * (self.values + self.weight_scale)


_F32 = 4
FORMATS: Dict[str, Format] = {f.name: f for f in (
    Format("delayed", "DelayedScaling", "--fp8-recipe delayed", Fraction(1), Fraction(0), Fraction(0), _F32, 2,
           RECIPE_SRC + " DelayedScaling; tensor/float8_tensor.py Float8Quantizer (_data, _transpose, _scale_inv)"),
    Format("tensorwise", "Float8CurrentScaling", "--fp8-recipe tensorwise", Fraction(1), Fraction(0), Fraction(0),
           _F32, 2, RECIPE_SRC + " Float8CurrentScaling; tensor/float8_tensor.py Float8CurrentScalingQuantizer "
                                 "(_data, _transpose, one FP32 _scale_inv)"),
    Format("blockwise", "Float8BlockScaling", "--fp8-recipe blockwise", Fraction(1), Fraction(_F32, 128),
           Fraction(_F32, 128 * 128), 0, 2,
           RECIPE_SRC + " Float8BlockScaling (x_block_scaling_dim 1: 1x128, w_block_scaling_dim 2: 128x128, FP32 "
                        "scales); tensor/float8_blockwise_tensor.py"),
    Format("mxfp8", "MXFP8BlockScaling", "--fp8-recipe mxfp8", Fraction(1), Fraction(1, 32), Fraction(1, 32), 0, 2,
           RECIPE_SRC + " MXFP8BlockScaling (one E8M0 scale per 32 values); tensor/mxfp8_tensor.py"),
    Format("nvfp4", "NVFP4BlockScaling", "--fp4-format e2m1 --fp4-recipe nvfp4", Fraction(1, 2), Fraction(1, 16),
           Fraction(1, 16), _F32, 2,
           RECIPE_SRC + " NVFP4BlockScaling (E2M1 values, one E4M3 scale per 16 values, one FP32 per tensor); "
                        "tensor/nvfp4_tensor.py get_scale_shape"),
)}
RECIPES = tuple(FORMATS)

#: Megatron's --fp8-recipe values memsym models (fp8_utils.py get_fp8_recipe); 'custom' is not.
MEGATRON_FP8 = ("delayed", "tensorwise", "blockwise", "mxfp8")


def recipe(name: str) -> Format:
    """The Format of ``--linear-recipe name`` (ConfigError if none)."""
    if name not in FORMATS:
        raise ConfigError("linear-recipe",
                          f"--linear-recipe must be one of {', '.join(RECIPES)}, got {str(name)[:40]!r}")
    return FORMATS[name]
