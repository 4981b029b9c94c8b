"""Sec. 5: the activations kept for backward (Tables 9-10) and their views.

* :mod:`~derivations.activations.view`: which tensors a training keeps (pure, no sympy);
* :mod:`~derivations.activations.inventory`: the tensor lists, one tagged Part per tensor;
* :mod:`~derivations.activations.views`: how a view retypes and rescales them, the parts it keeps;
* :mod:`~derivations.activations.naming`: the term ids of a view (from the generated tables);
* :mod:`~derivations.activations.kinds`: the terms of each view and kind (per layer, stage, peak).

Names are imported from those modules on first use (the terms need sympy, the view does not).
"""
from importlib import import_module
_FROM = {
    "view": ("View", "PAPER", "PRESET_CONVENTIONS", "CHECKPOINT_TAGS", "EXISTS", "MLA", "MOE", "EXT", "FLASH"),
    "views": ("apply", "flatten", "Group", "RULES"),
    "inventory": ("KEPT_FOR", "SPECS", "dense_specs", "head_specs", "mla_specs", "moe_specs"),
    "kinds": ("view_terms", "kind_parts", "reduced", "named", "REGISTERED"),
}


def __getattr__(name):
    for module, names in _FROM.items():
        if name in names:
            return getattr(import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
