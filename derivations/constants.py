"""The paper's values of the symbols a configuration may leave unset, by name (Table 7's bytes, Sec. 5.1's mask byte, F
= 1, the FP8 / E5M6 bytes) and the tensor lists' provenance labels."""
from __future__ import annotations

from fractions import Fraction
from typing import Dict

#: Bytes per element of the paper's Table 7 (and the 1-byte dropout mask of Sec. 5.1).
PAPER_BYTES: Dict[str, int] = {"B_w": 2, "B_g": 4, "B_m": 4, "B_1": 2, "B_2": 2, "B_a": 2, "B_k": 1}
#: Balanced routing (F = 1) and the bytes of the FP8 / E5M6 cached activations (used only by ``.fp8`` terms).
EXTENSION_DEFAULTS: Dict[str, object] = {"F": 1, "B_f8": 1, "B_o": Fraction(3, 2)}

#: Provenance labels of the tensor lists (derivations/tensors.py, a family's activations module): the
#: paper's MLA and MoE lists (Sec. 5.1 M_1^A, Sec. 5.2 M_1^E), and tensors the paper does not list.
MLA = "Sec. 5.1, M_1^A"
MOE = "Sec. 5.2, M_1^E"
EXT = "extension (not in the paper)"
FLASH = "extension: fused (flash) attention"
