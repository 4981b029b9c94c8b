"""The per-device total of one pipeline stage, symbolic in everything (Sec. 4-6 assembled): the model states plus one
micro-batch's ``act.stage``; :func:`component_ids` is the one statement of that sum (no schedule)."""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, Tuple

from symbolic.term import Term, combine

from derivations import evaluate as ev, notation as nt, variant, config as cfg
from derivations.activations import view_terms
from derivations.activations.shape import of_model
from derivations.activations.view import View
from derivations.assembly import schedules, step_names, step_terms
from derivations.tensors import B_IS_1
from derivations.assembly.sides import COMPONENTS, device_component_ids as component_ids  # noqa: F401
from derivations.config import RECOMPUTE, ZERO_NAMES, ConfigError, Training
import sympy as sp

def policies() -> Tuple[str, ...]:
    """The named recomputation policies (the paper's none and full, and the extensions; custom needs operators)."""
    return tuple(r for r in RECOMPUTE if r != "custom")


def choices(model, zeros=(0, 1, 2, 3), recompute=None,
            training: Training | None = None) -> Dict[Tuple[int, str], Dict[str, str]]:
    """{(ZeRO stage, policy): {component: term id}} of a search over those choices."""
    base = training or Training()
    return {(z, r): component_ids(model, replace(base, zero=z, recompute=r, recompute_ops=()))
            for z in zeros for r in (recompute or policies())}


def components(model, training: Training) -> Dict[str, Term]:
    """{component: Term} of the per-device total."""
    terms = variant(model, training).terms
    return {k: terms[t] for k, t in component_ids(model, training).items()}


def device_components(model, layout, training: Training, index: int) -> Dict[str, object]:
    """{component: expression} of device ``index`` (b and s symbolic): the model states of the stages it holds and n_fl
    x the activations of each chunk it runs, as device.py assembles them."""
    if training.virtual_layers is not None:  # the closed forms count each rank's layers in V equal chunks
        raise ConfigError("virtual-layers", "--virtual-layers (a simulated interleaved order) has no closed form "
                                            "here; use it with memsym estimate")
    comps = components(model, replace(training, schedule=None, microbatches=None, vpp=None))
    if not training.schedule:
        return dict(comps)
    every = cfg.stages(model, layout)
    at = lambda e, j: e.xreplace(every[j].values())  # L_d, L_m, e_E, e_H and the family's counts (DeepSeek's L_I)
    held = schedules.held_stages(training.schedule, layout.pp, index)
    chunks = schedules.chunks(training.schedule, layout.pp, index, training.microbatches, training.vpp)
    out = {k: sum(at(comps[k].expr, j) for j in held) for k in ("weights", "gradients", "optimizer")}
    at_part = lambda e, c: e.xreplace(c.composition(every[c.stage]).values())
    out["activations"] = sum(sp.Rational(c.inflight.numerator, c.inflight.denominator)
                             * at_part(comps["activations"].expr, c) for c in chunks)
    return out


def device_total(model, training: Training) -> Term:
    """``total.device``: weights + gradients + optimizer + activations of one device of a stage."""
    ids = component_ids(model, training)
    terms = variant(model, training).terms
    return combine("total.device", f"bytes on one device of a stage: model states under ZeRO {training.zero} "
                                   f"({ZERO_NAMES[training.zero]}) and one micro-batch's activations "
                                   f"({ids['activations']})",
                   "bytes", "Sec. 4-5 (Tables 8, 10)", [(k, k, 1, terms[t]) for k, t in ids.items()])


def step_expression(model, training, st, term_id: str, at: int = None):
    """The moment ``term_id`` (step_terms.py) of stage ``st`` in b and s: the kinds' symbols replaced by the view's
    terms (M_X0: without recomputation), less the head's cross-entropy transient; b = 1's indicator at b = ``at``."""
    _, framework, policy, moment = term_id.split(".")
    expr = step_terms.moments(framework, policy)[moment].expr
    plain, bare = step_names.trainings(training)
    shape = of_model(model)
    terms, with_cast = view_terms(View.of(plain), shape), view_terms(View.of(training), shape)
    kinds, _ = ev.device_inputs(model.family)
    out = step_terms.in_terms(expr, kinds, terms, view_terms(View.of(bare), shape))
    # the indicators, and the routing a moment may read at the bound that holds for any routing (step_names.ROUTING,
    # as evaluated without a traced routing)
    fixed = {**step_names.indicators(training), **dict.fromkeys(step_names.ROUTING, 0)}
    out = out.xreplace({sp.Symbol(k, nonnegative=True): v for k, v in fixed.items()})
    if "head" in terms:
        out -= nt.e_H * (with_cast["head"].expr - terms["head"].expr)
    b_now = training.mbs if at is None else at
    return out.xreplace({B_IS_1: int(b_now == 1)}).xreplace({nt.L_d: st.dense, nt.L_m: st.moe,
                                                              nt.e_E: int(st.embedding), nt.e_H: int(st.head)})
