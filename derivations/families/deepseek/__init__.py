"""The DeepSeek-V2/V3 family (the paper's models): MLA attention and DeepSeekMoE, declared in family.toml; parameters:
parameters.py (Table 2); tensors kept: activations.py (Sec. 5)."""
from derivations.families import MOE_DIVIDES, Divides, Family


class DeepSeek(Family):
    """DeepSeek-V2/V3 and the configs read as them (Table 1's notation; hooks: the modules of this folder)."""

    #: The paper's divisibility rules (Sec. 3), the dense FFN's split by TP last.
    divides = MOE_DIVIDES + (Divides("tp-divides-ffn", "h_F", "tp", "TP={TP} must divide h_F={h_F} (dense FFN)"),)


FAMILY = DeepSeek()
