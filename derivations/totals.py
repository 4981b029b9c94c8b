"""The per-device total of one pipeline stage, symbolic in everything (Sec. 4-6 assembled).

The memory of one device is the sum of four components (Table 8 + Table 10):

  weights, gradients, optimizer states   ``zero.<component>.<replicated|sharded>`` chosen by the ZeRO stage (Sec. 4)
  activations of one micro-batch          ``act.stage`` of the training's view: ``act.stage`` (none),
                                          ``act.stage.full`` (full recomputation), other policies, attention
                                          kernels and FP8 caching as extensions (derivations/activations.py)

exactly as :func:`derivations.device.estimate` assembles them without a pipeline schedule.
Every term is symbolic in the model dimensions, b, s, the parallel degrees, the bytes per
element and the stage composition L_d, L_m, e_E, e_H, so *one* expression covers every
stage of every layout: a stage is a substitution, and the most-loaded stage of a layout
is found by evaluating all of its stage compositions (vectorised, in ``symbolic.search``).

Sec. 6 gives no formula for buffers and fragmentation; as in :mod:`derivations.overheads`
the peak is modelled as ``(1 + f_frag) * allocated + M_buf`` (:func:`peak`), at either
end of the paper's ranges (:func:`overhead_values`).

Pipeline schedules (micro-batches in flight, DualPipe's two stages) are not part of this
one-micro-batch view: :func:`component_ids` refuses a training with a schedule.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, Tuple

from derivations.config import ConfigError, RECOMPUTE, ZERO_NAMES, Training
from derivations.notation import M_buf, f_frag
from symbolic.term import Term, combine

from .overheads import RANGES
from .zero import component_terms

#: The four components of the per-device total, in the paper's order.
COMPONENTS = ("weights", "gradients", "optimizer", "activations")
#: Which end of the Sec. 6 ranges: high (30%, 2 GiB; conservative), low (5%, 0.8 GiB) or none.
OVERHEAD_ENDS = ("high", "low", "none")


def component_ids(model, training: Training) -> Dict[str, str]:
    """{component: term id} of the per-device total of ``training`` (ZeRO stage and activation view)."""
    from .device import activation_ids
    if getattr(training, "schedule", None):
        raise ConfigError("schedule", f"--schedule {training.schedule}: sensitivity, fit and search use the paper's "
                                      f"one-micro-batch-per-stage view; use `memsym estimate --schedule` for schedules")
    if training.zero not in ZERO_NAMES:
        raise ConfigError("zero", f"ZeRO stage must be 0, 1, 2 or 3, got {training.zero!r}")
    ids = component_terms(training.zero)
    ids["activations"] = activation_ids(model, training)["stage"]
    return {k: ids[k] for k in COMPONENTS}


def policies() -> Tuple[str, ...]:
    """The named recomputation policies (the paper's none and full, and the extensions; custom needs operators)."""
    return tuple(r for r in RECOMPUTE if r != "custom")


def choices(model, zeros=(0, 1, 2, 3), recompute=None,
            training: Training | None = None) -> Dict[Tuple[int, str], Dict[str, str]]:
    """{(ZeRO stage, policy): {component: term id}} for a search over those choices.

    Together they use few distinct terms (three components x replicated/sharded, one
    activation term per policy); a search evaluates each once and picks per configuration.
    """
    base = training or Training()
    return {(z, r): component_ids(model, replace(base, zero=z, recompute=r, recompute_ops=()))
            for z in zeros for r in (recompute or policies())}


def components(terms, model, training: Training) -> Dict[str, Term]:
    """{component: Term} of the per-device total."""
    return {k: terms[t] for k, t in component_ids(model, training).items()}


def device_total(terms, model, training: Training) -> Term:
    """``total.device``: weights + gradients + optimizer + activations of one device of a stage."""
    ids = component_ids(model, training)
    return combine("total.device", f"bytes on one device of a stage: model states under ZeRO {training.zero} "
                                   f"({ZERO_NAMES[training.zero]}) and one micro-batch's activations ({ids['activations']})",
                   "bytes", "Sec. 4-5 (Tables 8, 10)", [(k, k, 1, terms[t]) for k, t in ids.items()])


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

    The same numbers as ``derivations.device.estimate`` without a schedule (the tests check
    it), from the same terms the derivatives and the search use.
    """
    from derivations import config as cfg
    from symbolic.numeric import exact
    from . import build
    cfg.validate_layout(model, layout, training.seq)
    cfg.validate_training(training)
    comp = cfg.stage(model, layout, stage_index)
    terms = build(model)
    subs = cfg.substitution(model, layout, training, comp)
    out = {k: exact(t, subs) for k, t in components(terms, model, training).items()}
    out["total"] = sum(out.values())
    return out
