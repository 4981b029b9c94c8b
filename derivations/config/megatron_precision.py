"""Megatron-LM's precision flags as memsym's options (read by derivations/config/megatron.py; NVIDIA/Megatron-LM
d98e8a64, ARGS megatron/training/arguments.py): the bytes per element and the optimizer's sharding (:func:`dtypes`),
and the low-precision linear layers (:func:`quantization`): --fp8-format (TransformerConfig.fp8; e4m3 and hybrid differ
in the gradients' exponent bits, not in bytes), --fp8-recipe (TransformerConfig.fp8_recipe, default 'delayed';
fp8_utils.py get_fp8_recipe builds DelayedScaling, Float8CurrentScaling, Float8BlockScaling or MXFP8BlockScaling;
'custom' is not modelled), --fp4-format e2m1 with --fp4-recipe nvfp4 (TransformerConfig.fp4: NVFP4BlockScaling),
--fp8-param-gather (TransformerConfig.fp8_param, arguments.py _add_transformer_engine_args) and --fp4-param-gather
(TransformerConfig.fp4_param, Megatron-Bridge's fp4_param_gather)."""
from __future__ import annotations

from derivations.config.megatron_flags import ARGS, DTYPE_NAMES, FSDP_ZERO, TC
from derivations.config.quantization import MEGATRON_FP8


def dtypes(a, launch, r, put) -> None:
    """Put the bytes per element and the optimizer's sharding (distributed optimizer or Megatron-FSDP)."""
    bf16, fp16 = a.has("--bf16"), a.has("--fp16")
    if bf16 and fp16:
        raise launch.err("--bf16 and --fp16 together (Megatron asserts one)")
    weights = "bf16" if bf16 else ("fp16" if fp16 else "fp32")
    w_src = "--bf16" if bf16 else ("--fp16" if fp16 else f"no --bf16/--fp16: params_dtype float32 ({ARGS})")
    fsdp = a.has("--use-megatron-fsdp")
    if fsdp:
        strategy, s_src = a.choice("--data-parallel-sharding-strategy",
                                   ("optim_grads_params", f"{ARGS} _add_distributed_args"), tuple(FSDP_ZERO))
        put("zero", FSDP_ZERO[strategy], f"--use-megatron-fsdp, {s_src}")
        if FSDP_ZERO[strategy] == 3:  # the non-unit bucket stays gathered (derivations/assembly/fsdp.py)
            put("rank", "mfsdp", f"--use-megatron-fsdp, {strategy}: the non-unit bucket (embedding, final norm, "
                "output layer) kept gathered (megatron_fsdp/param_and_grad_buffer.py AllGatherPipeline.reset)")
        a.has("--use-distributed-optimizer")
        master, m_src = a.choice("--megatron-fsdp-main-params-dtype", ("fp32", f"{ARGS}"),
                                 ("fp32", "bf16", "fp16", "auto"))
        grads, g_src = a.choice("--megatron-fsdp-main-grads-dtype", ("auto", f"{ARGS}"),
                                ("fp32", "bf16", "fp16", "auto"))
        master = weights if master == "auto" else master
        grads = weights if grads == "auto" else grads
    else:
        a.has("--data-parallel-sharding-strategy")
        if a.has("--use-distributed-optimizer"):
            put("bytes_per_param", "distributed", "--use-distributed-optimizer: main params and moments sharded "
                                                  "over DP (ZeRO-1)")
        master, m_src = a.choice("--main-params-dtype", ("fp32", f"{ARGS} _add_mixed_precision_args"), ("fp32", "fp16"))
        main_grads, g_src = a.choice("--main-grads-dtype", ("fp32", f"{ARGS}"), ("fp32", "bf16"))
        reduce_bf16 = a.has("--grad-reduce-in-bf16")
        grads = "bf16" if (bf16 and reduce_bf16) or main_grads == "bf16" else (
            "fp32" if bf16 or a.has("--accumulate-allreduce-grads-in-fp32") else weights)
        g_src = "--grad-reduce-in-bf16" if reduce_bf16 else (
            f"{g_src}; accumulate_allreduce_grads_in_fp32 with --bf16 ({ARGS} validate_args)" if bf16 else g_src)
    instances, _ = a.int("--num-distributed-optimizer-instances", (1, ""))
    if instances > 1:
        r.unmodelled.append(f"--num-distributed-optimizer-instances {instances}")
    avg, o_src = a.text("--exp-avg-dtype", ("fp32", f"{ARGS} _add_mixed_precision_args"))
    sq, _ = a.text("--exp-avg-sq-dtype", ("fp32", ""))
    if avg != sq or avg not in DTYPE_NAMES:
        r.unmodelled.append(f"--exp-avg-dtype {avg} --exp-avg-sq-dtype {sq}")
    put("weight_dtype", weights, w_src)
    put("grad_dtype", grads, g_src)
    put("master_dtype", master, m_src)
    put("optimizer_dtype", avg if avg in DTYPE_NAMES else "fp32", o_src)
    put("act_dtype", weights, w_src + " (the activations)")


def quantization(a, launch, r, put, known) -> None:
    """Put ``linear_recipe`` / ``quantized_param_gather`` from the launch's FP8/FP4 flags (``a``: megatron._Args)."""
    if "linear_recipe" not in known:  # a command without the option: the flags stay in the warning
        return
    fp8, f_src = a.text("--fp8-format", (None, f"{TC} fp8 None"))
    fp4, f4_src = a.text("--fp4-format", (None, f"{TC} fp4 None"))
    recipe8, r_src = a.text("--fp8-recipe", ("delayed", f"{TC} fp8_recipe"))
    recipe4, r4_src = a.text("--fp4-recipe", ("nvfp4", f"{TC} fp4_recipe"))
    gather = [f for f in ("--fp8-param-gather", "--fp4-param-gather") if a.has(f)]
    if fp8 and fp4:
        raise launch.err("--fp4-format and --fp8-format together (arguments.py validate_args refuses them)")
    if fp8 is not None:
        if fp8 not in ("e4m3", "hybrid"):
            raise launch.err(f"--fp8-format {str(fp8)[:20]!r}: Megatron accepts e4m3, hybrid")
        if recipe8 not in MEGATRON_FP8:
            r.unmodelled.append(f"--fp8-recipe {recipe8}")
            return
        put("linear_recipe", recipe8, f"--fp8-format {fp8}, {r_src} (fp8_utils.py get_fp8_recipe)")
    elif fp4 is not None:
        if recipe4 != "nvfp4":
            r.unmodelled.append(f"--fp4-recipe {recipe4}")
            return
        put("linear_recipe", "nvfp4", f"--fp4-format {fp4}, {r4_src}: NVFP4BlockScaling")
    elif gather:
        raise launch.err(f"{gather[0]} without --fp8-format/--fp4-format ({TC} __post_init__ refuses it)")
    if gather:
        put("quantized_param_gather", True, f"{' '.join(gather)}: the linear weights are quantized parameters")
