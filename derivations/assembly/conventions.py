"""Conventions: every modelling assumption a named switch (``derivations.config.CONVENTION_SWITCHES``, the paper's by
default, presets in ``CONVENTION_PRESETS``), applied through the tensor tags (views.py), the parameter terms' parts
(``static.device.moe.shared-tp``), the rank reported and Table 7's bytes; other sources reproduced exactly:

* ``conv.megatron.*``: Megatron-LM ``theoretical_memory_usage.py``'s weight-and-optimizer estimate with expert
  parallelism (:func:`megatron_params`: per layer A = MLA parameters with the latent norms, F_d = 3 h h_F, F_s = 3 h
  h_E N_s, F_r = 3 h h_E N; D the MTP layers); bytes (TP-split + shared + replicated) beta(DP) + experts beta(EDP),
  beta(d) = 6 + 12/d with the distributed optimizer: Table 7's bytes with FP32 moments and ZeRO-1.
* ``conv.modelzoo.*``: NVIDIA Megatron-MoE-ModelZoo's DeepSeek activation estimator, one MoE layer and micro-batch,
  t = b s N_r / TP routed token-copies per device, written literally; full recomputation keeps the layer input only.
  ``act.layer.modelzoo`` equals it at SP = TP."""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Dict, List, Optional, Tuple

from derivations import config as cfg
from derivations import families
from derivations.activations import KEPT_FOR, View, flatten, mla_specs, moe_specs
from derivations.assembly.sides import WeightSide, mtp_stage_shift, weight_side  # noqa: F401  (re-exported)
from derivations.assembly import fsdp
from derivations.assembly.sides import megatron_values
from derivations.assembly.zero import sharding_terms
from derivations.config.switches import (ORDER, PRESETS, describe, notes, preset_of, switch_value,  # noqa: F401
                                         switches_json, with_preset, with_switch)
from derivations.config.values import symbol_keyed
from derivations.notation import (B_a, CP, D, DP, EP, ETP, L_d, L_m, N, N_r, N_s, PP, TP, b, d_c, d_cq, d_h, d_hr, d_v,
                               ROUTING, SYMBOLS, h, h_E, h_F, n_h, s, v)
from derivations.tensors import TOPK_GT_1
from symbolic.numeric import exact
from symbolic.term import Part, Term, combine

MEG = "Megatron-LM theoretical_memory_usage.py (2026, with expert parallelism)"
MZ = "NVIDIA Megatron-MoE-ModelZoo DeepSeek estimator"
SHARED_TP = "convention --shared-expert tp (Megatron shards the shared experts by TP; the paper replicates them)"


# ----------------------------------------------------------------------------- Megatron-LM
def megatron_params(reg, shared_tp: bool = True) -> Term:
    """``conv.megatron.params``, or ``shared_tp=False``: ``conv.megatron.params.shared-replicated``."""
    norms = reg["params.norm"]
    latent_norms = sum((p.expr for p in norms.parts if p.key in ("q_norm", "kv_norm")), 0)
    A = reg["params.mla"].expr + latent_norms
    I_A, L_A = _indexers(reg)
    F_d = 3 * h * h_F
    F_s = 3 * h * h_E * N_s
    F_r = 3 * h * h_E * N
    sfx = "" if shared_tp else ".shared-replicated"
    shared = (Part("shared", "shared experts: F_s (L_m/PP + D) / TP", (F_s, L_m / PP + D), (TP,), MEG,
                   ("non_moe", "shared")) if shared_tp else
              Part("shared", "shared experts, replicated (--shared-expert replicated): F_s (L_m/PP + D)",
                   (F_s, L_m / PP + D), (), f"{MEG}; convention --shared-expert replicated", ("non_moe", "shared")))
    return Term(f"conv.megatron.params{sfx}", "parameters of Megatron's most-loaded shard"
                + ("" if shared_tp else " with the shared experts replicated"), "params", MEG, (
        Part("tp_split", "TP-split: ([(A + F_d) L_d + A L_m]/PP + A D + h v) / TP" + (
             " with DSA's indexers in A: + (I L_I / PP + I D) / TP" if I_A != 0 else ""),
             ((A + F_d) * L_d / PP + A * L_m / PP + A * D + h * v + I_A * L_A / PP + I_A * D,), (TP,), MEG,
             ("non_moe",)),
        shared,
        Part("replicated", "replicated: (2h per layer + h N router per MoE layer + final norm h)/PP + MTP layers'",
             ((2 * h * (L_d + L_m) + h * N * L_m + h) / PP + (2 * h + h * N) * D,), (), MEG, ("non_moe",)),
        Part("experts", "routed experts: F_r (L_m/PP + D) / (ETP EP)", (F_r, L_m / PP + D), (ETP, EP), MEG,
             ("moe",)),
    ), scope="model")


