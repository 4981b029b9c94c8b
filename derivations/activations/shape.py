"""The shape of a model's activation terms (:class:`Shape`): DeepSeek's ``q_lora`` flag (read through the generated
tables, derivations/evaluate.py ``kept``), or another family's flags, whose kept tensors are built from its own lists
(``activations.specs(kind, flags)``) and compared by sympy's structural equality."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, Mapping, Tuple

from derivations import families
from derivations.config import RECOMPUTE_OPS
from derivations.evaluate import FAMILY
from symbolic.errors import ConfigError


@dataclass(frozen=True)
class Shape:
    """A family (its name in derivations.families) and its structure flags ((name, value), ... in order)."""

    family: str
    flags: Tuple[Tuple[str, object], ...]

    @property
    def declared(self) -> families.Family:
        return families.get(self.family)

    def specs(self, kind: str):
        """The tensor list of ``kind`` (the family's ``activations.specs``)."""
        return self.declared.activation_specs(kind, dict(self.flags))


def of(family: str, structure):
    """DeepSeek's q_lora flag (its tables are committed), else the family's :class:`Shape`."""
    declared = families.get(family)
    if "activations" not in declared.sections:  # its parameters are modelled, its activations not yet
        raise ConfigError("family", f"the activations of {declared.title} models are not modelled yet: "
                                    f"`memsym params` counts their parameters; estimate, fit, search, sensitivity, "
                                    f"compare, report and the page need their activations")
    if family == FAMILY:
        return structure[0]
    return Shape(family, tuple(zip(families.get(family).flags, structure)))


def of_model(model):
    """:func:`of` a model's family and structure."""
    return of(model.family, model.structure)


def family(shape) -> families.Family:
    return shape.declared if isinstance(shape, Shape) else families.get("deepseek")


@lru_cache(maxsize=1024)
def kept(view, shape: Shape) -> Mapping[str, Tuple]:
    """{kind: ((key, expression), ...)}: the parts ``view`` keeps of each kind of ``shape``'s family (sympy)."""
    from derivations.activations.views import apply  # lazy: sympy (the generated path needs none)
    out: Dict[str, Tuple] = {}
    for kind in shape.declared.kinds:
        out[kind] = tuple((p.key, p.expr) for p in apply(view, shape.specs(kind)))
    return out


@lru_cache(maxsize=64)
def inert(shape) -> Tuple[bool, Tuple[str, ...]]:
    """(no tensor cached in FP8, the custom operators naming no tensor) of another family's :class:`Shape`."""
    if not isinstance(shape, Shape):  # (before any import: DeepSeek's estimate reads the generated tables, no sympy)
        return False, ()
    from derivations.activations.views import Group  # lazy: sympy (the tensor lists)
    tags = set()
    for kind in shape.declared.kinds:
        for spec in shape.specs(kind):
            tags |= set(spec.tags)
            if isinstance(spec, Group):
                tags |= {t for sub in spec.subs for t in sub[4]}
    return not tags & {"fp8", "e5m6"}, tuple(op for op in RECOMPUTE_OPS if op not in tags)


def check_options(model, training) -> None:
    """Refuse (ConfigError) an option changing no tensor of the family, or a field built otherwise."""
    unread = getattr(model, "unread", lambda conventions: None)(training.conventions)
    if unread is not None:
        raise ConfigError(f"hf-config.{unread[0]}", f"{model.name}: {unread[1]}")
    shape = of_model(model)
    fp8, ops = inert(shape)
    title = family(shape).title
    if fp8 and training.fp8:
        raise ConfigError("fp8-activations", f"--fp8-activations: no tensor of {title} is cached in FP8 (the "
                                             f"DeepSeek-V3 report's caching names MLA and MoE tensors)")
    idle = [op for op in training.recompute_ops if op in ops]
    if training.recompute == "custom" and idle:
        valid = ", ".join(op for op in RECOMPUTE_OPS if op not in ops)
        raise ConfigError("recompute-ops", f"--recompute custom:{','.join(idle)}: no tensor of {title} is recomputed "
                                           f"by it; its operators: {valid}")
