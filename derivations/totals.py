"""The per-device total of one pipeline stage, symbolic in everything (Sec. 4-6 assembled).

The memory of one device is the sum of four components (Table 8 + Table 10):

  weights, gradients, optimizer states   ``zero.<component>.<replicated|sharded>`` chosen by the ZeRO stage (Sec. 4)
  activations of one micro-batch          ``act.stage`` or ``act.stage.full`` by the recomputation policy (Sec. 5)

Every term is symbolic in the model dimensions, b, s, the parallel degrees, the bytes per
element and the stage composition L_d, L_m, e_E, e_H, so *one* expression covers every
stage of every layout: a stage is a substitution, and the most-loaded stage of a layout
is found by evaluating all of its stage compositions (vectorised, in ``symbolic.search``).

Sec. 6 gives no formula for buffers and fragmentation; as in :mod:`derivations.overheads`
the peak is modelled as ``(1 + f_frag) * allocated + M_buf`` (:func:`peak`), at either
end of the paper's ranges (:func:`overhead_values`).
"""
from __future__ import annotations

from typing import Dict, Tuple

from symbolic.config import ConfigError, RECOMPUTE, ZERO_NAMES
from symbolic.notation import M_buf, f_frag
from symbolic.term import Term, combine

from .device import activation_term_id
from .overheads import RANGES
from .zero import component_terms

#: The four components of the per-device total, in the paper's order.
COMPONENTS = ("weights", "gradients", "optimizer", "activations")
#: Which end of the Sec. 6 ranges: low (5%, 0.8 GiB), high (30%, 2 GiB, conservative) or none.
OVERHEAD_ENDS = ("high", "low", "none")


def component_ids(zero: int, recompute: str) -> Dict[str, str]:
    """{component: term id} of the per-device total for a ZeRO stage and a recomputation policy."""
    if zero not in ZERO_NAMES:
        raise ConfigError("zero", f"ZeRO stage must be 0, 1, 2 or 3, got {zero!r}")
    if recompute not in RECOMPUTE:
        raise ConfigError("recompute", f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    ids = component_terms(zero)
    ids["activations"] = activation_term_id("stage", recompute)
    return {k: ids[k] for k in COMPONENTS}


def policies(terms) -> Tuple[str, ...]:
    """The recomputation policies with a per-stage activation term in ``terms`` (the paper's: none, full)."""
    return tuple(r for r in RECOMPUTE if activation_term_id("stage", r) in terms)


def choices(terms, zeros=(0, 1, 2, 3), recompute=None) -> Dict[Tuple[int, str], Dict[str, str]]:
    """{(ZeRO stage, policy): {component: term id}} for a search over those choices.

    Together they use at most eight distinct terms (three components x replicated/sharded,
    activations x policies); a search evaluates each once and picks per configuration.
    """
    return {(z, r): component_ids(z, r) for z in zeros for r in (recompute or policies(terms))}


def components(terms, zero: int, recompute: str, training=None) -> Dict[str, Term]:
    """{component: Term} of the per-device total.  With ``training`` the activations are the
    term of its view (recomputation operators, attention kernel, FP8 caching; one micro-batch)."""
    ids = component_ids(zero, recompute)
    if training is not None:
        from .activations import View, ensure
        ids["activations"] = ensure(terms, View.of(training))["stage"]
    return {k: terms[t] for k, t in ids.items()}


def device_total(terms, zero: int, recompute: str) -> Term:
    """``total.device.z<zero>.<recompute>``: weights + gradients + optimizer + activations of one device."""
    ids = component_ids(zero, recompute)
    return combine(f"total.device.z{zero}.{recompute}",
                   f"bytes on one device of a stage: model states under ZeRO {zero} ({ZERO_NAMES[zero]}) and one "
                   f"micro-batch's activations, recomputation {recompute}", "bytes", "Sec. 4-5 (Tables 8, 10)",
                   [(k, k, 1, terms[t]) for k, t in ids.items()])


def peak(allocated, f=f_frag, buf=M_buf):
    """Sec. 6 peak: ``(1 + f_frag) * allocated + M_buf`` (the paper's ranges, no formula given)."""
    return (1 + f) * allocated + buf


def overhead_values(end: str = "high") -> Dict:
    """{f_frag: ..., M_buf: ...} at one end of the Sec. 6 ranges (exact Fractions); 'none' is zero."""
    if end not in OVERHEAD_ENDS:
        raise ConfigError("overheads", f"overheads must be one of {', '.join(OVERHEAD_ENDS)}, got {end!r}")
    if end == "none":
        return {f_frag: 0, M_buf: 0}
    i = 0 if end == "low" else 1
    return {f_frag: RANGES["f_frag"][i], M_buf: RANGES["M_buf"][i]}


def evaluate(model, layout, training, stage_index: int = 1) -> Dict:
    """Exact bytes of each component and their total on one device of a stage (Fractions).

    The same numbers as ``derivations.device.estimate`` (which the tests check), from the
    same terms the derivatives and the search use.
    """
    from symbolic import config as cfg
    from symbolic.numeric import exact
    from . import build
    cfg.validate_layout(model, layout, training.seq)
    cfg.validate_training(training)
    comp = cfg.stage(model, layout, stage_index)
    terms = build(model)
    subs = cfg.substitution(model, layout, training, comp)
    out = {k: exact(t, subs) for k, t in components(terms, training.zero, training.recompute, training).items()}
    out["total"] = sum(out.values())
    return out
