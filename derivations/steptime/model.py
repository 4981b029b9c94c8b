"""The step-time model's expressions (sympy; imported by ``python -m derivations.generate`` and the report), per
device of one pipeline stage (L_d dense, L_m MoE layers, the head when e_H = 1), one micro-batch of b x s tokens.

* Compute (:func:`flops`): 2 FLOPs per matrix parameter and token (Kaplan et al., arXiv:2001.08361, Sec. 2.1;
  Narayanan et al., arXiv:2104.04473, Sec. 5.1) plus the scores, c_A = 1 eager, 1/2 causal flash; backward twice
  the forward (t_W its weight half), a flash backward recomputes Q K^T (Dao, FlashAttention-2, arXiv:2307.08691,
  Algorithm 2; Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py@c082294 flops).  Rates: Phi of
  the recipe's precision (derivations/config/gpus.toml), Phi_A for the scores, times eta; a phase is the longer
  of its FLOPs and reading the weights at W_M (roofline: Williams et al., CACM 52(4), 2009).  Eager attention
  moves its s x s matrices through HBM, 4 passes forward, 7 backward (Dao et al., arXiv:2205.14135, Sec. 2.2).
* Memory-bound operations (:func:`memory_bytes`, ``MEMORY_OPS``) at the published HBM bandwidth W_M.
* Communication (:func:`volumes`) at each group's bandwidth beta (placement.py): TP with sequence parallelism
  (Korthikanti et al., arXiv:2205.05198, Sec. 4.2.2), EP dispatch and combine (tau_EP), the CP ring (Liu et al.,
  Ring Attention, arXiv:2310.01889), PP one activation each way; full recomputation resends the forward's.
* Data parallelism per step (:func:`dp_volumes`; Rajbhandari et al., ZeRO, arXiv:1910.02054, Sec. 7) and Adam's
  update at the HBM bandwidth.
* Step (:func:`step_time`): m micro-batches and the schedule's bubble (DeepSeek-V3 report, Table 2: 1F1B, ZB1P,
  DualPipe; interleaved 1F1B divides 1F1B's by V): chi_mb, chi_B, chi_W.

Overlap (``OVERLAPS``): 'none' exposes every transfer; 'megatron' hides what Megatron-LM's switches o_* hide
(evaluate.py OVERLAP_SWITCHES; TE's CP ring always) and under DualPipe the EP and PP transfers behind the paired
chunks (DeepSeek-V3 report, Sec. 3.2.1); 'ideal' hides every transfer behind compute (an upper bound on speed).
"""
from __future__ import annotations

from typing import Dict

import sympy as sp

from derivations import notation as nt
from derivations.steptime.evaluate import OVERLAPS

_P = dict(positive=True)
#: the model's own symbols: peak matrix rate, efficiency, HBM bandwidth, bandwidth of each group
Phi = sp.Symbol("Phi", **_P)
eta = sp.Symbol("eta", **_P)
W_M = sp.Symbol("W_M", **_P)
beta = {g: sp.Symbol(f"beta_{g}", **_P) for g in ("TP", "CP", "PP", "DP", "EDP")}
#: Phi_A the attention's own rate (BF16 whatever the recipe); B_EP the bytes per element of the experts' dispatch
#: and combine, their mean (DeepSeek-V3's FP8 dispatch, report Sec. 3.3.2); c_A the share of scores computed
Phi_A, B_EP, c_A = (sp.Symbol(n, **_P) for n in ("Phi_A", "B_EP", "c_A"))
#: tau_EP seconds of the dispatch per byte of a token's hidden state (placement.py); u_E 1 when the attention is
#: eager (its s x s matrices in HBM; V4's columns over s); rho_* the recomputation policy; chi_* the bubble's
#: coefficients; P_A, P_F, P_E, P_R, P_H the per-layer parameters a token passes (params.* terms); P_U those a
#: custom recomputation re-runs (evaluate.py _recomputed); Q_C the bytes of the recipe's casts of the linear layers'
#: inputs per token (0 in BF16); D_M, P_M the MTP modules trained on the head's stage and the parameters per token
#: of one (DeepSeek-V3 report Sec. 2.2); o_* Megatron's overlap switches (evaluate.py OVERLAP_SWITCHES); P_n, P_m
#: the device's non-MoE (replicated over DP CP) and MoE (over EDP) parameters
(tau_EP, u_E, rho_full, rho_sel, chi_mb, chi_B, chi_W, P_A, P_F, P_E, P_R, P_H, P_U, Q_C, D_M, P_M, o_GR, o_PG, o_EP,
 o_TP, o_DW, P_n, P_m) = sp.symbols("tau_EP u_E rho_full rho_sel chi_mb chi_B chi_W P_A P_F P_E P_R P_H P_U Q_C D_M "
                                    "P_M o_GR o_PG o_EP o_TP o_DW P_n P_m", nonnegative=True)

