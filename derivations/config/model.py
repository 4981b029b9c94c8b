"""The model of a configuration: the DeepSeek family's spec (derivations/families/deepseek/config.py)."""
from derivations.families.deepseek.config import ModelSpec

__all__ = ["ModelSpec"]
