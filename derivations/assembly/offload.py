"""Megatron-Core's fine-grained activation offloading (``--offload-activations MODULE,...``), read from Megatron-LM
d98e8a64 megatron/core/pipeline_parallel/fine_grained_activation_offload.py: the ``saved_tensors_hooks`` of
``FineGrainedActivationOffloadingInterface`` put what a named module saves (:data:`MODULE_TENSORS`) in its group,
copied to pinned host memory by ``bulk_offload_group``; tensors under ``min_offloaded_tensor_size``
(:data:`MIN_ELEMENTS`) and parameters stay, and so do the groups of micro-batch 0's last chunk's last layer
(``post_warmup_callback``, ``should_bulk_offload``: :func:`resident`; the plateau after step 1).  ``record_stream`` then
the dropped reference free at once (c10/cuda/CUDACachingAllocator.cpp ``free``), so ``act.offload`` = -(held layer
micro-batches x each kind's offloaded bytes) + the resident layer's.

The step moment ``step.offload.core_attn`` (:func:`step_moment`, :func:`moment_parts`): an offloaded layer's unfused
core attention backward at its ``BmmBackward0``, the core_attn group reloaded one tensor per save (the softmax output
twice, Transformer Engine ``UnfusedDotProductAttention._forward``), q, k, v refilled by the mla_up_proj recompute, and
bmm's gradients (the small groups reloaded beside it, tens of MiB, not counted)."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Dict, Mapping, Tuple

from derivations import evaluate as ev
from derivations.config import ConfigError, Training
from derivations.activations.view import View
from derivations.assembly import step_names
from symbolic import tomlfile

SOURCE = ("Megatron-LM d98e8a64 megatron/core/pipeline_parallel/fine_grained_activation_offload.py "
          "(ChunkOffloadHandler.bulk_offload_group, tensor_need_offloading_checker, should_bulk_offload; "
          "PipelineOffloadManager.post_warmup_callback)")
#: transformer_config.py ``min_offloaded_tensor_size``: a smaller saved tensor stays on the device.
MIN_ELEMENTS = 1024 * 1024

with tomlfile.package_data(Path(__file__).with_name("offload.toml")) as _DATA:
    #: {module: ((kind, tensor key, element size), ...)}: the saved tensors each module's group encloses (offload.toml)
    MODULE_TENSORS: Dict[str, Tuple[Tuple[str, str, object], ...]] = {
        m: tuple(map(tuple, rows)) for m, rows in _DATA["module_tensors"].items()}


def term_id(training: Training) -> str:
    """``act.offload.<module>-<module>...``: the term that takes the offloaded tensors off the peak."""
    return "act.offload." + "-".join(training.offload)


def check_megatron_layers(model, option: str) -> None:
    """``--<option>`` (offload-activations, linear-recipe) selects tensors of Megatron-Core's MLA and MoE layers,
    DeepSeek's: ConfigError (constraint ``option``) for a model of another family."""
    if model.family != "deepseek":
        raise ConfigError(option, f"--{option} selects the tensors of Megatron-Core's MLA and MoE layers; "
                                  f"{model.name} is of the {model.family} family")


def kept_tensors(model, training: Training, values: Mapping, kinds) -> Dict[str, Dict[str, Fraction]]:
    """{kind: {tensor key: bytes}} of the tensors ``training``'s view keeps of each of ``kinds`` at ``values``."""
    view = View.of(training)
    return {kind: ev.tensor_values(view, model.q_lora, values, kind) for kind in kinds}


def tensors(model, training: Training, values: Mapping) -> Dict[str, Tuple[Tuple[str, str, Fraction], ...]]:
    """{kind: ((module, tensor key, bytes), ...)} one layer micro-batch offloads at ``values``: those the view keeps, in
    a named module's group, of at least :data:`MIN_ELEMENTS`."""
    check_megatron_layers(model, "offload-activations")
    view = View.of(training)
    named = {kind for module in training.offload for kind, _, _ in MODULE_TENSORS[module]}
    # only the kinds the modules name: the search memoises this by the symbols it reads
    rows = kept_tensors(model, training, values, [kind for kind in ("mla", "moe", "dense") if kind in named])
    out: Dict[str, list] = {"mla": [], "moe": [], "dense": []}
    for module in training.offload:
        if module == "core_attn" and "score" in view.dropped:
            continue  # a recomputed core attention runs outside the offload context (MultiLatentAttention.forward)
        for kind, key, elem in MODULE_TENSORS[module]:
            got = rows[kind].get(key)
            if not got:
                continue
            size = Fraction(values[elem]) if isinstance(elem, str) else Fraction(elem)
            if Fraction(got) / size >= MIN_ELEMENTS:
                out[kind].append((module, key, Fraction(got)))
    return {k: tuple(v) for k, v in out.items()}