b, s, h, n_h = nt.b, nt.s, nt.h, nt.n_h
TP, CP, PP, EP, DP, EDP = nt.TP, nt.CP, nt.PP, nt.EP, nt.DP, nt.EDP
L_d, L_m, e_H = nt.L_d, nt.L_m, nt.e_H
m = nt.n_mb


def _ops():
    """MEMORY_OPS' rows: (layer kind, operation, elements per token read and written forward, backward, bytes per
    element, the tensors of derivations/families/deepseek/activations.py (and derivations/tensors.py's dense and head
    specs) it reads and writes)."""
    B, h, d_l, h_F, h_E, N_r = nt.B_a, nt.h, nt.d_cq + nt.d_c, nt.h_F, nt.h_E, nt.N_r
    return (
        ("A", "RMSNorm of the layer input", 2 * h, 3 * h, B, "norm_in, down_in"),
        ("A", "residual add", 3 * h, 3 * h, B, "norm_in (the layer output)"),
        ("A", "latents' RMSNorms (replicated over TP)", 2 * TP * d_l, 3 * TP * d_l, B, "latent, latent_norm"),
        ("A", "RoPE of q's heads and the shared k (replicated)", 2 * (n_h + TP) * nt.d_hr, 2 * (n_h + TP) * nt.d_hr,
         B, "rope_layer, q, k"),
        ("F", "RMSNorm of the sublayer input", 2 * h, 3 * h, B, "ffn_in"),
        ("F", "residual add", 3 * h, 3 * h, B, "the sublayer output"),
        ("F", "SwiGLU", 3 * h_F, 5 * h_F, B, "swiglu_in, swiglu_out"),
        ("M", "RMSNorm of the sublayer input", 2 * h, 3 * h, B, "norm_in"),
        ("M", "residual add", 3 * h, 3 * h, B, "the sublayer output"),
        ("M", "router scores (FP32 sigmoid or softmax)", 2 * nt.N, 3 * nt.N, 4, "mc_scores, mc_softmax"),
        ("M", "permute and unpermute of the token copies", (3 * nt.F * N_r + 1) * h, (3 * nt.F * N_r + 1) * h, B,
         "a2a_map, a2a_idx (Megatron-Core moe_utils.py permute, unpermute)"),
        ("M", "SwiGLU of the routed and shared experts", 3 * nt.F * (N_r + nt.N_s) * h_E,
         5 * nt.F * (N_r + nt.N_s) * h_E, B, "expert_tensors' swiglu_in, swiglu_out"),
        # Megatron-Core's vocab-parallel cross-entropy (tensor_parallel/cross_entropy.py): max, subtract, exp, sum and
        # divide over the logits forward (8 passes), the softmax times the loss gradient backward (2)
        ("H", "final RMSNorm", 2 * h, 3 * h, B, "head norm_in"),
        ("H", "cross-entropy over the logits", 8 * nt.v, 2 * nt.v, B, "head logits"),
    )


#: the memory-bound operations of each layer kind ('A' every layer's attention, 'F' dense FFN, 'M' MoE, 'H' head):
#: (kind, operation, elements per token read and written forward, backward, bytes per element, tensors).  A unary op
#: reads x and writes y forward, reads x and dy and writes dx backward (2 and 3 passes); a binary one (residual add,
#: SwiGLU) reads two and writes one.  Widths are per token of the device's b s / (CP TP) share: a tensor split over
#: heads or TP is its full width there, one replicated over TP (MLA's latents, the shared RoPE key) TP times it.
MEMORY_OPS = _ops()


