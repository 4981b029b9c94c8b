"""The paper's analysis, one module per section, each returning terms: ``build(model)`` (the frozen registry of a
structure's terms) and ``variant(model, training)`` (a frozen overlay of one configuration's view and weight side).

  params.*        Sec. 1-2: parameters of matrices, modules, layers, stages (Tables 2-4)
  static.*        Sec. 3: parameters held by one device of a stage (Table 6)
  zero.*          Sec. 4: bytes of weights, gradients, optimizer states (Tables 7-8)
  act.*           Sec. 5: activation bytes per layer and per stage (Tables 9-10)
  overhead.*      Sec. 6: buffers and fragmentation
  conv.*          other sources' conventions reproduced (Megatron-LM, NVIDIA ModelZoo)"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Dict

from derivations import config as cfg
from derivations import families
from derivations.activations import View
from derivations.activations import shape as shapes
from derivations.assembly import overheads
from symbolic.term import Terms


@lru_cache(maxsize=None)
def _build(structure, family: str = "deepseek") -> Terms:
    """The frozen registry of ``family``'s terms for one structure (its flags, in order), built once per process."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from derivations.activations import kinds as activations
    from derivations.assembly import conventions
    from derivations.assembly import parameters
    from derivations.assembly import static
    from derivations.assembly import zero
    fam = families.get(family)
    shared = {"parameters": parameters, "static": static, "zero": zero, "activations": activations,
              "overheads": overheads, "conventions": conventions}
    flags = MappingProxyType(dict(zip(fam.flags, structure)))
    terms = Terms()
    terms.hint = "(list them with `memsym terms`)"
    # the family's own parameters, then each shared section (given the registry so far, the family, its flags)
    for t in fam.parameter_terms(terms, flags):
        terms.add(t)
    for module in [shared[name] for name in fam.sections]:
        for t in module.terms(terms, fam, flags):
            terms.add(t)
    return terms.freeze()


def build(model=None) -> Terms:
    """The frozen registry of every base term of ``model``'s structure, cached per family and structure."""
    if model is None:
        model = cfg.PRESETS[cfg.DEFAULT_MODEL]
    return _build(model.structure, model.family)


@dataclass(frozen=True)
class Variant:
    """One configuration's terms (base + overlay), ``act`` {kind: term id} and weight ``side``."""

    terms: Terms
    act: Dict[str, str]
    side: object


@lru_cache(maxsize=512)
def _variant(structure, view, conventions, family: str = "deepseek") -> Variant:
    # lazy: sympy (only this path needs it)
    from derivations.activations import view_terms
    from derivations.assembly import step_names, step_terms
    from derivations.assembly.conventions import side_terms, weight_side
    base = _build(structure, family)
    fam = families.get(family)
    acts = view_terms(view, shapes.of(family, structure))
    sides = side_terms(base, conventions) if "conventions" in fam.sections else ()
    moments = step_terms.moments(step_names.framework_of(view.conv), step_names.policy_of(view.recompute))
    extra = list(sides) + list(acts.values()) + list(moments.values())
    return Variant(base.overlay(extra), {k: t.id for k, t in acts.items()}, weight_side(conventions))


def variant(model, training=None) -> Variant:
    """The cached, immutable :class:`Variant` of ``training`` (default: the paper's) for ``model``."""
    training = training or cfg.Training()
    conventions = getattr(training, "conventions", cfg.Conventions())
    return _variant(model.structure, View.of(training), conventions.side("weights"), model.family)


def configured(model, training=None) -> Terms:
    """The frozen registry of ``model``'s base terms plus exactly those of ``training``."""
    return variant(model, training).terms
