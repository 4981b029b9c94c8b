"""The parallel layout (Tables 5 and 9) and its divisibility rules, and what each pipeline stage holds (Table 4:
L_d, L_m, e_E, e_H; other spans of layers, Table 3)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction
from typing import Dict, List, Optional, Tuple

from symbolic.errors import ConfigError

from derivations.config.limits import LIST_LENGTHS, OPTIONS
from derivations.config.model import ModelSpec
from derivations import families
from derivations.config.values import symbol_keyed


@dataclass(frozen=True)
class Layout:
    """The parallel layout (Table 5). ``sp`` None means sequence parallelism on (SP = TP)."""

    dp: int = 32
    tp: int = 2
    pp: int = 16
    ep: int = 8
    etp: int = 1
    cp: int = 1
    sp: Optional[int] = None
    layers_per_stage: Optional[Tuple[int, ...]] = None

    @property
    def SP(self) -> int:
        return self.tp if self.sp is None else self.sp

    @property
    def edp(self) -> Fraction:
        """Replicas of each expert shard, world / (PP EP ETP) = DP TP CP / (EP ETP) (Table 5 with CP)."""
        return Fraction(self.dp * self.tp * self.cp, self.ep * self.etp)

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def named(self) -> Dict[str, int]:
        """{symbol name: value} of the degrees."""
        return {"DP": self.dp, "TP": self.tp, "PP": self.pp, "EP": self.ep, "ETP": self.etp, "CP": self.cp,
                "SP": self.SP}


def positive_int(name: str, value, limit: str) -> None:
    """``value`` a positive integer within the limit of option ``limit`` (limits.toml), else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("positive-integer", f"{name} must be a positive integer, got {value!r}")
    OPTIONS[limit].check(value, name)


def validate_layout(model: ModelSpec, layout: Layout, seq: Optional[int] = None) -> None:
    """Check the paper's divisibility rules; raise ConfigError naming the first that fails."""
    for f in ("dp", "tp", "pp", "ep", "etp", "cp"):
        positive_int(f.upper(), getattr(layout, f), f)
    if layout.sp is not None:
        positive_int("SP", layout.sp, "sp")
        if layout.sp not in (1, layout.tp):
            raise ConfigError("sp", f"SP must be 1 (off) or equal TP={layout.tp}, got SP={layout.sp}")
    dims = model.named()
    fam = families.get(model.family)
    for axis, one in fam.layout_defaults().items():
        if getattr(layout, axis) != one:
            raise ConfigError("no-experts", f"{axis.upper()}={getattr(layout, axis)}: {model.name} ({fam.title}) has "
                                            f"no experts to split; {axis.upper()} must be 1")
    for rule in fam.divides:
        if rule.symbol is None:
            _edp(layout)
        elif dims[rule.symbol] % getattr(layout, rule.axis):
            degrees = {a.upper(): getattr(layout, a) for a in ("dp", "tp", "pp", "ep", "etp", "cp")}
            raise ConfigError(rule.rule, rule.text.format(name=model.name, **degrees, **dims))
    if layout.pp > model.l:
        raise ConfigError("pp-layers", f"PP={layout.pp} is larger than the {model.l} layers of {model.name}")
    if seq is not None and seq % layout.cp:
        raise ConfigError("cp-divides-seq", f"CP={layout.cp} must divide the sequence length s={seq}")
    if seq is not None and seq % (layout.SP * layout.cp):
        raise ConfigError("sp-divides-seq", f"SP*CP={layout.SP * layout.cp} must divide the sequence length s={seq} "
                                            f"(sequence parallelism splits the sequence over SP={layout.SP} ranks)")
    stage_layers(model, layout)  # validates an explicit split


def _edp(layout: Layout) -> None:
    """EDP = DP TP CP / (EP ETP), the data-parallel degree of the experts, must be an integer."""
    tp, ep, etp = layout.tp, layout.ep, layout.etp
    if (layout.dp * tp * layout.cp) % (ep * etp):
        dtc = "DP*TP" if layout.cp == 1 else "DP*TP*CP"
        raise ConfigError("edp-integer",
                          f"{dtc}={layout.dp * tp * layout.cp} must be divisible by EP*ETP={ep * etp} "
                          f"(EDP = {dtc}/(EP*ETP) must be an integer; DP={layout.dp}, TP={tp}, EP={ep}, ETP={etp}"
                          + (f", CP={layout.cp}" if layout.cp != 1 else "") + ")")


