"""--conventions modelzoo reproduces NVIDIA Megatron-MoE-ModelZoo's misc/tools/deepseek_mem_estimate.py
(calc(), commit 78fd4d6 of that repository) whole: per-rank parameters, model-state bytes and
per-layer activations, at every layout it accepts (ETP > 1 included).

The expectations below are the script's own arithmetic, transcribed rule by rule (its variable
names in comments), in exact Fractions instead of its floats; nothing here calls memsym's terms."""
from fractions import Fraction

import pytest

from derivations import config as cfg
from derivations.assembly.conventions import with_preset
from derivations.assembly.device import estimate

V3 = cfg.PRESETS["deepseek-v3"]
# calc('moe_671b_lora', ...): n_embed, n_head, q_lora, kv_lora, qk_head_dim, rope, v_head, moe_ffn,
# n_experts (256 routed + 1 shared), n_activated (8 + 1 shared), shared_expert_num
H, NH, QL, KVL, QK, ROPE, VH, MFF, NEXP, NACT, NS = 7168, 128, 1536, 512, 192, 64, 128, 2048, 257, 9, 1


def script_rank(gpus, pp, tp, ep, etp, layers_per_pp):
    """(params per rank, bytes of weights + gradients + optimizer per rank), fp8=False, fsdp=False."""
    attn = H * QL + QL * NH * QK + H * (KVL + ROPE) + KVL * NH * (QK - ROPE) + KVL * NH * VH + H * NH * VH
    one_expert = H * MFF * 2 + MFF * H
    dense = attn + one_expert * NS                       # moe_layer_dense_params
    moe = Fraction(one_expert * (NEXP - NS), ep)         # moe_layer_moe_params
    dense_dp, moe_dp = gpus // pp // tp, gpus // pp // ep // etp
    p_dense, p_moe = Fraction(layers_per_pp * dense, tp), layers_per_pp * moe / etp
    return p_dense + p_moe, p_dense * (6 + Fraction(12, dense_dp)) + p_moe * (6 + Fraction(12, moe_dp))


def script_layer(seq, tp, etp, full=False):
    """Bytes cached for one layer and one micro-batch (``cached``; ``input_mem`` under full recompute)."""
    s, topk, N = Fraction(seq), NACT - NS, NEXP - NS
    b2, f4, i8 = 2, 4, 8
    input_mem = s * H / tp * b2
    if full:
        return input_mem
    parts = [input_mem, s * H / tp * b2, s * QL / tp * b2, s * QL / tp * b2, s * KVL / tp * b2, s * KVL * b2,
             s * NH * QK / tp * b2, s * NH * QK / tp * b2, s * NH * VH / tp * b2, s * NH * VH / tp * b2,
             Fraction(NH, tp) * s * f4, s * H / tp * b2, s * H * b2, s / tp * N * b2, s / tp * N * i8,
             s * MFF / tp * NS * 2 * b2, s * MFF / tp * NS * b2,
             s / tp * etp * topk * H * b2,                     # permute_out
             s / tp * etp * topk * MFF / etp * 2 * b2,         # expert_linear_1_out
             s / tp * etp * topk * MFF / etp * b2,             # expert_act_out
             s / tp * etp * topk * H * b2 / etp]               # unpermute_alltoall_out
    return sum(parts)


def test_the_issue_numbers_at_the_papers_layout():
    p, states = script_rank(1024, 16, 2, 8, 1, 4)
    assert (p, states) == (6_099_435_520, 45_225_689_088)
    assert script_layer(4096, 2, 1) == 1_203_765_248 and script_layer(4096, 2, 2) == 1_438_646_272


@pytest.mark.parametrize("dp, tp, pp, ep, etp, seq", [
    (32, 2, 16, 8, 1, 4096), (32, 2, 16, 8, 2, 4096), (64, 1, 16, 64, 1, 4096), (16, 4, 16, 16, 4, 8192),
    (128, 1, 8, 32, 2, 2048), (8, 8, 16, 8, 8, 4096),
])
def test_estimate_is_the_script(dp, tp, pp, ep, etp, seq):
    lay = cfg.Layout(dp=dp, tp=tp, pp=pp, ep=ep, etp=etp)
    tr = with_preset(cfg.Training(seq=seq), "modelzoo")
    est = estimate(V3, lay, tr, 1)
    layers = est.stage.dense + est.stage.moe
    p, states = script_rank(dp * tp * pp, pp, tp, ep, etp, layers)
    assert est.params["total"] == p
    assert est.bytes["weights"] + est.bytes["gradients"] + est.bytes["optimizer"] == states
    assert est.bytes["activations_per_layer"] == script_layer(seq, tp, etp)
    full = estimate(V3, lay, with_preset(cfg.Training(seq=seq, recompute="full"), "modelzoo"), 1)
    assert full.bytes["activations_per_layer"] == script_layer(seq, tp, etp, full=True)


def test_estimate_text_explains_the_scripts_rank():
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--conventions", "modelzoo"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert "5,637,144,576" in p.stdout  # the routed experts of 4 layers over EP 8 (the script's rank_moe params)
