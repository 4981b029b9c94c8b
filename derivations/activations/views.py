"""Views (extension): a :class:`View` (recomputation policy, attention kernel, FP8 caching, conventions) decides, tensor
by tensor and from its tags only, whether a tensor is kept and at how many bytes per element. The paper's terms are
``View()`` and ``View('full')``; ``act.mla.layer.selective`` is by construction ``act.mla.layer`` less its score rows.

Tags: ``layer_input`` (the checkpoint full recomputation keeps), ``routing`` (also kept by it: the paper's M_2^E),
``head`` (final norm, head and loss of the last stage, kept by full and selective recomputation), ``norm`` (RMSNorm
outputs), ``latent`` (c_Q, c_KV), ``mla_up`` (q, k, v), ``score`` (core attention: eager's softmax output, dropout mask
and output, b n_h s^2 each; flash's FP32 log-sum-exp), ``mask`` (dropout masks), ``router``, ``experts``, ``shared``,
``swiglu`` (its outputs, recomputable from its inputs), ``ffn`` (dense FFN intermediates), ``eager``/``flash`` (only
under that kernel), ``fp8``/``e5m6`` (cached in B_f8 / B_o under --fp8-activations), ``sublayer_input`` (the FFN
sublayer input, dropped by full recomputation under --checkpoints one), ``routed`` (E_token token-copies per local
expert), ``inter``/``fc1`` (an expert's h_E-wide tensors / its gate and up outputs); a conventions' tag existing under
one value of a switch is in :data:`EXISTS` (derivations/config/switches.py ``exists``), one a value rescales in
:data:`RULES`.

Policies: none keeps everything; full keeps layer_input, routing and head; selective drops ``score`` (Korthikanti et al.
2022, Sec. 4.2); custom drops the named operators (``derivations.config.RECOMPUTE_OPS``). ``flash`` (FlashAttention-2)
keeps no s^2 tensor, only an FP32 log-sum-exp per query row and head, 4 b n_h s/(TP CP). Under CP each device holds s/CP
queries against all s keys (Megatron's all-gather CP). FP8 caching (DeepSeek-V3 report, arXiv 2412.19437, Sec. 3.3): the
attention output in E5M6 (B_o = 3/2 B, packed), the experts' inputs and SwiGLU inputs in FP8 (B_f8 = 1); per-tile scales
not counted."""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Tuple

import sympy as sp

from derivations.tensors import B_IS_1, IS_FP32, NOT_FP32, Group  # noqa: F401 (the tensor vocabulary)
from derivations.activations.view import (CHECKPOINT_TAGS, EXISTS, EXT, FLASH, MLA, MOE, PAPER,  # noqa: F401
                                          PRESET_CONVENTIONS, View)
from derivations.notation import B_a, B_f8, B_o, EP, ETP, SP, TP
from symbolic.term import Part


def scale(view: View, tags: Iterable[str]) -> Tuple[Tuple, Tuple, Tuple[str, ...]]:
    """(extra numerator factors, extra denominator factors, notes) :data:`RULES` apply to a tensor with ``tags``."""
    tags, num, den, notes = set(tags), (), (), ()
    for need, switch, value, n, d, note, *unless in RULES:
        if need <= tags and getattr(view.conv, switch) == value and not (unless and unless[0] & tags):
            num, den, notes = num + n, den + d, notes + (note,)
    return num, den, notes


#: Conventions that rescale a tensor: (tags it needs, switch, value, extra numerator,
#: extra denominator, note[, tags that exempt a tensor]).  dispatch: each of the N/EP local experts receives
#: E_token EP/SP token-copies (EP source devices of b s/SP tokens each), b s N_r/SP in all.
RULES = (
    (frozenset({"routed"}), "routed_tokens", "dispatch", (EP,), (SP,),
     "dispatch: E_token EP/SP token-copies per local expert, b s N_r/SP per device"),
    (frozenset({"router"}), "router_tensors", "sp", (), (SP,), "divided by SP", frozenset({"per_expert"})),
    (frozenset({"latent"}), "latents", "sp", (), (SP,), "on the sequence-parallel shard: divided by SP",
     frozenset({"modelzoo_only"})),
    (frozenset({"router_dt"}), "router_dtype", "fp32", (4 / B_a,), (), "in the FP32 router's dtype"),
    (frozenset({"routed", "permuted"}), "expert_tp", "modelzoo", (ETP,), (),
     "ModelZoo's ETP rule: the permuted tokens multiplied by ETP"),
    (frozenset({"routed", "inter"}), "expert_tp", "modelzoo", (ETP,), (),
     "ModelZoo's ETP rule: not divided by ETP"),
    (frozenset({"shared", "inter"}), "shared_expert", "tp", (), (TP,), "split by TP"),
    (frozenset({"swiglu"}), "swiglu", "fused", (sp.Rational(1, 2),), (), "fused SwiGLU: the product only"),
    (frozenset({"swiglu"}), "swiglu", "offset-copy", (sp.Rational(3, 2),), (),
     "Megatron-Core's unfused glu: activation, x_linear + offset and product"),
    (frozenset({"pre_weight"}), "norm_storage", "torch", (4 / B_a,), (),
     "torch.rms_norm's pre-weight value in FP32"),
    (frozenset({"softmax_out"}), "softmax_dtype", "fp32", (4 / B_a,), (),
     "FP32 softmax output (transformers' eager_attention_forward: softmax(dtype=float32))"),
    (frozenset({"probs"}), "softmax_dtype", "fp32", (NOT_FP32,), (),
     "the B_a probabilities beside the FP32 softmax output (the same storage when B_a = 4)"),
)

def _kept(view: View, num, den, tags):
    """(num, den, notes) of one tensor as ``view`` keeps it, or None if it is not kept."""
    if not view.keeps(tags):
        return None
    n, d, notes = scale(view, tags)
    for tag, sym, fmt in (("e5m6", B_o, "E5M6"), ("fp8", B_f8, "FP8")) if view.fp8 else ():  # FP8 caching: B_a retyped
        if tag in tags:
            num, notes = tuple(sp.sympify(f).xreplace({B_a: sym}) for f in num), (f"cached in {fmt}",) + notes
            break
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
    """Every tensor kept by ``view``, one Part each (``<group>.<tensor>``): ``memsym estimate --tensors``."""
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


