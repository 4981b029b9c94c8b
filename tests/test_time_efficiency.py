"""--efficiency published (issue 45 item 2): every efficiency and bandwidth fraction the model reads is listed with
its source, none from a throughput row; the tables' arithmetic checked by hand against the numbers as printed."""
import pytest

from derivations.steptime import efficiency as E


def test_every_efficiency_read_is_listed_with_its_source_and_none_from_a_throughput_row():
    rows = E.listing()
    assert [r[0] for r in rows] == ["gemm_dense", "gemm_grouped", "gemm_grouped_mxfp8", "attention",
                                    "ep_nvlink h800/h100-80gb/h200", "ep_nvlink b200/b300", "ep_nvlink gb200/gb300",
                                    "ep_network", "ep_overlap_sms"]
    for name, value, source in rows:
        print(f"{name}: {value} <- {source}")
        assert "@" in source or "arXiv" in source, name  # a file@commit or a paper
        assert "throughput" not in source and "Megatron-Bridge" not in source, name
        values = value.values() if isinstance(value, dict) else [value]
        assert all(0 < v <= 1 for v in values), name


def test_the_grouped_gemm_at_4096_rows_is_deepgemms_two_shapes_over_the_h800_fp8_peak():
    """DeepGEMM README@55ab91f: 8 groups of 4096 rows, 4096x7168 at 1346 TFLOPS and 7168x2048 at 1214: the pair's
    FLOPs over their time, over 1,978.9 TFLOP/s (the H800's dense FP8 peak)."""
    f1, f2 = 2 * 4096 * 4096 * 7168, 2 * 4096 * 7168 * 2048
    want = (f1 + f2) / (f1 / 1346e12 + f2 / 1214e12) / 1978.9e12
    assert E.gemm([4096], grouped=True)[0] == pytest.approx(want, rel=1e-12)
    assert E.gemm([100000], grouped=True)[0] == pytest.approx(E.gemm([8192], grouped=True)[0])  # constant beyond
    assert E.gemm([256], grouped=True)[0] < E.gemm([1024], grouped=True)[0]  # a few rows per expert: slower


def test_gb200s_mxfp8_grouped_gemm_only_under_mxfp8_on_nvidia_blackwell():
    """Megatron-LM's GB200 page: 2,672 TFLOP/s MXFP8 grouped GEMM over GB200's 5 PFLOPS dense MXFP8 (gpus.toml), read
    for the experts under the MXFP8 recipe on NVIDIA's Blackwell only; BF16 there, and MXFP8 on AMD, read Hopper's."""
    from derivations.config import gpus
    hopper = E.gemm([4096], grouped=True)[0]
    assert E.gemm([4096], grouped=True, gpu=gpus.gpu("gb200"), precision="mxfp8")[0] == pytest.approx(2672e12 / 5e15)
    assert E.gemm([64], grouped=True, gpu=gpus.gpu("b200"), precision="mxfp8")[0] == pytest.approx(2672e12 / 5e15)
    assert E.gemm([4096], grouped=True, gpu=gpus.gpu("gb200"), precision="bf16")[0] == hopper
    assert E.gemm([4096], grouped=True, gpu=gpus.gpu("mi355x"), precision="mxfp8")[0] == hopper


def test_deepep_fractions_are_the_readme_bandwidths_over_the_links():
    """DeepEP's README (H800) and HybridEP's (B200 at 16 SMs; GB200 at 32 SMs by ranks), BF16 dispatch and combine
    as printed, over NVLink's one-way 160 and 900 GB/s."""
    from derivations.config import gpus
    assert E.links([8])["nvlink"][0] == pytest.approx((153 + 158) / 2 / 160)
    assert E.links([8], gpus.gpu("b300"))["nvlink"][0] == pytest.approx((535.94 + 530.86) / 2 / 900)
    assert E.links([32], gpus.gpu("gb200"))["nvlink"][0] == pytest.approx((484.22 + 464.54) / 2 / 900)
    assert E.links([64], gpus.gpu("gb300"))["nvlink"][0] == pytest.approx((479.02 + 447.89) / 2 / 900)
    assert E.links([32])["network"][0] == pytest.approx((44 + 47) / 2 / 50)
    assert E.links([256])["network"][0] == pytest.approx((46 + 45) / 2 / 50)  # constant beyond EP 64


