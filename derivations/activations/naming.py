"""The term ids of a view's activation terms (pure: read from the generated decision tables): conventions that change no
kept tensor are left out (:func:`reduced`), a view of exactly one preset's conventions is named by it (:func:`named`),
and a kind keeping the paper's tensors keeps the paper's id (:func:`activation_ids`)."""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Dict

from derivations.activations.view import PAPER, PRESET_CONVENTIONS, View
from derivations.activations import shape as shapes
from derivations import evaluate
from derivations.config import CONVENTION_PRESETS, CONVENTION_SWITCHES, Conventions

def kept(view: View, q_lora=True):
    """What ``view`` keeps of each kind (generated tables, or a Shape's tensor lists)."""
    return shapes.kept(view, q_lora) if isinstance(q_lora, shapes.Shape) else evaluate.kept(view, q_lora)


@lru_cache(maxsize=4096)
def reduced(view: View, q_lora: bool = True) -> View:
    """``view`` with every convention that changes no kept tensor under its policy reset to the paper's."""
    if not view.conv.changed():
        return replace(view, preset="")
    parts, conv = kept(view, q_lora), view.conv
    for k, _ in view.conv.changed():
        trial = replace(view, conv=replace(conv, **{k: CONVENTION_SWITCHES[k].default}))
        if kept(trial, q_lora) == parts:
            conv = trial.conv
    return replace(view, conv=conv, preset="")


@lru_cache(maxsize=4096)
def named(view: View, q_lora: bool = True) -> View:
    """:func:`reduced`, with ``preset`` set when the conventions are (reduced) exactly one preset's."""
    view = reduced(view, q_lora)
    if not view.conv.changed():
        return view
    kernel_matters = view.recompute != "full" and "score" not in view.dropped
    names = [n for n, c in PRESET_CONVENTIONS.items()
             if reduced(replace(view, conv=c), q_lora).conv == view.conv
             and (not kernel_matters or view.attention == CONVENTION_PRESETS[n]["attention"])]
    return replace(view, preset=names[0]) if len(names) == 1 else view


@lru_cache(maxsize=1024)
def activation_ids(view: View, q_lora: bool = True) -> Dict[str, str]:
    """{kind: term id} of a view's terms; with the MTP modules only the stage and peak ids end ``.mtp``."""
    mtp = view.conv.mtp_activations == "last-stage"
    view = named(replace(view, conv=replace(view.conv, mtp_activations="none")), q_lora)
    sfx = view.suffix
    parts, paper = kept(view, q_lora), kept(PAPER, q_lora)
    plain = replace(view, conv=Conventions())  # the same policy under the paper's conventions
    out = {}
    for kind, base_id in ((k.name, k.id) for k in shapes.family(q_lora).layer_terms):
        if sfx and parts[kind] == paper[kind]:
            out[kind] = base_id
        elif sfx != plain.suffix and parts[kind] == kept(plain, q_lora)[kind]:
            out[kind] = activation_ids(plain, q_lora)[kind]
        else:
            out[kind] = base_id + sfx
    mtp = mtp and "mtp" in shapes.family(q_lora).kinds
    tail = ".mtp" if mtp else ""
    if mtp:
        out["mtp"] = f"act.mtp{sfx}"
    out["layer"] = f"act.layer{sfx}"
    out["stage"] = f"act.stage{sfx}{tail}"
    out["peak"] = f"act.peak{sfx}{tail}"
    return out
