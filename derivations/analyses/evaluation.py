"""The search's evaluation (no sympy): every configuration's per-device memory by the printed assembly over numpy
arrays (exact.py), judged at its most-loaded stage (device, under a schedule) against the Sec. 6 peak
``(1 + f_frag) * total + M_buf``.  float64 evaluations of exact expressions: integers below 2^53 come out exact.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np

from derivations import config as cfg
from derivations import evaluate as ev
from derivations import families
from derivations.analyses import exact, kernels
from derivations.analyses.enumeration import Enumeration, enumerate_layouts
from derivations.assembly.overheads import named_values, peak


@dataclass
class SearchResult:
    """Every evaluated configuration (columns: the layout, edp, mbs, seq, zero, recompute (index into
    ``policies``, each as typed: ``custom:norm,mla_up``), stage (the most-loaded), the four components, total,
    peak, headroom (bytes, float64), fits) and the counts the command prints."""

    gpus: int
    hbm: int
    enumeration: Enumeration
    policies: Tuple[str, ...]
    overheads: Dict
    columns: Dict = field(repr=False, default_factory=dict)
    schedule: Optional[str] = None
    global_batch: Optional[int] = None
    #: configurations refused after enumeration, by rule (global-batch: m not an integer; dualpipe)
    invalid: Counter = field(default_factory=Counter)
    #: without a schedule, the (s, b) groups of each layout (rows: choices x layouts x groups); else None
    layout_groups: Optional[int] = None
    training: Optional[cfg.Training] = None  #: what the configurations ran under (schedule, m, attention kernel)
    #: --memory: {kind, capacity, terms_fitting, bytes: {row: memory of its configuration}} (ranking.ranked_judged)
    judged: Optional[Dict] = None

    @property
    def considered(self) -> int:
        return len(self.columns["total"])

    @property
    def fitting(self) -> int:
        return int(self.columns["fits"].sum())


def search(model: cfg.ModelSpec, gpus: int, hbm: int,
           choices: Iterable[Tuple[int, str]], *, mbs: Sequence[int] = (1, 2, 4),
           seqs: Sequence[int] = (4096,), training: cfg.Training | None = None, overheads: Mapping | None = None,
           enumeration: Enumeration | None = None, global_batch: Optional[int] = None) -> SearchResult:
    """Evaluate every valid configuration for ``gpus`` GPUs against ``hbm`` bytes.  ``choices``: the (ZeRO stage,
    policy) pairs (those ``training``'s options refuse left out: exact.choices); ``training``: the other settings;
    ``overheads``: {f_frag, M_buf} (Sec. 6).  With ``training.schedule`` or a ``global_batch`` (m = global_batch /
    (DP b)) every device is judged under the schedule; else each stage holds one micro-batch."""
    for name, values in (("--mbs", mbs), ("--seq", seqs)):
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise cfg.ConfigError("positive-integer", f"{name} values must be positive integers, got {list(values)}")
    enum = enumeration or enumerate_layouts(model, gpus, seqs)
    over = {getattr(k, "name", k): v for k, v in (overheads or {"f_frag": 0, "M_buf": 0}).items()}  # by name
    training = training or cfg.Training()
    accepted = exact.choices(training, list(choices))
    out, invalid, groups = exact.run(model, training, accepted, enum, seqs, mbs, global_batch)
    out["peak"] = peak(out["total"], float(over["f_frag"]), float(over["M_buf"]))
    out["headroom"] = lambda idx: hbm - out.take("peak", idx)
    out["fits"] = out["peak"] <= hbm
    if "microbatches" in out:  # the pipeline bubble fraction (PP - 1) / (m + PP - 1) of each configuration
        def bubble(idx):
            m, pp = out.take("microbatches", idx), out.take("pp", idx)
            return (pp - 1) / (np.where(m > 0, m, 10 ** 9).astype(np.float64) + pp - 1)
        out["bubble"] = bubble
    labels = tuple(dict.fromkeys(replace(training, recompute=r).recompute_label for _, r in accepted))
    return SearchResult(gpus, hbm, enum, labels, over, out,
                        schedule=training.schedule, global_batch=global_batch, invalid=invalid,
                        layout_groups=groups, training=training)


def pipeline(schedule=None, microbatches=None, vpp=None, global_batch=None, attention: str = "eager") -> cfg.Training:
    """The schedule part of a search or fit: with a global batch and no schedule, 1F1B (what
    Megatron-LM runs); a global batch and a fixed micro-batch count conflict."""
    if global_batch is not None:
        if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
            raise cfg.ConfigError("global-batch", f"--global-batch must be a positive integer, got {global_batch!r}")
        if microbatches is not None:
            raise cfg.ConfigError("global-batch", "give --global-batch (sequences per step: m = global / (DP mbs)) "
                                                  "or --microbatches, not both")
        schedule = schedule or "1f1b"
    cfg.validate_training(t := cfg.Training(schedule=schedule, microbatches=microbatches, vpp=vpp, attention=attention))
    return t


def _policies(recompute, ops: Tuple[str, ...] = ()) -> Tuple[str, ...]:
    """The recomputation policies of ``recompute`` (a comma-separated text; None: every named policy); custom
    only with its operators ``ops`` (a recipe's)."""
    known = kernels.policies() + (("custom",) if ops else ())
    if recompute is None:
        return known
    policies = tuple(dict.fromkeys(x.strip() for x in recompute.split(",") if x.strip()))
    bad = [x for x in policies if x not in known]
    if bad or not policies:
        raise cfg.ConfigError("recompute", f"--recompute must list policies among {', '.join(known)}, "
                                           f"got {recompute!r}")
    return policies


def configurations(model: cfg.ModelSpec, gpus: int, hbm: int, *, zeros=(0, 1, 2, 3), recompute=None,
                   mbs=(1, 2, 4), seqs=(4096,), overheads: str = "high", schedule=None, microbatches=None,
                   vpp=None, global_batch=None, gpus_per_node: Optional[int] = 8,
                   attention: str = "eager", options: Optional[cfg.Training] = None) -> SearchResult:
    """Every configuration of ``gpus`` GPUs (layouts x ZeRO stages ``zeros`` x policies ``recompute``, a
    comma-separated text or None for every named one, x ``mbs`` x ``seqs``) against ``hbm`` bytes at one end of the
    Sec. 6 ranges, TP and ETP inside a node of ``gpus_per_node``.  ``options``: a Training whose conventions,
    offloading, linear recipe, quantized gather, virtual layers, FP8 activations, bytes per element, routing skew F
    (every configuration at that upper end) and custom recomputation operators (tried as the policy custom) the
    configurations run under (exact.py)."""
    if model.family != ev.FAMILY:
        raise families.unsupported(model, "memsym search (checked for the DeepSeek family only)")
    ops = options.recompute_ops if options is not None else ()
    policies = _policies(recompute, ops)
    bad = [z for z in zeros if z not in cfg.ZERO_NAMES]
    if bad:
        raise cfg.ConfigError("zero", f"--zero must list ZeRO stages among 0,1,2,3, got {bad}")
    training = pipeline(schedule, microbatches, vpp, global_batch, attention)
    if options is not None:
        training = replace(training, conventions=options.conventions, offload=options.offload,
                           linear_recipe=options.linear_recipe, quantized_params=options.quantized_params,
                           virtual_layers=options.virtual_layers, fp8=options.fp8, bytes=options.bytes,
                           imbalance=options.imbalance, recompute="custom" if ops else training.recompute,
                           recompute_ops=ops)
        cfg.validate_training(training)
    if gpus_per_node is not None and (isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int)
                                      or not 1 <= gpus_per_node <= 1024):
        raise cfg.ConfigError("gpus-per-node", f"--gpus-per-node must be an integer in 1..1024, got {gpus_per_node!r}")
    zeros = tuple(dict.fromkeys(zeros))
    seqs = tuple(dict.fromkeys(seqs))
    enum = enumerate_layouts(model, gpus, seqs, gpus_per_node)
    return search(model, gpus, hbm, [(z, r) for z in zeros for r in policies], mbs=tuple(dict.fromkeys(mbs)),
                  seqs=seqs, training=training, overheads=named_values(overheads), enumeration=enum,
                  global_batch=global_batch)
