"""Training settings (:class:`Training`: Tables 7 and 9 and the extensions beyond the paper), the names each
accepts, and their validation."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Dict, Optional, Tuple

from symbolic import tomlfile
from symbolic.errors import ConfigError

from derivations.config.values import EXTENSION_DEFAULTS, PAPER_BYTES
from derivations.config.layout import positive_int, validate_layout
from derivations.config.limits import IMBALANCE, LAYERS, OPTIONS
from derivations.config.quantization import RECIPES
from derivations.config.switches import BYTES_CONVENTIONS, Conventions, validate_conventions


#: Recomputation policies: none and full (the paper's, Sec. 5), selective (the core attention, Korthikanti et al.
#: 2022) and custom (the operators named, RECOMPUTE_OPS).
RECOMPUTE = ("none", "full", "selective", "custom")
with tomlfile.package_data(Path(__file__).with_name("training.toml")) as _VALUES:
    #: Operators a custom policy may recompute (``--recompute custom:norm,mla_up``), each a tag of the activation
    #: tensors it stops keeping, and what it is (training.toml).
    RECOMPUTE_OPS: Dict[str, str] = dict(_VALUES["recompute_ops"])
    #: Megatron-Core's fine-grained activation offloading: the --offload-modules whose saved tensors go to host memory
    #: (derivations/assembly/offload.py), in Megatron's order (training.toml).
    OFFLOAD_MODULES: Dict[str, str] = dict(_VALUES["offload_modules"])
ATTENTION = ("eager", "flash")
#: Pipeline schedules (derivations/assembly/schedules.py); None keeps the paper's one-micro-batch view.
SCHEDULES = ("1f1b", "interleaved", "dualpipe", "zb")
#: Data-type names accepted by the precision options, in bytes per element.
DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
ZERO_NAMES = {0: "none", 1: "os", 2: "os+g", 3: "os+g+params"}


def _short(text) -> str:
    text = repr(str(text))
    return text if len(text) <= 48 else f"{text[:32]}...({len(text)} characters)"


def parse_recompute(text: str) -> Tuple[str, Tuple[str, ...]]:
    """``'custom:norm,mla_up'`` -> ('custom', ('norm', 'mla_up')), the operators in RECOMPUTE_OPS order."""
    policy, _, rest = str(text).partition(":")
    if policy not in RECOMPUTE:
        raise ConfigError("recompute", f"recompute must be one of none, full, selective, custom:OP[,OP...], "
                                       f"got {_short(text)}")
    if policy != "custom":
        if rest:
            raise ConfigError("recompute", f"only custom takes operators (custom:OP,...), got {_short(text)}")
        return policy, ()
    ops = [o.strip() for o in rest.split(",") if o.strip()]
    if not ops:
        raise ConfigError("recompute-ops", f"custom recomputation needs operators, e.g. custom:norm,mla_up; "
                                           f"valid: {', '.join(RECOMPUTE_OPS)}")
    bad = [o for o in ops if o not in RECOMPUTE_OPS]
    if bad:
        shown = ", ".join(o if len(o) <= 24 else o[:24] + "..." for o in bad[:8]) + (", ..." if len(bad) > 8 else "")
        raise ConfigError("recompute-ops", f"unknown recompute operator{'s' * (len(bad) > 1)} "
                                           f"{shown}; valid: {', '.join(RECOMPUTE_OPS)}")
    twice = next((o for i, o in enumerate(ops) if o in ops[:i]), None)
    if twice is not None:
        raise ConfigError("recompute-ops", f"recompute operator {twice} is named twice in {_short(text)}")
    return "custom", tuple(o for o in RECOMPUTE_OPS if o in ops)


def parse_offload(text: str) -> Tuple[str, ...]:
    """``'core_attn,attn_proj'`` -> ('core_attn', 'attn_proj'): Megatron's --offload-modules, in OFFLOAD_MODULES
    order; attn_proj only with core_attn (Megatron's own check, transformer_config.py __post_init__)."""
    names = [o.strip() for o in str(text).split(",") if o.strip()]
    if not names:
        raise ConfigError("offload-activations", f"--offload-activations needs module names: "
                                                 f"{', '.join(OFFLOAD_MODULES)}")
    bad = [o for o in names if o not in OFFLOAD_MODULES]
    if bad:
        raise ConfigError("offload-activations", f"unknown offload module {_short(bad[0])}; valid: "
                                                 f"{', '.join(OFFLOAD_MODULES)}")
    twice = next((o for i, o in enumerate(names) if o in names[:i]), None)
    if twice is not None:
        raise ConfigError("offload-activations", f"offload module {twice} is named twice")
    if "attn_proj" in names and "core_attn" not in names:
        raise ConfigError("offload-activations", "attn_proj is offloaded only with core_attn (Megatron-Core refuses "
                                                 "it alone: transformer_config.py)")
    return tuple(o for o in OFFLOAD_MODULES if o in names)


#: What a layer's CUDA graph captures (Megatron's --cuda-graph-modules, megatron/core/transformer/enums.py
#: CudaGraphModule attn, mlp, moe; ``layer``: its empty list, the whole layer): derivations/assembly/graphs.py
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "layer")


