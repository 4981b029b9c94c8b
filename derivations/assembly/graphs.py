"""CUDA graphs of Megatron-Core's layers captured through Transformer Engine (``--cuda-graphs``, issue 46 item 4), read
at NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553 (``MC``: transformer/cuda_graphs.py
``TECudaGraphHelper``, enums.py ``CudaGraphModule``) and
NVIDIA/TransformerEngine@d0067d0da6cb01811b8072a7d304f0e00344ce2b (``TE``: pytorch/graph.py
``_make_graphed_callables``): every layer micro-batch of the step captured in one private pool, ``attn``/``mlp``/
``moe`` or the whole ``layer``.  ``graph.static``: the static hidden states in and out (BF16) and, with the attention
captured, the bool causal mask (``get_layer_static_inputs``); ``graph.pool``: what the captured parts save for
backward (reserved, not allocated after the capture) and the captured backward's largest transient;
``step.graph.capture``: the capture as a moment of the step (no Adam moments under ``--cuda-graph-warmup-steps 0``).
``--cuda-graph-impl local`` is not modelled."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Mapping, Tuple

from derivations.assembly import quantized
from derivations.config import ConfigError

MC = "NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/transformer/"
TE = "NVIDIA/TransformerEngine@d0067d0da6cb01811b8072a7d304f0e00344ce2b transformer_engine/pytorch/graph.py"
STATIC, POOL, CAPTURE = "graph.static", "graph.pool", "step.graph.capture"
#: bytes of a static hidden-states buffer element (module.py get_layer_static_inputs: dtype=torch.bfloat16)
HIDDEN_BYTES = 2


@dataclass(frozen=True)
class Graphs:
    """The graphs' bytes on one device: ``static`` (graph.static), ``saves`` (what the held layer micro-batches'
    captured parts save, in the pool), ``transient`` (the captured backward's), ``moments`` (Adam's moments, absent
    at a capture before step 1), ``saves_by_kind`` {dense, moe} of one layer micro-batch."""

    static: Fraction
    saves: Fraction
    transient: Fraction
    moments: Fraction
    saves_by_kind: Mapping[str, Fraction]

    @property
    def pool(self) -> Fraction:
        return self.saves + self.transient


def captured(model, training, values: Mapping, inputs: Mapping) -> dict:
    """{'dense', 'moe'}: the bytes one layer micro-batch of each kind saves inside its captured part (the view's
    sublayer kinds M_A, M_D, M_E at ``inputs``, with --linear-recipe's quantized inputs)."""
    scopes = training.cuda_graphs
    q = {k: sum((r[2] for r in rows), Fraction(0))
         for k, rows in quantized.parts(model, training, values).items()} if training.linear_recipe else {}
    part = lambda kind, sym: Fraction(inputs.get(sym, 0)) + q.get(kind, 0)  # noqa: E731
    attn = part("mla", "M_A") if {"attn", "layer"} & set(scopes) else 0
    return {"dense": attn + (part("dense", "M_D") if {"mlp", "layer"} & set(scopes) else 0),
            "moe": attn + (part("moe", "M_E") if {"moe", "layer"} & set(scopes) else 0)}


def of_device(model, training, values: Mapping, inputs: Mapping, held: Iterable[Tuple[object, Fraction]],
              optimizer: Fraction) -> Graphs:
    """The graphs of ``training.cuda_graphs`` on a device holding ``held`` ((stage composition, in-flight
    micro-batches), ...) at its peak, whose optimizer states are ``optimizer`` bytes."""
    if model.family != "deepseek" or training.offload:
        raise ConfigError("cuda-graphs", "--cuda-graphs captures Megatron-Core's MLA and MoE layers of the deepseek "
                                         "family, without --offload-activations (not modelled together)")
    v = {k: Fraction(x) for k, x in values.items() if k in ("b", "s", "h", "n_h", "TP", "SP", "CP", "B_a")}
    per = captured(model, training, values, inputs)
    tokens = v["b"] * v["s"] / v["CP"]
    attn = bool({"attn", "layer"} & set(training.cuda_graphs))
    static = 2 * HIDDEN_BYTES * tokens / v["SP"] * v["h"] + (tokens * v["s"] if attn else 0)
    layers = {"dense": Fraction(0), "moe": Fraction(0)}
    for comp, n in held:
        layers["dense"] += n * comp.dense
        layers["moe"] += n * comp.moe
    graphed = sum((layers[k] for k in layers if per[k]), Fraction(0))
    eager = attn and training.attention == "eager"
    transient = v["B_a"] * v["b"] * v["n_h"] / v["TP"] * (v["s"] / v["CP"]) ** 2 if eager else Fraction(0)
    b = dict(training.bytes)
    moments = (optimizer * Fraction(b["B_1"] + b["B_2"], b["B_m"] + b["B_1"] + b["B_2"])
               if training.graph_warmup == 0 else Fraction(0))
    return Graphs(graphed * static, sum((layers[k] * per[k] for k in layers), Fraction(0)), transient, moments,
                  per)


def apply(model, training, values: Mapping, inputs: Mapping, byts: dict, ids: dict, notes: list, held, split):
    """The graphs of ``training.cuda_graphs`` (none: ``split`` as it is) in an estimate's ``byts``, ``ids`` and
    ``notes`` (derivations/assembly/device.py): the held activations less the pool's saves, the static buffers beside
    them, the capture as the step's moment when it holds more than the training step's; ``split`` (the layer rows
    ((layer, kind, bytes), ...), the bytes outside the layers) with the rows less their captured saves, returned."""
    if not training.cuda_graphs:
        return split
    notes.append(assumption(training))
    g = of_device(model, training, values, inputs, held, byts["optimizer"])
    byts["activations"] -= g.saves
    ids["activations"] += f" - {POOL} (saves)"
    byts["total"] += g.static - g.saves
    byts["graphs"], ids["graphs"] = g.static, STATIC
    byts["graph_pool"], ids["graph_pool"] = g.pool, POOL
    states = sum((byts[k] for k in ("weights", "gradients", "optimizer", "runtime") if k in byts), Fraction(0))
    capture = states - g.moments + g.static + g.pool - byts["total"]
    byts["step_replay"] = byts["step"]  # the training step's own excess, the graphs replayed (the allocator's)
    if capture > byts["step"]:
        byts["step"], ids["step"] = capture, CAPTURE
    byts["step_total"] = byts["total"] + byts["step"]
    return tuple((i, kind, x - g.saves_by_kind[kind]) for i, kind, x in split[0]), split[1]


def assumption(training) -> str:
    return (f"CUDA graphs of {', '.join(training.cuda_graphs)} through Transformer Engine ({STATIC}, {POOL}, "
            f"{CAPTURE}): the captured parts' saved tensors in the graphs' private pool (reserved, not allocated "
            f"after the capture); the capture a moment of the step, "
            + ("before step 1 (no Adam moments yet)" if training.graph_warmup == 0 else
               f"after {training.graph_warmup} warm-up step{'' if training.graph_warmup == 1 else 's'}")
            + f" ({MC}cuda_graphs.py TECudaGraphHelper, {TE})")
