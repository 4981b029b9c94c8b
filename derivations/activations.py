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

Policies: none keeps everything; full keeps layer_input, routing and head; selective drops
``score`` (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", Sec. 4.2: recompute the core attention); custom drops the named
operators (``symbolic.config.RECOMPUTE_OPS``).

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

from dataclasses import dataclass, replace
from typing import Dict, Iterable, Tuple

import sympy as sp

from symbolic.notation import (B_a, B_f8, B_k, B_o, CP, EP, ETP, E_token, L_d, L_m, N, N_r, N_s, SP, TP, b, d_c,
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
    policy recomputes; attention: 'eager' | 'flash'; fp8: the DeepSeek-V3 FP8 caching.
    """

    recompute: str = "none"
    ops: Tuple[str, ...] = ()
    attention: str = "eager"
    fp8: bool = False

    @classmethod
    def of(cls, training) -> "View":
        """The view of a :class:`symbolic.config.Training`."""
        return cls(training.recompute, tuple(training.recompute_ops), training.attention, bool(training.fp8))

    @property
    def dropped(self) -> frozenset:
        """Tags of the tensors this policy recomputes (full: everything but the checkpoints)."""
        return frozenset({"none": (), "selective": ("score",), "full": (), "custom": self.ops}[self.recompute])

    def keeps(self, tags: Iterable[str]) -> bool:
        tags = set(tags)
        if "eager" in tags and self.attention != "eager":
            return False
        if "flash" in tags and self.attention != "flash":
            return False
        if self.recompute == "full":
            return bool(tags & CHECKPOINT_TAGS)
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

    @property
    def suffix(self) -> str:
        """Term-id suffix: '' | '.full' | '.selective' | '.custom-<op>-<op>', then '.flash', '.fp8'.

        Full recomputation keeps neither score tensors nor FP8-cached ones, so it is '.full'
        whatever the kernel; '.flash' appears only when the policy keeps the score tensors."""
        if self.recompute == "full":
            return ".full"
        out = {"none": "", "selective": ".selective"}.get(self.recompute)
        if out is None:
            out = ".custom-" + "-".join(self.ops)
        if self.attention == "flash" and "score" not in self.dropped:
            out += ".flash"
        if self.fp8:
            out += ".fp8"
        return out

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
        return pol + (", " + ", ".join(extra) if extra else "")


PAPER = View()


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


def apply(view: View, specs) -> Tuple[Part, ...]:
    """The parts of a tensor list (Parts and Groups) kept by ``view``, in the paper's order."""
    out = []
    for spec in specs:
        if isinstance(spec, Group):
            kept, inner, changed = [], sp.Integer(0), False
            for key, label, num, den, tags in spec.subs:
                if not view.keeps(spec.tags + tags):
                    changed = True
                    continue
                num, note = view.retype(num, spec.tags + tags)
                changed = changed or bool(note)
                kept.append(label + (f" in {note}" if note else ""))
                inner += sp.Mul(*[sp.sympify(f) for f in num]) / sp.Mul(*[sp.sympify(f) for f in den])
            if not kept:
                continue
            label = spec.label if not changed else spec.label.split(":")[0] + ": kept per expert " + ", ".join(kept)
            out.append(Part(spec.key, label, (spec.count, inner), (), spec.provenance, spec.tags, counts=(0,)))
            continue
        if not view.keeps(spec.tags):
            continue
        num, note = view.retype(spec.num, spec.tags)
        out.append(spec if not note else replace(spec, num=num, label=f"{spec.label} (cached in {note})"))
    return tuple(out)


# ----------------------------------------------------------------------------- tensor lists
def mla_tensors(q_lora: bool = True, view: View = PAPER):
    """Tensors one MLA layer keeps for backward, in the paper's order (``view``: see View)."""
    latent = (B_a, b, s, d_cq + d_c) if q_lora else (B_a, b, s, d_c)
    latent_label = "c_Q and c_KV (not split: their weights are replicated)" if q_lora else \
        "c_KV (not split: its weight is replicated; no query compression)"
    return apply(view, (
        Part("norm_in", "RMSNorm input (the layer input)", (B_a, b, s, h), (SP, CP), MLA,
             ("layer_input",), row="x"),
        Part("down_in", "down-projection input (RMSNorm output)", (B_a, b, s, h), (SP, CP), MLA,
             ("norm",), row="x"),
        Part("latent", latent_label, latent, (CP,), MLA, ("latent",)),
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
    ))


def _expert(tokens, inter_den):
    """The tensors of one SwiGLU expert for ``tokens`` tokens (the paper's 3 t h + 8 t h_E)."""
    return (
        ("x", "tokens' input", (B_a, tokens, h), (), ("fp8",)),
        ("mask", "mask", (B_k, tokens, h), (), ("mask",)),
        ("swiglu_in", "gate and up outputs (SwiGLU inputs)", (2, B_a, tokens, h_E), inter_den, ("fp8",)),
        ("swiglu_out", "activation and product outputs (SwiGLU outputs)", (2, B_a, tokens, h_E), inter_den,
         ("swiglu",)),
    )


def moe_tensors(view: View = PAPER):
    """Tensors one MoE sublayer keeps for backward, in the paper's order (``view``: see View)."""
    shared = tuple((k, lab, num, den + (CP,), tags) for k, lab, num, den, tags in _expert(b * s, ()))
    return apply(view, (
        Part("norm_in", "RMSNorm input (the sublayer input)", (B_a, b, s, h), (SP, CP), MOE, ("layer_input",), row="x"),
        Part("router_in", "router and expert input (RMSNorm output)", (B_a, b, s, h), (SP, CP), MOE, ("norm",),
             row="x"),
        Part("router", "router logits and probabilities (not split by SP)", (2, B_a, b, s, N), (CP,), MOE,
             ("router",)),
        Part("routing", "routing choice / dispatch mask", (B_a, b, s, N_r), (CP,), MOE, ("routing",)),
        Group("routed", "routed experts on the device, N/EP of them: per expert its tokens' input and mask "
                        "(3 E_token h) and gate, up, activation and product outputs (8 E_token h_E)",
              N / EP, _expert(E_token, (ETP,)), MOE, ("experts",)),
        Group("shared", "shared experts N_s: all b s tokens' input and mask (3bsh) and intermediate outputs (8bsh_E)",
              N_s, shared, MOE, ("shared",)),
    ))


def dense_ffn_tensors(view: View = PAPER):
    """Dense FFN sublayer (layers 0..first_k_dense-1), read as the paper reads M_1^A (extension)."""
    return apply(view, (
        Part("norm_in", "RMSNorm input (the sublayer input)", (B_a, b, s, h), (SP, CP), EXT, ("layer_input",),
             row="x"),
        Part("ffn_in", "FFN input (RMSNorm output)", (B_a, b, s, h), (SP, CP), EXT, ("norm",), row="x"),
        Part("swiglu_in", "gate and up outputs, SwiGLU inputs (split by TP)", (2, B_a, b, s, h_F), (TP, CP), EXT,
             ("ffn",), row="inter"),
        Part("swiglu_out", "activation and product outputs, SwiGLU outputs (split by TP)", (2, B_a, b, s, h_F),
             (TP, CP), EXT, ("ffn", "swiglu"), row="inter"),
        Part("out_mask", "dropout mask after down_proj", (B_k, b, s, h), (SP, CP), EXT, ("mask",)),
    ))


def head_tensors(view: View = PAPER):
    """Final norm, output head and loss on the last stage (extension; the paper stops at the layers)."""
    return apply(view, (
        Part("norm_in", "final RMSNorm input", (B_a, b, s, h), (SP, CP), EXT, ("layer_input", "head"), row="x"),
        Part("head_in", "head input (final RMSNorm output)", (B_a, b, s, h), (SP, CP), EXT, ("norm", "head"),
             row="x"),
        Part("logits", "logits (vocabulary split by TP)", (B_a, b, s, v), (TP, CP), EXT, ("head",)),
        Part("loss", "FP32 softmax of the cross-entropy loss", (4, b, s, v), (TP, CP), EXT, ("head",)),
    ))


# ----------------------------------------------------------------------------- terms
_SYMBOLS = {("mla", ""): "M_1^A", ("mla", ".full"): "M_2^A", ("moe", ""): "M_1^E", ("moe", ".full"): "M_2^E"}


def _same(a: Tuple[Part, ...], b_: Tuple[Part, ...]) -> bool:
    return [(p.key, p.expr) for p in a] == [(p.key, p.expr) for p in b_]


def view_terms(view: View, q_lora: bool = True) -> Dict[str, Term]:
    """The activation terms of one view: {kind: Term} for kinds mla, moe, dense, head (per
    layer / sublayer), layer (one MoE transformer layer), stage (one micro-batch on one
    device of a stage) and peak (n_fl micro-batches in flight).  A per-layer term equal to
    the paper's keeps the paper's id (``act.head`` under full recomputation)."""
    sfx = view.suffix
    out = {}
    lists = {"mla": ("act.mla.layer", "one MLA layer", MLA, lambda w: mla_tensors(q_lora, w)),
             "moe": ("act.moe.layer", "one MoE layer", MOE, moe_tensors),
             "dense": ("act.dense.layer", "one dense FFN sublayer (extension)", EXT, dense_ffn_tensors),
             "head": ("act.head", "the final norm, head and loss on the last stage (extension)", EXT, head_tensors)}
    for kind, (base_id, what, prov, build_parts) in lists.items():
        parts, base = build_parts(view), build_parts(PAPER)
        if sfx and _same(parts, base):
            tid, label, parts = base_id, "no recomputation", base
        else:
            tid, label = base_id + sfx, view.label
        if sfx and view.recompute == "full" and kind != "head":
            keep = "only the layer input is kept" if kind in ("mla", "dense") else "layer input and routing decision kept"
            label = f"full recomputation ({keep})"
        if view.recompute == "full":
            prov = {"mla": "Sec. 5.1, M_2^A", "moe": "Sec. 5.2, M_2^E"}.get(kind, prov)
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
