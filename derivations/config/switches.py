"""Conventions: modelling assumptions as named switches (the paper's choices, Sections 3-5, and each
framework's, read from its sources or traced: paper/traces/), and every switch as each source sets it
(``convention_presets/*.toml``)."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, make_dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from symbolic.errors import ConfigError


@dataclass(frozen=True)
class SwitchSpec:
    """One modelling assumption, a table of switches.toml (whose header says what each field is)."""

    name: str
    option: str
    values: Tuple[str, ...]
    tokens: Dict[str, str]
    side: str
    help: str
    paper: str = ""
    exists: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    label: str = ""

    @property
    def default(self) -> str:
        return self.values[0]


with open(Path(__file__).with_name("switches.toml"), "rb") as _fh:
    _DATA = tomllib.load(_fh)
#: The switches (switches.toml, one table each; attention, bytes per parameter and MTP are switches too, kept in
#: Training / the CLI), and the order ``memsym compare`` flips them from ``paper`` to a preset (documented there).
CONVENTION_SWITCHES: Dict[str, SwitchSpec] = {
    name: SwitchSpec(name, t["option"], tuple(t["values"]), dict(t["tokens"]), t["side"], t["help"], t.get("paper", ""),
                     {k: tuple(v) for k, v in t.get("exists", {}).items()}, t.get("label", ""))
    for name, t in _DATA.items() if isinstance(t, dict)}
CONVENTION_ORDER = tuple(_DATA["order"])
BYTES_HELP, MTP_HELP = _DATA["bytes_per_param_help"], _DATA["mtp_help"]

#: Bytes per parameter (Table 7 symbols) and the smallest ZeRO stage of each convention (Megatron's distributed
#: optimizer: FP32 moments sharded over DP, ZeRO-1, 6 + 12/d bytes per parameter).
BYTES_CONVENTIONS: Dict[str, Tuple[Dict[str, int], int]] = {
    "paper": ({"B_w": 2, "B_g": 4, "B_m": 4, "B_1": 2, "B_2": 2}, 0),
    "fp32-moments": ({"B_w": 2, "B_g": 4, "B_m": 4, "B_1": 4, "B_2": 4}, 0),
    "distributed": ({"B_w": 2, "B_g": 4, "B_m": 4, "B_1": 4, "B_2": 4}, 1),
}
#: The ZeRO stage a --rank is (FSDP shards parameters, gradients and optimizer states: derivations/assembly/fsdp.py).
RANK_ZERO: Dict[str, int] = {"fsdp2": 3, "mfsdp": 3}

#: The conventions presets (``--conventions``) and kernel sets (``--kernels``): one TOML file each; ``attention``,
#: ``bytes_per_param`` and ``mtp`` are the Training / CLI switches.
PRESET_DIR = Path(__file__).with_name("convention_presets")
_EXTRA = {"attention": ("eager", "flash"), "bytes_per_param": tuple(BYTES_CONVENTIONS), "mtp": (False, True)}


def _checked_switches(where: str, values: Dict) -> Dict[str, object]:
    """``values`` (a preset's or a kernel set's [switches]) checked against the switches' names and values."""
    for k, v in values.items():
        allowed = CONVENTION_SWITCHES[k].values if k in CONVENTION_SWITCHES else _EXTRA.get(k)
        if allowed is None or v not in allowed or isinstance(v, bool) != isinstance(allowed[0], bool):
            raise ValueError(f"{where}: switch {k} = {v!r} is not one of {allowed}")
    return dict(values)


def read_presets(folder: Path = PRESET_DIR) -> Tuple[Dict[str, Dict[str, object]], Dict[str, str],
                                                   Tuple[str, ...], Dict[str, Dict[str, object]]]:
    """(presets, sources, the presets whose name is a term-id suffix, kernel sets) read from ``folder`` (ValueError:
    a broken install)."""
    found = []
    for path in sorted(folder.glob("*.toml")):
        if path.name == "kernels.toml":
            continue
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
        if set(data) != {"name", "order", "names_terms", "source", "switches"} or data["name"] != path.stem:
            raise ValueError(f"{path}: a preset has name (its file's stem), order, names_terms, source, [switches]")
        missing = [k for k in (*CONVENTION_SWITCHES, "attention", "bytes_per_param") if k not in data["switches"]]
        if missing:
            raise ValueError(f"{path}: a preset sets every switch; missing {', '.join(missing)}")
        found.append((data["order"], data["name"], data["source"], data["names_terms"],
                      _checked_switches(str(path), data["switches"])))
    found.sort()
    with open(folder / "kernels.toml", "rb") as fh:
        kernels = {k: _checked_switches(f"{folder}/kernels.toml [{k}]", v) for k, v in tomllib.load(fh).items()}
    return ({n: sw for _, n, _, _, sw in found}, {n: src for _, n, src, _, _ in found},
            tuple(n for _, n, _, named, _ in found if named), kernels)


CONVENTION_PRESETS, CONVENTION_SOURCES, NAMING_PRESETS, KERNEL_OVERRIDES = read_presets()


