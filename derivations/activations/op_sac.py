"""Operator-level selective checkpointing as data: what ``--recompute selective`` saves under ``--selective`` (pure).

``core-attention`` is Megatron's policy (View.dropped: the ``score`` tensors). ``torchtitan-op`` is torchtitan's
``activation_checkpoint.mode = "selective"``, ``selective_ac_option = "op"`` with FlexAttention and the model not
compiled, read at pytorch/torchtitan@99fee810b7e253273ed8d1e10eb6c5f60ba69eff: a block's ``attention`` fully
checkpointed, its ``moe`` / ``feed_forward`` op-checkpointed, norms and residual adds outside any checkpoint
(distributed/activation_checkpoint.py ``_apply_op_sac_to_transformer_block_with_flex``); ``_apply_op_sac``
``_custom_policy`` saves the outputs of ``_op_sac_save_list`` (models/deepseek_v3/infra/parallelize.py: aten.mm, SDPA,
flex_attention, reduce_scatter_tensor, all_to_all_single, max) "except every second mm": in models/moe.py
``MoE.forward`` router.gate and the shared w3, the routed ``torch._grouped_mm`` recomputed, under EP > 1 the two
``all_to_all_single`` outputs (distributed/expert_parallel.py); in ``FeedForward`` w1 and w2.  torch.nn.RMSNorm
(PyTorch >= 2.9 ``aten._fused_rms_norm``) saves its input and the FP32 rstd per row.  The saved outputs are tensors of
the inventory (tag ``sac_saved``: tensors.py ``op_sac_parts``); the whole-block variant (compiled, or no
FlexAttention) is not modelled (derivations/config/torchtitan.py says so)."""
from __future__ import annotations

#: {--selective value: (the tags of the tensors it keeps, the tags that exempt a tensor)}; ``core-attention`` keeps
#: by View.dropped instead.
SAVES = {
    "torchtitan-op": (frozenset({
        "layer_input", "sublayer_input",  # the RMSNorms' inputs (outside the checkpoints)
        "te_norm",  # their FP32 rstd (fused RMSNorm)
        "norm",  # the RMSNorms' outputs: the checkpointed attention's and MoE's (FFN's, head's) inputs
        "head",  # final norm, head and loss: outside the blocks
        "sac_saved",  # the op outputs _op_sac_save_list saves (op_sac_parts)
    }), frozenset({"latent"})),  # the latents' norms run inside the checkpointed attention: recomputed
}
