"""An independent, hand-written formula of the per-device memory (no memsym import).

Written from the paper (Zhang & Su, arXiv 2502.07846) and the
documented extensions, not from memsym's terms: one device of one pipeline stage, the paper's
conventions (Table 7 bytes, eager attention, dropout masks, balanced routing), ZeRO 0-3 and
recomputation none or full, at any layout including context parallelism.

  parameters (Sec. 3, Table 6)   per layer: RMSNorms 2h + d_cq + d_c and W^DQ, W^DKV, W^QR, W^KR
                                 replicated; W^UQ, W^UK, W^UV, W^O split by TP.  Per MoE layer:
                                 router N h replicated, N/EP routed experts of 3 h h_E / ETP, N_s
                                 shared experts of 3 h h_E replicated.  Extensions: dense FFN
                                 3 h h_F / TP, embedding and head v h / TP each.
  ZeRO (Sec. 4, Tables 7-8)      2 / 4 / 8 bytes per parameter for weights / gradients / optimizer;
                                 ZeRO z >= 1, 2, 3 shards optimizer, gradients, weights: non-MoE P_n
                                 over DP CP (the CP ranks are replicas), MoE P_m over
                                 EDP = DP TP CP / (EP ETP).
  activations (Sec. 5, Table 10) M_1^A, M_1^E per layer (Sec. 5), every b s term divided by
                                 CP, scores b n_h s (s / CP) / TP, an expert's intermediates / ETP;
                                 extensions: dense FFN layer 5bsh/SP + 8 b s h_F / TP, the last
                                 stage's final norm, head and loss 4bsh/SP + 6 b s v / TP.
                                 Full recomputation keeps M_2^A = 2bsh/SP, M_2^E = 2bsh/SP + 2bsN_r
                                 per layer (the dense FFN layer its input, 2bsh/SP) and the head whole.

Values are exact (Fractions) when the inputs are ints or Fractions; the same code runs on
float64 numpy arrays (benchmarks/bench.py uses it as the hand-written numpy floor).
"""
from __future__ import annotations

from fractions import Fraction

#: Model dimensions, copied from the paper (Table 1) and the released Hugging Face configs; d_v = d_h.
MODELS = {
    "deepseek-v3": dict(h=7168, h_F=18432, h_E=2048, l=61, n_h=128, d_cq=1536, d_c=512, d_h=128, d_hr=64,
                        d_v=128, N=256, N_s=1, N_r=8, v=129280, first_k_dense=3),
    "deepseek-v2": dict(h=5120, h_F=12288, h_E=1536, l=60, n_h=128, d_cq=1536, d_c=512, d_h=128, d_hr=64,
                        d_v=128, N=160, N_s=2, N_r=6, v=102400, first_k_dense=1),
}

#: Table 7: bytes per parameter of weights (BF16), gradients (FP32), optimizer (FP32 master + 2 BF16 moments).
W_BYTES, G_BYTES, O_BYTES = 2, 4, 4 + 2 + 2


