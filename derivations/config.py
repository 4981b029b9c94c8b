"""Configurations: model, parallel layout and training settings, as substitutions.

A configuration never rebuilds a term: it is turned into a mapping from notation
symbols to exact integers (or rationals) and applied to the symbolic terms.

* :class:`ModelSpec`: the dimensions of Table 1 plus the structural facts that decide
  which terms exist (query compression or not, routing bias, tied embeddings, MTP).
* :class:`Layout`: DP, TP, PP, EP, ETP, SP, CP (Table 5, Table 9).
* :class:`Training`: micro-batch, sequence, ZeRO stage, recomputation, bytes (Table 7).

Invalid input raises :class:`ConfigError`, which names the constraint that failed and
what was given; the CLI maps it to exit code 2.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from typing import Dict, List, Optional, Sequence, Tuple

from . import notation as nt

from symbolic.errors import ConfigError  # noqa: F401  (the configurations' error type)
from symbolic.units import GiB  # noqa: F401


# ---------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """A DeepSeek-family model in the paper's notation (Table 1; digest section 12).

    ``d_cq`` is None for models without query compression (DeepSeek-v2-Lite): queries
    are then one matrix W^Q of shape n_h (d_h + d_hr) x h and there is no query norm.
    ``mtp_layers`` is D, the multi-token-prediction modules of the checkpoint (HF
    num_nextn_predict_layers; not counted by the paper).  ``fp8_block`` is the block of
    one FP32 scale in an FP8 block-quantised release (HF quantization_config
    weight_block_size, (128, 128) for DeepSeek-v3): storage only, scales are not weights.
    A Hugging Face config.json becomes a ModelSpec through :mod:`derivations.hfconfig`.
    """

    name: str
    h: int
    h_F: int
    h_E: int
    l: int
    n_h: int
    d_cq: Optional[int]
    d_c: int
    d_h: int
    d_hr: int
    d_v: int
    N: int
    N_s: int
    N_r: int
    v: int
    first_k_dense: int
    moe_layer_freq: int = 1
    topk_method: str = "greedy"
    tie_word_embeddings: bool = False
    mtp_layers: int = 0
    fp8_block: Optional[Tuple[int, int]] = None
    source: str = "preset"

    # -- structure -----------------------------------------------------------------
    @property
    def q_lora(self) -> bool:
        return self.d_cq is not None

    @property
    def routing_bias(self) -> bool:
        """noaux_tc routing keeps a per-expert score-correction bias (N per MoE layer)."""
        return self.topk_method == "noaux_tc"

    @property
    def structure(self) -> Tuple:
        """What decides the *shape* of the terms (the dimensions stay symbols)."""
        return (self.q_lora, self.routing_bias, self.tie_word_embeddings)

    def is_moe_layer(self, i: int) -> bool:
        """HF DeepseekV2/V3 rule: MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0."""
        return i >= self.first_k_dense and i % self.moe_layer_freq == 0

    def layer_kinds(self) -> List[str]:
        return ["moe" if self.is_moe_layer(i) else "dense" for i in range(self.l)]

    def values(self) -> Dict:
        """Substitution for the model's symbols."""
        out = {nt.h: self.h, nt.h_F: self.h_F, nt.h_E: self.h_E, nt.l: self.l, nt.n_h: self.n_h,
               nt.d_c: self.d_c, nt.d_h: self.d_h, nt.d_hr: self.d_hr, nt.d_v: self.d_v,
               nt.N: self.N, nt.N_s: self.N_s, nt.N_r: self.N_r, nt.v: self.v, nt.D: self.mtp_layers}
        if self.d_cq is not None:
            out[nt.d_cq] = self.d_cq
        return out


