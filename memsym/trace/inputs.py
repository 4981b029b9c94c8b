"""What ``memsym trace`` is given, read once (as ``estimate`` reads it) and checked before torch is imported: the
fields only the implementations read (:data:`EXTRA_FIELDS`), the size a CPU can trace, each framework's options.
Every refusal is a ConfigError."""
from __future__ import annotations

import math
from typing import Mapping, Optional, Union

from derivations import config as cfg, evaluate as ev, families
from derivations.config import CONVENTION_PRESETS
from derivations.config.presets import load_config
from symbolic.errors import ConfigError
from symbolic.jsonfile import shown as _shown

from . import MAX_FAKE_LAYERS, MAX_FAKE_TOKENS, MAX_PARAMS, MAX_SCORE_ELEMENTS, MAX_TOKENS

#: What every trace record's [settings] holds (the command line's options).
SETTINGS = ("framework", "model", "mbs", "seq", "act_dtype", "attention", "experts", "recompute")
#: Megatron-Core's selective recomputation modules (TransformerConfig.recompute_modules).
MCORE_RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "layernorm", "mlp", "moe", "moe_act", "shared_experts")

#: Megatron-Core's settings beyond the config: option -> (TransformerConfig field, {value: the field's}), the first
#: value the DeepSeek recipes' (Megatron-Bridge models/deepseek/deepseek_provider.py DeepSeekModelProvider).
MCORE_SETTINGS = {
    "swiglu": ("bias_activation_fusion", {"fused": True, "unfused": False}),
    "router_dtype": ("moe_router_dtype", {"fp32": "fp32", "activation": None}),
    "aux_loss": ("moe_router_load_balancing_type", {"seq": "seq_aux_loss", "global": "global_aux_loss",
                                                   "none": "none"}),
}
#: The recipes' values (the default of each option).
MCORE_RECIPE = {k: next(iter(v[1])) for k, v in MCORE_SETTINGS.items()}
#: What a Megatron-Core record without these settings ran: Megatron-Core's own defaults.
MCORE_BEFORE = {"swiglu": "unfused", "router_dtype": "activation", "aux_loss": "none"}
#: The load-balancing loss coefficient (DeepSeek-V3's provider; what the loss keeps does not depend on it).
MCORE_AUX_COEFF = 1e-4


def mcore_settings(settings: Optional[Mapping] = None) -> dict:
    """The Megatron-Core settings of a trace, each checked (ConfigError), the recipe's where not given."""
    out = dict(MCORE_RECIPE)
    for key, value in (settings or {}).items():
        if value is None:
            continue
        if key not in MCORE_SETTINGS:
            raise ConfigError("trace.settings", f"{key!r} is not a Megatron-Core trace setting "
                                                f"({', '.join(MCORE_SETTINGS)})")
        if value not in MCORE_SETTINGS[key][1]:
            raise ConfigError("trace.settings", f"--{key.replace('_', '-')} {_shown(value)}: Megatron-Core takes "
                                                f"{' or '.join(MCORE_SETTINGS[key][1])}")
        out[key] = value
    return out


#: Optional fields an implementation reads that estimate does not: (check, what it must be).
_NUMBER = (lambda x: _is_number(x) and x > 0, "a positive finite number")
EXTRA_FIELDS = {
    "rms_norm_eps": (lambda x: _is_number(x) and 0 < x < 1, "a finite number in (0, 1)"),
    "rope_theta": _NUMBER,
    "routed_scaling_factor": _NUMBER,
    "attention_dropout": (lambda x: _is_number(x) and 0 <= x < 1, "a finite number in [0, 1)"),
    "initializer_range": (lambda x: _is_number(x) and x >= 0, "a finite number >= 0"),
    "hidden_act": (lambda x: x == "silu", '"silu" (the SwiGLU the presets model)'),
    "num_key_value_heads": (lambda x: _is_int(x) and x > 0, "a positive integer"),
    "max_position_embeddings": (lambda x: _is_int(x) and 0 < x <= 1 << 24, "a positive integer <= 2^24"),
}


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return (_is_int(x) and abs(x) < 1 << 53) or (isinstance(x, float) and math.isfinite(x))


def read(model: str):
    """The ConfigFile of ``--model`` (a config.json, its folder or a preset), validated as ``estimate`` does."""
    conf = load_config(model)
    check_fields(conf.data, model)
    return conf


def of(config: Union[Mapping, str]):
    """``(parsed object, ModelSpec)`` of an implementation's ``run``'s config: a parsed object or a path."""
    if isinstance(config, Mapping):
        from derivations.config.hfconfig import from_dict
        check_fields(config)
        return language_model(config), from_dict(config, "<config>", "config")
    conf = read(config)
    return language_model(conf.data), conf.model


