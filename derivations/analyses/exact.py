"""The search under the options its numpy kernels do not print: a conventions preset or switches other than the
paper's, ``--offload-activations``, ``--linear-recipe`` (``--quantized-param-gather``) and ``--virtual-layers``.

The generated kernels (derivations/analyses/kernels.py) hold the terms of the default training only.  Under any of
these options every configuration's devices are evaluated by the one printed per-device assembly, exactly as
``memsym estimate`` evaluates them (derivations/assembly/device.py ``components``: the assembly of
derivations/assembly/device_terms.py with the options' terms, generated into derivations/generated/), and the
search's columns are those exact numbers as float64.  So a row is ``estimate`` of its configuration at its
most-loaded stage (device under a schedule), byte for byte.  Each device's activations and step are evaluated
once per (layout, stage, b, s, policy) and its model states once per ZeRO stage; a (ZeRO stage, policy) the options
refuse (offloading under full recomputation, a linear recipe under ZeRO-3) is left out, and a layout they refuse
(a --virtual-layers list of another length than PP x V, or not the stage's counts; m not a multiple of PP) is
counted invalid.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from fractions import Fraction
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from derivations import config as cfg
from derivations.analyses.enumeration import Enumeration, distinct_stages
from derivations.assembly import device

#: The columns the search's rows read (derivations/analyses/rows.py), as the kernels' paths fill them.
COMPONENTS = ("weights", "gradients", "optimizer", "activations")


def needed(training: cfg.Training) -> bool:
    """Whether ``training`` sets anything the generated kernels do not hold (then the search runs here)."""
    return (training.conventions != cfg.Conventions() or bool(training.offload) or training.linear_recipe is not None
            or training.quantized_params or training.virtual_layers is not None)


def choices(training: cfg.Training, pairs: Sequence[Tuple[int, str]]) -> List[Tuple[int, str]]:
    """The (ZeRO stage, policy) pairs ``training``'s options accept (config.validate_training); the first refusal
    is raised when they accept none."""
    out, first = [], None
    for z, r in pairs:
        try:
            cfg.validate_training(replace(training, zero=z, recompute=r, recompute_ops=()))
        except cfg.ConfigError as e:
            first = first or e
            continue
        out.append((z, r))
    if not out and first is not None:
        raise first
    return out


class _Devices:
    """Each device's exact bytes at one (layout, b, s, m, policy): the step's peak and its parts at the first ZeRO
    stage (device.components), the model states at the others (device.model_states), each computed once."""

    def __init__(self, model, training: cfg.Training):
        self.model, self.training = model, training
        self.memo: Dict = {}

    def at(self, layout: cfg.Layout, training: cfg.Training, index: int, zero: int) -> Dict[str, Fraction]:
        key = (layout, training.mbs, training.seq, training.microbatches, training.recompute, index)
        if key not in self.memo:
            self.memo[key] = {"zero": zero, **device.components(self.model, layout, replace(training, zero=zero),
                                                                 index)}
        got = self.memo[key]
        if got["zero"] == zero:
            return got
        states = device.model_states(self.model, layout, replace(training, zero=zero), index)
        out = dict(got, **states)
        out["step_total"] = got["step_total"] - sum(got[k] for k in states) + sum(states.values())
        return out


def _row(layout, b, s, z, ri, stage, got, m=None) -> Dict:
    out = {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "etp": layout.etp, "cp": layout.cp,
           "sp": layout.tp, "seq": s, "mbs": b, "edp": layout.dp * layout.tp * layout.cp // (layout.ep * layout.etp),
           "zero": z, "recompute": ri, "stage": stage}
    for k in ("weights", "gradients", "optimizer"):
        out[k] = got[k]
    out["activations"] = got["activations"] + got["step"]  # the step's peak, as the kernels' rows
    out["total"] = got["step_total"]
    if m is not None:
        out["microbatches"] = m
    return out


def _columns(rows: List[Dict], keys: Sequence[str]) -> Dict[str, np.ndarray]:
    ints = {"dp", "tp", "pp", "ep", "etp", "cp", "sp", "seq", "mbs", "edp", "zero", "recompute", "stage",
            "microbatches"}
    return {k: (np.array([r[k] for r in rows], dtype=np.int64) if k in ints else
                np.array([float(r[k]) for r in rows], dtype=np.float64)) for k in keys}


def run(model, training: cfg.Training, pairs: Sequence[Tuple[int, str]], enum: Enumeration, seqs, mbs,
        global_batch: Optional[int] = None, progress=None) -> Tuple[Dict, Counter, Optional[int]]:
    """({column: array}, invalid configurations by rule, (s, b) groups per layout or None): every configuration of
    the layouts ``enum`` x ``seqs`` x ``mbs`` x the accepted ``pairs`` at its most-loaded stage (first on ties), or
    under a schedule (``training.schedule`` or ``global_batch``) its most-loaded device."""
    pairs = choices(training, pairs)
    zeros = sorted({z for z, _ in pairs})
    policies = tuple(dict.fromkeys(r for _, r in pairs))
    present = [(z, ri, r) for z in zeros for ri, r in enumerate(policies) if (z, r) in pairs]
    devices = _Devices(model, training)
    invalid: Counter = Counter()
    scheduled = bool(training.schedule) or global_batch is not None
    keys = ["dp", "tp", "pp", "ep", "etp", "cp", "sp", "seq", "mbs", "edp", *COMPONENTS, "total", "zero",
            "recompute", "stage"] + (["microbatches"] if scheduled else [])
    rows: List[Dict] = []
    layouts = enum.layouts
    if not scheduled:  # the paper's view: choices x layouts x (s, b) groups, in the kernels' order
        for z, ri, r in present:
            for li, layout in enumerate(layouts):
                stages = distinct_stages(model, layout)
                for s in seqs:
                    for b in mbs:
                        tr = replace(training, mbs=b, seq=s, recompute=r, recompute_ops=())
                        got = [devices.at(layout, tr, st.index, z) for st in stages]
                        k = max(range(len(got)), key=lambda i: (got[i]["step_total"], -i))
                        rows.append(_row(layout, b, s, z, ri, stages[k].index, got[k]))
                if progress:
                    progress(li + 1, len(layouts))
        return _columns(rows, keys), invalid, len(seqs) * len(mbs)
    schedule = training.schedule or "1f1b"
    for li, layout in enumerate(layouts):
        for s in seqs:
            for b in mbs:
                m = training.microbatches
                if global_batch is not None:
                    if global_batch % (layout.dp * b):
                        invalid["global-batch"] += 1
                        continue
                    m = global_batch // (layout.dp * b)
                tr = replace(training, schedule=schedule, microbatches=m, mbs=b, seq=s)
                done = []
                try:
                    for z, ri, r in present:
                        t = replace(tr, recompute=r, recompute_ops=())
                        got = [devices.at(layout, t, i, z) for i in range(layout.pp)]
                        k = max(range(len(got)), key=lambda i: (got[i]["step_total"], -i))
                        done.append(_row(layout, b, s, z, ri, k, got[k], -1 if m is None else m))
                except cfg.ConfigError as e:  # a layout or m the schedule or the virtual stages refuse
                    invalid[e.constraint] += 1
                    continue
                rows += done
        if progress:
            progress(li + 1, len(layouts))
    return _columns(rows, keys), +invalid, None
