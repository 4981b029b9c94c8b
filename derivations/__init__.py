"""The model: the paper's analysis and what real training frameworks add. ``build``, ``variant`` and ``configured``
(:mod:`derivations.terms`) are imported on first use: they need sympy, the numbers do not."""
_TERMS = ("build", "variant", "configured", "Variant", "_build", "_variant")


def __getattr__(name):
    if name in _TERMS:
        # lazy: modules this module's importers do not need (estimate loads only what it runs)
        from . import terms
        return getattr(terms, name)
    raise AttributeError(f"module 'derivations' has no attribute {name!r}")