def parse_cuda_graphs(text: str) -> Tuple[str, ...]:
    """``'attn,moe'`` -> ('attn', 'moe'), in CUDA_GRAPH_SCOPES order; ``layer`` (the whole layer) alone."""
    names = [o.strip() for o in str(text).split(",") if o.strip()]
    bad = [o for o in names if o not in CUDA_GRAPH_SCOPES] or ([text] if not names else [])
    if bad:
        raise ConfigError("cuda-graphs", f"--cuda-graphs {_short(bad[0])}: expected a comma-separated list of "
                                         f"{', '.join(CUDA_GRAPH_SCOPES)} (one at least)")
    if len(set(names)) != len(names) or ("layer" in names and len(names) > 1):
        raise ConfigError("cuda-graphs", f"--cuda-graphs {_short(text)}: each scope once, layer alone")
    return tuple(o for o in CUDA_GRAPH_SCOPES if o in names)


@dataclass(frozen=True)
class Training:
    """Training settings (Table 9) and data types (Table 7), plus the extensions.  fp8: DeepSeek-V3's FP8 / E5M6
    activation caching (B_f8, B_o); imbalance: F >= 1; microbatches: m per step (None: the pipeline filled)."""

    mbs: int = 1
    seq: int = 4096
    zero: int = 0
    recompute: str = "none"
    bytes: Tuple[Tuple[str, int], ...] = tuple(PAPER_BYTES.items())
    recompute_ops: Tuple[str, ...] = ()
    attention: str = "eager"
    fp8: bool = False
    imbalance: object = 1
    schedule: Optional[str] = None
    microbatches: Optional[int] = None
    vpp: Optional[int] = None
    #: the layer counts of the PP V virtual stages (virtual stage j on rank j mod PP); None: V equal chunks
    virtual_layers: Optional[Tuple[int, ...]] = None
    conventions: Conventions = Conventions()
    #: ((layer, (tokens of each expert, ...)), ...) as a traced router gave them (paper/traces/*-step.toml); empty:
    #: not known, the step's moments take the bound that holds for any routing
    expert_tokens: Tuple[Tuple[int, Tuple[int, ...]], ...] = ()
    #: the --offload-modules offloaded (OFFLOAD_MODULES order; derivations/assembly/offload.py)
    offload: Tuple[str, ...] = ()
    #: Transformer Engine's recipe of the linear layers (quantization.py RECIPES); None: BF16
    linear_recipe: Optional[str] = None
    #: the linear layers' weights kept as quantized parameters (Megatron's --fp8-param-gather / --fp4-param-gather)
    quantized_params: bool = False
    #: the parts of each layer captured in CUDA graphs through Transformer Engine (CUDA_GRAPH_SCOPES); empty: none
    cuda_graphs: Tuple[str, ...] = ()
    #: Megatron's --cuda-graph-warmup-steps (TransformerConfig cuda_graph_warmup_steps 3): 0 captures before step 1
    graph_warmup: int = 3

    @property
    def recompute_label(self) -> str:
        """The policy as typed on the command line (``custom:norm,mla_up``)."""
        return f"custom:{','.join(self.recompute_ops)}" if self.recompute == "custom" else self.recompute

    def named(self) -> Dict[str, object]:
        """{symbol name: value}: b, s, the bytes per element, F, the extension defaults, m and V if set."""
        out = {"b": self.mbs, "s": self.seq, **EXTENSION_DEFAULTS, **dict(self.bytes),
               "F": self.imbalance if isinstance(self.imbalance, int) else Fraction(self.imbalance)}
        out.update({k: v for k, v in (("n_mb", self.microbatches), ("VPP", self.vpp)) if v is not None})
        return out

    def with_bytes(self, **kw) -> "Training":
        d = dict(self.bytes)
        d.update(kw)
        return replace(self, bytes=tuple(d.items()))

    def with_bytes_convention(self, name: str) -> "Training":
        """The bytes per parameter of BYTES_CONVENTIONS[name] (and, for ``distributed``, ZeRO >= 1)."""
        if name not in BYTES_CONVENTIONS:
            raise ConfigError("bytes-per-param", f"bytes per parameter must be one of {', '.join(BYTES_CONVENTIONS)}, "
                                                 f"got {name!r}")
        byts, zmin = BYTES_CONVENTIONS[name]
        return replace(self.with_bytes(**byts), zero=max(self.zero, zmin) if zmin else self.zero)

    @property
    def bytes_convention(self) -> Optional[str]:
        """The BYTES_CONVENTIONS name these bytes per parameter and ZeRO stage match, else None."""
        d = dict(self.bytes)
        for name in ("paper", "distributed", "fp32-moments"):
            byts, zmin = BYTES_CONVENTIONS[name]
            if all(d.get(k) == v for k, v in byts.items()) and (not zmin or self.zero == zmin):
                return name
        return None


