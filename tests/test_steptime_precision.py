"""Issue 45: machines as data, precision acting on time, custom recomputation timed, DeepSeek-V4 timed, the FP8
dispatch of DeepSeek's recipe.  Oracles are hand arithmetic on the published numbers, never the code under test."""
from __future__ import annotations

import json
import tomllib
from dataclasses import replace

import numpy as np
import pytest

from derivations import config as cfg
from derivations.config import gpus
from derivations.steptime import evaluate as E

V3 = cfg.load_model("deepseek-v3")
V4 = cfg.load_model("paper/models/deepseek-v4-flash.json")


def test_every_rate_has_its_source_and_the_rack_parts_their_domain():
    """Each preset with rates names its source; NVL72 parts join 72 GPUs, HGX nodes 8 (datasheets)."""
    with open(gpus.DATA, "rb") as fh:
        data = tomllib.load(fh)
    for key, e in data.items():
        if any(r in e for r in gpus.RATES):
            assert e.get("rates_source"), key
    assert {k: gpus.gpu(k).nvlink_domain for k in ("gb200", "gb300", "b200", "h800")} == \
        {"gb200": 72, "gb300": 72, "b200": 8, "h800": 8}
    # dense rates as the datasheets print them (sparse / 2): GB200 10 PFLOPS FP8 sparse, GB300 1,080 PF FP4 / 72
    assert gpus.gpu("gb200").rate("mxfp8") == 5e15 and gpus.gpu("gb300").rate("nvfp4") == 15e15
    assert gpus.gpu("h100").rate("mxfp8") is None  # Hopper has no block-scaled MMA


def _layout(**kw):
    base = dict(dp=8, tp=1, pp=8, ep=32, etp=1, cp=1)
    base.update(kw)
    return cfg.Layout(**base)


def test_an_fp8_recipe_runs_the_linear_layers_at_the_fp8_rate_and_the_attention_at_bf16():
    """On a B200 (FP8 twice BF16) the compute of the MXFP8 step is between half and all of the BF16 step's: the
    linears halve, the attention and the cast traffic do not."""
    t = cfg.Training(mbs=1, seq=4096, attention="flash", schedule="1f1b", microbatches=16)
    bf16 = E.layout_time(V3, _layout(), t, gpu="b200")["parts"]["compute"]
    mx = E.layout_time(V3, _layout(), replace(t, linear_recipe="mxfp8"), gpu="b200")["parts"]["compute"]
    assert bf16 / 2 < mx < bf16


def test_the_nvlink_domain_moves_the_expert_dispatch_off_the_network():
    """EP 32 on GB200: inside one NVL72 domain every copy goes over NVLink (900 GB/s), on 8-GPU nodes 7/8 of the
    copies cross the 50 GB/s network, so the exposed EP time drops at least 900/50 * 7/8 / (7/8) ~ tenfold."""
    t = cfg.Training(mbs=1, seq=4096, attention="flash", schedule="1f1b", microbatches=16)
    rack = E.layout_time(V3, _layout(), t, gpu="gb200")
    nodes = E.layout_time(V3, _layout(), t, gpu="gb200", gpus_per_node=8)
    assert rack["nvlink_domain"] == 72 and nodes["nvlink_domain"] == 8
    assert rack["parts"]["EP"] * 10 < nodes["parts"]["EP"]


def test_deepseek_fp8_dispatch_sends_three_quarters_of_the_bf16_bytes():
    """Report Sec. 3.3.2: dispatch in FP8 (1 B + a 4 B scale per 128), combine in BF16: (1 + 1/32 + 2) / 2 bytes per
    element against 2, over the network with nothing hiding it (overlap none)."""
    t = cfg.Training(mbs=1, seq=4096, attention="flash", schedule="1f1b", microbatches=16)
    bf = E.layout_time(V3, _layout(), t, gpu="h800", overlap="none")["parts"]["EP"]
    f8 = E.layout_time(V3, _layout(), replace(t, fp8=True), gpu="h800", overlap="none")["parts"]["EP"]
    assert f8 / bf == pytest.approx((1 + 1 / 32 + 2) / 2 / 2)


def test_a_custom_recomputation_costs_its_matrix_products():
    """custom:mla_up re-runs the two MLA up-projections: per token and layer 2 n_h (d_c' (d_h + d_hR) + d_c (d_h +
    d_v)) FLOPs, at 1 micro-batch of 4096 tokens, one MoE layer, the peak BF16 rate of an H800."""
    rows = {k: np.array([v]) for k, v in dict(dp=1, tp=1, pp=1, ep=1, etp=1, cp=1, mbs=1, seq=4096, zero=0,
                                             microbatches=1, L_d=0, L_m=1, e_E=0, e_H=0, L_I=0).items()}
    rows["recompute"] = np.array(["custom"])
    t = replace(cfg.Training(), recompute="custom", recompute_ops=("mla_up",), attention="flash")
    got = E.parts(V3, t, rows, gpu="h800")["recompute"][0]
    per_token = 2 * 128 * (1536 * (128 + 64) + 512 * (128 + 128))
    assert got == pytest.approx(4096 * per_token / 989.4e12)


