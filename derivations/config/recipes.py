"""Recipes (``--recipe``): named layouts and training choices as data, each with its source and the assumptions it
had to make where the source is silent (``memsym estimate --recipe NAME`` lists those that still hold)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from symbolic import tomlfile

from derivations import config as cfg


@dataclass(frozen=True)
class Recipe:
    """A recipe of recipes.toml (whose header says what each field is); device: (name, bytes) or None."""

    name: str
    description: str
    provenance: str
    options: Dict[str, object]
    assumptions: Tuple[Tuple[str, str], ...] = ()
    device: Optional[Tuple[str, int]] = None

    def assumptions_for(self, typed: Iterable[str] = ()) -> List[str]:
        typed = set(typed)
        return [f"recipe {self.name}: {text}" for dest, text in self.assumptions if not dest or dest not in typed]


def _paper_options() -> Dict[str, object]:
    """The command-line options of the paper's configuration: the Layout and Training defaults."""
    lay, tr = cfg.Layout(), cfg.Training()
    byts = dict(tr.bytes)
    return dict(model=cfg.DEFAULT_MODEL, dp=lay.dp, tp=lay.tp, pp=lay.pp, ep=lay.ep, etp=lay.etp, cp=lay.cp,
                sp=lay.sp, layers_per_stage=lay.layers_per_stage, zero=tr.zero,
                recompute=(tr.recompute, tuple(tr.recompute_ops)), attention=tr.attention, mbs=tr.mbs, seq=tr.seq,
                imbalance=tr.imbalance, schedule=tr.schedule, microbatches=tr.microbatches, vpp=tr.vpp,
                weight_dtype=byts["B_w"], grad_dtype=byts["B_g"], master_dtype=byts["B_m"],
                optimizer_dtype=byts["B_1"], act_dtype=byts["B_a"], fp8_activations=tr.fp8)


_PAPER_OPTIONS = _paper_options()


def _read(path: Path = Path(__file__).with_name("recipes.toml")) -> Dict[str, Recipe]:
    """The recipes of recipes.toml, each one's options over the paper's."""
    out = {}
    with tomlfile.package_data(path) as data:
        for name, r in data.items():
            options = dict(_PAPER_OPTIONS, **r.get("options", {}))
            if isinstance(options["recompute"], str):
                options["recompute"] = cfg.parse_recompute(options["recompute"])
            device = (r["device"][0], cfg.parse_size(r["device"][1])) if "device" in r else None
            out[name] = Recipe(name, r["description"], r["provenance"], options,
                               tuple(tuple(a) for a in r.get("assumptions", ())), device)
    return out


RECIPES: Dict[str, Recipe] = _read()