def validate_training(t: Training) -> None:
    positive_int("micro-batch size (--mbs)", t.mbs, "mbs")
    positive_int("sequence length (--seq)", t.seq, "seq")
    if t.zero not in ZERO_NAMES:
        raise ConfigError("zero", f"ZeRO stage must be 0, 1, 2 or 3, got {t.zero!r}")
    if t.recompute not in RECOMPUTE:
        raise ConfigError("recompute", f"recompute must be one of {', '.join(RECOMPUTE)}, got {t.recompute!r}")
    if t.recompute == "custom":
        parse_recompute("custom:" + ",".join(t.recompute_ops))
    elif t.recompute_ops:
        raise ConfigError("recompute-ops", f"recompute operators {t.recompute_ops} need the custom policy")
    if t.attention not in ATTENTION:
        raise ConfigError("attention", f"attention must be one of {', '.join(ATTENTION)}, got {t.attention!r}")
    if isinstance(t.imbalance, str) and len(t.imbalance) > 32:
        raise ConfigError("imbalance", f"imbalance F must be a number in 1..10^6, got {_short(t.imbalance)}")
    try:
        f = Fraction(t.imbalance)
    except (TypeError, ValueError):
        raise ConfigError("imbalance", f"imbalance F must be a number >= 1, got {t.imbalance!r}") from None
    if isinstance(t.imbalance, bool) or f < 1:
        raise ConfigError("imbalance", f"imbalance F must be >= 1 (1 is balanced routing), got {t.imbalance!r}")
    if f > IMBALANCE:
        raise ConfigError("limit.imbalance", f"imbalance F must be at most 10^6 (an expert cannot receive more than "
                                             f"every token), got {_short(t.imbalance)}")
    if t.schedule is not None and t.schedule not in SCHEDULES:
        raise ConfigError("schedule", f"schedule must be one of {', '.join(SCHEDULES)}, got {t.schedule!r}")
    if t.microbatches is not None:
        positive_int("micro-batches per step (--microbatches)", t.microbatches, "microbatches")
        if t.schedule is None:
            raise ConfigError("schedule", "--microbatches needs a pipeline schedule (--schedule)")
    if t.vpp is not None:
        positive_int("virtual pipeline stages (--vpp)", t.vpp, "vpp")
        if t.schedule != "interleaved":
            raise ConfigError("vpp", "--vpp applies to --schedule interleaved only, " + (
                "add --schedule interleaved" if t.schedule is None else f"got --schedule {t.schedule}"))
        if t.vpp < 2:
            raise ConfigError("vpp", f"the interleaved schedule needs --vpp V >= 2, got {t.vpp}")
    if t.virtual_layers is not None:
        if t.schedule != "interleaved":
            raise ConfigError("virtual-layers", "--virtual-layers applies to --schedule interleaved only, got "
                                                + (f"--schedule {t.schedule}" if t.schedule else "no --schedule"))
        if len(t.virtual_layers) > LAYERS or any(isinstance(x, bool) or not isinstance(x, int) or x < 0
                                                 for x in t.virtual_layers):
            raise ConfigError("virtual-layers", f"--virtual-layers needs at most {LAYERS} non-negative layer counts, "
                                                f"got {_short(t.virtual_layers)}")
    validate_conventions(t.conventions)
    if t.offload:
        parse_offload(",".join(t.offload))
        if t.recompute == "full":
            raise ConfigError("offload-activations", "--offload-activations offloads tensors full recomputation "
                                                     "does not keep (Megatron offloads inside the layers it would "
                                                     "recompute)")
        if t.fp8:
            raise ConfigError("offload-activations", "--offload-activations is Megatron-Core's, --fp8-activations "
                                                     "DeepSeek-V3's caching: not modelled together")
        if t.conventions.head_state != "mcore":
            raise ConfigError("offload-activations", "--offload-activations selects Megatron-Core's saved tensors: it "
                                                     "needs --conventions mcore or mcore-te (--head-state mcore)")
    _validate_recipe(t)
    for k, v in t.bytes:
        if isinstance(v, bool) or not isinstance(v, (int, Fraction)) or v <= 0:
            raise ConfigError("bytes", f"bytes per element {k} must be positive, got {v!r}")