def per_layer(model, training: Training, values: Mapping) -> Dict[str, Fraction]:
    """{'dense': bytes, 'moe': bytes}: what one layer micro-batch of each kind offloads (MLA and FFN)."""
    t = tensors(model, training, values)
    total = lambda kind: sum((b for _, _, b in t[kind]), Fraction(0))  # noqa: E731
    return {"dense": total("mla") + total("dense"), "moe": total("mla") + total("moe")}


def resident(model, training: Training, comp, off: Mapping[str, Fraction]) -> Fraction:
    """The rank's last layer's offloaded bytes in micro-batch 0; none with the MTP modules or no layer."""
    if not comp.layers or (comp.head and training.conventions.mtp_activations == "last-stage"
                           and model.mtp_layers):
        return Fraction(0)
    return off[model.layer_kinds()[comp.layers[-1]]]


def assumption(training: Training) -> str:
    return (f"activations of {', '.join(training.offload)} offloaded to host memory (Megatron-Core's fine-grained "
            f"offloading, {term_id(training)}): each held layer micro-batch keeps its tensors less those modules' "
            f"saved "
            f"tensors of at least {MIN_ELEMENTS:,} elements; the rank's last layer of micro-batch 0 keeps them all "
            f"(the MTP layer instead on a stage with MTP); the step's peak may be an offloaded layer's unfused "
            f"core-attention backward ({MOMENT}: its saves reloaded one device tensor per save, the softmax output "
            f"twice, and bmm's gradients, above the layers in flight less their offloaded tensors)")


#: the step moment's term id (see the module's docstring)
MOMENT = "step.offload.core_attn"
_TE = "Transformer Engine attention/dot_product_attention/backends.py: UnfusedDotProductAttention._forward"


def moment_parts(model, training: Training, values: Mapping) -> Tuple[Tuple[str, str, Fraction, str], ...]:
    """((key, label, bytes, source), ...) of :data:`MOMENT`; () unless core_attn is unfused and offloaded."""
    if training.attention != "eager" or "core_attn" not in training.offload:
        return ()
    if "score" in View.of(training).dropped:  # recomputed core attention: not offloaded (MultiLatentAttention.forward)
        return ()
    kept = kept_tensors(model, training, values, ["mla"])["mla"]
    full = kept_tensors(model, step_names.trainings(training)[1], values, ["mla"])["mla"]
    B_a = Fraction(values["B_a"])
    big = lambda key: Fraction(full.get(key, 0)) if Fraction(full.get(key, 0)) / B_a >= MIN_ELEMENTS else 0  # noqa: E731
    qkv = sum((big(k) for k in ("q", "k", "v")), Fraction(0))
    parts = [("reloaded", "the core_attn group's saves, reloaded one device tensor per save: the softmax output twice "
              "(the fused softmax's and BmmBackward0's), q, k and v once",
              2 * big("softmax") + qkv,
              SOURCE.split(" (")[0] + " (ChunkOffloadHandler.tensor_push, bulk_offload_group, reload); " + _TE)]
    if not all(k in kept for k in ("q", "k", "v")):
        parts.append(("recomputed", "q, k and v refilled by the mla_up_proj checkpoint's recompute (its hook on the "
                      "context's gradient), beside their reloaded copies", qkv,
                      "Megatron-LM d98e8a64 transformer/multi_latent_attention.py: MultiLatentAttention.forward "
                      "(discard_output_and_register_recompute after the core_attn commit)"))
    parts.append(("grads", "BmmBackward0's gradients of the probabilities and of the value, and the context's "
                  "gradient", Fraction(full.get("softmax", 0)) + Fraction(full.get("v", 0))
                  + Fraction(full.get("attn_out", 0)), "torch autograd: bmm's backward; " + _TE))
    return tuple(parts)


def step_moment(model, training: Training, values: Mapping, held: Fraction) -> Fraction:
    """The activations held at :data:`MOMENT` (``held`` and :func:`moment_parts`); 0 when there is none."""
    parts = moment_parts(model, training, values)
    return held + sum((p[2] for p in parts), Fraction(0)) if parts else Fraction(0)
