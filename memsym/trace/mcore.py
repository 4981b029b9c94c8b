"""Megatron-Core's ``GPTModel`` traced on CPU (memsym trace --framework mcore).

Built from the same Hugging Face config as :mod:`memsym.trace.hf` (random weights), with Megatron-Core's local
layer spec (``models/gpt/gpt_layer_specs.py: get_gpt_decoder_block_spec(use_transformer_engine=False)``:
``MLASelfAttention`` with the local ``DotProductAttention``, ``TopKRouter``, the all-to-all token dispatcher,
``SequentialMLP`` experts, ``SharedExpertMLP``, torch RMSNorm), world size 1 over gloo, in the activation dtype;
one forward with labels (the FP32 vocab-parallel cross-entropy) under :class:`memsym.trace.recorder.Recorder`,
then a backward.

What runs on CPU needs plumbing only; nothing changes what a layer saves (Megatron-Core 0.16.1 code):

* ``torch.cuda.current_device`` -> ``"cpu"`` (``RotaryEmbedding.__init__`` and others ask for it);
* no-op ``torch.cuda.Stream/Event/current_stream/stream/synchronize`` (``token_dispatcher.py:
  _maybe_dtoh_and_synchronize``'s side stream);
* the RNG tracker and checkpointing on the CPU generator (``tensor_parallel/random.py:
  _get_cuda_rng_state/_set_cuda_rng_state``);
* the causal mask built on CPU (``transformer/utils.py: get_default_causal_mask`` hard-codes ``device="cuda"``);
* ``HAVE_TE = False`` in ``multi_latent_attention.py``, ``te_general_gemm = None`` in ``moe/moe_utils.py``;
* the local ``DotProductAttention`` accepting ``MLASelfAttention``'s ``k_channels``/``v_channels`` (output
  width ``v_head_dim`` heads; upstream MLA is wired for TE's attention only);
* the process-wide ``GlobalMemoryBuffer`` (``parallel_state.py``) emptied at each run, so fake and real runs in
  one process never share its tensor;
* ``CheckpointWithoutOutput(fp8=False)``'s ``self.fp8 = fp8 is not None`` set to ``bool(fp8)`` (it calls a
  TE-only function otherwise);
* during a profiled step only, a one-rank ``all_reduce`` returns at once (:class:`_one_rank_all_reduce`).
"""
from __future__ import annotations

import contextlib
import os
from typing import Dict, Optional


from . import inputs
from .fake import describe, modes

_PATCHED = False
_RECORDER = None  # the Recorder running, for the checkpoint attribution below