def _states(prefix: str, params: Term, provenance: str, sfx: str = ""):
    """Weights, gradients, optimizer terms of ``params`` (non_moe parts over DP, moe over EDP)."""
    P_n = sum(p.expr for p in params.parts if "non_moe" in p.tags)
    P_m = sum(p.expr for p in params.parts if "moe" in p.tags)
    # Megatron's formula: beta(DP) for the non-expert parameters, as the issue states it
    for t in sharding_terms(prefix, P_n, P_m, provenance, non_moe_over=(DP,)):
        yield replace(t, id=t.id + sfx, scope=params.scope) if sfx else replace(t, scope=params.scope)


def _indexers(reg):
    """(I, L_I): one DSA indexer's parameters and the layers holding one, or (0, 0); Megatron-LM's formula and the
    ModelZoo script know no DSA: memsym counts them with A (TP-split)."""
    if "params.indexer" not in reg:
        return 0, 0
    return reg["params.indexer"].expr, SYMBOLS["L_I"]


# ----------------------------------------------------------------------------- NVIDIA ModelZoo
MZ_SCRIPT = "NVIDIA Megatron-MoE-ModelZoo DeepSeek memory estimator, calc()"


def modelzoo_params(reg):
    """``conv.modelzoo.params.non_moe`` / ``.moe`` / ``conv.modelzoo.params``: calc() counts ``layers_per_pp`` (here L_d
    + L_m) MoE layers on every rank: the attention projections (moe_layer_dense_params, no norms) and shared experts
    split by TP, the N routed experts over EP and ETP; no embedding, head, norms or router."""
    A = sum((p.expr for p in reg["params.mla"].parts), 0)
    I_A, L_A = _indexers(reg)
    F_E = 3 * h * h_E
    n_layers = L_d + L_m
    attn = (Part("attn", "attention projections per layer / TP (moe_layer_dense_params)", (n_layers, A), (TP,),
                 MZ_SCRIPT),)
    if I_A != 0:
        attn += (Part("indexer", "DSA lightning indexers / TP, counted with the attention projections (L_I)",
                      (L_A, I_A), (TP,), "memsym: DSA (the script has none)"),)
    non_moe = Term("conv.modelzoo.params.non_moe", "non-MoE parameters of the ModelZoo script's rank: attention "
                   "projections and shared experts of every layer of the stage, split by TP", "params", MZ_SCRIPT,
                   attn + (Part("shared", "shared experts per layer / TP", (n_layers, N_s, F_E), (TP,), MZ_SCRIPT),))
    moe = Term("conv.modelzoo.params.moe", "MoE parameters of the ModelZoo script's rank: the routed experts of every "
               "layer of the stage over EP, split by ETP", "params", MZ_SCRIPT,
               (Part("experts", "routed experts per layer / (EP ETP) (moe_layer_moe_params / etp)", (n_layers, N, F_E),
                     (EP, ETP), MZ_SCRIPT),))
    total = combine("conv.modelzoo.params", "parameters of the ModelZoo script's rank", "params", MZ_SCRIPT,
                    [("non_moe", "non-MoE", 1, non_moe), ("moe", "MoE", 1, moe)])
    return non_moe, moe, total