def test_deepseek_v4_is_timed_from_its_own_keys():
    """V4-Flash's stage 0 at PP 8 (6 layers, 2 CSA, 4 HCA): each query scores w = 128 sliding keys, a CSA layer
    k_I = 512 chosen entries and its indexer (64 heads of 128 over the causal half of s/4 entries), an HCA layer the
    causal half of s/128 entries; c_A is their total over 6 s."""
    s = 4096
    keys = 6 * 128 + 2 * (512 + 2 * 64 * 128 * (s / 4) / 2 / (2 * 64 * 512)) + 4 * (s / 128) / 2
    rows = {k: np.array([v]) for k, v in dict(dp=1, tp=1, pp=8, ep=32, etp=1, cp=1, mbs=1, seq=s, zero=0,
                                             microbatches=1, L_d=0, L_m=6, e_E=1, e_H=0, L_C=2, L_H=4,
                                             L_R=3).items()}
    rows["recompute"] = np.array(["none"])
    g = E.check(V4, "h100")
    v = E.inputs(V4, cfg.Training(), rows, g, None, 2, 1, None, "flash", None)
    assert float(v["c_A"][0]) == pytest.approx(keys / (6 * s))
    t = E.layout_time(V4, cfg.Layout(dp=1, tp=1, pp=8, ep=32, etp=1, cp=1),
                      cfg.Training(mbs=1, seq=s, attention="flash", schedule="1f1b", microbatches=8), gpu="h100")
    assert t["tokens_per_gpu_s"] > 0


def test_deepseek_v4_under_eager_is_timed_over_every_key_it_computes(capsys):
    """The same stage under eager_attention_forward (transformers 5.24: every score of s keys, s + s/4 in a CSA
    layer, s + s/128 in an HCA layer, masked not skipped) with the CSA indexer as above; its matrices' columns over
    s are u_E.  The time's kernel is the one the defaults line names (issue 43 item 2: one set of defaults)."""
    from clirun import run
    s = 4096
    columns = 6 * s + 2 * s / 4 + 4 * s / 128
    rows = {k: np.array([v]) for k, v in dict(dp=1, tp=1, pp=8, ep=32, etp=1, cp=1, mbs=1, seq=s, zero=0,
                                             microbatches=1, L_d=0, L_m=6, e_E=1, e_H=0, L_C=2, L_H=4,
                                             L_R=3).items()}
    rows["recompute"] = np.array(["none"])
    v = E.inputs(V4, cfg.Training(), rows, E.check(V4, "h100"), None, 2, 1, None, "eager", None)
    indexer = 2 * 64 * 128 * (s / 4) / 2 / (2 * 64 * 512)
    assert float(v["c_A"][0]) == pytest.approx((columns + 2 * indexer) / (6 * s))
    assert float(v["u_E"][0]) == pytest.approx(columns / (6 * s))
    for named, kernel in (((), "eager"), (("--gpus", "256"), "flash")):
        code, out, _ = run(capsys, "estimate", "--model", "paper/models/deepseek-v4-flash.json", *named, "--time")
        assert code == 0 and f"defaults: attention {kernel}" in out and f"; attention {kernel} (V4: " in out


def test_vpp_alone_selects_the_interleaved_schedule():
    from derivations.config import resolve as R
    values = dict(mbs=1, seq=4096, zero=0, vpp=4, schedule="1f1b")
    assert R.training_of(values, {"vpp"}).schedule == "interleaved"
    assert R.training_of(values, {"vpp", "schedule"}).schedule == "1f1b"


def test_a_block_scaled_recipe_without_a_gpu_named_is_timed_on_blackwell_and_refused_on_a_named_hopper(capsys):
    """Hopper has no MXFP8/NVFP4 tensor-core instructions (gpus.toml gives the H800 no such rate): ``--gpu h800``
    with ``--linear-recipe mxfp8`` is refused on one line; with no --gpu the step is timed on the B200."""
    from clirun import run
    base = ("estimate", "--conventions", "mcore-te", "--linear-recipe", "mxfp8", "--time", "--json")
    code, out, err = run(capsys, *base, "--gpu", "h800")
    assert code == 2 and out == "" and "no MXFP8 rate" in err and len(err.strip().splitlines()) == 1, err
    code, out, err = run(capsys, *base)
    assert code == 0, err
    assert json.loads(out)["time"]["gpu"] == "b200", json.loads(out)["time"]
    code, out, err = run(capsys, *base[:-1])  # the text says why the time is a B200's
    assert code == 0 and "timed on the B200: no --gpu, and the default H800 has no MXFP8 rate" in out, out


def test_a_grouped_gemm_casts_every_routed_copy_it_received_in_bf16():
    """Under MXFP8 (1 B and one E8M0 scale per 32 elements, read from 2 B): a MoE layer's linear inputs per token are
    the MoE input once (7,168), each of the 8 routed copies again after a BF16 dispatch (TE GroupedLinear casts the
    permuted tokens it received: 8 x 7,168) and the 9 experts' down-projection inputs (9 x 2,048); DeepSeek's FP8
    dispatch (--fp8-activations: report Sec. 3.3.2) casts a token once before sending it, so not the 8 copies."""
    per = 2 + 1 + 1 / 32
    mx = replace(cfg.Training(), linear_recipe="mxfp8")
    assert E._model_constants(V3, mx)["X_M"] == pytest.approx(per * (7168 + 8 * 7168 + 9 * 2048))
    assert E._model_constants(V3, replace(mx, fp8=True))["X_M"] == pytest.approx(per * (7168 + 9 * 2048))
