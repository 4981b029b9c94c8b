"""Sec. 5: activations kept for the backward pass (Tables 9-10), in bytes: each view's terms per layer
(``act.mla.layer``, ``act.moe.layer``, ...), per stage and in flight (``act.stage``, ``act.peak``), from the tensor
lists (derivations/families/<family>/activations.py, derivations/tensors.py: one Part per tensor or printed group, bytes
per element and parallel degrees as symbols) kept by the views (:mod:`.views`). The paper's readings (Sec. 5, Tables
9-10):

  M_1^A = 4bsh/SP + 2bs(d_c' + d_c) + 4bs(d_h + d_h^R)n_h/TP + 2bs d_h n_h/TP
          + 5 b n_h s^2/TP + 2bs d_h n_h/TP + bsh/SP
  M_1^E = 4bsh/SP + 4bsN + 2bsN_r + (N/EP)(3 E_token h + 8 E_token h_E) + N_s(3bsh + 8bsh_E)
  M_2^A = 2bsh/SP,  M_2^E = 2bsh/SP + 2bsN_r  (full recomputation)"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Dict, Tuple

from derivations.config import Conventions
from derivations.families.deepseek import FAMILY as DEEPSEEK
from derivations.notation import SYMBOLS, D, L_d, L_m, e_H, n_fl
from symbolic.term import Part, Term, combine

from derivations.activations import shape as shapes
from derivations.activations.naming import activation_ids, kept, named, reduced  # noqa: F401  (the ids: pure)
from derivations.families.deepseek.activations import KEPT_FOR, SPECS, mla_specs, moe_specs  # noqa: F401 (the lists)
from derivations.tensors import dense_specs, head_specs  # noqa: F401
from derivations.activations.views import (  # noqa: F401
    CHECKPOINT_TAGS, EXT, FLASH, MLA, MOE, PAPER, PRESET_CONVENTIONS, View, apply, flatten)

# ----------------------------------------------------------------------------- terms
#: The family's kinds with terms of their own (derivations/families/deepseek/family.toml: layer_terms).
KINDS = {k.name: k for k in DEEPSEEK.layer_terms}


@lru_cache(maxsize=None)
def kind_parts(view: View, q_lora: bool = True) -> Dict[str, Tuple[Part, ...]]:
    """{kind: parts kept by ``view``} (``q_lora``: DeepSeek's flag, or a Shape)."""
    if isinstance(q_lora, shapes.Shape):
        return {kind: apply(view, q_lora.specs(kind)) for kind in q_lora.declared.kinds}
    return {kind: apply(view, specs(q_lora)) for kind, specs in SPECS.items()}


def view_terms(view: View, q_lora: bool = True) -> Dict[str, Term]:
    """See :func:`_view_terms` (cached per view: terms are immutable)."""
    return dict(_view_terms(view, q_lora))


@lru_cache(maxsize=None)
def _view_terms(view: View, q_lora: bool = True) -> Dict[str, Term]:
    """{kind: Term} of one view: its kinds, layer, stage and peak, named by :func:`naming.activation_ids`."""
    fam = shapes.family(q_lora)
    kinds = {k.name: k for k in fam.layer_terms}
    ids = activation_ids(view, q_lora)
    mtp_view = view if view.conv.mtp_activations == "last-stage" and "mtp" in fam.kinds else None
    view = named(replace(view, conv=replace(view.conv, mtp_activations="none")), q_lora)
    sfx = view.suffix
    mtp = mtp_view is not None
    out = {}
    all_parts, paper = kind_parts(view, q_lora), kind_parts(PAPER, q_lora)
    one = view.conv.checkpoints == "one"
    for kind, spec in kinds.items():
        base_id, what, prov = spec.id, spec.what, spec.provenance
        tid, label, parts = ids[kind], view.label, all_parts[kind]
        if sfx and tid == base_id:  # the paper's tensors: the paper's term (naming.activation_ids)
            label, parts = "no recomputation", paper[kind]
        elif tid != base_id + sfx:  # the same policy's under the paper's conventions: its term
            out[kind] = view_terms(replace(view, conv=Conventions()), q_lora)[kind]
            continue
        if sfx and view.recompute == "full" and spec.full is not None:
            keep = spec.full[1 if one else 0]
            label = f"full recomputation ({keep})" + (f", {view.conv_label}" if view.conv_label else "")
        if view.recompute == "full":
            prov = spec.full_provenance or prov
            if tid != base_id + ".full" and view.conv_label:
                prov = f"{prov}; {view.conv_label} (not the paper's)"
        elif tid != base_id:
            prov = f"{prov}; view: {view.label} (extension)"
        out[kind] = Term(tid, f"activation bytes of {what}, {label}", "bytes", prov, parts,
                         symbol=dict(spec.symbols).get(tid[len(base_id):], ""))
    policy = view.label
    if mtp:
        out["mtp"] = Term(f"act.mtp{sfx}", "activation bytes of one multi-token-prediction module's own tensors "
                          + ("(under full recomputation its checkpoint's inputs, its head and loss)"
                             if view.recompute == "full" else "(its transformer layer counted as one more layer)")
                          + f", {policy}", "bytes", f"{EXT}; Megatron-Core transformer/multi_token_prediction.py",
                          kind_parts(mtp_view, q_lora)["mtp"])
        policy += ", with the MTP modules (--mtp-activations last-stage)"
    tail = ".mtp" if mtp else ""
    layers = L_d + L_m if "moe" in fam.kinds else L_d
    per = {"layers": layers, "moe": L_m, "dense": L_d, "last": e_H,
           **{sym: SYMBOLS[sym] for sym, _, _ in fam.counts}}  # a family's own counts (DeepSeek-V4's L_C, L_H)
    out["layer"] = combine(f"act.layer{sfx}", f"activation bytes of one {fam.layer_what}, {policy}",
                           "bytes", "Sec. 5", [(k, kinds[k].label, 1, out[k]) for k in fam.layer])
    out["stage"] = combine(f"act.stage{sfx}{tail}",
                           f"activation bytes of one micro-batch on one device of a stage, {policy}",
                           "bytes", "Table 10",
                           [(k, kinds[k].label, per[kinds[k].per], out[k]) for k in kinds]
                           + ([("mtp_layer", "the MTP modules' transformer layers", e_H * D, out["layer"])]
                              if mtp and view.recompute != "full" else [])
                           + ([("mtp", "the MTP modules' own tensors", e_H * D, out["mtp"])] if mtp else []))
    out["peak"] = combine(f"act.peak{sfx}{tail}", f"activation bytes one device of a stage holds at its peak: n_fl "
                                            f"micro-batches in flight (pipeline schedule), {policy}", "bytes",
                          "extension: pipeline schedules (derivations/assembly/schedules.py)",
                          [("stage", "one micro-batch's activations of the stage", n_fl, out["stage"])])
    return out


#: Views registered by ``build`` (listed by ``memsym terms``); others are added on demand by :func:`ensure`.
REGISTERED = (PAPER, View("full"), View("selective"), View(attention="flash"), View(fp8=True))


def terms(reg, family, flags):
    """The activation terms of the :data:`REGISTERED` views of a family's structure."""
    q_lora = shapes.of(family.name, tuple(flags.values()))
    seen = set()
    for view in REGISTERED:
        for t in view_terms(view, q_lora).values():
            if t.id not in seen:
                seen.add(t.id)
                yield t