def memory_bytes() -> Dict[str, sp.Expr]:
    """{'M_F', 'M_B'}: bytes the stage's memory-bound operations (MEMORY_OPS) read and write per token of the device's
    share, forward and backward: every layer's attention, the dense and MoE sublayers, the head, and the MTP modules'
    (D_M on the head's stage: one attention and MoE layer and the head each)."""
    count = {"A": L_d + L_m + e_H * D_M, "F": L_d, "M": L_m + e_H * D_M, "H": e_H * (1 + D_M)}
    return {name: sum(count[op[0]] * op[col] * op[4] for op in MEMORY_OPS) for name, col in (("M_F", 2), ("M_B", 3))}


def flops() -> Dict[str, sp.Expr]:
    """FLOPs of one micro-batch's forward on one device of the stage: 'layers' (matrix products of the
    L_d + L_m layers), 'attention' (scores and their product with values), 'head' (and the MTP modules'),
    'recomputed' (the matrix products a custom recomputation re-runs: P_U parameters per token of the stage),
    'rescore' (the scores a flash kernel's backward recomputes, u_E = 0; an eager one keeps its probabilities)."""
    tokens = b * s / (CP * TP)  # the micro-batch's tokens over the devices sharing its work
    matrix = (L_d + L_m) * P_A + L_d * P_F + L_m * (P_R + nt.F * (nt.N_r + nt.N_s) * P_E)
    attended = 2 * tokens * (L_d + L_m + e_H * D_M) * c_A * s * n_h
    return {"layers": 2 * tokens * matrix, "attention": attended * (nt.d_h + nt.d_hr + nt.d_v),
            "head": 2 * tokens * e_H * (P_H + D_M * P_M), "recomputed": 2 * tokens * P_U,
            "rescore": sp.Piecewise((attended * (nt.d_h + nt.d_hr), sp.Eq(u_E, 0)), (0, True))}


def volumes() -> Dict[str, sp.Expr]:
    """Bytes one device sends per micro-batch forward in each group (the backward's multiple is in
    :func:`comm_times`); 'DP' and 'EDP' per step (:func:`dp_volumes`)."""
    layers = L_d + L_m
    return {
        "TP": 4 * layers * (TP - 1) / TP * b * s * h * nt.B_a / CP,
        "EP": 2 * L_m * nt.F * b * s * h * B_EP / (CP * TP),
        "CP": layers * (CP - 1) * b * s / CP * n_h / TP * (nt.d_h + nt.d_hr + nt.d_v) * nt.B_a,
        "PP": sp.Min(1, PP - 1) * b * s * h * nt.B_a / (CP * TP),
    }


def dp_volumes() -> Dict[str, sp.Expr]:
    """Bytes one device sends per step for its non-MoE ('DP', over DP CP replicas) and MoE ('EDP') parameters:
    '<group>_reduce' the gradients' (an all-reduce without ZeRO, a reduce-scatter with it; ZeRO-3's every
    micro-batch), '<group>_gather' the weights' all-gather (ZeRO-1/2 once after the update, ZeRO-3 in every
    micro-batch's forward and backward)."""
    reduce = sp.Piecewise((2 * nt.B_g, sp.Eq(nt.z, 0)), (nt.B_g, nt.z < 3), (m * nt.B_g, True))
    gather = sp.Piecewise((0, sp.Eq(nt.z, 0)), (nt.B_w, nt.z < 3), (2 * m * nt.B_w, True))
    share = {"DP": (DP * CP - 1) / (DP * CP) * P_n, "EDP": (EDP - 1) / EDP * P_m}
    return {f"{g}_{k}": v * per for g, v in share.items() for k, per in (("reduce", reduce), ("gather", gather))}


