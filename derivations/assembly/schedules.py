"""Pipeline schedules: how many micro-batches' activations a device holds at its peak (extension).

Under a schedule a device holds every micro-batch whose forward it has run and whose backward it has not: n_fl in
flight, ``act.peak = n_fl x act.stage``. Symbols: m = n_mb micro-batches per step, PP, i = i_s the stage (0-based), V =
VPP.

  1f1b         PipeDream-flush / Megatron 1F1B (Narayanan et al. 2021): n_fl = min(m, PP - i).
  zb           zero-bubble ZB-H1 (Qi et al. 2023): the peak of 1F1B (DeepSeek-V3 report Table 2: ZB1P, PP).
  interleaved  Megatron's interleaved 1F1B, V chunks per device (``get_forward_backward_func``):
               n_fl = min(2 (PP - i - 1) + (V - 1) PP + 1, m V) / V in units of the device's layers (i = 0:
               PP (1 + (PP - 1)/(PP V)), ``theoretical_memory_usage.py``); the head, loss and MTP modules (the
               last rank's last chunk, whose backward follows each forward:
               ``forward_backward_pipelining_with_interleaving``) at 1.
  dualpipe     DualPipe (DeepSeek-V3 report Sec. 3.2.1, Table 2; github.com/deepseek-ai/DualPipe ``step``): rank i
               holds stages i and PP-1-i (both copies' weights, gradients and optimizer states, unsharded) and
               PP - i + i + 1 = PP + 1 micro-batches; PP even, m even and >= 2 PP.

Without ``--microbatches`` m is assumed to fill the pipeline (the steady state; said in the assumptions)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from fractions import Fraction
from typing import List, Optional, Tuple

from derivations.evaluate import inflight  # the formulas below, printed (derivations/generated)
from derivations.config import SCHEDULES, ConfigError
from derivations.config.layout import compose

#: Where m comes from, as a refusal names it (typed, or derived from the global batch).
M_FROM = "--microbatches, or --global-batch / (DP mbs)"
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
    """What of pipeline stage ``stage`` the device holds (``part``: :data:`PARTS`), ``inflight`` times."""

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
    """((which: 'own' | 'mirror' (stage PP-1-i), in-flight formula, part), ...) of a schedule in m, PP, i, V; printed as
    Python by derivations/generate.py for :func:`chunks`."""
    # lazy: sympy (estimate/params import no sympy)
    import sympy as sp

    from derivations.notation import PP, VPP, i_s, n_mb
    one_f_one_b = (("own", sp.Min(n_mb, PP - i_s), "all"),)
    return {"1f1b": one_f_one_b, "zb": one_f_one_b,
            "interleaved": (("own", sp.Min(2 * (PP - i_s - 1) + (VPP - 1) * PP + 1, n_mb * VPP) / VPP, "layers"),
                            ("own", sp.Integer(1), "head")),
            "dualpipe": (("own", PP - i_s, "all"), ("mirror", i_s + 1, "all"))}[name]


def validate(name: str, pp: int, microbatches: Optional[int], vpp: Optional[int]) -> None:
    """The schedule's own constraints (ConfigError naming the one that fails)."""
    if name not in SCHEDULES:
        raise ConfigError("schedule", f"schedule must be one of {', '.join(SCHEDULES)}, got {name!r}")
    if name == "dualpipe":
        if pp % 2:
            raise ConfigError("dualpipe-pp", f"DualPipe needs an even number of pipeline stages, got PP={pp}")
        if microbatches is not None and (microbatches % 2 or microbatches < 2 * pp):
            raise ConfigError("dualpipe-microbatches", f"DualPipe needs an even number of micro-batches m >= 2 PP "
                                                       f"= {2 * pp}, got m = {microbatches} ({M_FROM})")


@lru_cache(maxsize=4096)
def chunks(name: str, pp: int, index: int, microbatches: Optional[int] = None,
           vpp: Optional[int] = None) -> Tuple[Chunk, ...]:
    """The stages device ``index`` holds, each with its exact in-flight count (``microbatches`` None: steady state)."""
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
    return (index, pp - 1 - index) if name == "dualpipe" else (index,)


