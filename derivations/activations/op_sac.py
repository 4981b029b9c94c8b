"""Operator-level selective checkpointing as data: what ``--recompute selective`` saves under ``--selective`` (pure).

``core-attention`` is Megatron's policy (:mod:`derivations.activations.view`: the ``score`` tensors dropped).
``torchtitan-op`` is torchtitan's ``activation_checkpoint.mode = "selective"``, ``selective_ac_option = "op"``
with FlexAttention and the model not compiled, read at pytorch/torchtitan@99fee810b7e253273ed8d1e10eb6c5f60ba69eff:

* torchtitan/distributed/activation_checkpoint.py ``_apply_op_sac_to_transformer_block_with_flex`` (the path of every
  flavor with ``use_flex_attn``, deepseek_v3 16B among them, when ``compile.components`` lacks "model"): a block's
  ``attention`` is fully checkpointed (``ptd_checkpoint_wrapper``: its input kept, the attention norm's output), its
  ``moe`` (or dense ``feed_forward``) op-checkpointed; the two RMSNorms and residual adds run outside any checkpoint.
* ``_apply_op_sac`` ``_custom_policy``: MUST_SAVE the outputs of the ops of ``_op_sac_save_list``
  (torchtitan/models/deepseek_v3/infra/parallelize.py: aten.mm, the SDPA kernels, flex_attention,
  reduce_scatter_tensor, all_to_all_single, max) "except every second mm", counted per checkpointed call;
  PREFER_RECOMPUTE everything else, the checkpoint's input kept.
* torchtitan/models/moe.py ``MoE.forward``: its matmuls in order are router.gate (1st: saved), shared_experts.w1
  (2nd: recomputed), w3 (3rd: saved), w2 (4th: recomputed); the routed experts run ``torch._grouped_mm`` (not in the
  list: recomputed); with EP > 1, torchtitan/distributed/expert_parallel.py ``ExpertParallel`` dispatches and
  combines the token-copies by ``all_to_all_single``: both outputs saved.  ``FeedForward`` (the dense layer): w1
  (1st: saved), w3 (2nd), w2 (3rd: saved).
* torch.nn.RMSNorm outside the checkpoints, eager: PyTorch >= 2.9's fused CUDA kernel (``aten._fused_rms_norm``)
  saves its input and the FP32 rstd per row (``--norm-storage te``: the same two tensors).

The saved op outputs are tensors of their own in the inventory (tag ``sac_saved``: derivations/tensors.py
``op_sac_parts``); the rest are the inventory's tensors, kept by their tags.  The whole-block variant (the model
compiled, or no FlexAttention: the attention's wq, wkv_b and flex outputs saved, the norms recomputed) is not
modelled: derivations/config/torchtitan.py says so where it reads such a config.
"""
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
