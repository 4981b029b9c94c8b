"""The term ids of a view's activation terms (pure: read from the generated decision tables).

A view's terms are named by what it keeps (derivations/activations/kinds.py builds them with these
ids): conventions that change no kept tensor are left out of the ids (:func:`reduced`), a view
whose conventions are exactly one preset's is named by the preset (:func:`named`), and a kind
whose tensors equal the paper's (or, under other conventions, those of the same policy under the
paper's) keeps that term's id (:func:`activation_ids`).  "Keeps the same tensors" compares, tensor
by tensor, the expression each view makes of it (:func:`derivations.evaluate.kept`:
sympy's structural equality of the generated expressions), so no term is built to name one.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Dict

from derivations.activations.view import PAPER, PRESET_CONVENTIONS, View
from derivations.activations import shape as shapes
from derivations import evaluate
from derivations.config import CONVENTION_PRESETS, CONVENTION_SWITCHES, Conventions
from derivations.families.deepseek import FAMILY as DEEPSEEK

#: The kinds with terms of their own, and the id each has under the paper's view (the family's declaration:
#: derivations/families/deepseek/__init__.py, LAYER_TERMS).
BASE_IDS = {k.name: k.id for k in DEEPSEEK.layer_terms}


def kept(view: View, q_lora=True):
    """What ``view`` keeps of each kind: DeepSeek's (``q_lora`` its flag) from the generated tables
    (derivations/evaluate.py), another family's (``q_lora`` a :class:`~derivations.activations.shape.Shape`)
    from its tensor lists (derivations/activations/shape.py)."""
    return shapes.kept(view, q_lora) if shapes.is_shape(q_lora) else evaluate.kept(view, q_lora)


def _base_ids(q_lora) -> Dict[str, str]:
    return BASE_IDS if not shapes.is_shape(q_lora) else {k.name: k.id for k in shapes.kinds(q_lora)}


@lru_cache(maxsize=4096)
def reduced(view: View, q_lora: bool = True) -> View:
    """``view`` with every convention that changes no kept tensor under its policy reset to the
    paper's (full recomputation keeps no routed tensor, so ``dispatch`` does not name its terms)."""
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
    """{kind: term id} of a view's activation terms: mla, moe, dense, head (per layer or sublayer),
    mtp (the MTP modules' own tensors, under ``--mtp-activations last-stage``), layer (one MoE
    transformer layer), stage (one micro-batch on a device of a stage) and peak (n_fl of them).
    The MTP modules change no layer: the per-layer ids are the view's without them, the stage and
    peak ids end ``.mtp``.  (A new dict each call is not needed: callers copy what they keep.)"""
    mtp = view.conv.mtp_activations == "last-stage"
    view = named(replace(view, conv=replace(view.conv, mtp_activations="none")), q_lora)
    sfx = view.suffix
    parts, paper = kept(view, q_lora), kept(PAPER, q_lora)
    plain = replace(view, conv=Conventions())  # the same policy under the paper's conventions
    out = {}
    for kind, base_id in _base_ids(q_lora).items():
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
