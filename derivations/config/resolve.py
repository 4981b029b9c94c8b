"""Options resolved once: ``{dest: value}`` and the dests typed -> a :class:`Configuration`.  Precedence: a typed
option, then the recipe's (:mod:`derivations.config.recipes`), the conventions preset's (``--kernels te`` with
``--conventions mcore`` is ``mcore-te``), the view's default (:mod:`derivations.config.defaults`), the option's.
Contradictions are refused (ConfigError).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Collection, Dict, Mapping, Optional, Tuple

from symbolic.errors import ConfigError

from derivations import families
from derivations.config import defaults
from derivations.config.layout import Layout
from derivations.config.limits import SEARCH_GRID
from derivations.config.model import ModelSpec
from derivations.config.hfconfig import read_json
from derivations.config.presets import PRESETS, load_model
from derivations.config.recipes import RECIPES
from derivations.config.switches import (BYTES_CONVENTIONS, CONVENTION_PRESETS, CONVENTION_SWITCHES, RANK_ZERO,
                                         Conventions)
from derivations.config.training import (Training, capacity_bound, parse_cuda_graphs, parse_offload, parse_recompute,
                                         with_global_batch)

#: The dtype options and the Table 7 symbols each sets.
DTYPE_OPTIONS = (("weight_dtype", ("B_w",)), ("grad_dtype", ("B_g",)), ("master_dtype", ("B_m",)),
                 ("optimizer_dtype", ("B_1", "B_2")), ("act_dtype", ("B_a",)))
#: Set (default True) on the commands whose ``--conventions`` is one preset to apply (compare's is a list).
APPLY_CONVENTIONS = "_conventions_preset"
#: Where :func:`resolved` leaves what the view's defaults set (derivations/config/defaults.py ``applied``).
DEFAULTS = "_defaults"


@dataclass(frozen=True)
class Configuration:
    """What a command evaluates: model, layout, training, the stage asked for (None: the estimate chooses) and the
    recipe's assumptions that still hold."""

    model: ModelSpec
    layout: Layout
    training: Training
    stage: Optional[int]
    assumptions: Tuple[str, ...]


def preset_name(values: Mapping[str, object]) -> Optional[str]:
    """The conventions preset the options ask for, if one applies (``--kernels te`` turns mcore into mcore-te)."""
    name = values.get("conventions") if values.get(APPLY_CONVENTIONS, False) else None
    if name == "mcore" and values.get("kernels") == "te":
        return "mcore-te"
    return name


def _over_recipe(values: Mapping[str, object], typed: Collection[str]) -> set:
    """The options a recipe gives way to: those typed, and its m under a global batch (m = G / (DP b))."""
    return set(typed) | ({"microbatches"} if values.get("global_batch") is not None else set())


def resolved(values: Mapping[str, object], typed: Collection[str]) -> Dict[str, object]:
    """``values`` with the recipe's, the conventions preset's and the view's defaults under the typed ones."""
    out = dict(values)
    name = preset_name(values)
    layered = set(typed)
    if name is not None:
        out.update({k: v for k, v in CONVENTION_PRESETS[name].items() if k not in typed})
        layered |= set(CONVENTION_PRESETS[name])
    recipe = values.get("recipe")
    if recipe:
        over = _over_recipe(values, typed)
        out.update({k: v for k, v in RECIPES[recipe].options.items() if k not in over})
        layered |= set(RECIPES[recipe].options)
    out[DEFAULTS] = defaults.applied(out, layered)
    out.update(out[DEFAULTS]["set"])
    family = _family_of(out.get("model"))
    if recipe and family is not None and "model" in typed:
        own = _family_of(RECIPES[recipe].options.get("model"))
        if own is not None and own.name != family.name:
            shown = getattr(out["model"], "name", out["model"])
            raise ConfigError("recipe", f"--recipe {recipe} is a recipe for a {own.title} model; --model "
                                        f"{shown} is a {family.title} model")
    if family is not None:  # the family's defaults (EP = ETP = 1 without experts), under all of the above
        out.update({k: v for k, v in family.layout_defaults().items() if k in out and k not in layered})
    if out.get("gpus") is not None and "dp" in out:
        out["dp"] = _dp_of_gpus(out, typed)
    return out


