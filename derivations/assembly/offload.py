"""Megatron-Core's fine-grained activation offloading (``--offload-activations MODULE,...``): the saved tensors of
the named modules leave the device between their forward and their backward, except those of one layer.

Read from Megatron-LM d98e8a64 (``--fine-grained-activation-offloading --offload-modules ...``):

* **Which tensors.**  Each module's forward runs inside ``FineGrainedActivationOffloadingInterface`` (megatron/core/
  pipeline_parallel/fine_grained_activation_offload.py): ``group_start`` enters ``saved_tensors_hooks``
  (``PipelineOffloadManager.on_save_for_backward`` -> ``ChunkOffloadHandler.tensor_push``), so *every tensor autograd
  saves inside the module* joins the module's group; ``group_offload`` (``bulk_offload_group``) copies each to pinned
  host memory and drops the device reference, and ``forced_released_tensors`` resize the module's input storage
  to 0.  The modules and what they enclose: transformer_layer.py ``_run_input_layernorm`` (attn_norm: the input
  RMSNorm, or under layernorm recomputation the CheckpointWithoutOutput that saves its input, the layer input) and
  ``_forward_pre_mlp_layernorm`` (mlp_norm: the sublayer input); multi_latent_attention.py ``MultiLatentAttention.
  forward`` (qkv_linear: ``get_query_key_value_tensors``, whose down- and up-projections save the RMSNorm output,
  the latents and their norms, and the unfused RoPE's cast tables; core_attn: ``_run_core_attention``, which saves
  q, k, v and the softmax output, not entered when the core attention is recomputed; attn_proj: ``linear_proj``,
  its input the attention output); moe/experts.py ``TEGroupedMLP.forward`` (expert_fc1: ``linear_fc1``, its input the
  permuted tokens of all local experts, one tensor under the grouped GEMM; moe_act: the activation, or its
  CheckpointWithoutOutput, which saves the fc1 output and the FP32 per-token-copy probabilities; the product is
  saved by ``linear_fc2``, outside the group).
* **Which are kept anyway.**  ``ChunkOffloadHandler.tensor_need_offloading_checker``: a tensor of fewer than
  ``min_offloaded_tensor_size`` elements (transformer_config.py default 1024 * 1024, :data:`MIN_ELEMENTS`) stays, as do
  parameters; the router's tensors, the shared experts' and the head's are in no group.
* **Which layer keeps its groups.**  ``PipelineOffloadManager.post_warmup_callback`` marks, for every group name, the
  last group of the first chunk to run its backward not offloadable (the offload margin: one group per distinct
  name), and ``ChunkOffloadHandler.should_bulk_offload`` keeps the last group of each name of a chunk whose backward
  is the next one.  Both are the last layer of micro-batch 0's last chunk on the rank: that layer keeps everything
  (:func:`resident`).  On the last stage with MTP the MTP module's layer is that layer (it is in the head's part,
  held once and never offloaded), so no decoder layer stays.  Step 1 (the warm-up that records the groups)
  offloads every group: the plateau after it is what this models.
* **When they leave the allocated count.**  ``bulk_offload_group`` calls ``record_stream(d2h_stream)`` and drops the
  reference; PyTorch's ``DeviceCachingAllocator::free`` (c10/cuda/CUDACachingAllocator.cpp) decreases
  ``allocated_bytes`` before it defers the block's reuse to the stream's event, so the bytes leave
  ``max_memory_allocated`` when the group is committed, however long the copy takes (the reserved bytes wait).
* **Reloads.**  ``on_group_start_backward`` reloads the next group while one is computed (``bulk_reload``), and the
  last layer of the next backward chunk once its forward is done (``pre_reload_last_layer``): during a backward
  one layer's groups are back, which is the layer the step's backward moment already counts in full.

So at the peak each in-flight micro-batch's layers keep their tensors less the offloaded ones, and one layer keeps
them all: ``act.offload`` = -(held layer micro-batches x each kind's offloaded bytes) + the resident layer's.

**A step moment under offloading** (``step.offload.core_attn``, :func:`step_moment`): the backward of an offloaded
layer's unfused core attention, at its ``BmmBackward0`` (the product of the probabilities and the value).
Offloading empties the held layers, so the moment a layer's own s^2 tensors come back can exceed the end of the
forward.  What is on the device then, read from the code:

* *Each save is reloaded apart.*  Transformer Engine's ``UnfusedDotProductAttention._forward`` (transformer_engine/
  pytorch/attention/dot_product_attention/backends.py; ``--attention-backend unfused`` selects it: Megatron's
  language_module.py sets NVTE_UNFUSED_ATTN=1) saves the softmax output twice: the fused softmax's setup_context
  (softmax.py ``ctx.save_for_backward(output)``) and ``torch.bmm(attention_probs, value)`` (BmmBackward0 keeps
  both operands); baddbmm keeps q and k.  The saved-tensor hook gives each save its own tag
  (``ChunkOffloadHandler.tensor_push``), ``bulk_offload_group`` copies each tag to the host and ``reload`` makes
  a new device tensor per tag (``torch.empty``): the probabilities come back as two tensors, q, k and v as one each
  (Megatron-Core's local spec does the same: fusions/fused_softmax.py ScaledUpperTriangMaskedSoftmax saves its
  output, transformer/dot_product_attention.py the same bmm).
* *q, k and v twice under mla_up_proj recomputation.*  multi_latent_attention.py ``forward`` commits the core_attn
  group (offloading q, k, v and resizing their storages to 0: ``forced_released_tensors``) before
  ``qkv_up_checkpoint.discard_output_and_register_recompute(core_attn_out)``; the checkpoint's recompute runs when
  the gradient of ``core_attn_out`` is made, before the core attention's backward, and refills them.
* *The gradients.*  BmmBackward0 makes the probabilities' gradient (the softmax output's size and dtype) and the
  value's; the context's gradient is its input.
* *What else is held.*  The layers in flight at the state before a backward of a chunk with offloaded layers
  (schedules.backward_states; Megatron's interleaved 1F1B runs one forward, then one backward), each less its
  offloaded tensors.  The resident layer's backward is the step's first (post_warmup_callback): it is not held.
  A reload runs one group ahead (``on_group_start_backward`` -> ``bulk_reload``: the group whose backward is
  next); the small groups reloaded beside this one, the layer's latents the recompute reads and what the step's
  ``end`` moment holds besides the saves (tens of MiB) are not counted.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Dict, Mapping, Tuple

from derivations import evaluate as ev
from derivations.config import ConfigError, Training
from derivations.activations.view import View
from derivations.assembly import step_names

SOURCE = ("Megatron-LM d98e8a64 megatron/core/pipeline_parallel/fine_grained_activation_offload.py "
          "(ChunkOffloadHandler.bulk_offload_group, tensor_need_offloading_checker, should_bulk_offload; "
          "PipelineOffloadManager.post_warmup_callback)")
#: transformer_config.py ``min_offloaded_tensor_size``: a smaller saved tensor stays on the device.
MIN_ELEMENTS = 1024 * 1024

#: {module: ((kind, tensor key of the kind's list, element size: a bytes symbol's name or a number), ...)}: the
#: saved tensors each module's group encloses, as memsym's tensor lists name them (derivations/families/deepseek/
#: activations.py); only those the view keeps count.  memsym's ``latent`` is c_Q and c_KV in one row (Megatron saves
#: two tensors): the threshold is applied to the row.
MODULE_TENSORS: Dict[str, Tuple[Tuple[str, str, object], ...]] = {
    "attn_norm": (("mla", "norm_in", "B_a"), ("mla", "norm_rsigma", 4)),
    "qkv_linear": (("mla", "down_in", "B_a"), ("mla", "latent", "B_a"), ("mla", "latent_rsigma", 4),
                   ("mla", "latent_norm", "B_a"), ("mla", "rope_layer", "B_a")),
    "core_attn": (("mla", "q", "B_a"), ("mla", "k", "B_a"), ("mla", "v", "B_a"), ("mla", "softmax", "B_a"),
                  ("mla", "causal_mask", 1), ("mla", "score_mask", 1), ("mla", "score_dropout", "B_a"),
                  ("mla", "softmax_stats", 4)),
    "attn_proj": (("mla", "attn_out", "B_a"),),
    "mlp_norm": (("moe", "norm_in", "B_a"), ("moe", "norm_rsigma", 4), ("dense", "norm_in", "B_a"),
                 ("dense", "norm_rsigma", 4)),
    "expert_fc1": (("moe", "routed.x", "B_a"),),
    "moe_act": (("moe", "routed.swiglu_in", "B_a"), ("moe", "routed.probs_perm", 4)),
}


def term_id(training: Training) -> str:
    """``act.offload.<module>-<module>...``: the term that takes the offloaded tensors off the peak."""
    return "act.offload." + "-".join(training.offload)


def tensors(model, training: Training, values: Mapping) -> Dict[str, Tuple[Tuple[str, str, Fraction], ...]]:
    """{kind: ((module, tensor key, bytes), ...)}: the tensors one layer micro-batch offloads, per kind (mla, moe,
    dense), at ``values``: those the view keeps, in a named module's group, of at least :data:`MIN_ELEMENTS`."""
    if model.family != "deepseek":
        raise ConfigError("offload-activations", f"--offload-activations selects the tensors of Megatron-Core's MLA "
                                                 f"and MoE layers; {model.name} is of the {model.family} family")
    view = View.of(training)
    named = {kind for module in training.offload for kind, _, _ in MODULE_TENSORS[module]}
    rows = {kind: ev.tensor_values(view, model.q_lora, values, kind) for kind in ("mla", "moe", "dense")
            if kind in named}  # only the kinds the modules name: the search memoises this by the symbols it reads
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
    """{'dense': bytes, 'moe': bytes}: what one layer micro-batch of each kind offloads (its MLA's and its FFN's)."""
    t = tensors(model, training, values)
    total = lambda kind: sum((b for _, _, b in t[kind]), Fraction(0))  # noqa: E731
    return {"dense": total("mla") + total("dense"), "moe": total("mla") + total("moe")}


def resident(model, training: Training, comp, off: Mapping[str, Fraction]) -> Fraction:
    """The offloaded bytes the rank keeps anyway: its last decoder layer's in micro-batch 0 (the offload margin and
    should_bulk_offload), none when the stage runs the MTP modules (their layer is the one kept) or has no layer."""
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
    """((key, label, bytes, source), ...) of what the backward of an offloaded layer's core attention brings back and
    makes (:data:`MOMENT`), at ``values``; () unless the attention is unfused and its core_attn group offloaded."""
    if training.attention != "eager" or "core_attn" not in training.offload:
        return ()
    view = View.of(training)
    if "score" in view.dropped:  # a recomputed core attention is not offloaded (MultiLatentAttention.forward)
        return ()
    kept = ev.tensor_values(view, model.q_lora, values, "mla")
    full = ev.tensor_values(View.of(step_names.trainings(training)[1]), model.q_lora, values, "mla")
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
    """The activations on the device at :data:`MOMENT`: ``held`` (the layers in flight before the backward, less
    their offloaded tensors) and :func:`moment_parts`; 0 when there is no such moment."""
    parts = moment_parts(model, training, values)
    return held + sum((p[2] for p in parts), Fraction(0)) if parts else Fraction(0)