def times(f: Dict[str, sp.Expr] = None, mem: Dict[str, sp.Expr] = None) -> Dict[str, sp.Expr]:
    """Seconds of one micro-batch on one device: t_F (forward), t_B (backward), t_W (its weight-gradient
    half: the linear layers' matrix products, none of the core attention's, which has no weights), t_R
    (recomputation), t_att (the core attention's forward), t_rs (a flash backward's recomputed scores: with 2
    t_att, the backward the CP ring hides behind), t_mem (of t_F + t_B, the memory-bound
    operations: eager attention's matrices, the recipe's casts, M_F and M_B), c_<group> (each group's transfers,
    forward and backward), and per step t_DP (data-parallel traffic) and t_opt (optimizer).  ``f``: the
    forward FLOPs by part (:func:`flops`; the report passes symbols for them, to print the times shorter), ``mem``
    the memory-bound bytes (:func:`memory_bytes`, likewise)."""
    f = {**flops(), **(f or {})}
    rate, rate_A = eta * Phi, eta * Phi_A
    weights = nt.B_w * (P_n + P_m)
    # eager attention's s x s matrices through HBM (softmax and its backward are memory-bound)
    matrix = u_E * b * n_h * s ** 2 * nt.B_a * (L_d + L_m + e_H * D_M) / (TP * CP)
    t_sm = 4 * matrix / W_M
    # the recipe's quantization of each linear layer's inputs (forward) and output gradients (backward, twice)
    t_q = Q_C * b * s / (CP * TP) / W_M
    mem = {**memory_bytes(), **(mem or {})}
    t_mF, t_mB = (mem[k] * b * s / (CP * TP) / W_M for k in ("M_F", "M_B"))  # the memory-bound operations
    t_lin = (f["layers"] + f["head"]) / rate
    t_mm = sp.Max(t_lin + f["attention"] / rate_A, weights / W_M)
    t_F = t_mm + t_sm + t_q + t_mF
    t_att = f["attention"] / rate_A + t_sm
    t_R = rho_full * (sp.Max(f["layers"] / rate + f["attention"] / rate_A, weights / W_M) + t_sm + t_q + t_mF) \
        + rho_sel * t_att + f["recomputed"] / rate
    v = volumes()
    again = 2 + rho_full  # forward, backward and the recomputed forward
    c = {"c_TP": again * v["TP"] / beta["TP"], "c_EP": again * v["EP"] * tau_EP,
         "c_CP": (3 + rho_full) * v["CP"] / beta["CP"], "c_PP": 2 * v["PP"] / beta["PP"]}
    dv = dp_volumes()
    sharded = sp.Piecewise((P_n + P_m, sp.Eq(nt.z, 0)), (P_n / (DP * CP) + P_m / EDP, True))
    adam = nt.B_g + 2 * (nt.B_m + nt.B_1 + nt.B_2) + nt.B_w
    t_mem = t_sm + 7 * matrix / W_M + 3 * t_q + t_mF + t_mB
    t_rs = f["rescore"] / rate_A  # the flash backward's recomputed scores
    out = {"t_F": t_F, "t_B": 2 * t_mm + t_rs + 7 * matrix / W_M + 2 * t_q + t_mB,
           "t_W": sp.Max(t_lin, weights / W_M), "t_R": t_R, "t_att": t_att, "t_rs": t_rs, "t_mem": t_mem, **c,
            "t_red": dv["DP_reduce"] / beta["DP"] + dv["EDP_reduce"] / beta["EDP"],
            "t_gat": dv["DP_gather"] / beta["DP"] + dv["EDP_gather"] / beta["EDP"], "t_opt": sharded * adam / W_M}
    out["t_DP"] = out["t_red"] + out["t_gat"]
    return out


