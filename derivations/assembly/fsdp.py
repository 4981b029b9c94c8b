"""torchtitan's FSDP2 (``--rank fsdp2``) and Megatron-FSDP (``--rank mfsdp``): a device's model states at the step's
peak.  Sources: pytorch/torchtitan@99fee810b7e253273ed8d1e10eb6c5f60ba69eff torchtitan/experiments/llama4/infra/
parallelize.py ``apply_fsdp``, torchtitan/train.py ``train_step``;
pytorch/pytorch@010ae4a89516fa3be548ab16dff711414ec12d0b torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py
``foreach_all_gather``, ``foreach_reduce``;
NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/distributed/fsdp/.

FSDP2 shards each transformer block over dp_shard x CP (the routed experts are their own unit over EDP), the FP32
parameter cast to B_w at each all-gather; at the peak (the last block's backward) two blocks are unsharded (running and
prefetched), beside the running block's unsharded gradients, the previous unit's reduce-scatter input in B_g and the
sharded gradients of the units already reduced (the head's, e_H).  Megatron-FSDP: ZeRO-3's states and the non-unit
bucket (embedding, final norm, output layer: param_and_grad_buffer.py ``_get_parameter_groups``) kept gathered in B_w
(``AllGatherPipeline.reset``, preserve_non_fsdp_units); its padding to the DP CP chunk is not counted."""
from __future__ import annotations

from dataclasses import replace

from derivations.notation import B_1, B_2, B_g, B_m, B_w, CP, DP, EDP, L_m, e_E, e_H, h
from symbolic.term import Part, Term

TT = "pytorch/torchtitan@99fee810 experiments/llama4/infra/parallelize.py apply_fsdp"
FSDP = "pytorch/pytorch@010ae4a8 torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py"
MFSDP = "NVIDIA/Megatron-LM@d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py"


def _sum(term: Term, keys) -> object:
    return sum((p.expr for p in term.parts if p.key in keys), 0)


def terms(reg, moe: Term, suffix: str):
    """``zero.<weights|gradients|optimizer>.<replicated|sharded><suffix>.fsdp2``: the model states under FSDP2,
    from the registry's per-device terms and ``moe``, one MoE layer's (``static.layer.moe`` or ``.shared-tp``)."""
    attn = reg["static.layer.mla"].expr + reg["static.layer.norm"].expr
    block = _sum(moe, ("router", "shared"))  # sharded with the transformer block
    routed = _sum(moe, ("routed",))  # the routed experts' own unit, over dp_mod_ep
    P_n, head = reg["static.device.non_moe"].expr, reg["static.head"].expr
    U = attn + moe.expr
    over = (DP, CP)
    rep = lambda n: (Part("non_moe", "non-MoE P_n with the router and shared experts", (n, P_n + L_m * block)),  # noqa: E731
                     Part("routed", "routed experts", (n, L_m * routed)))
    shard = lambda n: (  # noqa: E731
        Part("non_moe", "non-MoE P_n with the router and shared experts / DP CP (the block's unit)",
             (n, P_n + L_m * block), over, TT),
        Part("routed", "routed experts / EDP (their unit over dp_mod_ep)", (n, L_m * routed), (EDP,), TT))
    sfx = suffix + ".fsdp2"
    yield Term(f"zero.weights.replicated{sfx}", "bytes of the parameters on one device, one FP32 copy (FSDP2 "
                                                "without sharding)", "bytes", TT, rep(B_m))
    yield Term(f"zero.weights.sharded{sfx}", "bytes of the parameters on one device at the step's peak under FSDP2: "
                                             "the sharded FP32 parameters and the unsharded B_w copies of the "
                                             "running and the prefetched block", "bytes", f"{TT}; {FSDP}",
               shard(B_m) + (Part("running", "the block in its backward, all-gathered in B_w (U: attention, norms, "
                                             "MoE layer on the device)", (B_w, U), provenance=FSDP),
                             Part("prefetched", "the block before it, prefetched", (B_w, U), provenance=TT)))
    yield Term(f"zero.gradients.replicated{sfx}", "bytes of the gradients on one device (FSDP2 without sharding)",
               "bytes", TT, rep(B_g))
    yield Term(f"zero.gradients.sharded{sfx}", "bytes of the gradients on one device at the step's peak under FSDP2 "
                                               "(zero_grad frees the sharded ones before the forward): the head "
                                               "unit's sharded gradients, the running block's unsharded gradients, "
                                               "the reduce-scatter input of the unit reduced before it", "bytes",
               f"{TT}; {FSDP}",
               (Part("sharded", "the head unit's sharded gradients (reduced first)", (B_g, e_H, head), over, FSDP),
                Part("unsharded", "the running block's unsharded gradients in B_w", (B_w, U), provenance=FSDP),
                Part("reduce_scatter", "the previous unit's reduce-scatter input in B_g (the head's, else a block's)",
                     (B_g, e_H * head + (1 - e_H) * U), provenance=FSDP)))
    for stage, parts in (("replicated", rep(B_1 + B_2)), ("sharded", shard(B_1 + B_2))):
        yield Term(f"zero.optimizer.{stage}{sfx}", "bytes of the optimizer's moments on one device under FSDP2 (the "
                                                   "FP32 parameter is counted with the weights)", "bytes", TT, parts)


def megatron_terms(reg, suffix: str):
    """``zero.<component>.<replicated|sharded><suffix>.mfsdp``: the model states under Megatron-FSDP, ZeRO's terms
    (``zero.*<suffix>`` in ``reg``) with the non-unit bucket gathered beside the sharded weights."""
    for comp in ("weights", "gradients", "optimizer"):
        for stage in ("replicated", "sharded"):
            base = reg[f"zero.{comp}.{stage}{suffix}"]
            if (comp, stage) != ("weights", "sharded"):
                yield replace(base, id=base.id + ".mfsdp")
                continue
            gathered = Part("non_unit", "the non-unit bucket, gathered: e_E v h/TP + e_H (v h/TP + h)",
                            (B_w, e_E * reg["static.embedding"].expr + e_H * (reg["static.head"].expr + h)),
                            provenance=f"{MFSDP} _get_parameter_groups, AllGatherPipeline.reset")
            yield replace(base, id=base.id + ".mfsdp", parts=base.parts + (gathered,),
                          meaning=base.meaning + ", and Megatron-FSDP's non-unit bucket (embedding, final norm, "
                                                 "output layer) kept gathered in B_w",
                          provenance=f"{base.provenance}; {MFSDP}")
