"""Pipeline schedules: how many micro-batches' activations a device holds at its peak (extension).

The paper gives one micro-batch's activations of a stage (Table 10).  Under a pipeline
schedule a device holds the activations of every micro-batch whose forward pass it has
run and whose backward pass it has not: n_fl micro-batches "in flight", so the peak is
``act.peak = n_fl x act.stage`` (term ``act.peak<view>``).  Symbols: m = n_mb micro-batches
per step (gradient-accumulation steps), PP, i = i_s the stage index (0-based), V = VPP.

  1f1b         PipeDream-flush / Megatron 1F1B (Narayanan et al. 2021): stage i runs PP - i
               warm-up forwards before its first backward, so n_fl = min(m, PP - i): the
               first stage holds PP micro-batches, the last one.
  zb           zero-bubble ZB-H1 (Qi et al. 2023): the same peak as 1F1B (the DeepSeek-V3
               report's Table 2 lists ZB1P with activation PP); splitting the backward into
               B and W moves compute, not the count of held micro-batches.
  interleaved  Megatron's interleaved 1F1B with V model chunks per device: rank i runs
               2 (PP - i - 1) + (V - 1) PP warm-up chunk-forwards (capped at m V, Megatron's
               ``get_forward_backward_func``), one more before the first backward frees one;
               each chunk holds 1/V of the device's layers, so in units of the device's
               per-micro-batch activations n_fl = min(2 (PP - i - 1) + (V - 1) PP + 1, m V) / V.
               For i = 0 that is PP (1 + (PP - 1)/(PP V)): the first-stage penalty of
               Megatron's ``theoretical_memory_usage.py``.  Assumes the device's chunks are
               its PP stage's layers in V equal parts (Megatron's accounting).  The head
               (final norm, output layer, loss and the MTP modules: every e_H-weighted
               activation) is in the last chunk of the last rank, which runs each
               micro-batch's backward right after its forward (Megatron's
               ``forward_backward_pipelining_with_interleaving``: the last rank's warm-up ends
               with chunk V-1 of micro-batch 0, and in the steady state each of its forwards
               is followed by that micro-batch's backward), so the head is held for one
               micro-batch: part 'layers' at n_fl, part 'head' at 1.
  dualpipe     DualPipe (DeepSeek-V3 report Sec. 3.2.1, Table 2; github.com/deepseek-ai/DualPipe):
               rank i holds two stages, i (forward direction) and PP-1-i (reverse direction),
               so two copies of the parameters: weights, gradients (each copy accumulates
               its own, summed between the mirrored ranks) and optimizer states of both stages
               are on the device (we do not assume the two copies share ZeRO shards).  In
               DualPipe's schedule (its ``step``: nF0, nF0F1, nB1W1F1, then F0&B1 / F1&B0)
               rank i holds at its peak PP - i micro-batches of stage i and i + 1 of stage
               PP-1-i: PP + 1 in all (Table 2).  DualPipe needs PP even and m even, m >= 2 PP.

Without ``--microbatches`` we assume m is at least what fills the pipeline (the steady
state; said in the estimate's assumptions).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from fractions import Fraction
from typing import List, Optional, Tuple

from derivations.evaluate import inflight  # the formulas below, printed (derivations/generated)
from derivations.config import SCHEDULES, ConfigError
from derivations.config.layout import compose

TITLES = {
    "1f1b": "1F1B (PipeDream-flush, Megatron)",
    "interleaved": "interleaved 1F1B (Megatron virtual pipeline stages)",
    "dualpipe": "DualPipe (DeepSeek-V3 report, Table 2)",
    "zb": "zero-bubble ZB-H1 (peak as 1F1B)",
}

#: What of a stage's composition a chunk holds: 'all', its 'layers' (e_H = 0: the layers, and on the
#: first stage the embedding) or its 'head' (L_d = L_m = e_E = 0: the final norm, head, loss and MTP
#: modules, every e_H-weighted activation).  Every activation term is linear in the composition.
PARTS = ("all", "layers", "head")


@dataclass(frozen=True)
class Chunk:
    """What of pipeline stage ``stage`` the device holds (``part``, see :data:`PARTS`), with
    ``inflight`` micro-batches of those activations at the device's peak."""

    stage: int
    inflight: Fraction
    part: str = "all"

    def composition(self, comp):
        """``comp`` (the stage's StageComposition) reduced to this chunk's part."""
        return part_composition(comp, self.part)


def part_composition(comp, part: str):
    """``comp`` (a StageComposition) reduced to ``part`` (:data:`PARTS`)."""
    if part == "layers":
        return replace(comp, head=False)
    if part == "head":  # no layer: none of the family's layer counts either
        return replace(comp, dense=0, moe=0, embedding=False, extra=tuple((k, 0) for k, _ in comp.extra))
    return comp