class _Nop:
    """A CUDA stream/event stand-in (CPU, one process): ``wait_stream``, ``record``, ``synchronize`` ... do nothing
    (``record_event`` returns another event), ``query`` says done."""

    def __init__(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def query(self):
        return True

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *a, **k: _Nop()


def _patch():
    """The plumbing-only patches of the module docstring (once per process)."""
    global _PATCHED
    if _PATCHED:
        return
    # lazy: sympy, numpy, jinja2, torch, megatron (optional; only this path needs it)
    import torch
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.Stream = _Nop
    torch.cuda.Event = _Nop
    torch.cuda.current_stream = lambda *a, **k: _Nop()
    torch.cuda.stream = lambda s=None: _Nop()
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
    torch.cuda.manual_seed = lambda seed: None
    import megatron.core.tensor_parallel.random as rnd
    rnd._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    rnd._set_cuda_rng_state = lambda st, *a, **k: torch.set_rng_state(st)
    _orig_ckpt_init = rnd.CheckpointWithoutOutput.__init__

    def _ckpt_init(self, fp8=False):
        _orig_ckpt_init(self, fp8=fp8)
        self.fp8 = bool(fp8)
    rnd.CheckpointWithoutOutput.__init__ = _ckpt_init
    import megatron.core.tensor_parallel as tp
    _orig_checkpoint = tp.checkpoint

    def _checkpoint(function, distribute_saved_activations, *args):
        """Full recomputation (TransformerBlock._checkpointed_forward) checkpoints layers
        [start, end) from the block; what the checkpoint saves belongs to layer ``start``."""
        code, cells = getattr(function, "__code__", None), getattr(function, "__closure__", None) or ()
        names = code.co_freevars if code is not None else ()
        start = dict(zip(names, (c.cell_contents for c in cells))).get("start")
        if _RECORDER is None or not isinstance(start, int):
            return _orig_checkpoint(function, distribute_saved_activations, *args)
        _RECORDER.push(f"decoder.layers.{start}")
        try:
            return _orig_checkpoint(function, distribute_saved_activations, *args)
        finally:
            _RECORDER.pop()
    tp.checkpoint = _checkpoint
    import megatron.core.fusions.fused_softmax as fs
    fs.get_default_causal_mask = lambda sq: torch.triu(torch.ones(sq, sq, device="cpu"), diagonal=1).bool()
    import megatron.core.transformer.multi_latent_attention as mla
    mla.HAVE_TE = False
    import megatron.core.transformer.moe.moe_utils as mu
    if not hasattr(mu, "te_general_gemm"):
        mu.te_general_gemm = None
    _PATCHED = True


def _init_parallel(seed: int):
    # lazy: sympy, numpy, jinja2, torch, megatron (optional; only this path needs it)
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("gloo", rank=0, world_size=1)
    if not ps.model_parallel_is_initialized():
        ps.initialize_model_parallel(1, 1)
    # the process-wide GlobalMemoryBuffer (DotProductAttention's baddbmm output, beta 0: never saved) is
    # per run, so a fake run's fake buffer never reaches a real run, nor a real one a fake run
    ps.get_global_memory_buffer().buffer.clear()
    model_parallel_cuda_manual_seed(seed, force_reset_rng=True)


def routing_fields(raw: Dict, spec) -> Dict:
    """TransformerConfig's router fields for a model (:class:`~derivations.config.model.ModelSpec`), as
    Megatron-Bridge's DeepSeek bridges map a Hugging Face config (models/conversion/model_bridge.py
    CONFIG_MAPPING: scoring_func, n_group, topk_group and routed_scaling_factor of the transformers config, so
    an absent n_group/topk_group is its class's default; models/deepseek: moe_router_pre_softmax True for
    every DeepSeek model): the score function is the config's ``scoring_func`` (the V3 bridge sets sigmoid,
    what every V3 config says) and the expert bias is on for ``noaux_tc`` (the V3 bridge's; the V2 bridge
    has none).  ``norm_topk_prob`` has no field: Megatron-Core normalises the sigmoid top-k (k > 1) and not the
    pre-softmax top-k, whatever the config says; the scaling factor (``raw``'s routed_scaling_factor, else its
    class's default: DeepseekV2Config 1.0, DeepseekV3Config 2.5) multiplies by a Python number (nothing saved; its
    MulBackward0 keeps it, a wrapped float64)."""
    n_group, topk_group = spec.groups()
    scaling = raw.get("routed_scaling_factor", 1.0 if spec.model_type == "deepseek_v2" else 2.5)
    return {"moe_router_score_function": spec.scoring_func, "moe_router_pre_softmax": True,
            "moe_router_topk_scaling_factor": scaling,
            "moe_router_enable_expert_bias": spec.routing_bias,
            "moe_router_num_groups": n_group if topk_group is not None else None,
            "moe_router_group_topk": topk_group}


def transformer_config(raw: Dict, act_dtype: str, recompute: str, settings: Optional[Dict] = None):
    """``MLATransformerConfig`` from a Hugging Face DeepSeek config (the fields Megatron-Bridge's DeepSeek
    conversions map, the router's by :func:`routing_fields`, but the MoE layers as DeepSeek's code and Megatron-LM's
    --moe-layer-freq read moe_layer_freq, which the Bridge drops; the attention dropout the config's) with ``settings``
    (:data:`memsym.trace.inputs.MCORE_SETTINGS`: SwiGLU fusion, router dtype, load-balancing loss; the
    DeepSeek recipes' where not given)."""
    # lazy: sympy, numpy, jinja2, torch, megatron (optional; only this path needs it)
    import torch
    from megatron.core.transformer.transformer_config import MLATransformerConfig
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[act_dtype]
    _, spec = inputs.of(raw)
    st = inputs.mcore_settings(settings)
    fields = {inputs.MCORE_SETTINGS[key][0]: inputs.MCORE_SETTINGS[key][1][value] for key, value in st.items()}
    fields["moe_aux_loss_coeff"] = inputs.MCORE_AUX_COEFF if st["aux_loss"] != "none" else 0.0
    return MLATransformerConfig(
        num_layers=raw["num_hidden_layers"], hidden_size=raw["hidden_size"],
        num_attention_heads=raw["num_attention_heads"],
        ffn_hidden_size=raw["intermediate_size"], q_lora_rank=raw.get("q_lora_rank"),
        kv_lora_rank=raw["kv_lora_rank"], qk_head_dim=raw["qk_nope_head_dim"],
        qk_pos_emb_head_dim=raw["qk_rope_head_dim"], v_head_dim=raw["v_head_dim"], qk_layernorm=True,
        rope_type="rope", rotary_base=raw.get("rope_theta", 10000),
        num_moe_experts=raw["n_routed_experts"], moe_router_topk=raw["num_experts_per_tok"],
        moe_ffn_hidden_size=raw["moe_intermediate_size"],
        moe_shared_expert_intermediate_size=raw["moe_intermediate_size"] * (raw.get("n_shared_experts") or 0) or None,
        moe_layer_freq=[int(x == "moe") for x in spec.layer_kinds()],  # as Megatron-LM's --moe-layer-freq builds it
        **routing_fields(raw, spec), moe_token_dispatcher_type="alltoall", moe_grouped_gemm=False,
        moe_permute_fusion=False,
        normalization="RMSNorm", layernorm_epsilon=raw.get("rms_norm_eps", 1e-6), gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, add_bias_linear=False,
        hidden_dropout=0.0, attention_dropout=raw.get("attention_dropout", 0.0),
        use_cpu_initialization=True, bf16=act_dtype == "bf16", params_dtype=dtype, pipeline_dtype=dtype,
        masked_softmax_fusion=False, persist_layer_norm=False,
        bias_dropout_fusion=False, apply_rope_fusion=False, gradient_accumulation_fusion=False,
        cross_entropy_loss_fusion=False, tensor_model_parallel_size=1, sequence_parallel=False,
        mtp_num_layers=raw.get("num_nextn_predict_layers") or None, **fields, **inputs.mcore_recompute(recompute))


def run(config, mbs: int, seq: int, act_dtype: str = "bf16", attention: str = "eager",
        experts: str = "loop", recompute: str = "none", seed: int = 0, settings: Optional[Dict] = None,
        fake: bool = False, balanced: bool = False, step: bool = False):
    """Build, trace one forward, run one backward: (recorder, info dict), as :func:`memsym.trace.hf.run`."""
    raw, spec = inputs.of(config)
    inputs.check_run("mcore", spec, mbs, seq, attention, experts, recompute, settings, fake, balanced, step)

    # lazy: torch and megatron (optional, memsym[trace]; only this path needs them)
    import torch
    _patch()
    import megatron.core
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    from .recorder import Recorder

    class MLADotProductAttention(DotProductAttention):
        """The local DotProductAttention with MLA's head widths (q/k d_h + d_h^R, v d_v)."""

        def __init__(self, *a, k_channels=None, v_channels=None, **kw):
            super().__init__(*a, **kw)
            width = v_channels or self.config.v_head_dim
            self.hidden_size_per_partition = width * self.num_attention_heads_per_partition

    _init_parallel(seed)
    # the load-balancing losses' logging tracker is per process (moe_utils.py: save_to_aux_losses_tracker sizes
    # it by the first model's layers): emptied, so a second trace in one process starts as the first
    from megatron.core.transformer.moe.moe_utils import get_moe_layer_wise_logging_tracker
    get_moe_layer_wise_logging_tracker().clear()
    config = transformer_config(raw, act_dtype, recompute, settings)
    spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization="RMSNorm")
    for ls in spec.layer_specs:
        ls.submodules.self_attention.submodules.core_attention = MLADotProductAttention
    mtp_spec = None
    if config.mtp_num_layers:  # the D MTP modules (DeepSeek-V3 Sec. 2.2) on the (only) stage, as Megatron builds them
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec
        mtp_spec = get_gpt_mtp_block_spec(config, spec, use_transformer_engine=False)
    fake_mode, routing = modes(fake, balanced)

    def build():
        torch.manual_seed(seed)
        with fake_mode or contextlib.nullcontext(), routing:  # the dispatcher's index tensors get their values
            return GPTModel(config, spec, mtp_block_spec=mtp_spec, vocab_size=raw["vocab_size"],
                            max_sequence_length=max(seq, 1), position_embedding_type="rope",
                            share_embeddings_and_output_weights=bool(raw.get("tie_word_embeddings", False)),
                            rotary_base=raw.get("rope_theta", 10000)).train()

    def make_inputs():
        ids = torch.randint(2, raw["vocab_size"], (mbs, seq))
        return ids, torch.arange(seq).unsqueeze(0).expand(mbs, seq)

    def forward(model, ids, pos, hold=True):
        """The mean of the per-token losses (what the trace backpropagates) and the Recorder of the forward."""
        global _RECORDER
        with Recorder(model, hold=hold) as rec:
            _RECORDER = rec
            try:
                losses = model(ids, pos, None, labels=ids)  # [b, s] FP32 per-token losses
                loss = losses.float().mean()
            finally:
                _RECORDER = None
        return loss, rec

    states = get_cuda_rng_tracker().get_states()
    model = build()
    kinds = ["moe" if type(layer.mlp).__name__ == "MoELayer" else "dense" for layer in model.decoder.layers]
    with fake_mode or contextlib.nullcontext(), routing:
        ids, pos = make_inputs()
        loss, rec = forward(model, ids, pos)
    value, grads = None, 0
    if not fake:  # a fake trace runs no backward (nothing to compute it with)
        loss.backward()
        value = float(loss.detach())
        grads = sum(p.grad is not None or getattr(p, "main_grad", None) is not None for p in model.parameters())
    measured = None
    if step:  # then the profiled step, on a model built as the traced one (memsym/trace/step.py), the compiled
        # kernels (the fused SwiGLU's torch.compile) compiled by the trace, as a training step after the first has
        # them; the RNG tracker's states, the attention's global buffer and the loss tracker as the trace found them
        from megatron.core import parallel_state as ps

        from . import step as profiled
        del model, ids, pos, loss
        get_cuda_rng_tracker().set_states(states)
        ps.get_global_memory_buffer().buffer.clear()
        get_moe_layer_wise_logging_tracker().clear()
        with _one_rank_all_reduce():
            measured = profiled.run(build(), make_inputs, lambda m, ids, pos: forward(m, ids, pos, hold=False),
                                    _grads)
    info = {"framework": "mcore", "versions": {"torch": torch.__version__.split("+")[0],
                                               "megatron-core": megatron.core.__version__},
            "loss": value, "params_with_grad": grads,
            "alive_check": rec.alive_check(),
            "n_layers": raw["num_hidden_layers"], "kinds": kinds, "routing": describe(routing)}
    if measured is not None:
        info["step"] = measured
    return rec, info