class _ConventionMethods:
    """The methods of :class:`Conventions` (its fields are the switches: see below)."""

    def changed(self) -> List[Tuple[str, object]]:
        """(switch, value) of every switch not at the paper's choice, in CONVENTION_ORDER."""
        out = [(k, getattr(self, k)) for k in CONVENTION_ORDER
               if k in CONVENTION_SWITCHES and getattr(self, k) != CONVENTION_SWITCHES[k].default]
        return out + ([("mtp", True)] if self.mtp else [])

    def side(self, side: str) -> "Conventions":
        """These conventions with the switches that do not act on ``side`` reset to the paper's."""
        keep = {k for k, s in CONVENTION_SWITCHES.items() if s.side in (side, "both")}
        reset = {k: s.default for k, s in CONVENTION_SWITCHES.items() if k not in keep}
        if side != "weights":
            reset["mtp"] = False
        return replace(self, **reset)


#: Conventions' fields: switches.toml's first_fields, then any other switch (a report's notebooks print a
#: Conventions(...) call in field order).
_FIRST_FIELDS = tuple(_DATA["first_fields"])
_FIELD_ORDER = sorted(CONVENTION_SWITCHES,
                      key=lambda n: _FIRST_FIELDS.index(n) if n in _FIRST_FIELDS else len(_FIRST_FIELDS))
Conventions = make_dataclass(
    "Conventions", [(name, str, field(default=CONVENTION_SWITCHES[name].default)) for name in _FIELD_ORDER]
    + [("mtp", bool, field(default=False))], bases=(_ConventionMethods,), frozen=True)
Conventions.__module__ = __name__  # pickles and reprs as derivations.config.switches.Conventions
Conventions.__doc__ = ("The modelling assumptions, one field per switch of CONVENTION_SWITCHES (the paper's choice by "
                       "default) and mtp (count the D MTP layers in Megatron's shard).")


def validate_conventions(c: "Conventions") -> None:
    for k, spec in CONVENTION_SWITCHES.items():
        if getattr(c, k) not in spec.values:
            raise ConfigError(k, f"{spec.option} must be one of {', '.join(spec.values)}, got {getattr(c, k)!r}")
    if c.mtp and c.rank == "modelzoo":
        raise ConfigError("mtp", "--mtp counts the D MTP layers' parameters on the last stage (--rank stage) or in "
                                 "Megatron's most-loaded shard (--rank megatron); the ModelZoo rank counts none")


PRESETS = CONVENTION_PRESETS
ORDER = CONVENTION_ORDER


def switch_value(training, name: str):
    """The value of switch ``name`` (CONVENTION_ORDER) in ``training``."""
    if name == "attention":
        return training.attention
    if name == "bytes_per_param":
        return training.bytes_convention
    return getattr(training.conventions, name)


def with_switch(training, name: str, value):
    """``training`` with switch ``name`` set to ``value``."""
    if name == "attention":
        return replace(training, attention=value)
    if name == "bytes_per_param":
        return training.with_bytes_convention(value)
    return replace(training, conventions=replace(training.conventions, **{name: value}))


def with_preset(training, preset: str, mtp: bool = False):
    """``training`` with every switch of ``preset`` (and ``--mtp`` if asked under Megatron's rank)."""
    if preset not in PRESETS:
        raise ConfigError("conventions", f"conventions must be one of {', '.join(PRESETS)}, got {preset!r}")
    out = training
    for name, value in PRESETS[preset].items():
        out = with_switch(out, name, value)
    if mtp and out.conventions.rank == "megatron":
        out = with_switch(out, "mtp", True)
    return out


def preset_of(training) -> Optional[str]:
    """The preset whose every switch (the MTP ones aside) ``training`` has, else None."""
    for name, p in PRESETS.items():
        if all(switch_value(training, k) == val for k, val in p.items() if k not in ("mtp", "mtp_activations")):
            return name
    return None


def describe(name: str, value) -> str:
    """One line for a switch at a value: its option, value and what the paper does."""
    if name == "attention":
        return f"--attention {value}" + ("" if value == "eager" else " (the paper: eager, 5 b n_h s^2/TP)")
    if name == "bytes_per_param":
        return f"--bytes-per-param {value}" + ("" if value == "paper" else " (the paper: 2/4/4/2/2)")
    if name == "mtp":
        return "--mtp (the paper: no MTP parameters counted)" if value else "no MTP layer counted"
    spec = CONVENTION_SWITCHES[name]
    return f"{spec.option} {value}" + ("" if value == spec.default else f" (the paper: {spec.paper})")


def switches_json(training) -> Dict:
    """Every switch's value (JSON), and the preset they are, if any."""
    out = {name: switch_value(training, name) for name in ORDER}
    out["preset"] = preset_of(training)
    return out


def notes(training) -> List[str]:
    """An assumption line for each Conventions switch not at the paper's choice."""
    return [f"convention {describe(k, val)}" for k, val in training.conventions.changed()]
