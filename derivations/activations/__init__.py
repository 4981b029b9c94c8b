"""Sec. 5: the activations kept for backward (Tables 9-10): :mod:`.view` (which tensors, no sympy), :mod:`.views`
(retyping, rescaling), :mod:`.naming` (ids), :mod:`.kinds` (terms); imported on first use."""
from importlib import import_module
_FROM = {
    "view": ("View", "PAPER", "PRESET_CONVENTIONS", "CHECKPOINT_TAGS", "EXISTS", "MLA", "MOE", "EXT", "FLASH"),
    "views": ("apply", "flatten", "Group", "RULES"),
    "kinds": ("view_terms", "kind_parts", "reduced", "named", "REGISTERED", "KEPT_FOR", "SPECS", "dense_specs",
              "head_specs", "mla_specs", "moe_specs"),
}


def __getattr__(name):
    for module, names in _FROM.items():
        if name in names:
            return getattr(import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