class _one_rank_all_reduce:
    """During the profiled step, ``torch.distributed.all_reduce`` over one rank returns at once: the sum over one
    rank is the tensor itself.  Gloo's worker thread holds the tensor until it drops the finished work, racing the
    caller, and a free made on that thread is not reported to the profiler (its memory reporting is per thread,
    c10/core/CPUAllocator.cpp): the vocab-parallel cross-entropy's sum of exponentials then looked alive to the
    end in some runs."""

    def __enter__(self):
        # lazy: torch (optional; only this path needs it)
        import torch.distributed as dist
        self.real = real = dist.all_reduce

        def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
            if not async_op and dist.get_world_size(group) == 1 and op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX,
                                                                           dist.ReduceOp.MIN):
                return None
            return real(tensor, op=op, group=group, async_op=async_op)
        dist.all_reduce = all_reduce
        return self

    def __exit__(self, *exc):
        # lazy: torch (optional; only this path needs it)
        import torch.distributed as dist
        dist.all_reduce = self.real
        return False


def _grads(model):
    """The parameters' gradients after a backward (no DDP wrapper: autograd's ``.grad``; ``main_grad`` when a
    wrapper accumulates into its buffers)."""
    out = []
    for p in model.parameters():
        g = getattr(p, "main_grad", None)
        if g is None:
            g = p.grad
        if g is not None:
            out.append(g)
    return out