def _validate_recipe(t: Training) -> None:
    """--linear-recipe and --quantized-param-gather, refused beside what they are not modelled with."""
    if t.quantized_params and t.linear_recipe is None:
        raise ConfigError("quantized-param-gather", "--quantized-param-gather keeps the linear layers' weights in the "
                                                    "format of --linear-recipe: give --linear-recipe")
    if t.linear_recipe is None:
        return
    if t.linear_recipe not in RECIPES:
        raise ConfigError("linear-recipe", f"--linear-recipe must be one of {', '.join(RECIPES)}, got "
                                           f"{_short(t.linear_recipe)}")
    if t.fp8:
        raise ConfigError("linear-recipe", "--linear-recipe is Transformer Engine's quantized linear layers, "
                                           "--fp8-activations DeepSeek-V3's own FP8 caching: give one")
    if t.offload:
        raise ConfigError("linear-recipe", "--linear-recipe and --offload-activations are not modelled together")
    if t.conventions.head_state != "mcore" or t.conventions.norm_storage != "te":
        raise ConfigError("linear-recipe", "--linear-recipe selects the tensors Transformer Engine's linear layers "
                                           "save in Megatron-Core: it needs --conventions mcore-te")
    if t.zero >= 3:
        raise ConfigError("linear-recipe", "--linear-recipe with ZeRO-3 (sharded parameters) is not modelled: TE's "
                                           "weight copies of gathered parameters")


def with_global_batch(layout, training, global_batch):
    """``training`` with m = global_batch / (DP b) micro-batches (1F1B unless a schedule is given)."""
    if global_batch is None:
        return training
    per = layout.dp * training.mbs
    if global_batch % per:
        raise ConfigError("global-batch", f"--global-batch {global_batch} is not a multiple of DP * mbs = "
                                              f"{layout.dp} * {training.mbs} = {per} (m = G / (DP mbs) micro-batches)")
    if training.microbatches is not None:
        raise ConfigError("global-batch", "give --global-batch or --microbatches, not both")
    m, limit = global_batch // per, OPTIONS["microbatches"]
    if m > limit.high:  # named as typed: G's own range admits G = m DP mbs with m beyond m's
        raise ConfigError("global-batch", f"--global-batch {global_batch} / (DP * mbs = {per}) = {m} micro-batches "
                                          f"per step: at most {limit.domain.split('..')[1]} ({limit.why})")
    return replace(training, schedule=training.schedule or "1f1b", microbatches=m)


def capacity_imbalance(tokens: int, experts: int, topk: int, factor, ep: int, padded: bool = False) -> Fraction:
    """F, the worst EP rank's routed token-copies over balanced routing's, under Megatron-Core's token dropping
    (--moe-expert-capacity-factor; megatron-core 0.16.1 transformer/moe/moe_utils.py get_capacity and
    apply_router_token_dropping): of the ``tokens`` T = b s / (SP CP) of a source rank an expert keeps at most
    C = ceil(T N_r / N x factor) (in floating point, as get_capacity computes it; none dropped when C > T: min(C, T)),
    and a token sends at most min(N_r, N/EP) copies to one rank's N/EP experts.  So an EP rank receives from each
    source at most min(N/EP min(C, T), T min(N_r, N/EP)) against balanced routing's T N_r / EP, whichever
    --moe-token-drop-policy (probs or position choose which tokens drop, not how many); the bound is reached when
    the rank's experts are each routed C tokens or more.  ``padded`` (--moe-pad-expert-input-to-capacity;
    token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess, drop_and_pad): every expert's input is padded to C,
    F = N min(C, T) / (T N_r) exactly."""
    local = experts // ep
    cap = min(math.ceil((tokens * topk / experts) * float(factor)), tokens)
    per_source = local * cap if padded else min(local * cap, tokens * min(topk, local))
    return Fraction(per_source * ep, tokens * topk)


def capacity_bound(model, layout, training: Training, factor, padded: bool = False) -> Optional[Fraction]:
    """The :func:`capacity_imbalance` of ``training``'s b s over the layout's SP CP (below 1 when the capacity is
    under balanced routing's share); None for a model without routed experts."""
    n = model.named()
    if not n.get("N"):
        return None
    validate_training(training)
    validate_layout(model, layout, training.seq)
    tokens = training.mbs * training.seq // (layout.SP * layout.cp)
    return capacity_imbalance(tokens, n["N"], n["N_r"], factor, layout.ep, padded)
