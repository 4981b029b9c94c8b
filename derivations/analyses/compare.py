"""``memsym compare``: the per-device quantities under each preset of conventions and the
exact waterfall between two presets, flipping one switch at a time in the fixed order
``CONVENTION_ORDER`` (derivations/assembly/conventions.py documents the switches)."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Dict, List, Optional, Tuple

from derivations import config as cfg
from derivations import families
from derivations.config.switches import ORDER, PRESETS, switch_value, with_preset, with_switch
from derivations.assembly.device import estimate


QUANTITIES = ("weights", "gradients", "optimizer", "states", "activations_per_layer", "runtime")


@dataclass
class Step:
    """One flip: switch ``name`` from ``before`` to ``after``; exact bytes added (+) or removed (-)
    per quantity; ``values`` the quantities after the flip."""

    name: str
    before: object
    after: object
    delta: Dict[str, Fraction]
    values: Dict[str, Fraction]


@dataclass
class Waterfall:
    """From preset ``start`` to preset ``end``: the two ends' quantities and the flips between."""

    start: str
    end: str
    first: Dict[str, Fraction]
    last: Dict[str, Fraction]
    steps: List[Step]

    def largest(self, quantity: str) -> List[str]:
        """Switch names by |bytes| of ``quantity`` they move, largest first (ties: the fixed order)."""
        return [s.name for s in sorted(self.steps, key=lambda s: -abs(s.delta[quantity]))
                if s.delta[quantity] != 0]


def quantities(est) -> Dict[str, Fraction]:
    """weights, gradients, optimizer, their sum (model states), one MoE layer's activations and the
    runtime buffers (--runtime-buffers)."""
    q = {k: est.bytes[k] for k in ("weights", "gradients", "optimizer")}
    q["states"] = sum(q.values())
    q["activations_per_layer"] = est.bytes["activations_per_layer"]
    q["runtime"] = est.bytes.get("runtime", Fraction(0))
    return q


def waterfall(model: cfg.ModelSpec, layout: cfg.Layout, training: cfg.Training, end: str, start: str = "paper",
              stage: Optional[int] = None, mtp: bool = False) -> Tuple[Waterfall, Dict, Dict]:
    """The flips from ``start`` to ``end`` in CONVENTION_ORDER: (Waterfall, first estimate, last
    estimate).  ``training`` supplies everything but the switches (b, s, ZeRO, recomputation)."""
    cur = with_preset(training, start)
    target = with_preset(training, end, mtp)
    est = estimate(model, layout, cur, stage)
    first = quantities(est)
    values, steps, first_est = first, [], est
    for name in ORDER:
        before, after = switch_value(cur, name), switch_value(target, name)
        if before == after:
            continue
        cur = with_switch(cur, name, after)
        est = estimate(model, layout, cur, stage)
        new = quantities(est)
        steps.append(Step(name, before, after, {k: new[k] - values[k] for k in QUANTITIES}, new))
        values = new
    assert cur == target, "the waterfall did not reach the preset"
    return Waterfall(start, end, first, values, steps), first_est, est


#: The presets ``compare`` sets side by side unless told (``memsym compare --conventions``).
DEFAULT_PRESETS = ("paper", "megatron", "modelzoo")


def compare(model, layout, training, stage=None, mtp=False, presets=DEFAULT_PRESETS):
    """{preset: (Estimate, quantities)} and {preset: Waterfall from paper} for one layout
    (``presets``: which, paper always first)."""
    if "conventions" not in families.get(model.family).sections:  # other tools' conventions of DeepSeek models
        raise families.unsupported(model, "memsym compare (other tools' conventions)")
    presets = ("paper",) + tuple(p for p in presets if p != "paper")
    for name in presets:
        if name not in PRESETS:
            raise cfg.ConfigError("conventions", f"conventions must be among {', '.join(PRESETS)}, got {name!r}")
    columns = {}
    for name in presets:
        est = estimate(model, layout, with_preset(training, name, mtp), stage)
        columns[name] = (est, quantities(est))
    return columns, {name: waterfall(model, layout, training, name, "paper", stage, mtp)[0]
                     for name in presets if name != "paper"}