def _dp_of_gpus(values: Mapping[str, object], typed: Collection[str]) -> int:
    """DP = GPUs / (TP PP CP) for ``--gpus``; ConfigError when the GPUs do not divide or contradict a typed DP."""
    gpus, tp, pp, cp = (values[k] for k in ("gpus", "tp", "pp", "cp"))
    if gpus % (tp * pp * cp):
        raise ConfigError("gpus", f"--gpus {gpus} is not a multiple of TP PP CP = {tp} x {pp} x {cp} = {tp * pp * cp}")
    dp = gpus // (tp * pp * cp)
    if "dp" in typed and values["dp"] != dp:
        raise ConfigError("gpus", f"--gpus {gpus} with --dp {values['dp']}: DP TP PP CP = "
                                  f"{values['dp'] * tp * pp * cp} GPUs, not {gpus} (give one of them)")
    return dp


def _family_of(model) -> Optional["families.Family"]:
    """The family of the model the options name, before the model is built (None when it cannot be read)."""
    if model is None:
        return None
    if not isinstance(model, str):
        return families.find(getattr(model, "family", None))
    if model in PRESETS:
        return families.find(PRESETS[model].family)
    try:
        mt = read_json(model).get("model_type")
    except (ConfigError, OSError, ValueError):
        return None
    return families.for_model_type(mt) if isinstance(mt, str) else None


def check_conflicts(values: Mapping[str, object], typed: Collection[str]) -> None:
    """Options that contradict each other, refused before any work (ConfigError, exit 2)."""
    mbs, seq = values.get("mbs"), values.get("seq")
    if isinstance(mbs, tuple) and isinstance(seq, tuple) and len(mbs) * len(seq) > SEARCH_GRID:
        raise ConfigError("limit.search_grid", f"--mbs and --seq give {len(mbs)} x {len(seq)} = "
                                               f"{len(mbs) * len(seq)} pairs; a search evaluates at most "
                                               f"{SEARCH_GRID} (split it into several searches)")
    per_param = values.get("bytes_per_param")
    if per_param and per_param != "paper" and "zero" in typed:
        zmin = BYTES_CONVENTIONS[per_param][1]
        zero = values.get("zero")
        zeros = zero if isinstance(zero, tuple) else (zero,)
        low = [z for z in zeros if isinstance(z, int) and zmin and z < zmin]
        if low:
            raise ConfigError("bytes-per-param", f"--bytes-per-param {per_param} is a ZeRO >= {zmin} convention "
                                                 f"(the optimizer states sharded over the data-parallel ranks); "
                                                 f"--zero {low[0]} contradicts it")
    rec = values.get("recompute")  # (policy, ops), or a search's 'none,full'
    recs = [rec[0]] if isinstance(rec, tuple) else str(rec).split(",")
    if "selective" in typed and values.get("selective") and all(r in ("none", "full") for r in recs):
        raise ConfigError("selective", f"--selective {values['selective']} says what --recompute selective saves: "
                                       f"give --recompute selective (or leave --selective out)")


def model_of(values: Mapping[str, object]) -> ModelSpec:
    """The model of ``model`` (a preset or a config.json, read now), or the ModelSpec given (the Python API's)."""
    model = values["model"]
    return load_model(model) if isinstance(model, str) else model


def layout_of(values: Mapping[str, object]) -> Layout:
    v = values
    return Layout(dp=v["dp"], tp=v["tp"], pp=v["pp"], ep=v["ep"], etp=v["etp"], cp=v["cp"], sp=v["sp"],
                  layers_per_stage=v["layers_per_stage"])


def conventions_of(values: Mapping[str, object]) -> Conventions:
    """The Conventions of the switches given (the paper's where a command has none)."""
    if values.get("kernels") and values.get("conventions") not in ("mcore", "mcore-te"):
        raise ConfigError("kernels", f"--kernels {values['kernels']} applies to --conventions mcore (Megatron-Core's "
                                     f"kernels), got --conventions {values.get('conventions') or 'paper'}")
    kw = {k: values[k] for k in CONVENTION_SWITCHES if values.get(k) is not None}
    return Conventions(mtp=bool(values.get("mtp", False)), **kw)


