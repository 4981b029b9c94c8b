"""Transformer Engine's low-precision recipes as byte symbols (``--linear-recipe``; issue 28 item 3): what a quantized
tensor of te.Linear, LayerNormLinear or GroupedLinear costs per element, values plus scales (:data:`FORMATS`).  Read
from NVIDIA/TransformerEngine d0067d0d (2.20.0.dev0), transformer_engine/common/recipe/__init__.py and
transformer_engine/pytorch/tensor/*.py, and Megatron-LM d98e8a64 megatron/core/fp8_utils.py ``get_fp8_recipe``.

A GEMM's forward reads a tensor row-wise, the weight gradient column-wise: Float8 tensors (delayed, tensorwise) on
Hopper keep the column-wise copy as a transpose (float8_tensor.py ``_data``, ``_transpose``), the block recipes quantize
each direction apart with its own scales.  A weight kept for forward and backward costs two directions
(``Format.weight_bytes``), a saved input one (``Format.input_bytes``: linear.py ``_linear_forward`` keeps the
column-wise data); per-tensor FP32 scales and the padding of scale tensors (a few KiB per device) are not counted."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Dict

from symbolic import tomlfile
from symbolic.errors import ConfigError

TE = "Transformer Engine d0067d0d (2.20.0.dev0)"
RECIPE_SRC = TE + " transformer_engine/common/recipe/__init__.py"


@dataclass(frozen=True)
class Format:
    """One recipe's quantized tensors (a table of quantization.toml, whose header says what each field is)."""

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


with tomlfile.package_data(Path(__file__).with_name("quantization.toml")) as _data:
    FORMATS: Dict[str, Format] = {
        name: Format(name, f["te"], f["megatron"], *(Fraction(f[k]) for k in ("values", "input_scale", "weight_scale")),
                     f["per_tensor"], f["directions"], f"{RECIPE_SRC} {f['source']}")
        for name, f in _data.items()}
RECIPES = tuple(FORMATS)

#: Megatron's --fp8-recipe values memsym models (fp8_utils.py get_fp8_recipe); 'custom' is not.
MEGATRON_FP8 = ("delayed", "tensorwise", "blockwise", "mxfp8")


def recipe(name: str) -> Format:
    """The Format of ``--linear-recipe name`` (ConfigError if none)."""
    if name not in FORMATS:
        raise ConfigError("linear-recipe",
                          f"--linear-recipe must be one of {', '.join(RECIPES)}, got {str(name)[:40]!r}")
    return FORMATS[name]