def test_attention_is_cudnns_forward_and_backward_over_the_h100_bf16_peak():
    """FlashAttention-3's figures, cuDNN at 4k: forward 609, backward 499 TFLOP/s; a backward is 2.5 forwards' FLOPs,
    so 3.5 of them take 1/609 + 2.5/499; over 989.4 TFLOP/s.  Between 2k and 4k: linear in log2 s."""
    at = lambda f, b: 3.5 / (1 / f + 2.5 / b) / 989.4
    assert E.attention([4096])[0] == pytest.approx(at(609, 499))
    assert E.attention([2896.309])[0] == pytest.approx((at(617, 465) + at(609, 499)) / 2, rel=1e-6)
    assert E.attention([65536])[0] == pytest.approx(at(595, 516))  # constant beyond 16k


def test_published_is_the_default_and_peak_the_upper_bound(capsys):
    """--efficiency published by default; --efficiency peak (or one --gemm-efficiency) in its place, faster; both
    --efficiency published and --gemm-efficiency typed contradict each other: one line, exit 2."""
    import json

    from clirun import run
    argv = ["estimate", "--gpu", "h800", "--global-batch", "1024", "--time", "--json"]
    pub = json.loads(run(capsys, *argv)[1])["time"]
    peak = json.loads(run(capsys, *argv, "--efficiency", "peak")[1])["time"]
    half = json.loads(run(capsys, *argv, "--gemm-efficiency", "0.5")[1])["time"]
    assert pub["efficiency"] == "published" and peak["efficiency"] == 1 and half["efficiency"] == 0.5
    assert half["tokens_per_gpu_s"] < peak["tokens_per_gpu_s"] and pub["tokens_per_gpu_s"] < peak["tokens_per_gpu_s"]
    code, _, err = run(capsys, *argv, "--efficiency", "published", "--gemm-efficiency", "0.5")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--gemm-efficiency" in err


@pytest.mark.parametrize("given, said", [
    (["--gpu", "mi300x"], ["GEMM, grouped GEMM: H800's (DeepGEMM)", "attention: H100-80GB's (FlashAttention-3)",
                           "EP NVLink, EP network: H800's (DeepEP)"]),
    (["--gpu", "a100-80gb"], ["GEMM, grouped GEMM: H800's (DeepGEMM)", "EP NVLink, EP network: H800's (DeepEP)"]),
    (["--gpu", "gb200", "--conventions", "mcore-te", "--linear-recipe", "mxfp8"],
     ["GEMM: H800's (DeepGEMM)", "grouped GEMM: GB200's (Megatron-LM)", "EP NVLink: GB200's (DeepEP)",
      "EP network: H800's (DeepEP)"]),
    (["--gpu", "mi300x", "--efficiency", "peak"], [])])
def test_estimate_time_says_whose_measurements_each_kernel_kind_reads(capsys, given, said):
    """(adversarial review F6: `x efficiency published` did not say that on an MI300X or A100 it applies the H800's
    and H100's fractions of peak): the tables' GPUs and sources as efficiency.toml names them, within 100 columns."""
    from clirun import run
    code, out, _ = run(capsys, "estimate", "--time", *given)
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("  published: ")), None)
    assert code == 0 and (start is None) == (not said)
    if said:
        block = lines[start:next(i for i, line in enumerate(lines) if "slowest stage" in line)]
        assert all(s in " ".join(x.strip() for x in block) for s in said), block
        assert len(block) <= 2 and all(len(x) <= 100 for x in block), block


def test_the_dispatch_holds_deepseeks_20_of_the_hoppers_132_sms():
    """DeepSeek-V3 report Sec. 3.5.1 ('20 out of the 132 SMs available in the H800 GPU'), Megatron-Core's DeepEP
    default of 20 SMs: 20/132 on an H800 or H100; no share for a dispatcher or a GPU efficiency.toml gives no count."""
    from derivations.config import gpus
    assert E.overlap_sms(gpus.gpu("h800"), "deepep") == pytest.approx(20 / 132)
    assert E.overlap_sms(gpus.gpu("h100"), "deepep") == pytest.approx(20 / 132)
    assert E.overlap_sms(gpus.gpu("h800"), "alltoall") == 0 and E.overlap_sms(gpus.gpu("b200"), "deepep") == 0
