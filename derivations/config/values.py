"""Substitutions by symbol name, without sympy, what the generated evaluators read (:func:`named`), with the
paper's Table 7 bytes and the extension symbols' values that reproduce the paper."""
from __future__ import annotations

from typing import Dict

from derivations.constants import EXTENSION_DEFAULTS, PAPER_BYTES  # noqa: F401  (re-exported)


def named(model, layout=None, training=None, composition=None) -> Dict[str, object]:
    """{symbol name: exact value} of a configuration: the model's, the layout's, the training's (or the paper's
    bytes) and the stage composition's."""
    out = dict(model.named())
    if layout is not None:
        out.update(layout.named())
    if training is not None:
        out.update(training.named())
        out["z"] = training.zero
    else:
        out.update(PAPER_BYTES)
        out.update(EXTENSION_DEFAULTS)
    if composition is not None:
        out.update(composition.named())
    return out


def symbol_keyed(values: Dict[str, object]) -> Dict:
    """``values`` keyed by the registry's sympy symbols (imports sympy: the symbolic side only)."""
    # lazy: modules this module's importers do not need (estimate loads only what it runs)
    from derivations import notation as nt
    return {nt.SYMBOLS[k]: v for k, v in values.items()}

