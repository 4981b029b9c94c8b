"""transformers' ``DeepseekV3ForCausalLM`` (and the classes of trace.toml) traced on CPU (``--framework transformers``).

Built from a config with random weights as ``from_pretrained(..., dtype=...)`` builds it (``_from_config``), so
``_keep_in_fp32_modules_strict`` (the router) stays FP32; one forward with labels under the Recorder, one backward.
"""
from __future__ import annotations

import contextlib

from symbolic.errors import ConfigError

from . import DATA, inputs, traced
from .fake import modes


def run(config, mbs: int, seq: int, act_dtype: str = "bf16", attention: str = "eager",
        experts: str = "loop", recompute: str = "none", seed: int = 0, settings=None, fake: bool = False,
        balanced: bool = False, step: bool = False):
    """Build, trace one forward, run one backward: (recorder, info dict); every check before torch is imported.

    ``config``: the parsed config.json or its path; ``fake``: FakeTensorMode, balanced routing, forward only;
    ``balanced``: a real trace with :mod:`.fake`'s routing; ``step``: then a profiled step (``info["step"]``)."""
    raw, spec = inputs.of(config)
    inputs.check_run("transformers", spec, mbs, seq, attention, experts, recompute, settings, fake, balanced, step)
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
    counts = {}

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
            out = model(input_ids=ids, labels=ids, **DATA["transformers"]["forward"].get(raw.get("model_type"), {}))
        return out.loss, rec

    def prepare(model):  # with --step, the router's token copies per expert of each MoE layer
        layers = model.model.layers
        hooks = [layer.mlp.experts.register_forward_pre_hook(_counter(counts, i, config.n_routed_experts))
                 for i, layer in enumerate(layers) if step and getattr(layer.mlp, "experts", None) is not None]
        return ["moe" if hasattr(layer.mlp, "experts") else "dense" for layer in layers], hooks

    rec, info = traced("transformers", {"torch": torch.__version__.split("+")[0],
                                        "transformers": transformers.__version__}, config.num_hidden_layers, build,
                       prepare, make_inputs, forward, lambda m: [p.grad for p in m.parameters() if p.grad is not None],
                       fake, step, (fake_mode, routing))
    if step:
        info["expert_tokens"] = [{"layer": i, "counts": counts[i]} for i in sorted(counts)]
    return rec, info


def _counter(counts, layer: int, n_experts: int):
    """A pre-hook of a MoE layer's experts (``experts(hidden_states, top_k_index, ...)``): ``counts[layer]``, the
    token copies the forward's router sent to each expert."""
    def hook(module, args):
        if layer not in counts:
            import torch
            counts[layer] = torch.bincount(args[1].reshape(-1).detach(), minlength=n_experts).tolist()
    return hook


def _classes(model_type):
    """(config class, model class) transformers builds for ``model_type`` (trace.toml, DeepSeek-V3's by default)."""
    import transformers
    classes = DATA["transformers"]["classes"]
    config_name, model_name = classes.get(model_type, classes["default"])
    return getattr(transformers, config_name), getattr(transformers, model_name)