def modelzoo_tensors():
    """The ModelZoo estimator's tensors of one MoE transformer layer (BF16 unless said)."""
    t = b * s * N_r / TP  # routed token-copies per device
    c = (CP,)
    rows = [
        ("layer_in", "layer input", (B_a, b, s, h), (TP,), ("layer_input",)),
        ("norm_out", "input-norm output", (B_a, b, s, h), (TP,), ("norm",)),
        ("q_down", "q down-projection output", (B_a, b, s, d_cq), (TP,), ("latent",)),
        ("q_norm", "q norm output", (B_a, b, s, d_cq), (TP,), ("latent", "norm")),
        ("kv_latent", "kv latent", (B_a, b, s, d_c), (TP,), ("latent",)),
        ("kv_norm", "kv norm output (not split)", (B_a, b, s, d_c), (), ("latent", "norm")),
        ("q", "q after RoPE", (B_a, b, s, n_h, d_h + d_hr), (TP,), ("mla_up",)),
        ("k", "k after RoPE", (B_a, b, s, n_h, d_h + d_hr), (TP,), ("mla_up",)),
        ("v", "v", (B_a, b, s, n_h, d_v), (TP,), ("mla_up",)),
        ("attn_out", "attention output", (B_a, b, s, n_h, d_v), (TP,), ()),
        ("softmax_stats", "softmax statistics (FP32)", (4, b, n_h, s), (TP,), ("score",)),
        ("residual", "residual after attention", (B_a, b, s, h), (TP,), ()),
        ("shared_in", "shared-expert input after all-gather", (B_a, b, s, h), (), ("shared",)),
        ("router_probs", "router probabilities", (B_a, b, s, N), (TP,), ("router",)),
        ("row_map", "permutation row map (int64)", (8, b, s, N), (TP,), ("router",)),
        ("shared_fc1", "shared fc1 output", (2, B_a, b, s, h_E, N_s), (TP,), ("shared",)),
        ("shared_act", "shared activation output", (B_a, b, s, h_E, N_s), (TP,), ("shared",)),
        ("permuted", "permuted tokens", (B_a, t, h), (), ("experts",)),
        ("fc1", "expert fc1 output", (2, B_a, t, h_E), (), ("experts",)),
        ("act", "expert activation output", (B_a, t, h_E), (), ("experts",)),
        ("unpermute", "un-permute all-to-all output", (B_a, t, h), (), ("experts",)),
    ]
    return tuple(Part(k, lab, num, den + c, MZ, tags) for k, lab, num, den, tags in rows)


# ----------------------------------------------------------------------------- weight side
def _shared_tp_terms(reg):
    """``static.layer.moe.shared-tp`` and what is built on it: P_m with the shared experts / TP."""
    layer = reg["static.layer.moe"]
    parts = tuple(replace(p, label="shared experts N_s, each 3 h h_E / TP (split by TP: --shared-expert tp)",
                          den=tuple(p.den) + (TP,), provenance=SHARED_TP, tags=("tp_split", "shared"))
                  if p.key == "shared" else p for p in layer.parts)
    moe = Term("static.layer.moe.shared-tp", layer.meaning.replace("N_s shared experts (replicated)",
                                                                   "N_s shared experts (split by TP)"),
               "params", f"{layer.provenance}; {SHARED_TP}", parts)
    yield moe
    dev = combine("static.device.moe.shared-tp", "MoE parameters on one device of a stage (P_m), shared experts "
                                                 "split by TP", "params", f"Table 6, MoE; {SHARED_TP}",
                  [("moe", "MoE per layer", L_m, moe)], symbol="P_m")
    yield dev
    non_moe = reg["static.device.non_moe"]
    yield combine("static.device.total.shared-tp", "parameters on one device of a stage (P_n + P_m), shared "
                                                   "experts split by TP", "params", f"Table 6, total; {SHARED_TP}",
                  [("non_moe", "non-MoE", 1, non_moe), ("moe", "MoE", 1, dev)])
    for t in sharding_terms("zero", non_moe.expr, dev.expr, f"Sec. 4, Table 8; {SHARED_TP}"):
        yield replace(t, id=t.id + ".shared-tp")


def side_terms(reg, conventions: cfg.Conventions) -> List[Term]:
    """The weight-side terms ``conventions`` need beyond the base registry ``reg`` (not added to it)."""
    shared_tp = conventions.shared_expert == "tp"
    if conventions.rank == "modelzoo":
        return []  # conv.modelzoo.* are base terms
    if conventions.rank == "megatron":
        if shared_tp:
            return []  # conv.megatron.* are base terms
        params = megatron_params(reg, False)
        return [params, *_states("conv.megatron", params, f"{MEG}; convention --shared-expert replicated",
                                 ".shared-replicated")]
    out = list(_shared_tp_terms(reg)) if shared_tp else []
    if conventions.rank == "fsdp2" and "static.layer.moe" in reg:
        layer = {t.id: t for t in out}.get("static.layer.moe.shared-tp", reg["static.layer.moe"])
        out += fsdp.terms(reg, layer, ".shared-tp" if shared_tp else "")
    if conventions.rank == "mfsdp":
        out += fsdp.megatron_terms({**reg, **{t.id: t for t in out}}, ".shared-tp" if shared_tp else "")
    return out


