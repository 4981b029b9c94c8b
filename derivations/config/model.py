"""The model of a configuration: a family's model spec (derivations/families/<family>/config.py).

:class:`ModelSpec` is the DeepSeek family's (the paper's Table 1 notation:
derivations/families/deepseek/config.py); a Hugging Face config.json becomes the spec of the family
that reads its ``model_type`` through :mod:`derivations.config.hfconfig`; the presets are such files
(:mod:`derivations.config.presets`).
"""
from derivations.families.deepseek.config import ModelSpec

__all__ = ["ModelSpec"]
