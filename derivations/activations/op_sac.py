"""Operator-level selective checkpointing as data: what ``--recompute selective`` saves under ``--selective`` (pure).

``core-attention`` is Megatron's policy (View.dropped: the ``score`` tensors). ``torchtitan-op`` is torchtitan's
``activation_checkpoint.mode = "selective"``, ``selective_ac_option = "op"`` with FlexAttention and the model not
compiled, read at pytorch/torchtitan@99fee810b7e253273ed8d1e10eb6c5f60ba69eff:

* distributed/activation_checkpoint.py ``_apply_op_sac_to_transformer_block_with_flex``: a block's ``attention`` fully
  checkpointed (its input kept), its ``moe`` / ``feed_forward`` op-checkpointed; the RMSNorms and residual adds outside
  any checkpoint.
* ``_apply_op_sac`` ``_custom_policy``: MUST_SAVE the outputs of ``_op_sac_save_list``
  (models/deepseek_v3/infra/parallelize.py: aten.mm, SDPA, flex_attention, reduce_scatter_tensor, all_to_all_single,
  max) "except every second mm"; PREFER_RECOMPUTE the rest.
* models/moe.py ``MoE.forward``: router.gate (1st mm: saved), shared w1 (2nd), w3 (3rd: saved), w2 (4th); the routed
  experts' ``torch._grouped_mm`` recomputed; with EP > 1 distributed/expert_parallel.py's two ``all_to_all_single``
  outputs saved. ``FeedForward``: w1 (1st: saved), w3 (2nd), w2 (3rd: saved).
* torch.nn.RMSNorm (PyTorch >= 2.9 ``aten._fused_rms_norm``) saves its input and the FP32 rstd per row.

The saved op outputs are tensors of the inventory (tag ``sac_saved``: tensors.py ``op_sac_parts``). The whole-block
variant (compiled, or no FlexAttention) is not modelled (derivations/config/torchtitan.py says so)."""
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