def language_model(data: Mapping) -> Mapping:
    """The fields of the language model: a wrapper's field (Kimi K2.5's ``text_config``), else ``data``."""
    wrapped = families.wrapper(data.get("model_type")) if isinstance(data.get("model_type"), str) else None
    if wrapped is None:
        return data
    field, inner = wrapped
    return {"model_type": inner, **data[field]}


def check_fields(data: Mapping, path: str = "<config>") -> None:
    """The fields of :data:`EXTRA_FIELDS` present in ``data`` are what the implementations accept."""
    for field, (ok, what) in EXTRA_FIELDS.items():
        if field in data and data[field] is not None and not ok(data[field]):
            raise ConfigError(f"trace.{field}", f"{path}: field {field!r} must be {what} to be traced, "
                                                f"got {_shown(data[field])}")


def check_size(m, mbs: int, seq: int) -> None:
    """Refuse a model (its parameters: the ``params.stage`` term over all its layers) or a micro-batch too large for a
    CPU (ConfigError naming the limit)."""
    whole = cfg.named(m, None, None, cfg.whole_model(m))
    n_params = int(ev.Terms(m.structure, ev.derived(whole, m.family), m.family).term("params.stage"))
    if n_params > MAX_PARAMS:
        raise ConfigError("trace.params", f"the model has {n_params:,} parameters; trace runs on CPU up to "
                                          f"{MAX_PARAMS:,} (memsym.trace.MAX_PARAMS): use a scaled-down config")
    if mbs * seq > MAX_TOKENS:
        raise ConfigError("trace.tokens", f"mbs x seq = {mbs * seq:,} tokens; trace runs on CPU up to "
                                          f"{MAX_TOKENS:,} (memsym.trace.MAX_TOKENS)")
    score = mbs * m.n_h * seq * seq
    if score > MAX_SCORE_ELEMENTS:
        raise ConfigError("trace.scores", f"the score tensor b n_h s^2 has {score:,} elements; trace runs on CPU "
                                          f"up to {MAX_SCORE_ELEMENTS:,} (memsym.trace.MAX_SCORE_ELEMENTS)")


def check_fake(m, mbs: int, seq: int, recompute: str) -> None:
    """``--fake`` allocates nothing: bounded are time and the real routing tensors; no backward, no recomputation."""
    layers = m.l + (m.mtp_layers or 0)
    if layers > MAX_FAKE_LAYERS:
        raise ConfigError("trace.fake", f"--fake: the config has {m.l} decoder layers and {m.mtp_layers or 0} MTP "
                                        f"modules; a fake trace builds at most {MAX_FAKE_LAYERS} of them "
                                        f"(memsym.trace.MAX_FAKE_LAYERS): cut the config (num_hidden_layers, "
                                        f"first_k_dense_replace, num_nextn_predict_layers; "
                                        f"tests/data/deepseek-v3-l2/config.json is one)")
    if mbs * seq > MAX_FAKE_TOKENS:
        raise ConfigError("trace.tokens", f"--fake: mbs x seq = {mbs * seq:,} tokens; a fake trace runs up to "
                                          f"{MAX_FAKE_TOKENS:,} (memsym.trace.MAX_FAKE_TOKENS)")
    if recompute != "none":
        raise ConfigError("trace.recompute", f"--fake --recompute {_shown(recompute)}: a fake trace runs the "
                                             f"forward only; trace recomputation without --fake")


def check_run(framework: str, m, mbs: int, seq: int, attention: str, experts: str, recompute: str, settings,
              fake: bool, balanced: bool, step: bool) -> None:
    """Every check of an implementation's ``run`` (ConfigError), before torch is imported: the size first (``--step``
    takes real tensors), then the routing and the framework's options."""
    if getattr(m, "family", "deepseek") != "deepseek" and (fake or step):
        raise ConfigError("trace.family", f"--{'fake' if fake else 'step'}: {m.name} is traced end-of-forward only "
                                          f"(the fake routing and the step's moments are the DeepSeek family's)")
    if fake and step:
        raise ConfigError("trace.step", "--fake --step: a fake trace allocates nothing and runs no backward; "
                                        "profile the step of a real trace (without --fake)")
    if fake:
        check_fake(m, mbs, seq, recompute)
    else:
        check_size(m, mbs, seq)
    check_routing(framework, m, attention)
    check_options(framework, attention, experts, recompute, settings)
    if step and balanced:
        raise ConfigError("trace.step", "a profiled step runs the router's own routing (no balanced routing)")


