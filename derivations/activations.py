"""Sec. 5: activations kept for the backward pass (Tables 9-10), in bytes, and their variants.

Each activation term is the paper's list of tensors, one :class:`Part` per tensor (or per
row where the paper prints a group, such as the routed experts), with bytes per element
as symbols (B_a = 2 for BF16, B_k = 1 for dropout masks) and the parallel degrees as
symbols: SP divides the tensors of the sequence-parallel region, TP those after the
split projections, CP the sequence held by each device (extension; the paper has CP = 1),
ETP the intermediate size inside an expert.

The paper's readings (digest sec. 7):
  M_1^A = 4bsh/SP + 2bs(d_c' + d_c) + 4bs(d_h + d_h^R)n_h/TP + 2bs d_h n_h/TP
          + 5 b n_h s^2/TP + 2bs d_h n_h/TP + bsh/SP
  M_1^E = 4bsh/SP + 4bsN + 2bsN_r + (N/EP)(3 E_token h + 8 E_token h_E) + N_s(3bsh + 8bsh_E)
  M_2^A = 2bsh/SP,  M_2^E = 2bsh/SP + 2bsN_r  (full recomputation)

Views (extension).  Every activation term is a *view* of these tensor lists: a
:class:`View` (recomputation policy, attention kernel, FP8 caching) decides, tensor by
tensor and from its tags only, whether the tensor is kept and at how many bytes per
element.  The paper's terms are the view ``View()`` (none, eager, BF16) and ``View('full')``;
every other policy is built the same way, so ``act.mla.layer.selective`` is by
construction ``act.mla.layer`` minus exactly its score rows.  Tags:

  layer_input  the layer (sublayer) input: the checkpoint kept by full recomputation
  routing      the routing decision, also kept by full recomputation (the paper's M_2^E)
  head         final norm, head and loss of the last stage: outside the transformer
               layers, kept by full and selective recomputation (Megatron recomputes layers)
  norm         RMSNorm outputs           latent   c_Q and c_KV      mla_up  q, k, v
  score        core-attention internals: eager, the three b n_h s^2 tensors (softmax output,
               dropout mask, dropout output); flash, the FP32 per-row log-sum-exp
  mask         dropout masks             router   router logits and probabilities
  experts      routed-expert tensors     shared   shared-expert tensors
  swiglu       SwiGLU outputs (activation and product), recomputable from its inputs
  ffn          dense FFN intermediates
  eager/flash  exists only under that attention kernel
  fp8 / e5m6   cached in FP8 (B_f8) / in E5M6 (B_o) under --fp8-activations
  sublayer_input  the MoE / dense FFN sublayer input: not kept by full recomputation under
               --checkpoints one (the layer input, the MLA's, is the only checkpoint)
  routed       the routed experts' tensors (E_token token-copies per local expert)
  inter        an expert's intermediate (h_E-wide) tensors   fc1  its gate and up outputs
  combine      a routed expert's output (exists under --expert-outputs kept)
  latent_norm  the latents' RMSNorm outputs (exist under --latent-norms kept)
  dispatch_mask / row_map   the routing state (--routing-state mask / row-map)
  paper_only / modelzoo_only  in one tensor inventory only (--inventory paper / modelzoo)

Conventions (issue 8; derivations/conventions.py).  Every modelling assumption of the paper
is a switch of :class:`derivations.config.Conventions` applied by the same View, from the tags
only: :data:`EXISTS` (tensors that exist under one choice), :data:`RULES` (tensors a choice
rescales: dispatch multiplies the routed tensors by EP/SP, --router-tensors sp divides the
router's by SP, --shared-expert tp the shared experts' intermediates by TP, --swiglu fused
halves the SwiGLU outputs), dropped masks and the checkpoints of full recomputation.  The
tensor lists (``*_specs``) hold the paper's tensors and the ModelZoo inventory's own, tagged,
so the paper's default view keeps the paper's terms and ids; a view with other conventions
names them in its ids (``act.moe.layer.dispatch``, or the preset, ``act.layer.modelzoo``),
labels and provenance, leaving out those that change no kept tensor (:func:`reduced`).

Policies: none keeps everything; full keeps layer_input, routing and head; selective drops
``score`` (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", Sec. 4.2: recompute the core attention); custom drops the named
operators (``derivations.config.RECOMPUTE_OPS``).

Attention kernels: ``eager`` keeps the paper's 5 b n_h s^2/(TP CP) bytes per layer.
``flash`` (FlashAttention-2 style fused kernel) keeps no s^2 tensor: its backward needs q,
k, v (kept already), the attention output O (the same tensor as the W^O input, already
counted once as ``attn_out``) and one FP32 log-sum-exp per query row and head:
4 b n_h s/(TP CP) bytes.  Dropout inside the kernel is regenerated from the RNG state, so
no mask is kept.

Context parallelism: each device holds s/CP of the sequence (every b s term is divided by
CP) and, for eager attention, the scores of its s/CP query rows against all s keys:
s^2/(TP CP).  This is the all-gather (or ring, Megatron's CP) arrangement in which the
K/V blocks of other ranks are not kept for backward; a ring implementation that keeps
every received K/V block would add 2 (CP - 1)/CP of the k and v terms.

FP8 caching (DeepSeek-V3 technical report, arXiv 2412.19437, Sec. 3.3 "Low-Precision
Storage and Communication"): "it is a natural choice to cache activations in FP8 format
for the backward pass of the Linear operator. However, special considerations are taken
on several operators: (1) Inputs of the Linear after the attention operator ... We adopt a
customized E5M6 data format exclusively for these activations. (2) Inputs of the SwiGLU
operator in MoE. ... we cache the inputs of the SwiGLU operator and recompute its output
in the backward pass. These activations are also stored in FP8"; and "we quantize the
activation before MoE up-projections into FP8 and then apply dispatch components".  So
``--fp8-activations`` stores: the attention output before W^O in E5M6 (B_o, 12 bits =
3/2 B, assumed packed); the routed and shared experts' inputs (the MoE up-projection
inputs) and their SwiGLU inputs (gate and up outputs) in FP8 (B_f8 = 1).  The SwiGLU
outputs are dropped only when ``swiglu`` is recomputed (the DeepSeek-V3 recipe does).  The
report's general sentence is not applied to other tensors: it names no other, and in its
recipe the other Linear inputs (RMSNorm outputs, MLA up-projection outputs) are
recomputed.  Per-tile scaling factors (one per 1x128 tile) are not counted.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Dict, Iterable, Tuple

import sympy as sp

from derivations.config import CONVENTION_PRESETS, CONVENTION_SWITCHES, Conventions
from derivations.notation import (B_a, B_f8, B_k, B_o, CP, EP, ETP, E_token, L_d, L_m, N, N_r, N_s, SP, TP, b, d_c,
                               d_cq, d_h, d_hr, d_v, e_H, h, h_E, h_F, n_fl, n_h, s, v)
from symbolic.term import Part, Term, combine

MLA = "Sec. 5.1, M_1^A"
MOE = "Sec. 5.2, M_1^E"
EXT = "extension (not in the paper)"
FLASH = "extension: fused (flash) attention"
CHECKPOINT_TAGS = frozenset({"layer_input", "routing", "head"})


# ----------------------------------------------------------------------------- views
@dataclass(frozen=True)
class View:
    """Which activation tensors are kept, and in which format (see the module docstring).

    recompute: 'none' | 'full' | 'selective' | 'custom'; ops: the operators a custom
    policy recomputes; attention: 'eager' | 'flash'; fp8: the DeepSeek-V3 FP8 caching;
    conv: the modelling assumptions (:class:`derivations.config.Conventions`; only the
    activation switches are kept, see :data:`RULES`).
    """

    recompute: str = "none"
    ops: Tuple[str, ...] = ()
    attention: str = "eager"
    fp8: bool = False
    conv: Conventions = field(default_factory=Conventions)
    preset: str = field(default="", compare=False)  # the preset these conventions are (set by view_terms)

    def __post_init__(self):
        object.__setattr__(self, "conv", self.conv.side("activations"))

    @classmethod
    def of(cls, training) -> "View":
        """The view of a :class:`derivations.config.Training`."""
        return cls(training.recompute, tuple(training.recompute_ops), training.attention, bool(training.fp8),
                   getattr(training, "conventions", Conventions()))

    @property
    def dropped(self) -> frozenset:
        """Tags of the tensors this policy recomputes (full: everything but the checkpoints)."""
        return frozenset({"none": (), "selective": ("score",), "full": (), "custom": self.ops}[self.recompute])

    @property
    def checkpoints(self) -> frozenset:
        """Tags full recomputation keeps: the paper's two checkpoints per layer and the routing
        decision, or (``--checkpoints one``) the layer input only (and the head)."""
        return CHECKPOINT_TAGS if self.conv.checkpoints == "two" else frozenset({"layer_input", "head"})

    def exists(self, tags) -> bool:
        """Whether a tensor with these tags exists under this kernel and these conventions."""
        return all(check(self) for tag, check in EXISTS.items() if tag in tags)

    def keeps(self, tags: Iterable[str]) -> bool:
        tags = set(tags)
        if not self.exists(tags):
            return False
        if "mask" in tags and self.conv.dropout_masks == "none":
            return False
        if self.recompute == "full":
            if self.conv.checkpoints == "one" and "sublayer_input" in tags:
                return False
            return bool(tags & self.checkpoints)
        return not (tags & self.dropped)

    def retype(self, num: Tuple, tags: Iterable[str]) -> Tuple[Tuple, str]:
        """(factors with B_a replaced by the cached format's bytes symbol, format note)."""
        if not self.fp8:
            return tuple(num), ""
        tags = set(tags)
        for tag, sym, note in (("e5m6", B_o, "E5M6"), ("fp8", B_f8, "FP8")):
            if tag in tags:
                return tuple(sp.sympify(f).xreplace({B_a: sym}) for f in num), note
        return tuple(num), ""

    def scale(self, tags: Iterable[str]) -> Tuple[Tuple, Tuple, Tuple[str, ...]]:
        """(extra numerator factors, extra denominator factors, notes) the conventions apply
        to a tensor with these tags (:data:`RULES`)."""
        tags, num, den, notes = set(tags), (), (), ()
        for need, switch, value, n, d, note in RULES:
            if need <= tags and getattr(self.conv, switch) == value:
                num, den, notes = num + n, den + d, notes + (note,)
        return num, den, notes

    @property
    def conv_suffix(self) -> str:
        """Term-id suffix of the conventions: '' (the paper's), '.<preset>' when they are exactly
        one preset's activation switches, else '.<token>.<token>...' (CONVENTION_SWITCHES tokens)."""
        changed = self.conv.changed()
        if not changed:
            return ""
        if self.preset:
            return "." + self.preset
        return "".join("." + CONVENTION_SWITCHES[k].tokens[v] for k, v in changed)

    @property
    def suffix(self) -> str:
        """Term-id suffix: '' | '.full' | '.selective' | '.custom-<op>-<op>', then '.flash', '.fp8',
        then the conventions (:attr:`conv_suffix`).

        Full recomputation keeps neither score tensors nor FP8-cached ones, so it is '.full'
        whatever the kernel; '.flash' appears only when the policy keeps the score tensors."""
        if self.recompute == "full":
            return ".full" + self.conv_suffix
        out = {"none": "", "selective": ".selective"}.get(self.recompute)
        if out is None:
            out = ".custom-" + "-".join(self.ops)
        if self.attention == "flash" and "score" not in self.dropped and not self.preset:
            out += ".flash"  # a preset's name says its kernel (named() checks it)
        if self.fp8:
            out += ".fp8"
        return out + self.conv_suffix

    @property
    def conv_label(self) -> str:
        """The conventions in words ('' for the paper's)."""
        changed = self.conv.changed()
        if not changed:
            return ""
        what = ", ".join(f"{CONVENTION_SWITCHES[k].option.lstrip('-')} {v}" for k, v in changed)
        return f"conventions {self.preset} ({what})" if self.preset else f"conventions: {what}"

    @property
    def label(self) -> str:
        pol = {"none": "no recomputation", "full": "full recomputation",
               "selective": "selective recomputation (core attention)"}.get(
            self.recompute, f"recomputing {', '.join(self.ops)}")
        extra = []
        if self.recompute != "full":
            if self.attention == "flash" and "score" not in self.dropped:
                extra.append("flash attention")
            if self.fp8:
                extra.append("FP8 caching")
        if self.conv_label:
            extra.append(self.conv_label)
        return pol + (", " + ", ".join(extra) if extra else "")


#: Tags that make a tensor exist only under one kernel or one convention.
EXISTS = {
    "eager": lambda v: v.attention == "eager",
    "flash": lambda v: v.attention == "flash",
    "combine": lambda v: v.conv.expert_outputs == "kept",
    "latent_norm": lambda v: v.conv.latent_norms == "kept",
    "dispatch_mask": lambda v: v.conv.routing_state == "mask",
    "row_map": lambda v: v.conv.routing_state == "row-map",
    "paper_only": lambda v: v.conv.inventory == "paper",
    "modelzoo_only": lambda v: v.conv.inventory == "modelzoo",
}

#: Conventions that rescale a tensor: (tags it needs, switch, value, extra numerator,
#: extra denominator, note).  dispatch: each of the N/EP local experts receives
#: E_token EP/SP token-copies (EP source devices of b s/SP tokens each), b s N_r/SP in all.
RULES = (
    (frozenset({"routed"}), "routed_tokens", "dispatch", (EP,), (SP,),
     "dispatch: E_token EP/SP token-copies per local expert, b s N_r/SP per device"),
    (frozenset({"router"}), "router_tensors", "sp", (), (SP,), "divided by SP"),
    (frozenset({"shared", "inter"}), "shared_expert", "tp", (), (TP,), "split by TP"),
    (frozenset({"swiglu"}), "swiglu", "fused", (sp.Rational(1, 2),), (), "fused SwiGLU: the product only"),
)

PAPER = View()
#: The activation switches of each non-paper preset (derivations.config.CONVENTION_PRESETS).
PRESET_CONVENTIONS = {name: Conventions(**{k: v for k, v in p.items() if k in CONVENTION_SWITCHES}).side("activations")
                      for name, p in CONVENTION_PRESETS.items() if name != "paper"}


@dataclass(frozen=True)
class Group:
    """A row the paper prints as ``count x (tensors of one expert)``: the routed experts
    ``(N/EP)(3 E_token h + 8 E_token h_E)`` or the shared ones.  ``subs`` are the tensors of
    one expert as (key, label, num, den, tags); a view keeps or retypes each of them."""

    key: str
    label: str
    count: object
    subs: Tuple[Tuple, ...]
    provenance: str
    tags: Tuple[str, ...]


def _kept(view: View, num, den, tags):
    """(num, den, notes) of one tensor as ``view`` keeps it, or None if it is not kept."""
    if not view.keeps(tags):
        return None
    num, fmt = view.retype(num, tags)
    n, d, notes = view.scale(tags)
    if fmt:
        notes = (f"cached in {fmt}",) + notes
    return tuple(num) + n, tuple(den) + d, notes


def apply(view: View, specs) -> Tuple[Part, ...]:
    """The parts of a tensor list (Parts and Groups) kept by ``view``, in the paper's order."""
    out = []
    for spec in specs:
        if isinstance(spec, Group):
            kept, inner, changed, all_notes = [], sp.Integer(0), False, []
            for key, label, num, den, tags in spec.subs:
                if not view.exists(spec.tags + tags):
                    continue
                got = _kept(view, num, den, spec.tags + tags)
                if got is None:
                    changed = True
                    continue
                num, den, notes = got
                changed = changed or bool(notes)
                fmt = [n for n in notes if n.startswith("cached in ")]
                kept.append(label + (f" in {fmt[0][len('cached in '):]}" if fmt else ""))
                all_notes += [n for n in notes if n not in all_notes and n not in fmt]
                inner += sp.Mul(*[sp.sympify(f) for f in num]) / sp.Mul(*[sp.sympify(f) for f in den])
            if not kept:
                continue
            label = spec.label if not changed else (spec.label.split(":")[0] + ": kept per expert " + ", ".join(kept)
                                                    + (f" ({'; '.join(all_notes)})" if all_notes else ""))
            out.append(Part(spec.key, label, (spec.count, inner), (), spec.provenance, spec.tags, counts=(0,)))
            continue
        got = _kept(view, spec.num, spec.den, spec.tags)
        if got is None:
            continue
        num, den, notes = got
        out.append(spec if not notes else replace(spec, num=num, den=den,
                                                  label=f"{spec.label} ({'; '.join(notes)})"))
    return tuple(out)


def flatten(view: View, specs) -> Tuple[Part, ...]:
    """Every tensor kept by ``view``, one Part each (a group's tensor as ``count x tensor``,
    key ``<group>.<tensor>``): the per-tensor listing of ``memsym estimate --tensors``."""
    out = []
    for spec in specs:
        if isinstance(spec, Group):
            for key, label, num, den, tags in spec.subs:
                got = _kept(view, num, den, spec.tags + tags)
                if got is None:
                    continue
                num, den, notes = got
                what = spec.label.split(":")[0].split(",")[0]
                out.append(Part(f"{spec.key}.{key}", f"{what}: {label}" + (f" ({'; '.join(notes)})" if notes else ""),
                                (spec.count,) + num, den, spec.provenance, spec.tags + tags, counts=(0,)))
            continue
        got = _kept(view, spec.num, spec.den, spec.tags)
        if got is not None:
            num, den, notes = got
            out.append(replace(spec, num=num, den=den, row="",
                               label=spec.label + (f" ({'; '.join(notes)})" if notes else "")))
    return tuple(out)


# ----------------------------------------------------------------------------- tensor lists
MZ = "NVIDIA Megatron-MoE-ModelZoo DeepSeek estimator (--inventory modelzoo)"
CONV = "convention (not in the paper; see --help)"


def mla_specs(q_lora: bool = True):
    """The MLA layer's tensors (Parts), the paper's and the other inventories', tagged."""
    latent = (B_a, b, s, d_cq + d_c) if q_lora else (B_a, b, s, d_c)
    latent_label = "c_Q and c_KV (not split: their weights are replicated)" if q_lora else \
        "c_KV (not split: its weight is replicated; no query compression)"
    mz_q = (
        Part("mz_q_down", "c_Q, q down-projection output (on the sequence-parallel shard)", (B_a, b, s, d_cq),
             (TP, CP), MZ, ("latent", "modelzoo_only")),
        Part("mz_q_norm", "q norm output (on the sequence-parallel shard)", (B_a, b, s, d_cq), (TP, CP), MZ,
             ("latent", "norm", "latent_norm", "modelzoo_only")),
    ) if q_lora else ()
    return (
        Part("norm_in", "RMSNorm input (the layer input)", (B_a, b, s, h), (SP, CP), MLA,
             ("layer_input",), row="x"),
        Part("down_in", "down-projection input (RMSNorm output)", (B_a, b, s, h), (SP, CP), MLA,
             ("norm",), row="x"),
        Part("latent", latent_label, latent, (CP,), MLA, ("latent", "paper_only")),
        Part("latent_norm", "RMSNorm outputs of the latents, the up-projections' input (not split)", latent, (CP,),
             CONV, ("latent", "norm", "latent_norm", "paper_only")),
        *mz_q,
        Part("mz_kv_latent", "c_KV, kv down-projection output (on the sequence-parallel shard)", (B_a, b, s, d_c),
             (TP, CP), MZ, ("latent", "modelzoo_only")),
        Part("mz_kv_norm", "kv norm output (not split)", (B_a, b, s, d_c), (CP,), MZ,
             ("latent", "norm", "latent_norm", "modelzoo_only")),
        Part("q", "q with its RoPE part", (B_a, b, s, d_h + d_hr, n_h), (TP, CP), MLA, ("mla_up",), row="qk"),
        Part("k", "k with its RoPE part", (B_a, b, s, d_h + d_hr, n_h), (TP, CP), MLA, ("mla_up",), row="qk"),
        Part("v", "v", (B_a, b, s, d_v, n_h), (TP, CP), MLA, ("mla_up",)),
        Part("softmax", "softmax output", (B_a, b, n_h, s ** 2), (TP, CP), MLA, ("score", "eager"), row="score"),
        Part("score_mask", "attention dropout mask", (B_k, b, n_h, s ** 2), (TP, CP), MLA,
             ("score", "mask", "eager"), row="score"),
        Part("score_dropout", "attention dropout output", (B_a, b, n_h, s ** 2), (TP, CP), MLA,
             ("score", "eager"), row="score"),
        Part("softmax_stats", "softmax statistics: FP32 log-sum-exp per query row and head (fused attention)",
             (4, b, n_h, s), (TP, CP), FLASH, ("score", "flash")),
        Part("attn_out", "attention output before W^O (also the fused kernel's saved output)",
             (B_a, b, s, d_v, n_h), (TP, CP), MLA, ("e5m6",)),
        Part("out_mask", "dropout mask after W^O", (B_k, b, s, h), (SP, CP), MLA, ("mask",)),
    )


def mla_tensors(q_lora: bool = True, view: View = PAPER):
    """Tensors one MLA layer keeps for backward, in the paper's order (``view``: see View)."""
    return apply(view, mla_specs(q_lora))


def _expert(tokens, inter_den, routed=False, x_tags=()):
    """The tensors of one SwiGLU expert for ``tokens`` tokens (the paper's 3 t h + 8 t h_E);
    a routed expert's output exists under ``--expert-outputs kept``."""
    out = (
        ("x", "tokens' input", (B_a, tokens, h), (), ("fp8",) + x_tags),
        ("mask", "mask", (B_k, tokens, h), (), ("mask",)),
        ("swiglu_in", "gate and up outputs (SwiGLU inputs)", (2, B_a, tokens, h_E), inter_den,
         ("fp8", "inter", "fc1")),
        ("swiglu_out", "activation and product outputs (SwiGLU outputs)", (2, B_a, tokens, h_E), inter_den,
         ("swiglu", "inter")),
    )
    if routed:
        out += (("out", "output, kept for the probability-weighted combine (un-permute)", (B_a, tokens, h), (),
                 ("combine",)),)
    return out


def moe_specs():
    """The MoE sublayer's tensors (Parts and Groups), the paper's and the other inventories', tagged."""
    shared = tuple((k, lab, num, den + (CP,), tags)
                   for k, lab, num, den, tags in _expert(b * s, (), x_tags=("paper_only",)))
    return (
        Part("norm_in", "RMSNorm input (the sublayer input)", (B_a, b, s, h), (SP, CP), MOE,
             ("layer_input", "sublayer_input"), row="x"),
        Part("router_in", "router and expert input (RMSNorm output)", (B_a, b, s, h), (SP, CP), MOE,
             ("norm", "paper_only"), row="x"),
        Part("router", "router logits and probabilities (not split by SP)", (2, B_a, b, s, N), (CP,), MOE,
             ("router", "paper_only")),
        Part("mz_router_probs", "router probabilities", (B_a, b, s, N), (CP,), MZ, ("router", "modelzoo_only")),
        Part("routing", "routing choice / dispatch mask", (B_a, b, s, N_r), (CP,), MOE,
             ("routing", "dispatch_mask")),
        Part("row_map", "permutation row map (int64, one per token and expert)", (8, b, s, N), (CP,), CONV,
             ("routing", "router", "row_map")),
        Part("mz_shared_in", "shared experts' input after the all-gather, kept once (the N_s shared experts are "
                             "one fused MLP)", (B_a, b, s, h), (CP,), MZ, ("shared", "fp8", "modelzoo_only")),
        Group("routed", "routed experts on the device, N/EP of them: per expert its tokens' input and mask "
                        "(3 E_token h) and gate, up, activation and product outputs (8 E_token h_E)",
              N / EP, _expert(E_token, (ETP,), routed=True), MOE, ("experts", "routed")),
        Group("shared", "shared experts N_s: all b s tokens' input and mask (3bsh) and intermediate outputs (8bsh_E)",
              N_s, shared, MOE, ("shared",)),
    )


def moe_tensors(view: View = PAPER):
    """Tensors one MoE sublayer keeps for backward, in the paper's order (``view``: see View)."""
    return apply(view, moe_specs())


def dense_specs():
    """The dense FFN sublayer's tensors (extension), tagged."""
    return (
        Part("norm_in", "RMSNorm input (the sublayer input)", (B_a, b, s, h), (SP, CP), EXT,
             ("layer_input", "sublayer_input"), row="x"),
        Part("ffn_in", "FFN input (RMSNorm output)", (B_a, b, s, h), (SP, CP), EXT, ("norm",), row="x"),
        Part("swiglu_in", "gate and up outputs, SwiGLU inputs (split by TP)", (2, B_a, b, s, h_F), (TP, CP), EXT,
             ("ffn",), row="inter"),
        Part("swiglu_out", "activation and product outputs, SwiGLU outputs (split by TP)", (2, B_a, b, s, h_F),
             (TP, CP), EXT, ("ffn", "swiglu"), row="inter"),
        Part("out_mask", "dropout mask after down_proj", (B_k, b, s, h), (SP, CP), EXT, ("mask",)),
    )


def dense_ffn_tensors(view: View = PAPER):
    """Dense FFN sublayer (layers 0..first_k_dense-1), read as the paper reads M_1^A (extension)."""
    return apply(view, dense_specs())


def head_specs():
    """Final norm, output head and loss of the last stage (extension), tagged."""
    return (
        Part("norm_in", "final RMSNorm input", (B_a, b, s, h), (SP, CP), EXT, ("layer_input", "head"), row="x"),
        Part("head_in", "head input (final RMSNorm output)", (B_a, b, s, h), (SP, CP), EXT, ("norm", "head"),
             row="x"),
        Part("logits", "logits (vocabulary split by TP)", (B_a, b, s, v), (TP, CP), EXT, ("head",)),
        Part("loss", "FP32 softmax of the cross-entropy loss", (4, b, s, v), (TP, CP), EXT, ("head",)),
    )


def head_tensors(view: View = PAPER):
    """Final norm, output head and loss on the last stage (extension; the paper stops at the layers)."""
    return apply(view, head_specs())


#: The tensor lists of each kind (q_lora -> specs), in the paper's order.
SPECS = {"mla": mla_specs, "moe": lambda q_lora=True: moe_specs(), "dense": lambda q_lora=True: dense_specs(),
         "head": lambda q_lora=True: head_specs()}

#: The operation whose backward keeps each tensor (by tensor key; a group's tensors by their own key).
KEPT_FOR = {
    "norm_in": "RMSNorm backward (its input)",
    "down_in": "down-projections W^DQ, W^DKV, W^KR: weight gradients (their input)",
    "latent": "latent RMSNorms and up-projections W^UQ, W^QR, W^UK, W^UV (their input)",
    "latent_norm": "up-projections W^UQ, W^QR, W^UK, W^UV: weight gradients (their input)",
    "mz_q_down": "q RMSNorm backward (its input)",
    "mz_q_norm": "up-projections W^UQ, W^QR: weight gradients (their input)",
    "mz_kv_latent": "kv RMSNorm backward (its input)",
    "mz_kv_norm": "up-projections W^UK, W^UV: weight gradients (their input)",
    "q": "core attention Q K^T (its input)", "k": "core attention Q K^T (its input)",
    "v": "core attention P V (its input)",
    "softmax": "softmax backward (its output)", "score_mask": "attention dropout (its mask)",
    "score_dropout": "core attention P V (its input P)",
    "softmax_stats": "fused attention backward (recomputes the scores from q, k and these statistics)",
    "attn_out": "W^O weight gradient (its input); fused attention backward (its output)",
    "out_mask": "dropout after the output projection (its mask)",
    "router_in": "router weight gradient (its input, also the experts' input)",
    "router": "router softmax / sigmoid backward (logits and probabilities)",
    "mz_router_probs": "combine: weights of the expert outputs (router probabilities)",
    "routing": "dispatch and combine (which experts each token went to)",
    "row_map": "permute / un-permute backward (token-to-expert row map)",
    "mz_shared_in": "shared experts' gate_proj and up_proj: weight gradients (their input)",
    "x": "gate_proj and up_proj: weight gradients (their input)",
    "mask": "dropout after the expert (its mask)",
    "swiglu_in": "SwiGLU backward (its inputs, the gate and up outputs)",
    "swiglu_out": "SwiGLU product and down_proj weight gradient (activation and product outputs)",
    "out": "combine: gradient of the router probabilities (the expert outputs)",
    "ffn_in": "gate_proj and up_proj: weight gradients (their input)",
    "head_in": "output head: weight gradient (its input)", "logits": "cross-entropy backward (the logits)",
    "loss": "cross-entropy backward (FP32 softmax)",
}


# ----------------------------------------------------------------------------- terms
_SYMBOLS = {("mla", ""): "M_1^A", ("mla", ".full"): "M_2^A", ("moe", ""): "M_1^E", ("moe", ".full"): "M_2^E"}


def _same(a: Tuple[Part, ...], b_: Tuple[Part, ...]) -> bool:
    return [(p.key, p.expr) for p in a] == [(p.key, p.expr) for p in b_]


@lru_cache(maxsize=None)
def kind_parts(view: View, q_lora: bool = True) -> Dict[str, Tuple[Part, ...]]:
    """{kind: parts kept by ``view``} for the kinds mla, moe, dense, head (cached: parts are immutable)."""
    return {kind: apply(view, specs(q_lora)) for kind, specs in SPECS.items()}


def reduced(view: View, q_lora: bool = True) -> View:
    """``view`` with every convention that changes no kept tensor under its policy reset to the
    paper's (full recomputation keeps no routed tensor, so ``dispatch`` does not name its terms)."""
    if not view.conv.changed():
        return replace(view, preset="")
    parts, conv = kind_parts(view, q_lora), view.conv
    for k, _ in view.conv.changed():
        trial = replace(view, conv=replace(conv, **{k: CONVENTION_SWITCHES[k].default}))
        if all(_same(parts[kind], p) for kind, p in kind_parts(trial, q_lora).items()):
            conv = trial.conv
    return replace(view, conv=conv, preset="")


def named(view: View, q_lora: bool = True) -> View:
    """:func:`reduced`, with ``preset`` set when the conventions are (reduced) exactly one preset's."""
    view = reduced(view, q_lora)
    if not view.conv.changed():
        return view
    kernel_matters = view.recompute != "full" and "score" not in view.dropped
    names = [n for n, c in PRESET_CONVENTIONS.items()
             if reduced(replace(view, conv=c), q_lora).conv == view.conv
             and (not kernel_matters or view.attention == CONVENTION_PRESETS[n]["attention"])]
    return replace(view, preset=names[0]) if len(names) == 1 else view


def view_terms(view: View, q_lora: bool = True) -> Dict[str, Term]:
    """See :func:`_view_terms` (cached per view: terms are immutable)."""
    return dict(_view_terms(view, q_lora))


@lru_cache(maxsize=None)
def _view_terms(view: View, q_lora: bool = True) -> Dict[str, Term]:
    """The activation terms of one view: {kind: Term} for kinds mla, moe, dense, head (per
    layer / sublayer), layer (one MoE transformer layer), stage (one micro-batch on one
    device of a stage) and peak (n_fl micro-batches in flight).  A per-layer term equal to
    the paper's keeps the paper's id (``act.head`` under full recomputation); conventions
    that change no kept tensor are left out of the ids (:func:`reduced`)."""
    view = named(view, q_lora)
    sfx = view.suffix
    out = {}
    lists = {"mla": ("act.mla.layer", "one MLA layer", MLA),
             "moe": ("act.moe.layer", "one MoE layer", MOE),
             "dense": ("act.dense.layer", "one dense FFN sublayer (extension)", EXT),
             "head": ("act.head", "the final norm, head and loss on the last stage (extension)", EXT)}
    all_parts, paper = kind_parts(view, q_lora), kind_parts(PAPER, q_lora)
    plain = replace(view, conv=Conventions())  # the same policy under the paper's conventions
    plain_parts = kind_parts(plain, q_lora) if sfx != plain.suffix else all_parts
    one = view.conv.checkpoints == "one"
    for kind, (base_id, what, prov) in lists.items():
        parts, base = all_parts[kind], paper[kind]
        if sfx and _same(parts, base):
            tid, label, parts = base_id, "no recomputation", base
        elif sfx != plain.suffix and _same(parts, plain_parts[kind]):
            return_plain = view_terms(plain, q_lora)[kind]
            out[kind] = return_plain
            continue
        else:
            tid, label = base_id + sfx, view.label
        if sfx and view.recompute == "full" and kind != "head":
            keep = {"mla": "only the layer input is kept",
                    "dense": "nothing kept: the layer's one checkpoint is its input" if one
                    else "only the layer input is kept",
                    "moe": "nothing kept: the layer's one checkpoint is the MLA input" if one
                    else "layer input and routing decision kept"}[kind]
            label = f"full recomputation ({keep})" + (f", {view.conv_label}" if view.conv_label else "")
        if view.recompute == "full":
            prov = {"mla": "Sec. 5.1, M_2^A", "moe": "Sec. 5.2, M_2^E"}.get(kind, prov)
            if tid != base_id + ".full" and view.conv_label:
                prov = f"{prov}; {view.conv_label} (not the paper's)"
        elif tid != base_id:
            prov = f"{prov}; view: {view.label} (extension)"
        out[kind] = Term(tid, f"activation bytes of {what}, {label}", "bytes", prov, parts,
                         symbol=_SYMBOLS.get((kind, tid[len(base_id):]), ""))
    policy = view.label
    out["layer"] = combine(f"act.layer{sfx}", f"activation bytes of one MoE transformer layer (MLA + MoE), {policy}",
                           "bytes", "Sec. 5", [("mla", "MLA", 1, out["mla"]), ("moe", "MoE", 1, out["moe"])])
    out["stage"] = combine(f"act.stage{sfx}", f"activation bytes of one micro-batch on one device of a stage, {policy}",
                           "bytes", "Table 10",
                           [("mla", "MLA", L_d + L_m, out["mla"]), ("moe", "MoE", L_m, out["moe"]),
                            ("dense", "dense FFN", L_d, out["dense"]), ("head", "head and loss", e_H, out["head"])])
    out["peak"] = combine(f"act.peak{sfx}", f"activation bytes one device of a stage holds at its peak: n_fl "
                                            f"micro-batches in flight (pipeline schedule), {policy}", "bytes",
                          "extension: pipeline schedules (derivations/schedules.py)",
                          [("stage", "one micro-batch's activations of the stage", n_fl, out["stage"])])
    return out


#: Views registered by ``build`` (listed by ``memsym terms``); others are added on demand by :func:`ensure`.
REGISTERED = (PAPER, View("full"), View("selective"), View(attention="flash"), View(fp8=True))


def ensure(reg, view: View, q_lora: bool | None = None) -> Dict[str, str]:
    """Add the terms of ``view`` to the registry ``reg`` when missing; {kind: term id}.

    ``q_lora`` None: read from the registry (query compression iff params.mla has W^DQ)."""
    if q_lora is None:
        q_lora = any(p.key == "W_DQ" for p in reg["params.mla"].parts)
    ids = {}
    for kind, t in view_terms(view, q_lora).items():
        if t.id not in reg:
            reg.add(t)
        ids[kind] = t.id
    return ids


def terms(reg, *, q_lora, routing_bias, tied):
    seen = set()
    for view in REGISTERED:
        for t in view_terms(view, q_lora).values():
            if t.id not in seen:
                seen.add(t.id)
                yield t
