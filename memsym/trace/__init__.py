"""Ground truth per tensor (issue 12): trace real implementations on CPU.

:mod:`memsym.trace.recorder` records every tensor autograd saves for backward (de-duplicated
by storage object), attributes it to the layer and sublayer whose operation saved it;
:mod:`memsym.trace.hf` builds Hugging Face transformers' ``DeepseekV3ForCausalLM`` from a
config and runs it.  torch and transformers are the optional extra ``memsym[trace]``;
nothing here imports them at module level.

Megatron-Core (``--framework mcore``) and the ``mcore`` preset are not built yet.  What is
known (megatron-core 0.16.1, the newest release whose metadata accepts Python 3.11, installs
and imports on CPU: ``MLASelfAttention``, ``get_gpt_layer_local_spec(num_experts=8,
multi_latent_attention=True)``, local ``DotProductAttention``, whose ``__init__`` takes no
``k_channels``/``v_channels``) and what is missing:

* ``memsym/trace/mcore.py``: build ``GPTModel`` from the same config (``MLATransformerConfig``:
  q_lora_rank, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim, num_moe_experts,
  moe_router_topk, moe_shared_expert_intermediate_size, moe_layer_freq ``[0, 1, 1]``,
  ``use_cpu_initialization=True``, ``bf16``), world size 1 over gloo, after the plumbing-only
  patches issue 12 lists: ``torch.cuda.current_device`` -> cpu; no-op
  ``torch.cuda.Stream/Event/current_stream/synchronize`` (the all-to-all dispatcher); CPU RNG
  for the RNG tracker and checkpointing; ``get_default_causal_mask`` on CPU; ``jit_fuser`` off;
  a ``DotProductAttention`` subclass accepting ``k_channels``/``v_channels``;
  ``CheckpointWithoutOutput(fp8=False)`` setting ``self.fp8 = fp8 is not None`` (selective
  ``layernorm`` recompute without TE).  The recorder already de-duplicates by storage object
  (Megatron's output-discarding recompute frees with ``resize_(0)``) and attributes by the
  module path ``decoder.layers.<i>``.
* the ``mcore`` preset (``--kernels local|te``): switches for Megatron's tensors (FP32 softmax +
  B_a probabilities + a bool mask in local attention; TE's fused norms, fused masked softmax
  and fused attention for ``te``), records for none, full and three selective module sets at
  two configs, and ``compare --conventions paper,mcore``.
"""
from __future__ import annotations

INSTALL_HINT = "pip install 'memsym[trace]'"

#: The versions the records in paper/traces/ were measured with (pyproject's trace extra pins them).
PINNED = {"torch": "2.13.0", "transformers": "5.24.0", "megatron-core": "0.16.1"}

#: Largest config traced on CPU: parameters and the biggest saved score tensor (b n_h s^2 elements).
MAX_PARAMS = 50_000_000
MAX_SCORE_ELEMENTS = 64 * 1024 * 1024
MAX_TOKENS = 16384


def missing(framework: str = "transformers"):
    """The name of the first package the trace extra needs that is not installed, or None."""
    import importlib.util
    need = ["torch", "transformers"] if framework == "transformers" else ["torch", "megatron.core"]
    for mod in need:
        try:
            if importlib.util.find_spec(mod) is None:
                return mod
        except ModuleNotFoundError:
            return mod
    return None
