"""Hugging Face transformers' ``DeepseekV3ForCausalLM`` (and the other classes of :data:`MODEL_CLASSES`, as
``AutoModelForCausalLM`` maps model_type) traced on CPU (memsym trace --framework transformers).

The model is built from a config (random weights, no download) as ``AutoModelForCausalLM.from_config`` and
``from_pretrained(..., dtype=...)`` build it (modeling_utils.py: ``PreTrainedModel._from_config``), so
``_keep_in_fp32_modules_strict`` (the router's ``gate.weight`` and ``e_score_correction_bias``) stays FP32
(``model.to(dtype)`` would cast the router to BF16 and make its ``.type(float32)`` a copy a real run never
makes).  It runs one forward pass with labels (the FP32 cross-entropy loss) under
:class:`memsym.trace.recorder.Recorder`, then one backward to show it trains.
"""
from __future__ import annotations

import contextlib

from symbolic.errors import ConfigError

from . import inputs
from .fake import describe, modes


def run(config, mbs: int, seq: int, act_dtype: str = "bf16", attention: str = "eager",
        experts: str = "loop", recompute: str = "none", seed: int = 0, settings=None, fake: bool = False,
        balanced: bool = False, step: bool = False):
    """Build, trace one forward, run one backward.  Returns (recorder, info dict).

    ``config``: the parsed config.json (what :func:`memsym.trace.inputs.read` validated) or its path.
    ``fake``: under FakeTensorMode, balanced routing, forward only; ``balanced``: a real trace with
    the balanced routing of :mod:`memsym.trace.fake`; ``step``: then a forward and backward of a model built
    the same way (same weights, same tokens) under torch's profiler (:mod:`memsym.trace.step`: its result is
    ``info["step"]``).
    Every check (:func:`memsym.trace.inputs.check_run`: ConfigError) comes before torch is imported."""
    raw, spec = inputs.of(config)
    inputs.check_run("transformers", spec, mbs, seq, attention, experts, recompute, settings, fake, balanced, step)

    # lazy: torch and transformers (optional, memsym[trace]; only this path needs them)
    import torch
    import transformers

    config_class, model_class = _classes(raw.get("model_type"))

    from .recorder import Recorder

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[act_dtype]
    keep = {k: v for k, v in raw.items() if k not in ("auto_map", "quantization_config", "architectures",
                                                       "transformers_version", "torch_dtype", "_comment")}
    impl = {"eager": "eager", "sdpa": "sdpa", "flash": "flash_attention_2"}[attention]
    exp = {"loop": "eager", "grouped": "grouped_mm"}[experts]
    try:
        config = config_class(**keep)
    except (TypeError, ValueError, KeyError) as exc:  # a field transformers refuses (memsym reads it not)
        raise ConfigError("trace.config", f"transformers' {config_class.__name__} refuses the config: {exc}") from None
    config._attn_implementation = impl
    config._experts_implementation = exp
    fake_mode, routing = modes(fake, balanced)

    def build():
        torch.manual_seed(seed)
        with fake_mode or contextlib.nullcontext():
            model = model_class._from_config(config, dtype=dtype)
        got = (model.config._attn_implementation, model.config._experts_implementation)
        if got != (impl, exp):  # _from_config resolves the implementations again: it must keep the ones asked for
            raise ConfigError("trace.implementation", f"transformers built attention/experts {got}, not {(impl, exp)}")
        model.train()
        if recompute == "full":
            model.gradient_checkpointing_enable()
        return model

    def make_inputs():
        return (torch.randint(2, config.vocab_size, (mbs, seq)),)

    def forward(model, ids, hold=True):
        """The loss (transformers' Trainer.compute_loss keeps the loss only) and the Recorder of the forward;
        the RoPE cos and sin tables, computed once and handed to every layer, are the stage's, not a layer's."""
        with Recorder(model, stage=(model.model.rotary_emb,), hold=hold) as rec:
            out = model(input_ids=ids, labels=ids, **NO_CACHE.get(raw.get("model_type"), {}))
        return out.loss, rec

    model = build()
    kinds = ["moe" if hasattr(layer.mlp, "experts") else "dense" for layer in model.model.layers]
    counts, hooks = {}, []
    if step:  # the router's token copies per expert, each MoE layer (the experts' top-k indices, as they get them)
        for i, layer in enumerate(model.model.layers):
            experts = getattr(layer.mlp, "experts", None)
            if experts is not None:
                hooks.append(experts.register_forward_pre_hook(_counter(counts, i, config.n_routed_experts)))
    with fake_mode or contextlib.nullcontext(), routing:
        loss, rec = forward(model, *make_inputs())
    for hook in hooks:
        hook.remove()
    value, grads = None, 0
    if not fake:  # a fake trace runs no backward (nothing to compute it with)
        loss.backward()
        value, grads = float(loss.detach()), sum(p.grad is not None for p in model.parameters())
    measured = None
    if step:  # then the profiled step, on a model built as the traced one (memsym/trace/step.py)
        from . import step as profiled
        del model, loss
        measured = profiled.run(build(), make_inputs, lambda m, ids: forward(m, ids, hold=False),
                                lambda m: [p.grad for p in m.parameters() if p.grad is not None])
    info = {"framework": "transformers", "versions": {"torch": torch.__version__.split("+")[0],
                                                      "transformers": transformers.__version__},
            "loss": value, "params_with_grad": grads, "alive_check": rec.alive_check(),
            "n_layers": config.num_hidden_layers, "kinds": kinds, "routing": describe(routing)}
    if measured is not None:
        info["step"] = measured
        info["expert_tokens"] = [{"layer": i, "counts": counts[i]} for i in sorted(counts)]
    return rec, info