def megatron_substitution(model: cfg.ModelSpec, layout: cfg.Layout, training: cfg.Training) -> Dict:
    """The substitution of Megatron's shard, keyed by symbol (:func:`derivations.assembly.sides.megatron_values`)."""
    return symbol_keyed(megatron_values(model, layout, training))


# ----------------------------------------------------------------------------- per-tensor view
#: Recomputation / offload options whose saving ``estimate --tensors`` prints: (name, what,
#: tags a kept tensor needs all of).  The recomputations are ``--recompute custom:OP``.
SAVINGS = (
    ("custom:norm", "recompute the RMSNorms (their outputs)", ("norm",)),
    ("custom:swiglu", "recompute the activation function (SwiGLU outputs)", ("swiglu",)),
    ("custom:mla_up", "recompute the MLA up-projections and RoPE (q, k, v)", ("mla_up",)),
    ("custom:shared", "recompute the shared experts", ("shared",)),
    ("offload expert fc1", "offload the routed experts' fc1 outputs (gate and up, SwiGLU inputs) to host memory",
     ("experts", "fc1")),
)


@dataclass
class TensorRow:
    """One tensor kept for backward: sublayer, Part (count x tensor), exact bytes, operation."""

    sublayer: str
    part: Part
    bytes: Fraction
    kept_for: str


def indicators(subs) -> Dict:
    """{indicator: 0 or 1} of ``subs``: the routing indicators (notation.ROUTING) and TOPK_GT_1, for display."""
    out = {k: v for k, v in subs.items() if k in ROUTING}
    if N_r in subs:
        out[TOPK_GT_1] = TOPK_GT_1.xreplace({N_r: subs[N_r]})
    return out


def tensor_rows(model: cfg.ModelSpec, layout: cfg.Layout, training: cfg.Training,
                stage: Optional[int] = None) -> Tuple[List[TensorRow], Dict[str, Fraction]]:
    """Every tensor one MoE layer keeps for backward (one micro-batch) and {option: bytes it saves}."""
    if model.family != "deepseek":  # the MLA and MoE tensor lists
        raise families.unsupported(model, "--tensors")
    cfg.validate_layout(model, layout, training.seq)
    cfg.validate_training(training)
    lay_stage = cfg.stage(model, layout, stage if stage is not None else (1 if layout.pp > 1 else 0))
    subs = cfg.substitution(model, layout, training, lay_stage)
    view = View.of(training)
    routing = indicators(subs)
    rows = []
    for sub, specs in (("MLA", mla_specs(model.q_lora)), ("MoE", moe_specs())):
        for p in flatten(view, specs):
            if p.expr.xreplace(routing) == 0:
                continue  # a tensor the model's router does not make (an indicator is 0)
            rows.append(TensorRow(sub, p, exact(p.expr, subs), KEPT_FOR.get(p.key.split(".")[-1], "")))
    return rows, {name: sum((r.bytes for r in rows if set(need) <= set(r.part.tags)), Fraction(0))
                  for name, _, need in SAVINGS}


def terms(reg, family, flags):
    params = megatron_params(reg)
    yield params
    yield from _states("conv.megatron", params, MEG)
    non_moe, moe, total = modelzoo_params(reg)
    yield from (non_moe, moe, total)
    # calc(): dense parameters over dense_dp = gpus / (pp tp) = DP CP, experts over moe_dp = EDP
    yield from sharding_terms("conv.modelzoo", non_moe.expr, moe.expr, MZ_SCRIPT)
    parts = modelzoo_tensors()
    if not flags["q_lora"]:
        parts = tuple(p for p in parts if p.key not in ("q_down", "q_norm"))
    yield Term("conv.modelzoo.layer", "activation bytes of one MoE transformer layer, ModelZoo accounting", "bytes",
               MZ, parts)
    yield Term("conv.modelzoo.layer.full", "activation bytes of one MoE transformer layer, ModelZoo accounting, "
                                           "full recomputation (layer input only)", "bytes", MZ,
               tuple(p for p in parts if "layer_input" in p.tags))
