"""The step-time model (derivations/steptime): its parts against arithmetic written out here from the
model's dimensions and the published rates, not through the model's own expressions."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from derivations import config as cfg
from derivations.config import PRESETS
from derivations.config import gpus
from derivations.steptime import evaluate as E
from derivations.steptime import placement

V3 = PRESETS["deepseek-v3"]
H800 = gpus.gpu("h800")


def _row(**kw):
    base = dict(dp=1, tp=1, pp=1, ep=1, etp=1, cp=1, mbs=1, seq=4096, zero=1, recompute="none", microbatches=1,
                L_d=0, L_m=1, e_E=0, e_H=0, L_I=0)
    base.update(kw)
    return {k: np.array([v], dtype=object if k == "recompute" else None) for k, v in base.items()}


def _one(rows, **kw):
    out = E.parts(V3, cfg.Training(), rows, gpu="h800", **kw)
    return {k: float(v[0]) for k, v in out.items()}


def _moe_layer_matrix_params():
    """Parameters a token passes through in one V3 MoE layer, by hand from the config's dimensions
    (MLA with query compression, the router, 8 routed and 1 shared expert of 3 h h_E)."""
    h, n_h, d_h, d_hr, d_v, d_c, d_cq, h_E = 7168, 128, 128, 64, 128, 512, 1536, 2048
    mla = (h * d_cq + d_cq * n_h * (d_h + d_hr)          # W^DQ, W^UQ and W^QR
           + h * (d_c + d_hr)                           # W^DKV, W^KR
           + d_c * n_h * (d_h + d_v)                    # W^UK, W^UV
           + n_h * d_v * h)                             # W^O
    return mla + 256 * h + 9 * 3 * h * h_E


def test_compute_is_six_flops_per_parameter_and_token_at_the_peak():
    """Forward 2, backward 4 FLOPs per parameter a token passes through (plus the attention's scores, and
    eager attention's matrices through HBM) at 989.4 TFLOP/s, one micro-batch of 4096 tokens; EP 64: 4 experts
    of 128 x 8 tokens each on the device, compute-bound.  A flash kernel's backward recomputes Q K^T besides
    (FlashAttention-2, arXiv:2307.08691, Algorithm 2: five products of s x s against the forward's two)."""
    got = _one(_row(ep=64), overlap="none", attention="flash")
    tokens = 4096
    scores = 2 * tokens * 0.5 * 4096 * 128 * (128 + 64 + 128)  # a causal flash kernel: half of s x s
    rescore = 2 * tokens * 0.5 * 4096 * 128 * (128 + 64)  # S = Q K^T again in the backward
    want = (3 * (2 * tokens * _moe_layer_matrix_params() + scores) + rescore) / 989.4e12
    assert got["compute"] - got["memory"] == pytest.approx(want, rel=1e-12)
    eager = _one(_row(ep=64), overlap="none", attention="eager")
    matrix = 128 * 4096 ** 2 * 2  # heads x s x s x BF16
    want_eager = 3 * (2 * tokens * _moe_layer_matrix_params() + 2 * scores) / 989.4e12
    assert eager["compute"] - eager["memory"] == pytest.approx(want_eager, rel=1e-12)
    assert eager["memory"] - got["memory"] == pytest.approx((4 + 7) * matrix / 3.35e12, rel=1e-12)


def test_the_memory_bound_operations_of_a_moe_layer_at_the_hbm_bandwidth():
    """One V3 MoE layer's elementwise, normalisation and permutation kernels, bytes by hand (BF16, the FP32 router
    scores), forward + backward per token: two RMSNorms of h (2 + 3 passes each), two residual adds (3 + 3), the
    latents' RMSNorms (d_cq + d_c, 2 + 3), RoPE of q's 128 heads and the shared k (d_hr, 2 + 2), the router's 256
    scores (2 + 3, 4 bytes), the permute and unpermute of 8 copies (3 x 8 + 1 widths of h, each way), SwiGLU of 9
    experts (3 + 5 widths of h_E); 4096 tokens at 3.35 TB/s."""
    h, d_cq, d_c, n_h, d_hr, h_E = 7168, 1536, 512, 128, 64, 2048
    per_token = 2 * (2 * 5 * h + 2 * 6 * h + 5 * (d_cq + d_c) + 4 * (n_h + 1) * d_hr + 2 * 25 * h + 8 * 9 * h_E) \
        + 4 * 5 * 256
    got = _one(_row(ep=64), overlap="none", attention="flash")
    assert got["memory"] == pytest.approx(4096 * per_token / 3.35e12, rel=1e-12)


def test_a_few_tokens_per_gpu_are_bound_by_reading_the_weights():
    """The roofline: with 4 tokens a layer's weights take longer to read (3.35 TB/s) than to multiply (and
    with every expert of the layer on one device, 4096 tokens too: 128 per expert); the flash backward's
    recomputed scores (4 x 4 causal, 128 heads of 192) read no weight."""
    got = _one(_row(seq=4), overlap="none", attention="flash")
    weights = 2 * (1536 + 512 + 2 * 7168 + 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
                   + 128 * 128 * 7168 + 256 * 7168 + 257 * 3 * 7168 * 2048)  # norms + MLA + router + experts, BF16
    rescore = 2 * 4 * 0.5 * 4 * 128 * 192 / 989.4e12
    assert got["compute"] - got["memory"] == pytest.approx(3 * weights / 3.35e12 + rescore, rel=1e-12)


def test_the_1f1b_bubble_is_pp_minus_one_microbatch_periods():
    rows = _row(pp=4, microbatches=32)
    got = _one(rows, schedule="1f1b", overlap="none")
    assert got["bubble"] == pytest.approx(3 * got["microbatch"], rel=1e-12)
    assert got["step"] == pytest.approx(32 * got["microbatch"] + got["bubble"] + got["DP"] + got["optimizer"],
                                        rel=1e-12)
    inter = _one(rows, schedule="interleaved", vpp=3, overlap="none")
    assert inter["bubble"] == pytest.approx(got["bubble"] / 3, rel=1e-12)
    assert _one(rows, overlap="none")["bubble"] == 0  # no schedule: no bubble


def test_data_parallel_traffic_follows_the_zero_paper():
    """ZeRO (Rajbhandari et al., Sec. 7): an all-reduce moves 2 Psi gradient bytes; ZeRO-1 a reduce-scatter and
    an all-gather; over 8 replicas in a node, (D - 1)/D of each at NVLink's 160 GB/s (H800, DeepSeek-V3 Sec. 3.2.2)."""
    rows = _row(dp=8, zero=0)
    psi = E.device_params(V3, rows)
    p = float(psi["P_n"][0] + psi["P_m"][0])
    z0 = _one(rows, overlap="none", schedule="1f1b")["DP"]
    assert z0 == pytest.approx(7 / 8 * p * 2 * 4 / 160e9, rel=1e-12)  # FP32 gradients
    z1 = _one(_row(dp=8, zero=1), overlap="none", schedule="1f1b")["DP"]
    assert _one(_row(dp=8, zero=1), overlap="none")["DP"] == 0  # no schedule: a micro-batch's period, no step
    z3 = _one(_row(dp=8, zero=3), overlap="none")["DP"]  # ZeRO-3: both gathers and the reduce every micro-batch
    assert z3 == pytest.approx(7 / 8 * p * (4 + 2 * 2) / 160e9, rel=1e-12)
    assert z1 == pytest.approx(7 / 8 * p * (4 + 2) / 160e9, rel=1e-12)


def test_groups_across_nodes_send_at_the_network_bandwidth():
    rows = {k: np.array(v, dtype=float) for k, v in dict(tp=[8, 2], cp=[1, 8], dp=[4, 4], pp=[1, 1]).items()}
    b = placement.bandwidths(rows["tp"], rows["cp"], rows["dp"], rows["pp"], 8, 160e9, 50e9)
    assert list(b["beta_TP"]) == [160e9, 160e9]
    assert list(b["beta_CP"]) == [160e9, 50e9]  # CP 8 over ranks 2 apart spans two nodes
    assert list(b["beta_DP"]) == [50e9, 50e9]


def test_the_dispatch_over_nodes_alltoall_and_node_deduplicated():
    """EP 64 over 8 nodes, 8 experts per token, 4 groups kept: per byte of a token's hidden state the all-to-all
    sends 8 x 56/64 copies over the network; DeepSeek's dispatch at most 4 nodes, 7/8 of them remote, and
    forwards 8 x 7/8 copies inside the node."""
    ep, etp = np.array([64.0, 8.0]), np.array([1.0, 1.0])
    a2a = placement.dispatch_seconds(ep, etp, 8, 160e9, 50e9, 8, 4, "alltoall")
    assert a2a[0] == pytest.approx(8 * 56 / 64 / 50e9, rel=1e-12)
    assert a2a[1] == pytest.approx(8 * 7 / 8 / 160e9, rel=1e-12)  # inside a node: NVLink only
    deep = placement.dispatch_seconds(ep, etp, 8, 160e9, 50e9, 8, 4, "deepep")
    assert deep[0] == pytest.approx(max(4 * 7 / 8 / 50e9, 8 * 7 / 8 / 160e9), rel=1e-12)


def test_overlap_hides_only_what_compute_covers():
    rows = _row(ep=64, dp=64, microbatches=8)
    none, ideal = _one(rows, overlap="none"), _one(rows, overlap="ideal")
    compute = (none["compute"] + none["recompute"]) / 8
    sent = (none["TP"] + none["EP"] + none["CP"] + none["PP"]) / 8
    assert (ideal["TP"] + ideal["EP"] + ideal["CP"] + ideal["PP"]) / 8 == pytest.approx(max(0, sent - compute))
    assert ideal["step"] <= _one(rows, overlap="megatron")["step"] <= none["step"]


def test_refusals_are_one_line():
    with pytest.raises(cfg.ConfigError, match="overlap"):
        E.parts(V3, cfg.Training(), _row(), overlap="some")
    with pytest.raises(cfg.ConfigError, match="gemm-efficiency"):
        E.parts(V3, cfg.Training(), _row(), efficiency=1.5)
    with pytest.raises(cfg.ConfigError, match="no MXFP8 rate"):  # Hopper has no block-scaled FP8 instructions
        E.check(V3, "h100", training=cfg.Training(linear_recipe="mxfp8"))


@pytest.mark.parametrize("argv, said", [
    (["estimate", "--efficiency", "published"], "--efficiency acts on the step time only: add --time"),
    (["estimate", "--gemm-efficiency", "0.5"], "--gemm-efficiency acts on the step time only: add --time"),
    (["sensitivity", "--nvlink-domain", "72"], "--nvlink-domain acts on the step time or --memory device only"),
    (["estimate", "--time", "--gpus-per-node", "8", "--nvlink-domain", "4"],
     "--nvlink-domain 4 is smaller than --gpus-per-node 8"),
    (["search", "--gpus", "64", "--gpus-per-node", "8", "--nvlink-domain", "4"],
     "--nvlink-domain 4 is smaller than --gpus-per-node 8"),
    (["estimate", "--memory", "device", "--nvlink-domain", "7"], "--nvlink-domain 7 is smaller than a node's 8 GPUs"),
    (["estimate", "--memory", "device", "--gpus", "16", "--tp", "1", "--pp", "1", "--gpus-per-node", "3"],
     "--gpus 16 is not a whole number of nodes of --gpus-per-node 3"),
    (["estimate", "--time", "--gpus", "1024", "--gpus-per-node", "5"], "--gpus 1024 is not a whole number of nodes"),
    (["search", "--gpus", "256", "--gpu", "h800", "--gpus-per-node", "3", "--global-batch", "1024"],
     "--gpus 256 is not a whole number of nodes")])
def test_an_option_without_effect_or_a_domain_smaller_than_a_node_is_refused(capsys, argv, said):
    """A time option without --time changed nothing; an NVLink domain joins at least a node (gpus.toml: GB200 NVL72
    72 GPUs of 4-GPU nodes, an HGX node one domain of 8)."""
    from clirun import run
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and said in err and len(err.strip().splitlines()) == 1, err


def test_an_nvl72_rack_of_four_gpu_nodes_is_timed_as_one_domain(capsys):
    from clirun import run
    code, out, err = run(capsys, "estimate", "--gpu", "gb200", "--gpus-per-node", "4", "--nvlink-domain", "72",
                         "--time")
    assert code == 0 and "NVLink domain of 72 GPUs" in out, err


def test_search_ranks_by_time_and_keeps_micro_batches_of_real_size():
    """Issue 29's first acceptance line: on 1024 H800s the first 20 layouts keep >= 512 tokens per GPU per
    micro-batch and each row carries its step time and parts."""
    out = subprocess.run([sys.executable, "-m", "memsym", "search", "--gpus", "1024", "--gpu", "h800",
                          "--global-batch", "15360", "--seq", "4096", "--json"], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    d = json.loads(out)
    assert d["sort"] == "time" and d["attention"] == "flash"
    rows = d["rows"][:20]
    assert rows and all(r["mbs"] * r["seq"] / r["cp"] >= 512 for r in rows)
    times = [r["step_time"] for r in rows]
    assert times == sorted(times) and all(t > 0 for t in times)  # one global batch: the most tokens/s first
    for r in rows:
        parts = sum(r[k] for k in ("time_compute", "time_recompute", "time_TP", "time_EP", "time_CP", "time_PP",
                                   "time_DP", "time_bubble", "time_optimizer"))
        assert parts == pytest.approx(r["step_time"], abs=1e-5)


def test_estimate_time_is_the_search_rows_time():
    """estimate --time of a layout gives the time search --json lists for the same configuration."""
    run = lambda *a: json.loads(subprocess.run([sys.executable, "-m", "memsym", *a, "--json"], capture_output=True,
                                               text=True, timeout=300, check=True).stdout)
    d = run("search", "--gpus", "1024", "--gpu", "h800", "--global-batch", "15360", "--seq", "4096", "--top", "3")
    for r in d["rows"]:
        e = run("estimate", "--dp", str(r["dp"]), "--tp", str(r["tp"]), "--pp", str(r["pp"]), "--ep", str(r["ep"]),
                "--etp", str(r["etp"]), "--cp", str(r["cp"]), "--sp", str(r["sp"]), "--zero", str(r["zero"]),
                "--recompute", r["recompute"], "--mbs", str(r["mbs"]), "--seq", str(r["seq"]),
                "--schedule", "1f1b", "--microbatches", str(r["microbatches"]), "--gpu", "h800", "--time",
                "--attention", d["attention"])
        assert e["time"]["parts"]["step"] == pytest.approx(r["step_time"], abs=1e-5)


def test_sensitivity_time_slope_is_the_finite_difference():
    """The closed-form dT/db against the generated evaluator's (T(b + h) - T(b - h)) / 2h."""
    from derivations.steptime.sensitivity import time_sensitivity
    layout = cfg.Layout(dp=32, tp=2, pp=16, ep=8, etp=1, sp=2)
    train = cfg.Training(recompute="full", schedule="1f1b", microbatches=64, mbs=4)
    s = time_sensitivity(V3, layout, train, ["b", "s"], gpu="h800")
    from dataclasses import replace
    t = lambda **kw: E.layout_time(V3, layout, replace(train, **kw), gpu="h800")["parts"]["step"]
    assert s["wrt"]["b"]["derivative"] == pytest.approx((t(mbs=5) - t(mbs=3)) / 2, rel=1e-6)
    assert s["wrt"]["s"]["derivative"] == pytest.approx((t(seq=4097) - t(seq=4095)) / 2, rel=1e-4)


def test_sensitivity_time_says_the_efficiency_it_holds(capsys):
    """(adversarial review F4) The slopes hold the efficiency: exact at a fraction of peak (the test above), but the
    published tables change with s (attention, the GEMMs' rows): there dT/ds is off the finite difference (6% at
    s = 4096), which the output says."""
    from dataclasses import replace
    from clirun import run
    from derivations.steptime.sensitivity import time_sensitivity
    layout = cfg.Layout(dp=32, tp=2, pp=16, ep=8, etp=1, sp=2)
    train = cfg.Training(recompute="full", schedule="1f1b", microbatches=64, mbs=4)
    s = time_sensitivity(V3, layout, train, ["s"], gpu="h800", efficiency="published")
    t = lambda seq: E.layout_time(V3, layout, replace(train, seq=seq), gpu="h800", efficiency="published")
    fd = (t(4160)["parts"]["step"] - t(4032)["parts"]["step"]) / 128
    assert abs(s["wrt"]["s"]["derivative"] / fd - 1) > 0.01
    out = " ".join(run(capsys, "sensitivity", "--time")[1].split())
    assert ("the links, the stage's layers and the efficiency held (published: the tables' values here; how they "
            "change with b, s, N_r, a degree is not in the slopes):") in out
    out = " ".join(run(capsys, "sensitivity", "--time", "--efficiency", "peak")[1].split())
    assert "the efficiency held (1 of peak):" in out and "published" not in out


def test_deepseek_v3_layout_ranks_among_the_first_ten():
    """Issue 29, item 3: on 2,048 H800s, global batch 15,360, DualPipe, DeepSeek's layout (TP 1, PP 16, EP 64)
    is among the first 10 layouts the search lists (the check of /work/shared/acceptance/choose)."""
    out = subprocess.run([sys.executable, "-m", "memsym", "search", "--model", "deepseek-v3", "--gpus", "2048", "--gpu",
                          "h800", "--global-batch", "15360", "--seq", "4096", "--schedule", "dualpipe", "--json"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    top = json.loads(out)["rows"][:10]
    assert any(r["tp"] == 1 and r["pp"] == 16 and r["ep"] == 64 for r in top), [(r["tp"], r["pp"], r["ep"])
                                                                                for r in top]


def test_sensitivity_time_without_a_schedule_is_the_slope_of_what_estimate_prints():
    """No schedule: the step is one micro-batch's period; dT/db and dT/dCP are those of that function (a micro-batch
    twice as large takes twice as long; CP 2 halves it), and dT/dEP inside a node follows the dispatch's copies."""
    from dataclasses import replace
    from derivations.steptime.sensitivity import time_sensitivity
    layout = cfg.Layout(dp=32, tp=2, pp=16, ep=8, etp=1, sp=2)
    s = time_sensitivity(V3, layout, cfg.Training(), ["b", "CP", "DP", "EP"], gpu="h800")
    t = lambda lay, **kw: E.layout_time(V3, lay, replace(cfg.Training(), **kw), gpu="h800")["parts"]["step"]
    base = t(layout)
    assert s["wrt"]["b"]["derivative"] == pytest.approx(t(layout, mbs=2) - base, rel=1e-9)  # linear in b
    assert s["wrt"]["DP"]["derivative"] == 0 and t(replace(layout, dp=16)) == pytest.approx(base)
    assert s["wrt"]["CP"]["elasticity"] == pytest.approx(-1.0, abs=1e-9)
    lo = (base - t(replace(layout, ep=4))) / 4
    assert 0 < s["wrt"]["EP"]["derivative"] < lo  # the copies' (n - 1)/n flattens: the slope at 8 below the secant


def test_the_model_at_the_peak_is_not_slower_than_a_published_run():
    """paper/throughput.toml: DeepSeek-V3's pre-training (2.664M H800 GPU hours, 14.8T tokens: about 1,543 tokens
    per second per GPU) against the model at its layout, --gemm-efficiency 1: the model at the published peak is an
    upper bound on speed, so it must not predict fewer tokens per second than the run reached; the ratio is the
    efficiency the run reached (printed here, not fitted: the model names it --gemm-efficiency)."""
    import shlex
    import tomllib
    from pathlib import Path
    data = tomllib.loads((Path(__file__).resolve().parent.parent / "paper" / "throughput.toml").read_text())
    for run in data["runs"]:
        measured = run["tokens"] / (run["gpu_hours"] * 3600)
        argv = shlex.split(run["command"])
        assert argv[:2] == ["memsym", "estimate"]
        out = subprocess.run([sys.executable, "-m", "memsym", *argv[1:]], capture_output=True, text=True,
                             timeout=300, check=True).stdout
        predicted = json.loads(out)["time"]["tokens_per_gpu_s"]
        print(f"{run['id']}: measured {measured:,.0f} tokens/s/GPU, model at the peak {predicted:,.0f}: "
              f"efficiency reached {measured / predicted:.2f}")
        assert predicted >= measured, (run["id"], predicted, measured)


def test_all_stages_times_every_stage(capsys):
    """--all-stages --time: each stage's time per micro-batch; the slowest is the one the step is timed at (what
    estimate --time reports), and the last stage (one MoE layer and the head) is faster than a 4-MoE-layer one."""
    import json

    from clirun import run
    argv = ["estimate", "--gpu", "h800", "--global-batch", "1024", "--time", "--json"]
    code, out, err = run(capsys, *argv, "--all-stages")
    assert code == 0, err
    every = json.loads(out)["time"]
    code, out, err = run(capsys, *argv)
    one = json.loads(out)["time"]
    per_mb = {s["stage"]: s["parts"]["microbatch"] for s in every["stages"]}
    assert sorted(per_mb) == list(range(16)) and max(per_mb, key=per_mb.get) == one["stage"]
    assert per_mb[one["stage"]] == one["parts"]["microbatch"] and per_mb[15] < per_mb[1]
    code, out, err = run(capsys, *argv[:-1], "--all-stages")
    assert code == 0 and "s/mb" in out and "step time" in out, err


def test_the_period_reads_no_zero_stage_and_a_grid_is_its_rows():
    """One micro-batch's period reads no ZeRO stage, in every variant's expression and in the printed functions,
    and the parts over a grid numpy broadcasts (layouts x policies x micro-batch sizes) are, to the bit, the
    parts of each of its configurations given one by one."""
    from derivations import notation as nt
    from derivations.steptime import model as M
    for _, overlap, dualpipe in M.variants():
        assert nt.z not in M.step_time(overlap, dualpipe)["microbatch"].free_symbols
    lay = {"dp": [64, 8, 2, 128], "tp": [1, 2, 8, 1], "pp": [16, 8, 4, 2], "ep": [64, 16, 8, 32], "etp": [1, 1, 2, 1],
           "cp": [1, 4, 2, 1], "L_d": [3, 0, 0, 3], "L_m": [1, 8, 13, 28], "e_E": [1, 0, 0, 1], "e_H": [0, 0, 1, 0],
           "L_I": [0, 1, 3, 0]}
    grid = {k: np.array(v)[:, None, None] for k, v in lay.items()}
    grid.update(recompute=np.array(["none", "full", "selective"])[None, :, None], mbs=np.array([1, 2, 4])[None, None],
                seq=np.array([[[4096]]]), zero=np.array([[[3]]]), microbatches=np.array([[[1]]]))
    shape = (4, 3, 3)
    flat = {k: np.broadcast_to(v, shape).reshape(-1) for k, v in grid.items()}
    for kw in ({}, {"overlap": "none"}, {"schedule": "dualpipe", "attention": "flash"}):
        got, want = E.parts(V3, cfg.Training(), grid, gpu="h800", **kw), E.parts(V3, cfg.Training(), flat,
                                                                               gpu="h800", **kw)
        assert all(got[k].shape == shape and np.array_equal(got[k].reshape(-1), want[k]) for k in E.PARTS)
        periods = [E.parts(V3, cfg.Training(), dict(flat, zero=np.full(36, z)), gpu="h800", **kw)["microbatch"]
                   for z in range(4)]
        assert all(np.array_equal(p, periods[0]) for p in periods)
        assert "schedule" in kw or np.all(want["step"] >= want["microbatch"])  # + ZeRO-3's traffic


def test_the_devices_parameter_coefficients_are_the_terms_at_each_layout():
    """The coefficients of the device's parameters (computed once per value of the degrees their term reads) are
    the terms evaluated at the whole substitution of each (TP, EP, ETP), each composition count alone."""
    from derivations import evaluate as ev
    for model in (V3, PRESETS["deepseek-v2-lite"]):
        names = cfg.composition_names(model.family)
        for tp, ep, etp in [(1, 1, 1), (2, 8, 1), (8, 64, 2), (4, 16, 4), (16, 2, 8)]:
            got = E._device_coefficients(model, tp, ep, etp)
            base = cfg.named(model, cfg.Layout(tp=tp, ep=ep, etp=etp, sp=tp), None)
            for part, tid in E.DEVICE_TERMS:
                want = tuple(float(ev.exact(model.structure, tid, {**base, **{n: int(n == c) for n in names}}))
                             for c in names)
                assert got[part] == want, (model.name, tp, ep, etp, part)


def test_the_time_says_what_the_conventions_set_and_that_the_layout_does_not_fit(capsys):
    """issue 45 item 5: --conventions mcore-te sets the attention kernel the time depends on, and a layout over
    the budget is timed with a flag beside its time; a typed kernel and a layout that fits say neither."""
    from clirun import run
    argv = ["estimate", "--time", "--gpu", "h800", "--global-batch", "1024", "--conventions", "mcore-te"]
    code, out, err = run(capsys, *argv)
    assert code == 0 and "attention flash: set by --conventions mcore-te" in out and "would not run" in out
    code, out, err = run(capsys, *argv, "--attention", "flash", "--zero", "1", "--recompute", "full")
    assert code == 0 and "set by --conventions" not in out and "would not run" not in out


def test_mtp_modules_add_their_layer_projection_and_head_on_the_head_stage():
    """--mtp-activations last-stage: DeepSeek-V3's one MTP module (report Sec. 2.2) runs eh_proj (2h x h), one MLA +
    MoE layer and the shared head (h x v) again on the stage holding the head, forward 2 and backward 4 FLOPs per
    parameter and token (its scores' Q K^T once more in the flash backward); the memory-bound operations of its
    layer, its norms and cross-entropy too."""
    on = cfg.Training(conventions=dataclasses.replace(cfg.Training().conventions, mtp_activations="last-stage"))
    rows = _row(ep=64, e_H=1)
    base = {k: float(v[0]) for k, v in E.parts(V3, cfg.Training(), rows, gpu="h800", attention="flash").items()}
    mtp = {k: float(v[0]) for k, v in E.parts(V3, on, rows, gpu="h800", attention="flash").items()}
    scores = 2 * 4096 * 0.5 * 4096 * 128 * (128 + 64 + 128)
    rescore = 2 * 4096 * 0.5 * 4096 * 128 * (128 + 64)
    extra = (3 * (2 * 4096 * (2 * 7168 ** 2 + _moe_layer_matrix_params() + 7168 * 129280) + scores) + rescore) \
        / 989.4e12
    assert (mtp["compute"] - mtp["memory"]) - (base["compute"] - base["memory"]) == pytest.approx(extra, rel=1e-9)
    assert mtp["memory"] > base["memory"]
    headless = _row(ep=64, e_H=0)
    step = [E.parts(V3, t, headless, gpu="h800")["step"][0] for t in (on, cfg.Training())]
    assert step[0] == step[1]  # no head on the stage: no MTP module


def test_dsa_attends_to_its_top_k_and_runs_the_lightning_indexer():
    """DeepSeek-V3.2's sparse attention (tests/data/dsa: n_h 4 of 32 + 16 + 32, an indexer of n_I = 2 heads of
    d_I = 32 keeping k_I = 16): each query's scores and values over the causal mean of its 16 chosen keys (16 (1 -
    16 / 2s)) instead of half the s keys, the indexer scoring half the s keys with 2 x 32 per key, and its
    projections (wq_b 96 x 64, wk 256 x 32, k_norm 2 x 32, weights_proj 256 x 2), forward 2 and backward 4 FLOPs;
    the flash backward recomputes the scores' share (32 + 16 of 80) of the scores and of the indexer's (counted as
    keys of the attention: derivations/steptime/evaluate.py _dsa_attention)."""
    dsa = cfg.load_model(str(Path(__file__).resolve().parent / "data" / "dsa" / "config.json"))
    rows = _row(seq=4096, L_I=1)
    t = {k: float(v[0]) for k, v in E.parts(dsa, cfg.Training(), rows, gpu="h800", attention="flash").items()}
    s, tokens = 4096, 4096
    sparse = 2 * tokens * 4 * (32 + 16 + 32) * 16 * (1 - 16 / (2 * s))
    indexer = 2 * tokens * 2 * 32 * s / 2 + 2 * tokens * (96 * 64 + 256 * 32 + 2 * 32 + 256 * 2)
    mla = 256 * 96 + 96 * 4 * 48 + 256 * (64 + 16) + 64 * 4 * 64 + 4 * 32 * 256
    layer = mla + 8 * 256 + 3 * 3 * 256 * 128  # the router and 2 routed + 1 shared expert of 3 h h_E
    rescore = (sparse + 2 * tokens * 2 * 32 * s / 2) * (32 + 16) / (32 + 16 + 32)
    want = (3 * (2 * tokens * layer + sparse + indexer) + rescore) / 989.4e12
    assert t["compute"] - t["memory"] == pytest.approx(want, rel=1e-9)


def test_the_cp_ring_hides_behind_the_attention_forward_and_its_flash_backward():
    """CP 2 inside a node (NVLink 160 GB/s): each layer's ring sends one key/value block of s / 2 tokens x 128 heads
    x (128 + 64 + 128) in BF16, once forward and twice backward, behind the core attention of the device's 2,048
    queries: its forward, the backward's two products of it and the recomputed Q K^T (989.4 TFLOP/s)."""
    t = _one(_row(cp=2), overlap="megatron", attention="flash")
    ring = 3 * 2048 * 128 * 320 * 2 / 160e9
    attention = 2 * 2048 * 0.5 * 4096 * 128 * (3 * 320 + 192) / 989.4e12
    assert t["CP"] == pytest.approx(ring - attention, rel=1e-9)


def test_megatron_overlap_switches_hide_what_they_name():
    """--overlap megatron:SWITCH,...: the EP all-to-all behind the micro-batch's compute (1F1B A2A overlap), without
    its weight gradients unless they are delayed (t_W, a third of the matrix products' time besides the flash
    backward's recomputed scores, less the core attention's forward, which has no weights: no recomputation here);
    the first forward and the last backward of the 4 micro-batches run alone (PP 1: Megatron-Core's
    combined_1f1b_schedule_for_no_pipelining), a quarter of the all-to-all exposed; the gradients' reduce only with
    grad-reduce (the default 'megatron' has it, 'megatron:' none)."""
    rows = _row(ep=64, dp=64, microbatches=4)
    none = _one(rows, overlap="none", attention="flash", schedule="1f1b")
    compute = (none["compute"]) / 4
    ep = none["EP"] / 4
    delayed = _one(rows, overlap="megatron:ep,wgrad", attention="flash", schedule="1f1b")
    assert delayed["EP"] / 4 == pytest.approx(ep / 4 + max(0.0, 3 * ep / 4 - compute), rel=1e-9, abs=1e-15)
    plain = _one(rows, overlap="megatron:ep", attention="flash", schedule="1f1b")
    scores = 2 * 4096 * 0.5 * 4096 * 128 / 989.4e12  # per unit of head width: Q K^T (d_h + d_h^R), P V (d_v)
    t_w = ((none["compute"] - none["memory"]) / 4 - scores * 192) / 3 - scores * (192 + 128)
    assert plain["EP"] / 4 == pytest.approx(ep / 4 + max(0.0, 3 * ep / 4 - (compute - t_w)), rel=1e-9, abs=1e-15)
    dp = [_one(rows, overlap=o, schedule="1f1b")["DP"] for o in ("megatron:", "megatron")]
    assert dp[0] > dp[1]
    assert _one(rows, overlap="megatron")["step"] == _one(rows, overlap="megatron:grad-reduce,param-gather")["step"]


def test_from_megatron_reads_the_overlap_flags(tmp_path):
    launch = tmp_path / "run.sh"
    launch.write_text("torchrun pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
                      "--multi-latent-attention --kv-lora-rank 128 --q-lora-rank 256 --qk-head-dim 64 "
                      "--qk-pos-emb-head-dim 32 --v-head-dim 64 --num-experts 16 --moe-router-topk 2 "
                      "--moe-ffn-hidden-size 512 --ffn-hidden-size 2048 --swiglu --expert-model-parallel-size 8 "
                      "--micro-batch-size 1 --seq-length 4096 --overlap-param-gather --tp-comm-overlap "
                      "--overlap-moe-expert-parallel-comm --bf16 --vocab-size 32000 --tokenizer-type NullTokenizer\n")
    out = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--from-megatron", str(launch), "--gpus", "8",
                          "--time", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["time"]["overlap"] == "megatron:param-gather,ep,tp"


def test_megatrons_a2a_overlap_leaves_the_warm_up_and_cool_down_exposed():
    """Megatron-Core's get_pp_rank_microbatches (schedules.py@d98e8a64ddf3 L951-977), counted by hand: interleaved,
    PP 8, V 4, 128 micro-batches: rank 0 runs 2 x 7 + 3 x 8 + 1 = 39 of its 512 chunk-forwards before the first
    paired step (and 39 backwards after the last), rank 7 3 x 8 + 1 = 25; 1F1B PP 4 rank 1: 4 - 1 - 1 + 1 = 3 of 8;
    no more than all of them (PP 8, V 4, 2 micro-batches: 8 chunks, none paired); no schedule: all paired."""
    assert E.ep_paired_share("interleaved", 8.0, 4, 128.0, 0.0) == pytest.approx(1 - 39 / 512)
    assert E.ep_paired_share("interleaved", 8.0, 4, 128.0, 7.0) == pytest.approx(1 - 25 / 512)
    assert E.ep_paired_share("1f1b", 4.0, 2, 8.0, 1.0) == pytest.approx(1 - 3 / 8)
    assert E.ep_paired_share("interleaved", 8.0, 4, 2.0, 0.0) == 0
    assert E.ep_paired_share(None, 8.0, 4, 128.0, 0.0) == 1


def test_the_dispatch_kernels_sms_are_not_the_computes_under_published_efficiency():
    """DeepSeek-V3 report Sec. 3.5.1: DeepEP holds 20 of the H800's 132 SMs (Megatron-Core's moe_deepep_num_sms
    default 20): under --efficiency published a share 20/132 of the all-to-all run behind compute is not hidden
    (PP 1, 4 micro-batches: 3/4 of it paired, the first forward and last backward alone); --efficiency peak keeps
    every SM for compute; the NCCL all-to-all, whose SM count is not in efficiency.toml, none."""
    rows = _row(ep=64, dp=64, microbatches=4)
    kw = dict(attention="flash", schedule="1f1b")
    none = _one(rows, overlap="none", dispatcher="deepep", efficiency="published", **kw)
    ep, compute = none["EP"] / 4, none["compute"] / 4
    pub = _one(rows, overlap="megatron:ep,wgrad", dispatcher="deepep", efficiency="published", **kw)
    hidden = 3 / 4 * (1 - 20 / 132)
    assert pub["EP"] / 4 == pytest.approx((1 - hidden) * ep + max(0.0, hidden * ep - compute), rel=1e-9)
    nccl = _one(rows, overlap="megatron:ep,wgrad", dispatcher="alltoall", efficiency="published", **kw)
    nccl_none = _one(rows, overlap="none", dispatcher="alltoall", efficiency="published", **kw)
    assert nccl["EP"] / 4 == pytest.approx(nccl_none["EP"] / 16 + max(0.0, 3 / 4 * nccl_none["EP"] / 4 - compute),
                                           rel=1e-9)


def test_estimate_says_what_the_ep_overlap_hid(capsys):
    """estimate --time with --overlap megatron:ep: the JSON's 'ep_overlap' at the slowest stage r, by hand from
    Megatron-Core's warm-up count (interleaved, PP 4, V 2: 2 (4 - r - 1) + 4 + 1 of the 2 m chunk-forwards) and
    DeepEP's 20 of the H800's 132 SMs; the text says it; without the switch no such key."""
    from clirun import run
    argv = ["estimate", "--gpu", "h800", "--gpus", "256", "--pp", "4", "--ep", "8", "--schedule", "interleaved",
            "--vpp", "2", "--global-batch", "512", "--dispatcher", "deepep", "--time"]
    t = json.loads(run(capsys, *argv, "--overlap", "megatron:ep", "--json")[1])["time"]
    r, m = t["stage"], t["microbatches"]
    paired = 1 - (2 * (4 - r - 1) + 4 + 1) / (2 * m)
    assert t["ep_overlap"] == pytest.approx({"paired": paired, "sms_held": 20 / 132,
                                             "hidden": paired * (1 - 20 / 132)})
    assert f"at most {paired * (1 - 20 / 132):.1%} of EP hidden" in run(capsys, *argv, "--overlap", "megatron:ep")[1]
    assert "ep_overlap" not in json.loads(run(capsys, *argv, "--json")[1])["time"]