@lru_cache(maxsize=None)
def formulas(name: str) -> Tuple[Tuple[str, object, str], ...]:
    """((which stage, in-flight formula, part), ...) of a schedule, in the symbols m, PP, i, V (built
    once: sympy's Min is slow to construct, and fit asks for every stage at every trial).  The numbers
    (:func:`chunks`) come from these formulas printed as Python (derivations/generate.py); sympy is
    imported here, for the formulas only.

    'own' is stage i; 'mirror' is stage PP - 1 - i (DualPipe only); part as :data:`PARTS`."""
    # lazy: sympy (estimate/params import no sympy)
    import sympy as sp

    from derivations.notation import PP, VPP, i_s, n_mb
    if name in ("1f1b", "zb"):
        return (("own", sp.Min(n_mb, PP - i_s), "all"),)
    if name == "interleaved":
        return (("own", sp.Min(2 * (PP - i_s - 1) + (VPP - 1) * PP + 1, n_mb * VPP) / VPP, "layers"),
                ("own", sp.Integer(1), "head"))
    if name == "dualpipe":
        return (("own", PP - i_s, "all"), ("mirror", i_s + 1, "all"))
    raise ConfigError("schedule", f"schedule must be one of {', '.join(SCHEDULES)}, got {name!r}")


def validate(name: str, pp: int, microbatches: Optional[int], vpp: Optional[int]) -> None:
    """The schedule's own constraints (ConfigError naming the one that fails)."""
    if name not in SCHEDULES:
        raise ConfigError("schedule", f"schedule must be one of {', '.join(SCHEDULES)}, got {name!r}")
    if name == "dualpipe":
        if pp % 2:
            raise ConfigError("dualpipe-pp", f"DualPipe needs an even number of pipeline stages, got PP={pp}")
        if microbatches is not None and (microbatches % 2 or microbatches < 2 * pp):
            raise ConfigError("dualpipe-microbatches", f"DualPipe needs an even number of micro-batches m >= 2 PP "
                                                       f"= {2 * pp}, got --microbatches {microbatches}")


@lru_cache(maxsize=4096)
def chunks(name: str, pp: int, index: int, microbatches: Optional[int] = None,
           vpp: Optional[int] = None) -> Tuple[Chunk, ...]:
    """The stages whose layers device ``index`` holds, each with its in-flight count (exact).

    ``microbatches`` None: at least enough to fill the pipeline (the steady state)."""
    validate(name, pp, microbatches, vpp)
    if name == "interleaved" and vpp is None:
        vpp = 2
    out = []
    for which, val, part in inflight(name, pp, index, microbatches, vpp or 1):
        stage = index if which == "own" else pp - 1 - index
        out.append(Chunk(stage, Fraction(val), part))
    return tuple(out)


def held_stages(name: Optional[str], pp: int, index: int) -> Tuple[int, ...]:
    """Stages whose parameters device ``index`` holds: (index,), or (index, PP-1-index) under DualPipe."""
    if name == "dualpipe":
        return (index, pp - 1 - index)
    return (index,)


def assumptions(name: str, pp: int, microbatches: Optional[int], vpp: Optional[int],
                virtual: bool = False) -> List[str]:
    """What the estimate had to assume about the schedule, in words (``virtual``: the chunks are
    given as Megatron's pipeline layout, --virtual-layers)."""
    out = []
    if microbatches is None:
        need = 2 * pp if name == "dualpipe" else pp
        out.append(f"micro-batches per step m not given (--microbatches): assumed >= {need}, enough to fill "
                   f"the {TITLES[name]} pipeline, so each stage holds its steady-state count")
    if name == "interleaved" and vpp is None:
        out.append("virtual stages V not given (--vpp): assumed V = 2")
    if name == "interleaved" and virtual:
        out.append("interleaved: the device's chunks as --virtual-layers (Megatron's pipeline layout); the peak is the "
                   "largest state of the rank's interleaved order, the head, loss and MTP modules with its last chunk")
    elif name == "interleaved":
        out.append("interleaved: the device's V chunks are its stage's layers in V equal parts (Megatron's "
                   "accounting); the head, loss and MTP modules (the last rank's last chunk) are held for one "
                   "micro-batch")
    if name == "dualpipe":
        out.append("DualPipe: device i holds stages i and PP-1-i (2x parameters; gradients and optimizer states of "
                   "both copies kept, not sharded between the mirrored ranks) and PP + 1 micro-batches in flight: "
                   "PP - i of stage i and i + 1 of stage PP-1-i (DualPipe's step())")
    if name == "zb":
        out.append("zero-bubble schedule taken as ZB-H1: the same in-flight micro-batches as 1F1B")
    return out


