"""Transformer Engine's quantized linear layers in Megatron-Core (``--linear-recipe R``, ``--quantized-param-gather``):
``act.quantized.<R>``, each held layer micro-batch's linear inputs in the format instead of B_a, and
``state.quantized.<R>``, the quantized weight copies TE caches on every device (formats: config/quantization.py).

Saved inputs (Transformer Engine d0067d0d, transformer_engine/pytorch/module/ linear.py ``_linear_forward``,
layernorm_linear.py ``ln_out``, grouped_linear.py): quantized, column-wise, the local shard under SP; BF16 where
``save_original_input`` is set (Megatron-Core d98e8a64: linear_proj for every recipe but delayed,
transformer/attention.py, and under recomputation: moe/experts.py, multi_latent_attention.py, moe_layer.py).  Weight
copies (linear.py ``Linear.forward``, base.py ``quantize_weight``): one per linear (grouped: per expert), both
directions, cached at ``is_first_microbatch``; under ``--quantized-param-gather`` the parameter itself (no B_w copy)."""
from __future__ import annotations

from fractions import Fraction
from typing import Dict, Mapping, Tuple

from derivations.activations.view import View
from derivations.assembly.offload import check_megatron_layers, kept_tensors
from derivations.config import Training
from derivations.config.quantization import FORMATS, recipe

TE = "Transformer Engine d0067d0d transformer_engine/pytorch/module/"
MC = "Megatron-LM d98e8a64 megatron/core/"


def act_id(training: Training) -> str:
    return f"act.quantized.{training.linear_recipe}"


def state_id(training: Training) -> str:
    return f"state.quantized.{training.linear_recipe}" + (".param-gather" if training.quantized_params else "")


def _rows(kind: str, t: Mapping[str, Fraction], B_a: Fraction, q: Fraction, training: Training, prefix: str = ""):
    """((key, label, delta bytes, source), ...) of one layer's tensors ``t`` under the recipe."""
    out = []
    get = lambda k: Fraction(t.get(prefix + k, 0))  # noqa: E731
    ratio = (q - B_a) / B_a  # a B_a tensor replaced by its quantized copy
    if kind == "mla":
        if get("down_in"):
            out.append(("down_in", "down-projections' input: two quantized copies (W^DQ; W^DKV, W^KR) for one B_a",
                        get("down_in") * (2 * q - B_a) / B_a, TE + "linear.py _linear_forward"))
        if get("latent_norm"):
            out.append(("latent_norm", "up-projections' fused norm output ln_out, quantized",
                        get("latent_norm") * ratio, TE + "layernorm_linear.py _LayerNormLinear.forward"))
        if training.linear_recipe == "delayed" and get("attn_out"):
            extra = ratio if training.attention == "eager" else q / B_a
            out.append(("attn_out", "output projection's quantized input (delayed: no save_original_input)",
                        get("attn_out") * extra, MC + "transformer/attention.py (set_save_original_input)"))
    elif kind == "moe":
        if get("router_in") and get("shared.swiglu_in"):
            out.append(("shared_in", "shared experts' fc1: its quantized copy of the router's input",
                        get("router_in") * q / B_a, TE + "linear.py _linear_forward (backward_input_needs_gather)"))
        if get("routed.x"):
            out.append(("routed.x", "grouped fc1's input (the permuted tokens), quantized", get("routed.x") * ratio,
                        TE + "grouped_linear.py _GroupedLinear.forward"))
        for group in ("routed", "shared"):
            if get(f"{group}.swiglu_out") and get(f"{group}.swiglu_in"):
                out.append((f"{group}.fc2_in", f"{group} experts' fc2 input (the SwiGLU product), quantized",
                            get(f"{group}.swiglu_in") / 2 * ratio, TE + ("grouped_linear.py" if group == "routed"
                                                                          else "linear.py")))
    elif kind == "dense":
        if get("ffn_in"):
            out.append(("ffn_in", "dense fc1's fused norm output ln_out, quantized", get("ffn_in") * ratio,
                        TE + "layernorm_linear.py _LayerNormLinear.forward"))
        if get("swiglu_out") and get("swiglu_in"):
            out.append(("fc2_in", "dense fc2 input (the SwiGLU product), quantized", get("swiglu_in") / 2 * ratio,
                        TE + "linear.py _linear_forward"))
    return out


def parts(model, training: Training, values: Mapping) -> Dict[str, Tuple[Tuple[str, str, Fraction, str], ...]]:
    """{'mla', 'moe', 'dense', 'mtp': ((key, label, delta bytes, source), ...)} of one layer micro-batch of each kind at
    ``values``; 'mtp' the MTP module's eh_proj input."""
    check_megatron_layers(model, "linear-recipe")
    t = kept_tensors(model, training, values, ("mla", "moe", "dense") + (("mtp",) if model.mtp_layers else ()))
    B_a, q = Fraction(values["B_a"]), recipe(training.linear_recipe).input_bytes
    out = {kind: tuple(_rows(kind, t[kind], B_a, q, training)) for kind in ("mla", "moe", "dense")}
    eh = Fraction(t["mtp"].get("mtp_eh_in", 0)) if model.mtp_layers else 0
    out["mtp"] = ((("mtp_eh_in", "MTP eh_proj input, quantized", eh * (q - B_a) / B_a,
                    MC + "transformer/multi_token_prediction.py (get_fp8_context)"),) if eh else ())
    return out


def per_layer(model, training: Training, values: Mapping) -> Dict[str, Fraction]:
    """{'dense', 'moe', 'head'}: what one held layer micro-batch (and the head's MTP modules) change by."""
    p = parts(model, training, values)
    total = lambda kind: sum((r[2] for r in p[kind]), Fraction(0))  # noqa: E731
    mtp = training.conventions.mtp_activations == "last-stage" and View.of(training).recompute != "full"
    head = model.mtp_layers * (total("mla") + total("moe")) + total("mtp") if mtp else Fraction(0)
    return {"dense": total("mla") + total("dense"), "moe": total("mla") + total("moe"), "head": head}


def linear_params(terms, dev: Mapping, params_id: str) -> Fraction:
    """TE linear layers' weights: ``params_id`` at ``dev`` less norms, embedding, head and routers."""
    # (exact numbers in, exact out; the search passes float64 arrays: derivations/analyses/exact.py)
    other = terms.term("static.device.norm")
    other = other + dev.get("e_E", 0) * terms.term("static.embedding")
    other = other + dev.get("e_H", 0) * terms.term("static.head")
    other = other + dev.get("L_m", 0) * dev.get("N", 0) * dev["h"]
    return terms.term(params_id) - other


def copies(training: Training, P_lin: Fraction, B_w) -> Fraction:
    """``state.quantized``: P_lin weights x both directions' bytes, less their B_w copy under param gather."""
    out = P_lin * recipe(training.linear_recipe).weight_bytes
    return out - P_lin * Fraction(B_w) if training.quantized_params else out


def assumption(training: Training) -> str:
    f = FORMATS[training.linear_recipe]
    return (f"linear layers in Transformer Engine's {f.te} ({f.megatron}; {act_id(training)}, {state_id(training)}): "
            f"their saved inputs at {f.input_bytes} B per element (one direction with its scales), TE's cached weight "
            f"copies at {f.weight_bytes} B per weight (both directions, Hopper)"
            + (", the weights themselves quantized (param gather)" if training.quantized_params else "")
            + "; the per-layer tensor list and the backward moment stay in B_a")