def stage_layers(model: ModelSpec, layout: Layout) -> List[range]:
    """Layers held by each pipeline stage: ``layers_per_stage`` if given, else ceil(l/PP) each and the rest on the
    last stage (Table 4) when that is a layer or more, else the first l mod PP stages one more."""
    l, pp = model.l, layout.pp
    if layout.layers_per_stage is not None:
        split = list(layout.layers_per_stage)
        if len(split) > LIST_LENGTHS["layers_per_stage"]:
            raise ConfigError("limit.layers_per_stage", f"--layers-per-stage has {len(split)} entries; at most "
                                                        f"{LIST_LENGTHS['layers_per_stage']}")
        if len(split) != pp:
            raise ConfigError("layers-per-stage", f"--layers-per-stage has {len(split)} entries, PP={pp}")
        if any((not isinstance(x, int)) or x < 1 for x in split):
            raise ConfigError("layers-per-stage", f"every stage needs at least one layer, got {split}")
        if sum(split) != l:
            raise ConfigError("layers-per-stage", f"--layers-per-stage sums to {sum(split)}, the model has {l} layers")
    else:
        if pp > l:
            raise ConfigError("pp-layers", f"PP={pp} is larger than the {l} layers of {model.name}")
        k = -(-l // pp)
        if pp == 1:
            split = [l]
        elif l - k * (pp - 1) >= 1:
            split = [k] * (pp - 1) + [l - k * (pp - 1)]
        else:
            base, rem = divmod(l, pp)
            split = [base + 1] * rem + [base] * (pp - rem)
    starts = [0, *itertools.accumulate(split)]
    return [range(a, b) for a, b in zip(starts, starts[1:])]


#: The composition symbols every family's stage has (Table 4), in order; a family's own counts follow them
#: (:func:`composition_names`).
COMPOSITION = ("L_d", "L_m", "e_E", "e_H")


def composition_names(family: str) -> Tuple[str, ...]:
    """The symbols of a stage's composition in ``family``: L_d, L_m, e_E, e_H and the family's own counts."""
    return COMPOSITION + tuple(sym for sym, _, _ in families.get(family).counts)


@dataclass(frozen=True)
class StageComposition:
    """What one pipeline stage holds: the values of L_d, L_m, e_E, e_H (and its family's own counts)."""

    index: int
    layers: range
    dense: int
    moe: int
    embedding: bool
    head: bool
    #: (symbol, value) of the family's own counts (derivations/families Family.counts: DeepSeek-V4's L_C, L_H, L_R)
    extra: Tuple[Tuple[str, int], ...] = ()

    def named(self) -> Dict[str, int]:
        """{symbol name: value} of L_d, L_m, e_E, e_H (and the family's own counts)."""
        return {"L_d": self.dense, "L_m": self.moe, "e_E": int(self.embedding), "e_H": int(self.head),
                **dict(self.extra)}

    def values(self) -> Dict:
        return symbol_keyed(self.named())

    def vector(self, names: Tuple[str, ...]) -> Tuple[int, ...]:
        """The values of the composition symbols ``names`` (:func:`composition_names`), in order."""
        named = self.named()
        return tuple(named[n] for n in names)

    @property
    def label(self) -> str:
        return layers_label(self.layers.start, self.layers.stop)


def layers_label(start: int, stop: int) -> str:
    """``layer i`` or ``layers i-j`` of the layers start..stop-1 (a stage's label)."""
    return f"layer {start}" if stop - start == 1 else f"layers {start}-{stop - 1}"


def compose(model: ModelSpec, layers: range, first: bool, last: bool, index: int = 0) -> StageComposition:
    kinds = model.layer_kinds()  # cached per model (ModelSpec.layer_kinds)
    dense = sum(1 for i in layers if kinds[i] == "dense")
    counts = families.get(model.family).counts
    extra = ()
    if counts:
        features = model.layer_features()
        extra = tuple((sym, sum(1 for i in layers if feature in features[i])) for sym, feature, _ in counts)
    return StageComposition(index, layers, dense, len(layers) - dense, first, last, extra)


def stages(model: ModelSpec, layout: Layout) -> List[StageComposition]:
    split = stage_layers(model, layout)
    return [compose(model, r, i == 0, i == len(split) - 1, i) for i, r in enumerate(split)]


def stage(model: ModelSpec, layout: Layout, index: int) -> StageComposition:
    all_stages = stages(model, layout)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(all_stages):
        raise ConfigError("stage",
                          f"stage must be an integer in 0..{len(all_stages) - 1} (PP={layout.pp}), got {index!r}")
    return all_stages[index]


def whole_model(model: ModelSpec) -> StageComposition:
    """The whole model as one 'stage' (PP = 1): every layer, embedding and head."""
    return compose(model, range(model.l), True, True)


def layer_range(model: ModelSpec, first: int, last: int) -> StageComposition:
    """Layers first..last (inclusive) with the embedding on layer 0 and the head on layer l-1 (Table 3)."""
    if not (0 <= first <= last < model.l):
        raise ConfigError("layers", f"layers {first}..{last} out of range 0..{model.l - 1}")
    return compose(model, range(first, last + 1), first == 0, last == model.l - 1)
