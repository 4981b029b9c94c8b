"""The DeepSeek-V4 family (transformers 5.24 models/deepseek_v4, DeepseekV4Config), declared in family.toml: CSA/HCA
attention, a grouped low-rank output projection, hyper-connections and DeepSeekMoE with hash-routed first layers."""
from derivations.families import MOE_DIVIDES, Family


class DeepSeekV4(Family):
    """DeepSeek-V4 (transformers 5.24 models/deepseek_v4; hooks: the modules of this folder)."""

    divides = MOE_DIVIDES


FAMILY = DeepSeekV4()