def stage_split(l: int, pp: int):
    """Layers per stage, the paper's Table 4 rule: PP-1 stages of ceil(l/PP), the last the rest
    (61 layers, PP 16: 4 x 15 + 1); if that leaves the last stage empty, as even as possible."""
    k = -(-l // pp)
    if pp == 1:
        return [l]
    if l - k * (pp - 1) >= 1:
        return [k] * (pp - 1) + [l - k * (pp - 1)]
    base, rem = divmod(l, pp)
    return [base + 1] * rem + [base] * (pp - rem)


def stage_composition(m: dict, pp: int, index: int):
    """(dense layers, MoE layers, holds the embedding, holds the head) of stage ``index``."""
    split = stage_split(m["l"], pp)
    first = sum(split[:index])
    layers = range(first, first + split[index])
    dense = sum(1 for i in layers if i < m["first_k_dense"])
    return dense, len(layers) - dense, int(index == 0), int(index == pp - 1)


def _num(x, exact):
    return Fraction(x) if exact else x


def params(m, *, TP, EP, ETP, L_d, L_m, e_E, e_H, exact=True):
    """(P_n, P_m): non-MoE and MoE parameters on one device of the stage (Sec. 3, Table 6)."""
    q = lambda x: _num(x, exact)
    h, h_E, h_F, n_h = q(m["h"]), q(m["h_E"]), q(m["h_F"]), q(m["n_h"])
    d_cq, d_c, d_h, d_hr, d_v = q(m["d_cq"]), q(m["d_c"]), q(m["d_h"]), q(m["d_hr"]), q(m["d_v"])
    N, N_s, v = q(m["N"]), q(m["N_s"]), q(m["v"])
    TP, EP, ETP = q(TP), q(EP), q(ETP)
    norm = 2 * h + d_cq + d_c
    replicated = d_cq * h + d_c * h + d_hr * n_h * d_cq + d_hr * h          # W^DQ, W^DKV, W^QR, W^KR
    split = d_h * n_h * d_cq + d_h * n_h * d_c + d_v * n_h * d_c + h * d_v * n_h  # W^UQ, W^UK, W^UV, W^O
    mla = replicated + split / TP
    P_n = (L_d + L_m) * (norm + mla) + L_d * 3 * h * h_F / TP + (e_E + e_H) * v * h / TP
    expert = 3 * h * h_E
    P_m = L_m * (N * h + N / EP * expert / ETP + N_s * expert)
    return P_n, P_m


def model_states(m, *, DP, TP, CP, EP, ETP, L_d, L_m, e_E, e_H, zero, exact=True):
    """{weights, gradients, optimizer} bytes under ZeRO ``zero`` (Sec. 4, Tables 7-8)."""
    P_n, P_m = params(m, TP=TP, EP=EP, ETP=ETP, L_d=L_d, L_m=L_m, e_E=e_E, e_H=e_H, exact=exact)
    DP, TP, CP, EP, ETP = (_num(x, exact) for x in (DP, TP, CP, EP, ETP))
    EDP = DP * TP * CP / (EP * ETP)
    whole = P_n + P_m
    shard = P_n / (DP * CP) + P_m / EDP
    return {"weights": W_BYTES * (shard if zero >= 3 else whole),
            "gradients": G_BYTES * (shard if zero >= 2 else whole),
            "optimizer": O_BYTES * (shard if zero >= 1 else whole)}


def activations(m, *, TP, SP, CP, EP, ETP, b, s, L_d, L_m, e_H, recompute="none", exact=True):
    """Bytes of one micro-batch's activations on one device of the stage (Sec. 5, Table 10)."""
    q = lambda x: _num(x, exact)
    h, h_E, h_F, n_h = q(m["h"]), q(m["h_E"]), q(m["h_F"]), q(m["n_h"])
    d_cq, d_c, d_h, d_hr, d_v = q(m["d_cq"]), q(m["d_c"]), q(m["d_h"]), q(m["d_hr"]), q(m["d_v"])
    N, N_s, N_r, v = q(m["N"]), q(m["N_s"]), q(m["N_r"]), q(m["v"])
    TP, SP, CP, EP, ETP, b, s = (q(x) for x in (TP, SP, CP, EP, ETP, b, s))
    bs = b * s / CP                      # the device's tokens
    head = 4 * bs * h / SP + 6 * bs * v / TP   # final norm input + output, BF16 logits, FP32 softmax
    if recompute == "full":
        mla = 2 * bs * h / SP
        moe = 2 * bs * h / SP + 2 * bs * N_r
        dense = 2 * bs * h / SP
    elif recompute == "none":
        # M_1^A: 4bsh/SP + 2bs(d_cq + d_c) + 4bs(d_h + d_hr)n_h/TP + 2bs d_v n_h/TP + 5 b n_h s^2/TP
        #        + 2bs d_v n_h/TP + bsh/SP, with the sequence divided by CP (scores: s/CP query rows)
        mla = (4 * bs * h / SP + 2 * bs * (d_cq + d_c) + 4 * bs * (d_h + d_hr) * n_h / TP
               + 2 * bs * d_v * n_h / TP + 5 * b * n_h * s * (s / CP) / TP + 2 * bs * d_v * n_h / TP + bs * h / SP)
        # M_1^E: 4bsh/SP + 4bsN + 2bsN_r + (N/EP)(3 E h + 8 E h_E / ETP) + N_s (3bsh + 8bsh_E)
        e_token = bs * N_r / N
        moe = (4 * bs * h / SP + 4 * bs * N + 2 * bs * N_r + N / EP * (3 * e_token * h + 8 * e_token * h_E / ETP)
               + N_s * (3 * bs * h + 8 * bs * h_E))
        # dense FFN layer, read like M_1^A: input and norm output, gate/up and SwiGLU outputs / TP, mask
        dense = 5 * bs * h / SP + 8 * bs * h_F / TP
    else:
        raise ValueError(f"recompute none or full, got {recompute!r}")
    return (L_d + L_m) * mla + L_m * moe + L_d * dense + e_H * head


def per_device(m, *, DP, TP, SP, CP, EP, ETP, b, s, L_d, L_m, e_E, e_H, zero=0, recompute="none", exact=True):
    """{weights, gradients, optimizer, activations, total} bytes on one device of the stage."""
    out = model_states(m, DP=DP, TP=TP, CP=CP, EP=EP, ETP=ETP, L_d=L_d, L_m=L_m, e_E=e_E, e_H=e_H, zero=zero,
                       exact=exact)
    out["activations"] = activations(m, TP=TP, SP=SP, CP=CP, EP=EP, ETP=ETP, b=b, s=s, L_d=L_d, L_m=L_m,
                                     e_H=e_H, recompute=recompute, exact=exact)
    out["total"] = out["weights"] + out["gradients"] + out["optimizer"] + out["activations"]
    return out


def total_numpy(m, DP, TP, SP, EP, ETP, CP, b, s, L_d, L_m, e_E, e_H, zero=1, recompute="none"):
    """The per-device total over float64 numpy columns (the benchmark's hand-written floor)."""
    return per_device(m, DP=DP, TP=TP, SP=SP, CP=CP, EP=EP, ETP=ETP, b=b, s=s, L_d=L_d, L_m=L_m, e_E=e_E,
                      e_H=e_H, zero=zero, recompute=recompute, exact=False)["total"]