def virtual_chunks(model, layout, index: int, virtual_layers: Tuple[int, ...], vpp: Optional[int]):
    """The V chunks of rank ``index`` under Megatron's pipeline layout (``--pipeline-model-parallel-layout``,
    as the layer counts of its PP V virtual stages: virtual stage j holds the next ``virtual_layers[j]``
    layers and runs on rank j mod PP as its chunk j // PP): one StageComposition per chunk, of its layers
    (the embedding on virtual stage 0, the head on the last)."""
    pp, v = layout.pp, vpp or 2
    if len(virtual_layers) != pp * v:
        raise ConfigError("virtual-layers", f"--virtual-layers has {len(virtual_layers)} entries; PP x V = "
                                            f"{pp} x {v} = {pp * v} virtual stages")
    if sum(virtual_layers) != model.l:
        raise ConfigError("virtual-layers", f"--virtual-layers sums to {sum(virtual_layers)}, the model has "
                                            f"{model.l} layers")
    starts = [sum(virtual_layers[:j]) for j in range(pp * v)]
    out = []
    for c in range(v):
        j = c * pp + index
        layers = range(starts[j], starts[j] + virtual_layers[j])
        comp = compose(model, layers, j == 0, j == pp * v - 1, index)
        out.append(comp)
    return out


def interleaved_order(pp: int, v: int, m: int, index: int) -> List[Tuple[int, ...]]:
    """The chunks rank ``index`` holds after each of its forwards in Megatron-Core's interleaved 1F1B
    (pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving, micro-batch group
    size PP): the k-th forward runs chunk (k // PP) mod V, the k-th backward chunk V-1 - (k // PP) mod V;
    min(2 (PP - i - 1) + (V - 1) PP, m V) warm-up forwards, then a forward and a backward each.
    Each entry: the in-flight micro-batches of every chunk."""
    return _order(pp, v, m, index, m * v)


def distinct_states(pp: int, v: int, m: int, index: int) -> List[Tuple[int, ...]]:
    """The states of :func:`interleaved_order` up to the end of its first steady-state period: after the
    warm-up, each step adds a forward of chunk (f // PP) mod V and removes a backward of chunk
    V-1 - (b // PP) mod V with f - b constant, so the states repeat every PP V steps (each chunk gains
    and loses PP micro-batches per period).  The same largest state, in at most warm-up + PP V steps
    whatever m (a step of 2^20 micro-batches took minutes)."""
    warm = min(2 * (pp - index - 1) + (v - 1) * pp, m * v)
    return _order(pp, v, m, index, min(m * v, warm + pp * v))


def backward_states(pp: int, v: int, m: int, index: int) -> List[Tuple[Tuple[int, ...], int]]:
    """(state, chunk) for each steady-state step of :func:`distinct_states`: the chunks held after the step's
    forward and the chunk whose backward runs next (V-1 - (k // PP) mod V for the k-th backward)."""
    warm = min(2 * (pp - index - 1) + (v - 1) * pp, m * v)
    return [(st, v - 1 - (k // pp) % v) for k, st in enumerate(distinct_states(pp, v, m, index)[warm:])]


def _order(pp: int, v: int, m: int, index: int, until: int) -> List[Tuple[int, ...]]:
    """The first ``until`` states of the interleaved order of rank ``index`` (see :func:`interleaved_order`)."""
    total = m * v
    warm = min(2 * (pp - index - 1) + (v - 1) * pp, total)
    held, states, f, b = [0] * v, [], 0, 0
    while f < until:
        held[(f // pp) % v] += 1
        f += 1
        states.append(tuple(held))
        if f > warm:
            held[v - 1 - (b // pp) % v] -= 1
            b += 1
    return states


def rank_chunks(model, layout, training, comp):
    """The chunks of rank ``comp.index`` under ``--virtual-layers`` (:func:`virtual_chunks`), refused (ConfigError)
    when they are not the stage's dense and MoE counts or m is not a multiple of PP: checked before any term is
    evaluated."""
    chunks = virtual_chunks(model, layout, comp.index, training.virtual_layers, training.vpp)
    dense, moe = sum(c.dense for c in chunks), sum(c.moe for c in chunks)
    if (dense, moe) != (comp.dense, comp.moe):
        raise ConfigError("virtual-layers",
                              f"--virtual-layers gives stage {comp.index} {dense} dense and {moe} MoE layers, "
                              f"memsym's contiguous stage ({comp.label}) {comp.dense} and {comp.moe}: the layout is "
                              f"modelled when each rank holds the dense and MoE counts of a contiguous split "
                              f"(--layers-per-stage: the per-rank sums)")
    virtual_groups(layout.pp, training.microbatches)
    return chunks


def virtual_groups(pp: int, microbatches: Optional[int]) -> None:
    """--virtual-layers refused (ConfigError) when m is not a multiple of PP."""
    m = microbatches or 4 * pp
    if m % pp:
        raise ConfigError("virtual-layers", f"--virtual-layers simulates Megatron's interleaved order, which runs "
                                                f"micro-batches in groups of PP={pp}: --microbatches must be a "
                                                f"multiple of PP, got {m}")