def _counter(counts, layer: int, n_experts: int):
    """A forward pre-hook of a MoE layer's experts (``experts(hidden_states, top_k_index, top_k_weights)``,
    transformers 5.24 DeepseekV3MoE.forward): ``counts[layer]``, the token copies the router sent to each expert,
    in expert order (the forward's only: the recomputation routes the same tokens again)."""
    def hook(module, args):
        if layer not in counts:
            import torch
            counts[layer] = torch.bincount(args[1].reshape(-1).detach(), minlength=n_experts).tolist()
    return hook


#: The modelling code transformers runs for a config's model_type (AutoModelForCausalLM's mapping,
#: models/auto/modeling_auto.py; models/deepseek_v32 is V3 with the DSA indexer, models/glm_moe_dsa V3.2 whose
#: ``shared`` layers reuse the previous layer's top-k); DeepSeek-V3's for any other (``kimi_k2`` publishes its code).
MODEL_CLASSES = {"deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM"),
                 "deepseek_v32": ("DeepseekV32Config", "DeepseekV32ForCausalLM"),
                 "glm_moe_dsa": ("GlmMoeDsaConfig", "GlmMoeDsaForCausalLM"),
                 "deepseek_v4": ("DeepseekV4Config", "DeepseekV4ForCausalLM")}
#: Forward arguments of a training forward by model_type: DeepSeek-V4's config defaults to use_cache, and a cache kept
#: with the output holds the CSA indexer's compressor alive (paper/traces/V4.md, 4.2); a training step builds none.
NO_CACHE = {"deepseek_v4": {"use_cache": False}}
DEFAULT_CLASSES = ("DeepseekV3Config", "DeepseekV3ForCausalLM")


def _classes(model_type):
    """(config class, model class) transformers builds for ``model_type`` (:data:`MODEL_CLASSES`)."""
    # lazy: torch, transformers (optional; only this path needs it)
    import transformers
    config_name, model_name = MODEL_CLASSES.get(model_type, DEFAULT_CLASSES)
    return getattr(transformers, config_name), getattr(transformers, model_name)