PRESETS: Dict[str, ModelSpec] = {
    # digest section 2 and 12 (released configs)
    "deepseek-v3": ModelSpec("deepseek-v3", h=7168, h_F=18432, h_E=2048, l=61, n_h=128, d_cq=1536,
                             d_c=512, d_h=128, d_hr=64, d_v=128, N=256, N_s=1, N_r=8, v=129280,
                             first_k_dense=3, moe_layer_freq=1, topk_method="noaux_tc",
                             tie_word_embeddings=False, mtp_layers=1, fp8_block=(128, 128)),
    "deepseek-v2": ModelSpec("deepseek-v2", h=5120, h_F=12288, h_E=1536, l=60, n_h=128, d_cq=1536,
                             d_c=512, d_h=128, d_hr=64, d_v=128, N=160, N_s=2, N_r=6, v=102400,
                             first_k_dense=1, moe_layer_freq=1, topk_method="group_limited_greedy",
                             tie_word_embeddings=False, mtp_layers=0),
    "deepseek-v2-lite": ModelSpec("deepseek-v2-lite", h=2048, h_F=10944, h_E=1408, l=27, n_h=16, d_cq=None,
                                  d_c=512, d_h=128, d_hr=64, d_v=128, N=64, N_s=2, N_r=6, v=102400,
                                  first_k_dense=1, moe_layer_freq=1, topk_method="greedy",
                                  tie_word_embeddings=False, mtp_layers=0),
}


def load_model(name_or_path: str) -> ModelSpec:
    """A preset by name, or a Hugging Face ``config.json`` (read as JSON data only)."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    import os
    if os.path.exists(name_or_path) or name_or_path.endswith(".json"):
        from .hfconfig import from_hf_config  # issue: real checkpoints
        return from_hf_config(name_or_path)
    raise ConfigError("model", f"unknown model {name_or_path!r}: use one of {', '.join(PRESETS)} "
                               f"or a path to a Hugging Face config.json")


# ---------------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """The parallel layout (Table 5). ``sp`` None means sequence parallelism on (SP = TP)."""

    dp: int = 32
    tp: int = 2
    pp: int = 16
    ep: int = 8
    etp: int = 1
    cp: int = 1
    sp: Optional[int] = None
    layers_per_stage: Optional[Tuple[int, ...]] = None

    @property
    def SP(self) -> int:
        return self.tp if self.sp is None else self.sp

    @property
    def edp(self) -> Fraction:
        """Replicas of each expert shard, world / (PP EP ETP) = DP TP CP / (EP ETP) (Table 5 with CP)."""
        return Fraction(self.dp * self.tp * self.cp, self.ep * self.etp)

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def values(self) -> Dict:
        return {nt.DP: self.dp, nt.TP: self.tp, nt.PP: self.pp, nt.EP: self.ep, nt.ETP: self.etp,
                nt.CP: self.cp, nt.SP: self.SP}


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("positive-integer", f"{name} must be a positive integer, got {value!r}")


def validate_layout(model: ModelSpec, layout: Layout, seq: Optional[int] = None) -> None:
    """Check the paper's divisibility rules; raise ConfigError naming the first that fails."""
    for f in ("dp", "tp", "pp", "ep", "etp", "cp"):
        _positive_int(f.upper(), getattr(layout, f))
    if layout.sp is not None:
        _positive_int("SP", layout.sp)
        if layout.sp not in (1, layout.tp):
            raise ConfigError("sp", f"SP must be 1 (off) or equal TP={layout.tp}, got SP={layout.sp}")
    tp, ep, etp = layout.tp, layout.ep, layout.etp
    if model.n_h % tp:
        raise ConfigError("tp-divides-heads",
                          f"TP={tp} must divide n_h={model.n_h} (attention heads of {model.name})")
    if model.N % ep:
        raise ConfigError("ep-divides-experts",
                          f"EP={ep} must divide N={model.N} (routed experts of {model.name})")
    if (layout.dp * tp * layout.cp) % (ep * etp):
        dtc = "DP*TP" if layout.cp == 1 else "DP*TP*CP"
        raise ConfigError("edp-integer",
                          f"{dtc}={layout.dp * tp * layout.cp} must be divisible by EP*ETP={ep * etp} "
                          f"(EDP = {dtc}/(EP*ETP) must be an integer; DP={layout.dp}, TP={tp}, EP={ep}, ETP={etp}"
                          + (f", CP={layout.cp}" if layout.cp != 1 else "") + ")")
    if model.h_E % etp:
        raise ConfigError("etp-divides-expert", f"ETP={etp} must divide h_E={model.h_E}")
    if model.h_F % tp:
        raise ConfigError("tp-divides-ffn", f"TP={tp} must divide h_F={model.h_F} (dense FFN)")
    if layout.pp > model.l:
        raise ConfigError("pp-layers", f"PP={layout.pp} is larger than the {model.l} layers of {model.name}")
    if seq is not None and seq % layout.cp:
        raise ConfigError("cp-divides-seq", f"CP={layout.cp} must divide the sequence length s={seq}")
    if seq is not None and seq % (layout.SP * layout.cp):
        raise ConfigError("sp-divides-seq", f"SP*CP={layout.SP * layout.cp} must divide the sequence length s={seq} "
                                            f"(sequence parallelism splits the sequence over SP={layout.SP} ranks)")
    stage_layers(model, layout)  # validates an explicit split


