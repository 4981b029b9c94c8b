"""Per-device totals: Sections 3-6 assembled for one stage of one layout.

``estimate`` evaluates, exactly, the terms that make up the memory of one device of a
pipeline stage: its parameters (P_n, P_m; Table 6), the bytes of weights, gradients and
optimizer states under the chosen ZeRO stage (Table 8), one micro-batch's activations
(Table 10 generalised to any stage) and the Sec. 6 overheads at both ends of the
paper's ranges.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Dict, Optional

from symbolic import config as cfg
from symbolic.notation import M_buf, f_frag
from symbolic.numeric import as_number, exact

from . import build
from .overheads import RANGES
from .zero import component_terms


def activation_term_id(kind: str, recompute: str) -> str:
    """``act.stage`` / ``act.stage.full`` (and the per-layer ``act.layer`` ...)."""
    return f"act.{kind}" + ("" if recompute == "none" else f".{recompute}")


@dataclass
class Estimate:
    model: cfg.ModelSpec
    layout: cfg.Layout
    training: cfg.Training
    stage: cfg.StageComposition
    params: Dict[str, Fraction]
    bytes: Dict[str, Fraction]
    overheads: Dict[str, Dict[str, Fraction]]
    term_ids: Dict[str, str]
    subs: Dict = field(repr=False, default_factory=dict)

    def to_json(self) -> Dict:
        num = lambda x: as_number(x) if isinstance(x, Fraction) and x.denominator == 1 else float(x)
        st = self.stage
        return {
            "model": self.model.name,
            "layout": {"dp": self.layout.dp, "tp": self.layout.tp, "pp": self.layout.pp, "ep": self.layout.ep,
                       "etp": self.layout.etp, "cp": self.layout.cp, "sp": self.layout.SP,
                       "edp": num(self.layout.edp)},
            "training": {"mbs": self.training.mbs, "seq": self.training.seq, "zero": self.training.zero,
                         "zero_name": cfg.ZERO_NAMES[self.training.zero], "recompute": self.training.recompute,
                         "bytes_per_element": dict(self.training.bytes)},
            "stage": {"index": st.index, "layers": [st.layers.start, st.layers.stop - 1], "dense_layers": st.dense,
                      "moe_layers": st.moe, "embedding": st.embedding, "head": st.head},
            "params": {k: num(v) for k, v in self.params.items()},
            "bytes": {k: num(v) for k, v in self.bytes.items()},
            "gib": {k: float(v / cfg.GiB) for k, v in self.bytes.items()},
            "overheads": {end: {k: num(v) for k, v in d.items()} for end, d in self.overheads.items()},
            "terms": dict(self.term_ids),
        }


def estimate(model: cfg.ModelSpec, layout: cfg.Layout, training: cfg.Training, stage_index: int = 1) -> Estimate:
    cfg.validate_layout(model, layout, training.seq)
    cfg.validate_training(training)
    comp = cfg.stage(model, layout, stage_index)
    terms = build(model)
    subs = cfg.substitution(model, layout, training, comp)
    P_n = exact(terms["static.device.non_moe"], subs)
    P_m = exact(terms["static.device.moe"], subs)
    ids = component_terms(training.zero)
    ids["activations"] = activation_term_id("stage", training.recompute)
    ids["activations_per_layer"] = activation_term_id("layer", training.recompute)
    out = {k: exact(terms[t], subs) for k, t in ids.items()}
    byts = {"weights": out["weights"], "gradients": out["gradients"], "optimizer": out["optimizer"],
            "activations": out["activations"]}
    byts["total"] = sum(byts.values())
    byts["activations_per_layer"] = out["activations_per_layer"]
    over = {}
    for end, i in (("low", 0), ("high", 1)):
        f, buf = RANGES["f_frag"][i], RANGES["M_buf"][i]
        frag = byts["total"] * f
        over[end] = {"f_frag": f, "fragmentation": frag, "buffers": buf, "peak": byts["total"] + frag + buf}
    return Estimate(model, layout, training, comp, {"non_moe": P_n, "moe": P_m, "total": P_n + P_m}, byts, over,
                    ids, subs)


def stage_params(model: cfg.ModelSpec, layout: cfg.Layout, accounting: str = "paper"):
    """Parameters of every stage (Table 4 for PP=16) and of the whole model (Table 3)."""
    if accounting not in ("paper", "checkpoint"):
        raise cfg.ConfigError("accounting", f"accounting must be paper or checkpoint, got {accounting!r}")
    terms = build(model)
    tid = "params.stage" if accounting == "paper" else "params.stage.checkpoint"
    term = terms[tid]
    rows = []
    for comp in cfg.stages(model, layout):
        subs = cfg.substitution(model, None, None, comp)
        parts = {p.key: exact(p.expr, subs) for p in term.parts}
        rows.append((comp, exact(term, subs), parts))
    whole = cfg.whole_model(model)
    total = exact(term, cfg.substitution(model, None, None, whole))
    assert total == sum(r[1] for r in rows), "stage split does not add up to the model"
    return rows, total