def exposed(overlap: str, dualpipe: bool, t: Dict[str, sp.Expr]) -> Dict[str, sp.Expr]:
    """The seconds of each group's transfers left exposed per micro-batch ('TP', 'EP', 'CP', 'PP') and per
    step ('DP') under ``overlap`` (OVERLAPS) and, with ``dualpipe``, DualPipe's own overlap."""
    compute = t["t_F"] + t["t_B"] + t["t_R"]
    groups = ("TP", "EP", "CP", "PP")
    if overlap == "none":
        return {**{g: t["c_" + g] for g in groups}, "DP": t["t_DP"]}
    if overlap == "ideal":  # everything behind the micro-batch's compute: what exceeds it, group by group
        return {**_beyond([t["c_" + g] for g in groups], compute, groups),
                "DP": sp.Max(0, t["t_DP"] - m * (t["t_F"] + t["t_B"]))}
    # --tp-comm-overlap (TE userbuffers) pipelines the TP collectives with the GEMMs beside them, and
    # --overlap-moe-expert-parallel-comm (Megatron-Core's 1F1B A2A overlap: one micro-batch's forward beside another's
    # backward) the EP all-to-all with the other micro-batch's compute, the weight gradients in that window only when
    # delayed (--delay-wgrad-compute): what is switched on runs behind that compute in turn, TP's first
    window = compute - (1 - o_DW) * t["t_W"]
    hidden = _beyond([o_TP * t["c_TP"], o_EP * t["c_EP"]], window, ("TP", "EP"))
    out = {"TP": (1 - o_TP) * t["c_TP"] + hidden["TP"], "EP": (1 - o_EP) * t["c_EP"] + hidden["EP"],
           "CP": sp.Max(0, t["c_CP"] - (3 + rho_full) * t["t_att"] - t["t_rs"]), "PP": t["c_PP"]}
    if dualpipe:  # the all-to-all and PP transfers of a chunk pair behind its compute
        out.update(_beyond([t["c_EP"], t["c_PP"]], compute, ("EP", "PP")))
    # Megatron's --overlap-grad-reduce starts a bucket's reduce in the last micro-batch's backward (the others run
    # under no_sync: megatron/core/pipeline_parallel/schedules.py), --overlap-param-gather the next step's gather
    # in the first micro-batch's forward; ZeRO-3 (Megatron-FSDP) prefetches each micro-batch's gathers behind it
    red, gat = t["t_red"] - o_GR * sp.Min(t["t_red"], t["t_B"]), t["t_gat"] - o_PG * sp.Min(t["t_gat"], t["t_F"])
    out["DP"] = sp.Piecewise((m * sp.Max(0, t["t_DP"] / m - t["t_F"] - t["t_B"]), sp.Eq(nt.z, 3)), (red + gat, True))
    return out


def _beyond(costs, budget, names) -> Dict[str, sp.Expr]:
    """{name: seconds of its transfer left exposed} when ``costs`` run in order behind ``budget`` seconds of
    compute: each its part of what the running sum exceeds the budget by (no division: 0 when nothing is sent)."""
    out, before = {}, 0
    for name, c in zip(names, costs):
        out[name] = sp.Max(0, before + c - budget) - sp.Max(0, before - budget)
        before = before + c
    return out


def step_time(overlap: str, dualpipe: bool) -> Dict[str, sp.Expr]:
    """{'compute', 'memory' (of compute, the memory-bound operations at the HBM bandwidth), 'recompute', 'TP',
    'EP', 'CP', 'PP', 'DP', 'bubble', 'optimizer', 'microbatch', 'step'}:
    seconds of one step on one device of the stage (m micro-batches, the bubble, the exposed data-parallel
    traffic and the optimizer step); 'microbatch' is one micro-batch's time (the step's period per
    micro-batch in steady state)."""
    t = times()
    x = exposed(overlap, dualpipe, t)
    per = {g: x[g] for g in ("TP", "EP", "CP", "PP")}
    mb = t["t_F"] + t["t_B"] + t["t_R"] + sum(per.values())
    bubble = chi_mb * mb + chi_B * t["t_B"] - chi_W * t["t_W"]
    out = {"compute": m * (t["t_F"] + t["t_B"]), "memory": m * t["t_mem"], "recompute": m * t["t_R"],
           **{g: m * v for g, v in per.items()}, "DP": x["DP"], "bubble": bubble, "optimizer": t["t_opt"],
           "microbatch": mb}
    out["step"] = m * mb + bubble + x["DP"] + t["t_opt"]
    return out


def variants():
    """(name, overlap, dualpipe) of every generated step-time function."""
    return [(f"{o}{'_dualpipe' if d else ''}", o, d) for o in OVERLAPS for d in (False, True)
            if not (d and o != "megatron")]
