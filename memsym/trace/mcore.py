"""Megatron-Core's ``GPTModel`` traced on CPU (``--framework mcore``), from the same config as :mod:`.hf`.

Local layer spec (``get_gpt_decoder_block_spec(use_transformer_engine=False)``: MLA with the local
``DotProductAttention``, ``TopKRouter``, all-to-all dispatcher, ``SequentialMLP``), one rank over gloo; one forward
with labels under the Recorder, then a backward.  CPU needs plumbing only, nothing a layer saves changes (0.16.1):
CUDA device, streams, events and RNG states on the CPU; the causal mask built on CPU; no TE
(``HAVE_TE``, ``te_general_gemm``, ``CheckpointWithoutOutput.fp8``); the local attention given MLA's head widths;
the process-wide ``GlobalMemoryBuffer`` emptied per run; a one-rank ``all_reduce`` skipped in a profiled step.
"""
from __future__ import annotations

import contextlib
import os
from typing import Dict, Optional


from . import DATA, inputs, traced
from .fake import modes

_PATCHED = False
_RECORDER = None  # the Recorder running, for the checkpoint attribution below


class _Nop:
    """A CUDA stream/event stand-in: every method does nothing (returning another), ``query`` says done."""

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
        """Full recomputation checkpoints layers [start, end): what it saves belongs to layer ``start``."""
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


def one_rank():
    """Megatron-Core's parallel state on one gloo rank, set up once per process (also :mod:`.transients`')."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("gloo", rank=0, world_size=1)
    if not ps.model_parallel_is_initialized():
        ps.initialize_model_parallel(1, 1)
    return ps


def routing_fields(raw: Dict, spec) -> Dict:
    """TransformerConfig's router fields for a ModelSpec, as Megatron-Bridge's DeepSeek bridges map a config
    (model_bridge.py CONFIG_MAPPING; pre-softmax for every DeepSeek model, the expert bias for ``noaux_tc``; the
    top-k scaling factor ``raw``'s routed_scaling_factor, else its class's default: DeepseekV2Config 1.0,
    DeepseekV3Config 2.5).  ``norm_topk_prob`` has no field: Megatron-Core normalises the sigmoid top-k only."""
    n_group, topk_group = spec.groups()
    scaling = raw.get("routed_scaling_factor", 1.0 if spec.model_type == "deepseek_v2" else 2.5)
    return {"moe_router_score_function": spec.scoring_func, "moe_router_pre_softmax": True,
            "moe_router_topk_scaling_factor": scaling,
            "moe_router_enable_expert_bias": spec.routing_bias,
            "moe_router_num_groups": n_group if topk_group is not None else None,
            "moe_router_group_topk": topk_group}


def transformer_config(raw: Dict, act_dtype: str, recompute: str, settings: Optional[Dict] = None):
    """``MLATransformerConfig`` of a DeepSeek config as Megatron-Bridge maps it (the MoE layers as --moe-layer-freq
    reads them, which the Bridge drops) with ``settings`` (:data:`memsym.trace.inputs.MCORE_SETTINGS`)."""
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
        qk_pos_emb_head_dim=raw["qk_rope_head_dim"], v_head_dim=raw["v_head_dim"],
        rotary_base=raw.get("rope_theta", 10000),
        num_moe_experts=raw["n_routed_experts"], moe_router_topk=raw["num_experts_per_tok"],
        moe_ffn_hidden_size=raw["moe_intermediate_size"],
        moe_shared_expert_intermediate_size=raw["moe_intermediate_size"] * (raw.get("n_shared_experts") or 0) or None,
        moe_layer_freq=[int(x == "moe") for x in spec.layer_kinds()],  # as Megatron-LM's --moe-layer-freq builds it
        **routing_fields(raw, spec), layernorm_epsilon=raw.get("rms_norm_eps", 1e-6),
        activation_func=torch.nn.functional.silu, attention_dropout=raw.get("attention_dropout", 0.0),
        bf16=act_dtype == "bf16", params_dtype=dtype, pipeline_dtype=dtype, **DATA["mcore"]["transformer_config"],
        mtp_num_layers=raw.get("num_nextn_predict_layers") or None, **fields, **inputs.mcore_recompute(recompute))


def run(config, mbs: int, seq: int, act_dtype: str = "bf16", attention: str = "eager",
        experts: str = "loop", recompute: str = "none", seed: int = 0, settings: Optional[Dict] = None,
        fake: bool = False, balanced: bool = False, step: bool = False):
    """Build, trace one forward, run one backward: (recorder, info dict), as :func:`memsym.trace.hf.run`."""
    raw, spec = inputs.of(config)
    inputs.check_run("mcore", spec, mbs, seq, attention, experts, recompute, settings, fake, balanced, step)
    import torch
    _patch()
    import megatron.core
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker, model_parallel_cuda_manual_seed
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.moe.moe_utils import get_moe_layer_wise_logging_tracker

    from .recorder import Recorder

    class MLADotProductAttention(DotProductAttention):
        """The local DotProductAttention with MLA's head widths (q/k d_h + d_h^R, v d_v)."""

        def __init__(self, *a, k_channels=None, v_channels=None, **kw):
            super().__init__(*a, **kw)
            width = v_channels or self.config.v_head_dim
            self.hidden_size_per_partition = width * self.num_attention_heads_per_partition

    one_rank()
    # the process-wide GlobalMemoryBuffer (never saved) per run: a fake run's never reaches a real one
    ps.get_global_memory_buffer().buffer.clear()
    model_parallel_cuda_manual_seed(seed, force_reset_rng=True)
    # the per-process load-balancing loss tracker, sized by the first model: emptied for a second trace
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

    def step_context():  # the profiled step's model (its torch.compile kernels compiled by the trace, as in a step
        # after the first) with the RNG states, global buffer and loss tracker as the trace found them
        get_cuda_rng_tracker().set_states(states)
        ps.get_global_memory_buffer().buffer.clear()
        get_moe_layer_wise_logging_tracker().clear()
        return _one_rank_all_reduce()

    states = get_cuda_rng_tracker().get_states()
    return traced("mcore", {"torch": torch.__version__.split("+")[0], "megatron-core": megatron.core.__version__},
                  raw["num_hidden_layers"], build,
                  lambda m: (["moe" if type(layer.mlp).__name__ == "MoELayer" else "dense"
                              for layer in m.decoder.layers], ()),
                  make_inputs, forward, _grads, fake, step, (fake_mode, routing), step_context)


@contextlib.contextmanager
def _one_rank_all_reduce():
    """In the profiled step, a one-rank ``all_reduce`` returns at once: gloo's thread held the tensor, and its free,
    made on that thread, is not reported to the profiler (c10/core/CPUAllocator.cpp is per thread)."""
    import torch.distributed as dist
    real = dist.all_reduce

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if not async_op and dist.get_world_size(group) == 1 and op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX,
                                                                       dist.ReduceOp.MIN):
            return None
        return real(tensor, op=op, group=group, async_op=async_op)
    dist.all_reduce = all_reduce
    try:
        yield
    finally:
        dist.all_reduce = real


def _grads(model):
    """The parameters' gradients after a backward (``main_grad`` when a wrapper accumulates into it, else ``.grad``)."""
    grads = (getattr(p, "main_grad", None) for p in model.parameters())
    return [g if g is not None else p.grad for g, p in zip(grads, model.parameters())
            if g is not None or p.grad is not None]
