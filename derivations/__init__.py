"""The model: the paper's analysis and what real training frameworks add (see README, "Layout").

``derivations.build(model)`` (the frozen term registry of a model's structure),
``derivations.variant(model, training)`` and ``derivations.configured(model, training)`` live in
:mod:`derivations.terms`; they are imported on first use, since the terms need sympy and the
numbers do not (:mod:`derivations.evaluate` reads the generated evaluators): importing a
configuration module (``from derivations import config``) stays free of sympy (measured: sympy's
import is most of a command's start-up).
"""
_TERMS = ("build", "variant", "configured", "Variant", "_build", "_make", "_variant")


def __getattr__(name):
    if name in _TERMS:
        # lazy: modules this module's importers do not need (estimate loads only what it runs)
        from . import terms
        return getattr(terms, name)
    raise AttributeError(f"module 'derivations' has no attribute {name!r}")
