"""The paper's analysis, one module per section, each returning terms.

``build(model)`` collects every term for a model's structure (dimensions stay symbols;
only structural facts such as query compression choose which terms exist).  Term ids:

  params.*        Sec. 1-2: parameters of matrices, modules, layers, stages (Tables 2-4)
  static.*        Sec. 3: parameters held by one device of a stage (Table 6)
  zero.*          Sec. 4: bytes of weights, gradients, optimizer states (Tables 7-8)
  act.*           Sec. 5: activation bytes per layer and per stage (Tables 9-10)
  overhead.*      Sec. 6: buffers and fragmentation
  conv.*          other sources' conventions reproduced (Megatron-LM, NVIDIA ModelZoo)

List them with ``memsym terms``.
"""
from __future__ import annotations

from functools import lru_cache

from symbolic.term import Terms


@lru_cache(maxsize=None)
def _build(structure) -> Terms:
    from . import architecture, parameters, static, zero, activations, overheads, conventions
    q_lora, routing_bias, tied = structure
    terms = Terms()
    for module in (architecture, parameters, static, zero, activations, overheads, conventions):
        for t in module.terms(terms, q_lora=q_lora, routing_bias=routing_bias, tied=tied):
            terms.add(t)
    terms.base_ids = tuple(terms)
    return terms


def build(model=None) -> Terms:
    """All terms for ``model`` (a ModelSpec; default DeepSeek-v3's structure).

    This registry is shared and cached: the terms of a recomputation view or of a set of
    conventions are added to it on demand (:func:`derivations.device.activation_ids`).
    Views that must not depend on what else ran in the process use :func:`configured`."""
    if model is None:
        from derivations.config import PRESETS
        model = PRESETS["deepseek-v3"]
    return _build(model.structure)


def configured(model, training=None) -> Terms:
    """A fresh registry: the base terms of ``model`` plus exactly the terms of ``training``'s
    activation view and conventions (nothing registered by other configurations earlier in
    the process), so what a report lists depends only on its own inputs."""
    from derivations import config as cfg
    from .activations import View, ensure
    from .conventions import weight_side
    shared = build(model)
    reg = Terms((tid, shared[tid]) for tid in shared.base_ids)
    reg.base_ids = shared.base_ids
    training = training or cfg.Training()
    weight_side(reg, getattr(training, "conventions", cfg.Conventions()))
    ensure(reg, View.of(training), model.q_lora)
    return reg
