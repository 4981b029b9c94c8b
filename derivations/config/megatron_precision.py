"""Megatron-LM's low-precision flags as memsym's ``--linear-recipe`` / ``--quantized-param-gather`` (read by
derivations/config/megatron.py; NVIDIA/Megatron-LM d98e8a64).

  --fp8-format e4m3|hybrid      transformer_config.py TransformerConfig.fp8 (None: no FP8): the formats differ in
                                the gradients' exponent bits only, not in bytes
  --fp8-recipe R                TransformerConfig.fp8_recipe, default 'delayed'; fp8_utils.py get_fp8_recipe builds
                                DelayedScaling, Float8CurrentScaling (tensorwise), Float8BlockScaling (blockwise) or
                                MXFP8BlockScaling (mxfp8); 'custom' (a quantizer factory) is not modelled
  --fp4-format e2m1             TransformerConfig.fp4, with --fp4-recipe nvfp4 (default): NVFP4BlockScaling
  --fp8-param-gather            TransformerConfig.fp8_param (arguments.py _add_transformer_engine_args)
  --fp4-param-gather            TransformerConfig.fp4_param (Megatron-Bridge's fp4_param_gather)
"""
from __future__ import annotations

from derivations.config.quantization import MEGATRON_FP8

TC = "transformer_config.py TransformerConfig"


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