def training_of(values: Mapping[str, object], typed: Collection[str]) -> Training:
    """The Training of the options (``--global-batch`` not applied: :func:`configuration` does)."""
    v = values
    # a --vpp typed without --schedule selects the interleaved schedule, as Megatron-LM's virtual pipeline size does
    # (megatron/core/pipeline_parallel/schedules.py get_forward_backward_func)
    schedule = "interleaved" if v.get("vpp") and "vpp" in typed and "schedule" not in typed else v.get("schedule")
    recompute = v.get("recompute", ("none", ()))
    if isinstance(recompute, str):  # a command that kept a plain string
        recompute = parse_recompute(recompute)
    t = Training(mbs=v["mbs"], seq=v["seq"], zero=v["zero"], recompute=recompute[0], recompute_ops=recompute[1],
                 attention=v.get("attention", "eager"), fp8=v.get("fp8_activations", False),
                 imbalance=v.get("imbalance", 1), schedule=schedule, microbatches=v.get("microbatches"),
                 vpp=v.get("vpp"), virtual_layers=v.get("virtual_layers"))
    if v.get("offload_activations"):  # Megatron's --offload-modules (a tuple from the command line or the API)
        off = v["offload_activations"]
        t = replace(t, offload=parse_offload(off if isinstance(off, str) else ",".join(off)))
    if v.get("linear_recipe") or v.get("quantized_param_gather"):  # Transformer Engine's quantized linear layers
        t = replace(t, linear_recipe=v.get("linear_recipe"), quantized_params=bool(v.get("quantized_param_gather")))
    if v.get("cuda_graphs"):  # Megatron's --cuda-graph-modules under TE's implementation (a tuple or its text)
        g = v["cuda_graphs"]
        t = replace(t, cuda_graphs=parse_cuda_graphs(g if isinstance(g, str) else ",".join(g)),
                    graph_warmup=v.get("cuda_graph_warmup_steps", 3))
    t = replace(t, conventions=conventions_of(v))
    byts = {sym: v[dest] for dest, syms in DTYPE_OPTIONS if v.get(dest) is not None for sym in syms}
    t = t.with_bytes(**byts) if byts else t
    per_param = v.get("bytes_per_param", "paper")
    if per_param and per_param != "paper":  # a preset of the dtype options and ZeRO: typed options win
        conv_bytes, zmin = BYTES_CONVENTIONS[per_param]
        keep = {sym for dest, syms in DTYPE_OPTIONS if dest in typed for sym in syms}
        t = t.with_bytes(**{k: val for k, val in conv_bytes.items() if k not in keep})
        if zmin and "zero" not in typed:
            t = replace(t, zero=max(t.zero, zmin))
    rank = t.conventions.rank
    if rank in RANK_ZERO and t.zero != RANK_ZERO[rank]:
        if "zero" in typed:
            raise ConfigError("zero", f"--rank {rank} shards the parameters, gradients and optimizer states "
                                      f"(ZeRO {RANK_ZERO[rank]}: derivations/assembly/fsdp.py): --zero {t.zero} "
                                      f"contradicts it")
        t = replace(t, zero=RANK_ZERO[rank])
    return t


def training_with_capacity(values: Mapping[str, object],
                           typed: Collection[str]) -> Tuple[Training, Optional[Fraction]]:
    """(:func:`training_of` with F bounded by Megatron-Core's token dropping at its b, s and layout, at least 1; the
    bound itself, training.py capacity_bound, None without --capacity-factor or routed experts)."""
    factor = values.get("capacity_factor")
    if values.get("pad_to_capacity") and not factor:
        raise ConfigError("capacity-factor", "--pad-to-capacity pads each expert to its capacity: give "
                                             "--capacity-factor (Megatron-Core asserts it)")
    if factor and "imbalance" in typed:
        raise ConfigError("capacity-factor", "--capacity-factor and --imbalance both state the routing skew: give one")
    t = training_of(values, typed)
    f = capacity_bound(model_of(values), layout_of(values), t, factor, bool(values.get("pad_to_capacity"))) \
        if factor else None
    return (t if f is None else replace(t, imbalance=max(f, 1))), f


def resolve(values: Mapping[str, object], typed: Collection[str]) -> Configuration:
    """The configuration the options stand for (precedence applied, contradictions refused)."""
    values = resolved(values, typed)
    check_conflicts(values, typed)
    training, bound = training_with_capacity(values, typed)
    if values.get("global_batch") is not None and "dp" in values:  # m = G / (DP mbs) micro-batches
        training = with_global_batch(layout_of(values), training, values["global_batch"])
    below = (f"capacity factor {float(values['capacity_factor']):g} bounds F at {bound} < 1: counted at balanced "
             "routing F = 1",) if bound is not None and bound < 1 else ()
    recipe = values.get("recipe")  # its assumptions that still hold: an option typed beside it drops its own
    held = tuple(RECIPES[recipe].assumptions_for(_over_recipe(values, typed))) if recipe else ()
    # the stage typed, or None to let the estimate choose (stage 1; the most-loaded with a schedule)
    return Configuration(model_of(values), layout_of(values), training, values["stage"] if "stage" in typed else None,
                         held + below)