def check_routing(framework: str, m, attention: str = "eager") -> None:
    """A routing the framework's code runs (ConfigError otherwise): DeepseekV2TopkRouter's topk_methods, groups
    from the config; Megatron-Core's group-limited top-k needs both counts."""
    if getattr(m, "family", "deepseek") != "deepseek":  # DeepSeek-V4: transformers' models/deepseek_v4 only
        if framework != "transformers":
            raise ConfigError("trace.family", f"model_type {m.model_type}: Megatron-Core has no model of it; trace it "
                                              f"with --framework transformers")
        if attention != "eager":  # DeepseekV4PreTrainedModel: _supports_sdpa = _supports_flash_attn = False
            raise ConfigError("trace.attention", f"--attention {attention}: transformers runs {m.model_type} with "
                                                 f"eager attention only (its sinks; sdpa and flash are refused)")
        return
    n_group, topk_group = m.groups()
    if framework == "transformers" and m.model_type == "deepseek_v2":
        if m.topk_method not in ("greedy", "group_limited_greedy"):
            raise ConfigError("trace.topk_method", f"topk_method {_shown(m.topk_method)}: transformers' DeepSeek-V2 "
                                                   f"code (model_type deepseek_v2) routes with greedy or "
                                                   f"group_limited_greedy only")
        if m.topk_method == "group_limited_greedy" and (n_group is None or topk_group is None):
            raise ConfigError("trace.n_group", "topk_method group_limited_greedy: transformers' DeepSeek-V2 code needs "
                                               "n_group and topk_group in the config")
    if framework == "mcore" and getattr(m, "indexer", False):
        raise ConfigError("trace.dsa", f"model_type {m.model_type}: Megatron-Core's DeepSeek Sparse Attention "
                                       "(transformer/experimental_attention_variant/dsa.py) is not traced yet; trace "
                                       "it with --framework transformers")
    if framework == "mcore" and topk_group is not None and n_group is None:
        raise ConfigError("trace.n_group", "topk_group without n_group: Megatron-Core's group-limited top-k needs "
                                           "both (moe_router_num_groups, moe_router_group_topk)")


def mcore_recompute(recompute: str) -> dict:
    """TransformerConfig's recomputation fields for ``--recompute``: none, full (uniform, one layer per checkpoint),
    selective (``core_attn``) or ``custom:M1,M2`` (:data:`MCORE_RECOMPUTE_MODULES`)."""
    if recompute == "none":
        return {}
    if recompute == "full":
        return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    if recompute == "selective":
        return {"recompute_granularity": "selective", "recompute_modules": ["core_attn"]}
    policy, _, rest = recompute.partition(":")
    mods = [m.strip() for m in rest.split(",") if m.strip()]
    bad = [m for m in mods if m not in MCORE_RECOMPUTE_MODULES]
    if policy != "custom" or not mods or bad:
        raise ConfigError("trace.recompute", f"--recompute {_shown(recompute)}: Megatron-Core takes none, "
                                             f"full, selective (core_attn) or custom:MODULES with modules from "
                                             f"{', '.join(MCORE_RECOMPUTE_MODULES)}")
    return {"recompute_granularity": "selective", "recompute_modules": mods}


def check_options(framework: str, attention: str, experts: str, recompute: str,
                  settings: Optional[Mapping] = None) -> None:
    """The options ``framework`` takes (ConfigError otherwise); ``settings``: Megatron-Core's only."""
    given = {k: v for k, v in (settings or {}).items() if v is not None}
    if framework == "mcore":
        mcore_settings(given)
    elif given:
        names = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ConfigError("trace.settings", f"{names}: Megatron-Core's settings; transformers' model has none "
                                            f"(its SwiGLU, router dtype and losses are the model code's)")
    if attention == "flash":
        raise ConfigError("trace.attention", "--attention flash needs a GPU (FlashAttention-2); use eager or sdpa")
    if framework == "mcore":
        if attention != "eager":
            raise ConfigError("trace.attention", f"--attention {attention}: Megatron-Core's local spec has one "
                                                 f"attention, the unfused DotProductAttention (eager); TE's fused "
                                                 f"attention needs a GPU")
        if experts != "loop":
            raise ConfigError("trace.experts", f"--experts {experts}: Megatron-Core's local spec runs SequentialMLP "
                                               f"(loop); its grouped experts need Transformer Engine or grouped_gemm "
                                               f"on a GPU")
        mcore_recompute(recompute)
    elif recompute not in ("none", "full"):
        raise ConfigError("trace.recompute", f"--recompute {_shown(recompute)}: transformers has no selective "
                                             f"recomputation (none or full)")


def check_conventions(conventions: Optional[str]) -> None:
    """``--conventions``: a preset of derivations.config.CONVENTION_PRESETS, or None (the framework's)."""
    if conventions is None:
        return
    if conventions not in CONVENTION_PRESETS:
        raise ConfigError("trace.conventions", f"--conventions {_shown(conventions)}: not a preset; presets: "
                                               f"{', '.join(CONVENTION_PRESETS)}")