def stage_layers(model: ModelSpec, layout: Layout) -> List[range]:
    """Layers held by each pipeline stage.

    Default split (reproduces the paper's Table 4 for 61 layers, PP=16): the first PP-1
    stages take ceil(l/PP) layers each and the last stage the remainder, when that
    remainder is at least one layer; otherwise layers are spread as evenly as possible
    (the first l mod PP stages take one more).  An explicit ``layers_per_stage`` wins.
    """
    l, pp = model.l, layout.pp
    if layout.layers_per_stage is not None:
        split = list(layout.layers_per_stage)
        if len(split) != pp:
            raise ConfigError("layers-per-stage", f"--layers-per-stage has {len(split)} entries, PP={pp}")
        if any((not isinstance(x, int)) or x < 1 for x in split):
            raise ConfigError("layers-per-stage", f"every stage needs at least one layer, got {split}")
        if sum(split) != l:
            raise ConfigError("layers-per-stage", f"--layers-per-stage sums to {sum(split)}, the model has {l} layers")
    else:
        if pp > l:
            raise ConfigError("pp-layers", f"PP={pp} is larger than the {l} layers of {model.name}")
        k = -(-l // pp)
        if pp == 1:
            split = [l]
        elif l - k * (pp - 1) >= 1:
            split = [k] * (pp - 1) + [l - k * (pp - 1)]
        else:
            base, rem = divmod(l, pp)
            split = [base + 1] * rem + [base] * (pp - rem)
    out, start = [], 0
    for n in split:
        out.append(range(start, start + n))
        start += n
    return out


@dataclass(frozen=True)
class StageComposition:
    """What one pipeline stage holds: the values of L_d, L_m, e_E, e_H."""

    index: int
    layers: range
    dense: int
    moe: int
    embedding: bool
    head: bool

    def values(self) -> Dict:
        return {nt.L_d: self.dense, nt.L_m: self.moe, nt.e_E: int(self.embedding), nt.e_H: int(self.head)}

    @property
    def label(self) -> str:
        if len(self.layers) == 1:
            return f"layer {self.layers.start}"
        return f"layers {self.layers.start}-{self.layers.stop - 1}"


def compose(model: ModelSpec, layers: range, first: bool, last: bool, index: int = 0) -> StageComposition:
    kinds = model.layer_kinds()
    dense = sum(1 for i in layers if kinds[i] == "dense")
    return StageComposition(index, layers, dense, len(layers) - dense, first, last)


def stages(model: ModelSpec, layout: Layout) -> List[StageComposition]:
    split = stage_layers(model, layout)
    return [compose(model, r, i == 0, i == len(split) - 1, i) for i, r in enumerate(split)]


def stage(model: ModelSpec, layout: Layout, index: int) -> StageComposition:
    all_stages = stages(model, layout)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(all_stages):
        raise ConfigError("stage", f"stage must be an integer in 0..{len(all_stages) - 1} (PP={layout.pp}), got {index!r}")
    return all_stages[index]


def whole_model(model: ModelSpec) -> StageComposition:
    """The whole model as one 'stage' (PP = 1): every layer, embedding and head."""
    return compose(model, range(model.l), True, True)


def layer_range(model: ModelSpec, first: int, last: int) -> StageComposition:
    """Layers first..last (inclusive) with the embedding on layer 0 and the head on layer l-1 (Table 3)."""
    if not (0 <= first <= last < model.l):
        raise ConfigError("layers", f"layers {first}..{last} out of range 0..{model.l - 1}")
    return compose(model, range(first, last + 1), first == 0, last == model.l - 1)


# ---------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------
#: Recomputation policies (views of the per-tensor activation terms, derivations/activations.py):
#: none and full are the paper's (Sec. 5); selective recomputes the core attention (the b n_h s^2
#: tensors; Korthikanti et al. 2022); custom recomputes the named operators (RECOMPUTE_OPS).
RECOMPUTE = ("none", "full", "selective", "custom")
#: Operators a custom policy may recompute (``--recompute custom:norm,mla_up``): each name is a
#: tag of the activation tensors it stops keeping.
RECOMPUTE_OPS = {
    "norm": "RMSNorm outputs (MLA down-projection input, MoE router/expert input, dense FFN input, head input)",
    "latent": "the MLA latents c_Q and c_KV",
    "mla_up": "MLA up-projection outputs: q and k with their RoPE parts, v",
    "score": "core attention internals: the b n_h s^2 softmax/dropout tensors (eager) or the softmax "
             "statistics (flash)",
    "mask": "dropout masks (attention, after W^O, after the FFN and the experts)",
    "router": "router logits and probabilities",
    "experts": "every tensor of the routed experts",
    "shared": "every tensor of the shared experts",
    "swiglu": "SwiGLU outputs (activation and product) of the routed, shared and dense FFN experts",
    "ffn": "dense FFN intermediates (SwiGLU inputs and outputs)",
}
ATTENTION = ("eager", "flash")
#: Pipeline schedules (derivations/schedules.py); None keeps the paper's one-micro-batch view.
SCHEDULES = ("1f1b", "interleaved", "dualpipe", "zb")
#: Data-type names accepted by the precision options, in bytes per element.
DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
ZERO_NAMES = {0: "none", 1: "os", 2: "os+g", 3: "os+g+params"}


def parse_recompute(text: str) -> Tuple[str, Tuple[str, ...]]:
    """``'selective'`` -> ('selective', ()); ``'custom:norm,mla_up'`` -> ('custom', ('norm', 'mla_up')).

    Operators come back in RECOMPUTE_OPS order (one canonical spelling per policy)."""
    policy, _, rest = str(text).partition(":")
    if policy not in RECOMPUTE:
        raise ConfigError("recompute", f"recompute must be one of none, full, selective, custom:OP[,OP...], "
                                       f"got {text!r}")
    if policy != "custom":
        if rest:
            raise ConfigError("recompute", f"only custom takes operators (custom:OP,...), got {text!r}")
        return policy, ()
    ops = [o.strip() for o in rest.split(",") if o.strip()]
    if not ops:
        raise ConfigError("recompute-ops", f"custom recomputation needs operators, e.g. custom:norm,mla_up; "
                                           f"valid: {', '.join(RECOMPUTE_OPS)}")
    bad = [o for o in ops if o not in RECOMPUTE_OPS]
    if bad:
        raise ConfigError("recompute-ops", f"unknown recompute operator{'s' * (len(bad) > 1)} "
                                           f"{', '.join(bad)}; valid: {', '.join(RECOMPUTE_OPS)}")
    return "custom", tuple(o for o in RECOMPUTE_OPS if o in ops)


# ---------------------------------------------------------------------------------
# Conventions: modelling assumptions as named switches (issue 8; digest sec. 10)
# ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SwitchSpec:
    """One modelling assumption: ``values`` with the paper's choice first; ``tokens`` the
    term-id token of each other value (``act.layer.dispatch``); ``side`` what it changes
    ('activations', 'weights' or 'both'); ``help`` the option's text."""

    name: str
    option: str
    values: Tuple[str, ...]
    tokens: Dict[str, str]
    side: str
    help: str
    paper: str = ""

    @property
    def default(self) -> str:
        return self.values[0]


#: The switches, in the fixed order ``memsym compare`` flips them (attention, bytes per
#: parameter and MTP are switches too, kept in Training / the CLI; see CONVENTION_ORDER).
CONVENTION_SWITCHES: Dict[str, SwitchSpec] = {s.name: s for s in (
    SwitchSpec("routed_tokens", "--routed-tokens", ("paper", "dispatch"), {"dispatch": "dispatch"}, "activations",
               "routed token-copies one device's experts hold: paper ((N/EP) E_token = b s N_r/EP, Table 9) or "
               "dispatch (b s N_r/SP: the EP devices of an expert-parallel group each hold their own b s/SP tokens, "
               "so under balanced routing a device receives b s N_r/SP token-copies, EP/SP times the paper's; the "
               "count of every public estimator)", "(N/EP) E_token = b s N_r/EP token-copies per device"),
    SwitchSpec("router_tensors", "--router-tensors", ("full", "sp"), {"sp": "router-sp"}, "activations",
               "router logits and probabilities (4 b s N bytes): full (the paper: over the whole sequence) or sp "
               "(divided by SP: the router runs on the sequence-parallel shard)", "not divided by SP"),
    SwitchSpec("shared_expert", "--shared-expert", ("replicated", "tp"), {"tp": "shared-tp"}, "both",
               "shared experts: replicated (the paper: N_s x 3 h h_E weights on every device and their gate/up/"
               "SwiGLU activations over all b s tokens) or tp (split by TP as Megatron shards them: weights / TP and "
               "those activations / TP; their all-gathered input is not split)", "replicated on every device"),
    SwitchSpec("dropout_masks", "--dropout-masks", ("kept", "none"), {"none": "no-masks"}, "activations",
               "dropout masks (1 B per element: attention, after W^O, after every expert): kept (the paper, Sec. 5) "
               "or none (dropout off, as DeepSeek-V3 and Megatron's DeepSeek recipes train)", "kept"),
    SwitchSpec("checkpoints", "--checkpoints", ("two", "one"), {"one": "one-checkpoint"}, "activations",
               "what full recomputation keeps per layer: two (the paper's M_2^A + M_2^E: the MLA and the MoE "
               "sublayer inputs and the routing decision) or one (the layer input only, as Megatron-LM and the "
               "estimators keep)", "two per layer plus the routing decision"),
    SwitchSpec("swiglu", "--swiglu", ("separate", "fused"), {"fused": "fused-swiglu"}, "activations",
               "SwiGLU outputs kept: separate (the paper: activation and product, two tensors of h_E per token) or "
               "fused (a fused SwiGLU kernel keeps its input and only the product, the down-projection input)",
               "activation and product kept"),
    SwitchSpec("expert_outputs", "--expert-outputs", ("not-kept", "kept"), {"kept": "expert-outputs"},
               "activations",
               "routed experts' outputs: not-kept (the paper) or kept (the combine / un-permute step weights them by "
               "the router probabilities, whose gradient needs them: ModelZoo's un-permute all-to-all output)",
               "not kept"),
    SwitchSpec("latent_norms", "--latent-norms", ("not-kept", "kept"), {"kept": "latent-norms"}, "activations",
               "RMSNorm outputs of the MLA latents c_Q and c_KV (the up-projections' inputs): not-kept (the paper "
               "counts each latent once) or kept (beside the latents, as ModelZoo counts)", "not kept"),
    SwitchSpec("routing_state", "--routing-state", ("mask", "row-map"), {"row-map": "row-map"}, "activations",
               "routing state kept for backward: mask (the paper's routing choice, B_a b s N_r) or row-map "
               "(Megatron's int64 permutation row map, 8 b s N bytes; divided by SP with --router-tensors sp)",
               "routing choice B_a b s N_r"),
    SwitchSpec("inventory", "--inventory", ("paper", "modelzoo"), {"modelzoo": "modelzoo-inventory"},
               "activations",
               "per-tensor list: paper (Sec. 5) or modelzoo (NVIDIA Megatron-MoE-ModelZoo's: latents on the "
               "sequence-parallel shard with the kv norm output unsplit, no MoE RMSNorm output, router "
               "probabilities without logits, the shared experts' input kept once); the other switches still apply",
               "Sec. 5's tensors"),
    SwitchSpec("rank", "--rank", ("stage", "megatron"), {"megatron": "megatron"}, "weights",
               "the rank whose parameters are reported: stage (the paper: one device of the --stage pipeline "
               "stage, Table 6) or megatron (Megatron-LM theoretical_memory_usage.py's most-loaded shard: the TP-split "
               "and replicated parameters of an average stage, every MLA matrix and norm split by TP, the shared "
               "experts with the dense parameters, sharded over DP)", "one device of a pipeline stage"),
)}

#: The order ``memsym compare`` flips the switches from ``paper`` to a preset (documented
#: there): activations first (largest first in the paper's reading), then the weight side.
CONVENTION_ORDER = ("routed_tokens", "attention", "router_tensors", "shared_expert", "dropout_masks", "checkpoints",
                    "swiglu", "expert_outputs", "latent_norms", "routing_state", "bytes_per_param", "rank", "mtp",
                    "inventory")

#: Bytes per parameter (Table 7 symbols) and the smallest ZeRO stage of each convention:
#: the paper's 2/4/4/2/2; FP32 moments 2/4/4/4/4; Megatron's distributed optimizer, FP32
#: moments sharded over the data-parallel ranks (ZeRO-1): 6 + 12/d bytes per parameter.
BYTES_CONVENTIONS: Dict[str, Tuple[Dict[str, int], int]] = {
    "paper": ({"B_w": 2, "B_g": 4, "B_m": 4, "B_1": 2, "B_2": 2}, 0),
    "fp32-moments": ({"B_w": 2, "B_g": 4, "B_m": 4, "B_1": 4, "B_2": 4}, 0),
    "distributed": ({"B_w": 2, "B_g": 4, "B_m": 4, "B_1": 4, "B_2": 4}, 1),
}
BYTES_HELP = ("bytes per parameter: paper (Table 7: BF16 weights, FP32 gradients and master copy, BF16 moments, "
              "2/4/4/2/2), fp32-moments (2/4/4/4/4) or distributed (Megatron's distributed optimizer: FP32 moments "
              "and the optimizer states sharded over the data-parallel ranks, ZeRO-1: 6 + 12/d bytes per parameter); "
              "sets --optimizer-dtype and (distributed) --zero 1 unless typed")
MTP_HELP = ("count the model's D multi-token-prediction layers (DeepSeek-v3: 1) in Megatron's most-loaded shard, as "
            "Megatron-LM does (needs --rank megatron; the paper counts none)")

#: Presets of every switch (``--conventions``): each source's assumptions.  ``attention``
#: and ``bytes_per_param`` are the Training / CLI switches.  megatron: Megatron-LM's
#: weight-and-optimizer estimate and the runtime choices of Megatron-LM that the ModelZoo
#: estimator encodes, on the paper's tensor list; modelzoo: those runtime choices and
#: ModelZoo's own tensor list (its weights follow the paper's rank and bytes).
_RUNTIME = dict(routed_tokens="dispatch", attention="flash", router_tensors="sp", shared_expert="tp",
                dropout_masks="none", checkpoints="one", swiglu="fused", expert_outputs="kept", latent_norms="kept",
                routing_state="row-map")
CONVENTION_PRESETS: Dict[str, Dict[str, object]] = {
    "paper": dict({k: s.default for k, s in CONVENTION_SWITCHES.items()}, attention="eager",
                  bytes_per_param="paper", mtp=False),
    "megatron": dict({k: s.default for k, s in CONVENTION_SWITCHES.items()}, **_RUNTIME, rank="megatron",
                     bytes_per_param="distributed"),
    "modelzoo": dict({k: s.default for k, s in CONVENTION_SWITCHES.items()}, **_RUNTIME, inventory="modelzoo",
                     bytes_per_param="paper"),
}
CONVENTION_SOURCES = {
    "paper": "Zhang & Su, arXiv 2502.07846 (Sections 3-5, Tables 6-10)",
    "megatron": "Megatron-LM megatron/training/theoretical_memory_usage.py (2026, expert parallelism) for weights "
                "and optimizer; Megatron-LM runtime choices as the ModelZoo estimator encodes them for activations",
    "modelzoo": "NVIDIA Megatron-MoE-ModelZoo DeepSeek memory estimator (activations)",
}


@dataclass(frozen=True)
class Conventions:
    """The modelling assumptions of CONVENTION_SWITCHES (the paper's choice by default) and
    ``mtp`` (count the D MTP layers in Megatron's shard).  Attention kernel and bytes per
    parameter are switches too, held as Training.attention and Training.bytes/zero."""

    routed_tokens: str = "paper"
    router_tensors: str = "full"
    shared_expert: str = "replicated"
    dropout_masks: str = "kept"
    checkpoints: str = "two"
    swiglu: str = "separate"
    expert_outputs: str = "not-kept"
    latent_norms: str = "not-kept"
    routing_state: str = "mask"
    inventory: str = "paper"
    rank: str = "stage"
    mtp: bool = False

    def changed(self) -> List[Tuple[str, object]]:
        """(switch, value) of every switch not at the paper's choice, in CONVENTION_ORDER."""
        out = [(k, getattr(self, k)) for k in CONVENTION_ORDER
               if k in CONVENTION_SWITCHES and getattr(self, k) != CONVENTION_SWITCHES[k].default]
        return out + ([("mtp", True)] if self.mtp else [])

    def side(self, side: str) -> "Conventions":
        """These conventions with the switches that do not act on ``side`` ('activations' or
        'weights') reset to the paper's (what a term of that side depends on)."""
        keep = {k for k, s in CONVENTION_SWITCHES.items() if s.side in (side, "both")}
        reset = {k: s.default for k, s in CONVENTION_SWITCHES.items() if k not in keep}
        if side != "weights":
            reset["mtp"] = False
        return replace(self, **reset)


def validate_conventions(c: "Conventions") -> None:
    for k, spec in CONVENTION_SWITCHES.items():
        if getattr(c, k) not in spec.values:
            raise ConfigError(k, f"{spec.option} must be one of {', '.join(spec.values)}, got {getattr(c, k)!r}")
    if c.mtp and c.rank != "megatron":
        raise ConfigError("mtp", "--mtp counts the D MTP layers in Megatron's most-loaded shard: it needs --rank "
                                 "megatron (or --conventions megatron); the paper's stages hold no MTP layer")


@dataclass(frozen=True)
class Training:
    """Training settings (Table 9) and data types (Table 7), plus the extensions beyond the paper.

    recompute / recompute_ops: the recomputation policy (RECOMPUTE; the operators of custom).
    attention: 'eager' (the paper's b n_h s^2 tensors) or 'flash' (fused; FP32 per-row statistics).
    fp8: cache the activations the DeepSeek-V3 report names in FP8 / E5M6 (B_f8, B_o).
    imbalance: F >= 1, tokens of the busiest expert rank over the balanced average (E_token).
    schedule, microbatches, vpp: the pipeline schedule, micro-batches per step m (None: at
    least enough to fill the pipeline) and virtual stages V (interleaved).
    """

    mbs: int = 1
    seq: int = 4096
    zero: int = 0
    recompute: str = "none"
    bytes: Tuple[Tuple[str, int], ...] = tuple((k.name, v) for k, v in nt.PAPER_BYTES.items())
    recompute_ops: Tuple[str, ...] = ()
    attention: str = "eager"
    fp8: bool = False
    imbalance: object = 1
    schedule: Optional[str] = None
    microbatches: Optional[int] = None
    vpp: Optional[int] = None
    conventions: Conventions = Conventions()

    @property
    def recompute_label(self) -> str:
        """The policy as typed on the command line (``custom:norm,mla_up``)."""
        return f"custom:{','.join(self.recompute_ops)}" if self.recompute == "custom" else self.recompute

    def values(self) -> Dict:
        out = {nt.b: self.mbs, nt.s: self.seq}
        out.update(nt.EXTENSION_DEFAULTS)
        out.update({nt.symbol(k): v for k, v in self.bytes})
        out[nt.F] = Fraction(self.imbalance) if not isinstance(self.imbalance, int) else self.imbalance
        if self.microbatches is not None:
            out[nt.n_mb] = self.microbatches
        if self.vpp is not None:
            out[nt.VPP] = self.vpp
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
        """The BYTES_CONVENTIONS name these bytes per parameter and ZeRO stage match, else None
        (FP32 moments under ZeRO-1 is Megatron's distributed optimizer)."""
        d = dict(self.bytes)
        for name in ("paper", "distributed", "fp32-moments"):
            byts, zmin = BYTES_CONVENTIONS[name]
            if all(d.get(k) == v for k, v in byts.items()) and (not zmin or self.zero == zmin):
                return name
        return None


def validate_training(t: Training) -> None:
    _positive_int("micro-batch size (--mbs)", t.mbs)
    _positive_int("sequence length (--seq)", t.seq)
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
    try:
        f = Fraction(t.imbalance)
    except (TypeError, ValueError):
        raise ConfigError("imbalance", f"imbalance F must be a number >= 1, got {t.imbalance!r}") from None
    if isinstance(t.imbalance, bool) or f < 1:
        raise ConfigError("imbalance", f"imbalance F must be >= 1 (1 is balanced routing), got {t.imbalance!r}")
    if t.schedule is not None and t.schedule not in SCHEDULES:
        raise ConfigError("schedule", f"schedule must be one of {', '.join(SCHEDULES)}, got {t.schedule!r}")
    if t.microbatches is not None:
        _positive_int("micro-batches per step (--microbatches)", t.microbatches)
        if t.schedule is None:
            raise ConfigError("schedule", "--microbatches needs a pipeline schedule (--schedule)")
    if t.vpp is not None:
        _positive_int("virtual pipeline stages (--vpp)", t.vpp)
        if t.schedule != "interleaved":
            raise ConfigError("vpp", f"--vpp applies to --schedule interleaved only, got schedule {t.schedule}")
        if t.vpp < 2:
            raise ConfigError("vpp", f"the interleaved schedule needs --vpp V >= 2, got {t.vpp}")
    validate_conventions(t.conventions)
    for k, v in t.bytes:
        if isinstance(v, bool) or not isinstance(v, (int, Fraction)) or v <= 0:
            raise ConfigError("bytes", f"bytes per element {k} must be positive, got {v!r}")


def substitution(model: ModelSpec, layout: Optional[Layout] = None, training: Optional[Training] = None,
                 composition: Optional[StageComposition] = None) -> Dict:
    """The full substitution symbol -> exact value for a configuration."""
    out = dict(model.values())
    if layout is not None:
        out.update(layout.values())
    if training is not None:
        out.update(training.values())
        out[nt.z] = training.zero
    else:
        out.update(nt.PAPER_BYTES)
        out.update(nt.EXTENSION_DEFAULTS)
    if composition is not None:
        out.update(composition.values())
    return out


from symbolic.units import parse_size  # noqa: E402,F401  (re-exported for the CLI)
