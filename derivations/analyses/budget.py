"""Will it fit?  A configuration against a memory budget (``estimate --hbm/--gpu``), judged at its most-loaded
device at the step's peak at each end of the Sec. 6 ranges; when it does not fit at the high end, the cheapest
single change that fits, each checked exactly: more recomputation, the next ZeRO stage, a smaller micro-batch,
then one layout step on the same GPUs (TP, PP, CP doubled with DP halved, or EP doubled).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Dict, List, Optional, Tuple

from symbolic.units import GiB

from derivations import config as cfg
from derivations.assembly import device
from derivations.assembly.overheads import at_ends
from symbolic.exact import as_number

ENDS = ("none", "low", "high")
RECOMPUTE_ORDER = ("none", "selective", "full")


@dataclass
class Verdict:
    """hbm: the budget (bytes); stage: the most-loaded device's stage index; total: its bytes
    without overheads; peaks: {end: peak bytes}; change: the cheapest single change that fits at
    the high end (None when it fits, or when no single change does); tried: every change tried."""

    hbm: int
    gpu: object
    stage: int
    total: Fraction
    peaks: Dict[str, Fraction]
    change: Optional[Dict] = None
    tried: List[Dict] = field(default_factory=list)

    @property
    def fits(self) -> Dict[str, bool]:
        return {e: self.peaks[e] <= self.hbm for e in ENDS}

    def to_json(self) -> Dict:
        return {"budget": {"hbm": self.hbm, "gib": float(Fraction(self.hbm) / GiB),
                           "gpu": self.gpu.to_json() if self.gpu is not None else None},
                "fits": self.fits,
                "headroom": {e: {"bytes": as_number(self.hbm - self.peaks[e]),
                                 "gib": float((self.hbm - self.peaks[e]) / GiB)} for e in ENDS},
                "verdict_stage": self.stage,
                "cheapest_change": self.change, "changes_tried": self.tried}


def peaks(model, layout, training) -> Tuple[int, Fraction, Dict[str, Fraction]]:
    """(most-loaded stage, its total at the step's peak, {end: peak}) of a configuration (exact): the end of the
    forward plus the step excess (derivations/assembly/step_terms.py: a backward's moment)."""
    every, worst = device.estimate_all(model, layout, training)
    total = every[worst].bytes["step_total"]  # the step's peak: the end of the forward + the step excess
    ends = at_ends(total)
    return worst, total, {"none": total, "low": ends["low"]["peak"], "high": ends["high"]["peak"]}


def _candidates(model, layout, training):
    """(option text, layout, training) of every single change, cheapest first."""
    pol = training.recompute if training.recompute in RECOMPUTE_ORDER else None
    if pol is not None:
        for r in RECOMPUTE_ORDER[RECOMPUTE_ORDER.index(pol) + 1:]:
            yield f"--recompute {r}", layout, replace(training, recompute=r, recompute_ops=())
    for z in range(training.zero + 1, 4):
        yield f"--zero {z}", layout, replace(training, zero=z)
    for b in range(training.mbs - 1, 0, -1):
        yield f"--mbs {b}", layout, replace(training, mbs=b)
    steps = []
    if layout.dp % 2 == 0:
        steps += [("tp", "--tp"), ("pp", "--pp"), ("cp", "--cp"), ("ep", "--ep")]
    for fld, opt in steps:
        kw = {fld: getattr(layout, fld) * 2}
        if fld != "ep":
            kw["dp"] = layout.dp // 2
        new = replace(layout, **kw)
        text = f"{opt} {kw[fld]}" + (f" --dp {kw['dp']}" if "dp" in kw else "")
        yield text, new, training


def verdict(model, layout, training, hbm: int, gpu=None, search_changes: bool = True) -> Verdict:
    """The :class:`Verdict` of a configuration against ``hbm`` bytes."""
    stage, total, pk = peaks(model, layout, training)
    out = Verdict(hbm, gpu, stage, total, pk)
    if pk["high"] <= hbm or not search_changes:
        return out
    for text, lay, tr in _candidates(model, layout, training):
        try:
            cfg.validate_layout(model, lay, tr.seq)
            s2, _, p2 = peaks(model, lay, tr)
        except cfg.ConfigError as exc:
            out.tried.append({"option": text, "valid": False, "reason": str(exc)})
            continue
        fits = p2["high"] <= hbm
        out.tried.append({"option": text, "valid": True, "fits": fits, "peak_high": as_number(p2["high"]),
                          "stage": s2})
        if fits:
            out.change = {"option": text, "peak_high": as_number(p2["high"]),
                          "headroom_high": as_number(hbm - p2["high"]), "stage": s2}
            break
    return out
