"""Hugging Face transformers' ``DeepseekV3ForCausalLM`` traced on CPU (memsym trace --framework transformers).

The model is built from a config (random weights, no download), in the activation dtype,
and runs one forward pass with labels (the FP32 cross-entropy loss) under the
:class:`memsym.trace.recorder.Recorder`, then one backward pass to show it trains.
"""
from __future__ import annotations

import json
from typing import Dict

from . import MAX_PARAMS, MAX_SCORE_ELEMENTS, MAX_TOKENS


def load_config(path: str) -> Dict:
    with open(path) as f:
        return json.load(f)


def check_size(cfg: Dict, mbs: int, seq: int, n_params: int) -> None:
    """Refuse configs too large for CPU (ValueError naming the limit)."""
    if n_params > MAX_PARAMS:
        raise ValueError(f"the model has {n_params:,} parameters; trace runs on CPU up to {MAX_PARAMS:,} "
                         f"(memsym.trace.MAX_PARAMS): use a scaled-down config")
    if mbs * seq > MAX_TOKENS:
        raise ValueError(f"mbs x seq = {mbs * seq:,} tokens; trace runs on CPU up to {MAX_TOKENS:,} "
                         f"(memsym.trace.MAX_TOKENS)")
    score = mbs * cfg["num_attention_heads"] * seq * seq
    if score > MAX_SCORE_ELEMENTS:
        raise ValueError(f"the score tensor b n_h s^2 has {score:,} elements; trace runs on CPU up to "
                         f"{MAX_SCORE_ELEMENTS:,} (memsym.trace.MAX_SCORE_ELEMENTS)")


def estimate_params(cfg: Dict) -> int:
    """Parameters of a DeepSeek-V3 config, roughly (for the size check, before building)."""
    h, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    k = cfg.get("first_k_dense_replace", 0)
    moe = 3 * h * cfg["moe_intermediate_size"] * (cfg["n_routed_experts"] + cfg.get("n_shared_experts", 0))
    dense = 3 * h * cfg["intermediate_size"]
    n_h = cfg["num_attention_heads"]
    att = h * ((cfg.get("q_lora_rank") or 0) + cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) \
        + (cfg.get("q_lora_rank") or h) * n_h * (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) \
        + cfg["kv_lora_rank"] * n_h * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]) + n_h * cfg["v_head_dim"] * h
    return 2 * cfg["vocab_size"] * h + L * att + k * dense + (L - k) * moe


def run(config_path: str, mbs: int, seq: int, act_dtype: str = "bf16", attention: str = "eager",
        experts: str = "loop", recompute: str = "none", seed: int = 0):
    """Build, trace one forward, run one backward.  Returns (recorder, info dict)."""
    import torch
    import transformers
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    from .recorder import Recorder

    raw = load_config(config_path)
    check_size(raw, mbs, seq, estimate_params(raw))
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[act_dtype]
    keep = {k: v for k, v in raw.items() if k not in ("auto_map", "quantization_config", "architectures",
                                                       "transformers_version", "torch_dtype")}
    impl = {"eager": "eager", "sdpa": "sdpa", "flash": "flash_attention_2"}[attention]
    exp = {"loop": "eager", "grouped": "grouped_mm"}[experts]
    config = DeepseekV3Config(**keep)
    config._attn_implementation = impl
    config._experts_implementation = exp
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(config).to(dtype)
    model.train()
    if recompute == "full":
        model.gradient_checkpointing_enable()
    elif recompute != "none":
        raise ValueError(f"--recompute {recompute}: transformers has no selective recomputation (none or full)")
    ids = torch.randint(2, config.vocab_size, (mbs, seq))
    with Recorder(model) as rec:
        out = model(input_ids=ids, labels=ids)
    alive = _alive_check(rec)
    out.loss.backward()
    grads = sum(p.grad is not None for p in model.parameters())
    info = {"framework": "transformers", "versions": {"torch": torch.__version__.split("+")[0],
                                                      "transformers": transformers.__version__},
            "loss": float(out.loss.detach()), "params_with_grad": grads, "alive_check": alive,
            "n_layers": config.num_hidden_layers, "first_dense": config.first_k_dense_replace}
    return rec, info


def _alive_check(rec) -> str:
    """Every recorded storage is alive after the forward (held by the graph or by us): the count."""
    return f"{len(rec.saved)} storages recorded"