def assumptions(name: str, pp: int, microbatches: Optional[int], vpp: Optional[int],
                virtual: bool = False) -> List[str]:
    """What the estimate assumed of the schedule (``virtual``: --virtual-layers), in words."""
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
    """Rank ``index``'s V chunks under Megatron's ``--pipeline-model-parallel-layout`` (virtual stage j holds the next
    ``virtual_layers[j]`` layers, on rank j mod PP as chunk j // PP), one StageComposition each."""
    pp, v = layout.pp, vpp or 2
    if len(virtual_layers) != pp * v:
        raise ConfigError("virtual-layers", f"--virtual-layers has {len(virtual_layers)} entries; PP x V = "
                                            f"{pp} x {v} = {pp * v} virtual stages")
    if sum(virtual_layers) != model.l:
        raise ConfigError("virtual-layers", f"--virtual-layers sums to {sum(virtual_layers)}, the model has "
                                            f"{model.l} layers")
    starts = [sum(virtual_layers[:j]) for j in range(pp * v)]
    return [compose(model, range(starts[j], starts[j] + virtual_layers[j]), j == 0, j == pp * v - 1, index)
            for j in range(index, pp * v, pp)]


def _warm(pp: int, v: int, m: int, index: int) -> int:
    """The warm-up forwards of rank ``index``: min(2 (PP - i - 1) + (V - 1) PP, m V)."""
    return min(2 * (pp - index - 1) + (v - 1) * pp, m * v)


def interleaved_order(pp: int, v: int, m: int, index: int, until: Optional[int] = None) -> List[Tuple[int, ...]]:
    """The chunks rank ``index`` holds after each forward (the first ``until``) of Megatron-Core's interleaved 1F1B
    (pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving): forward k runs chunk (k // PP) mod
    V, backward k chunk V-1 - (k // PP) mod V, after :func:`_warm` warm-up forwards."""
    warm, until = _warm(pp, v, m, index), m * v if until is None else until
    held, states, f, b = [0] * v, [], 0, 0
    while f < until:
        held[(f // pp) % v] += 1
        f += 1
        states.append(tuple(held))
        if f > warm:
            held[v - 1 - (b // pp) % v] -= 1
            b += 1
    return states


def distinct_states(pp: int, v: int, m: int, index: int) -> List[Tuple[int, ...]]:
    """:func:`interleaved_order` up to the end of its first steady-state period: the states repeat every PP V steps, so
    this has the same largest state whatever m."""
    return interleaved_order(pp, v, m, index, min(m * v, _warm(pp, v, m, index) + pp * v))


def backward_states(pp: int, v: int, m: int, index: int) -> List[Tuple[Tuple[int, ...], int]]:
    """(state, chunk whose backward runs next) for each steady-state step of :func:`distinct_states`."""
    warm = _warm(pp, v, m, index)
    return [(st, v - 1 - (k // pp) % v) for k, st in enumerate(distinct_states(pp, v, m, index)[warm:])]


def interleaved_peak(pp: int, m: int, index: int, layer_bytes, head, with_layers):
    """(the largest bytes held, its state, the largest held before the backward of a chunk with layers, or 0) of rank
    ``index``'s interleaved order (:func:`distinct_states`: every state has the same largest), a micro-batch of chunk c
    holding ``layer_bytes[c]`` and of the last chunk ``head`` more; ``with_layers[c]``: chunk c holds a layer."""
    v = len(layer_bytes)
    held_at = lambda state: sum(n * a for n, a in zip(state, layer_bytes)) + state[-1] * head  # noqa: E731
    best, best_state = None, None
    for state in distinct_states(pp, v, m, index):
        if best is None or held_at(state) > best:
            best, best_state = held_at(state), state
    before = max((held_at(st) for st, c in backward_states(pp, v, m, index) if with_layers[c]), default=Fraction(0))
    return best, best_state, before


def rank_chunks(model, layout, training, comp):
    """:func:`virtual_chunks` of rank ``comp.index``, refused unless they match its stage and PP divides m."""
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
                                                f"micro-batches in groups of PP={pp}: m must be a multiple of PP, "
                                                f"got m = {m} ({M_FROM})")
