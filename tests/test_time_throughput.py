"""paper/throughput.toml's rows of Megatron-Bridge's performance summary (issue 45 item 7), checked and not tuned:
each row's ratio predicted / published tokens per second per GPU and the parts of its step, printed (run with -s);
the share of rows within +-20% and the pairs ordered as published within each table (release, system, precision)
are recorded: the test fails only when they drop below what was measured when the rows were added."""
import json
import shlex
import tomllib
from collections import defaultdict
from itertools import combinations
from pathlib import Path

import pytest

from clirun import run

DATA = tomllib.loads((Path(__file__).resolve().parent.parent / "paper" / "throughput.toml").read_text())
ROWS = DATA["rows"]
#: --efficiency peak (the default until published became it), measured when the rows were added: 1 of 14 within
#: +-20% (25.09 H100, 1.09), 0 of 1 pair ordered (25.09 B200: the same layout in two FP8 granularities, predicted
#: equal).
#: Measured again when each row's command gained what its release's performance scripts launched (paper/throughput.toml
#: "flags": recomputation, MTP, overlap switches, dispatcher) and the 25.09 precisions were read from the release's perf
#: matrix (FP8 current scaling unparenthesized, MXFP8 / blockwise in parentheses): 0 of 14 at the peak, ratios
#: 1.62-3.10;
#: the H100 row's 1.05 had been two errors cancelling (its run overlaps the EP all-to-all with the other micro-batch,
#: --overlap-moe-expert-parallel-comm with DeepEP: with it the model is 2.65x the measured speed).  The B200 pair is now
#: ordered (the MXFP8 scales' casts), and at the peak no row is predicted slower than it ran (the upper bound).
#: Measured again when a flash kernel's backward recomputed its scores (five s x s products against four: ratios
#: 1.59-3.03, the H100 row's unchanged, its EP all-to-all behind that compute) and the 26.02.01 Kimi K2 row was added
#: (2.04): 0 of 15.  With the 25.09 GB200 MXFP8 row timed at EP 32 (its printed EP 64 cannot be built): 0 of 15, 2 of 2
#: pairs ordered.
WITHIN_20_AT_LEAST = 0
ORDERED_AT_LEAST = 2
#: --efficiency published, the defaults now (derivations/config/efficiency.toml; under MXFP8 on NVIDIA's Blackwell the
#: experts' grouped GEMM at NVIDIA's published GB200 MXFP8 rate): 0 of 14, ratios 1.21-2.35, 1 of 1 pair ordered.
#: (The 25.11 GB300 BF16 row's 1.12 came from reading that MXFP8 kernel's rate for BF16 GEMMs, a defect: 1.21 now.)
#: With the flash backward's recomputed scores: 1 of 15 (25.11 GB300 BF16, 1.19), ratios 1.19-2.29, Kimi K2 1.48.
#: With the attention at cuDNN's published forward and backward rates (0.53 of the peak at 4k, not FlashAttention-3's
#: forward 0.75) and the dispatch at DeepEP's / HybridEP's published bandwidth of the GPU's generation (NVL72 0.53,
#: HGX B200 0.59 of NVLink, not the H800's 0.97): 4 of 15 (the GB300 rows and Kimi K2: 1.03-1.18), ratios 1.03-2.18.
#: With Megatron-Core's 1F1B A2A overlap hiding only the paired micro-batches' all-to-all (get_pp_rank_microbatches'
#: warm-up forwards and cool-down backwards run alone) and DeepEP's 20 of Hopper's 132 SMs not the compute's while it
#: runs (DeepSeek-V3 report Sec. 3.5.1): the 25.09 H100 row (the only one launched with the overlap) 2.18 -> 1.95, its
#: EP 0 -> 15% of the step; the others unchanged: 4 of 15, ratios 1.03-1.97.  With each routed copy cast again where
#: it arrives in BF16 (TE's grouped GEMM quantizes the tokens it received): every quantized row 1-3% slower, 4 of 15,
#: ratios 1.03-1.94 (H100 1.90, GB200 1.26-1.71, HGX B200/B300 1.59-1.94).
PUBLISHED_WITHIN_20_AT_LEAST = 4
#: What stays unexplained (printed per row as the share of the measured step the model does not account for): the
#: framework's own authors name host-side overhead as the largest loss on these runs ("the biggest performance issue
#: is that there are large gaps between kernels, and the CPU kernel launch speed cannot keep up": NVIDIA/Megatron-LM
#: docs/discussions/deepseek-v3-gb200-optimization@eb0783b, Sec. 2, 494 -> 970 TFLOP/s, much of it by removing it), with
#: the fragmented quantization, permute and padding kernels; none has a published per-kernel rate the model could
#: read, so none is modelled.  Its size is published only as whole-run gains: the same guide's proxy model puts what
#: is left at its 970 TFLOP/s at "at least a 10% additional performance gain" (Sec. 3.1), and Megatron-Bridge pull
#: request #4458 (a later B300 MXFP8 recipe) measured 894 -> 1,161 TFLOP/s from full CUDA graphs, FP8 attention, A2A
#: overlap, VP 2 and MBS 1 together (not one of them alone).  Per table what stays (at the defaults): 25.09 B200 and
#: GB200 (no CUDA graphs, NCCL's all-to-all read at HybridEP's bandwidth, none published for it: 1.53-1.92), 25.11/26.02
#: HGX B200/B300 (1.59-1.94), 25.09 H100 (1.90: its EP all-to-all behind the other micro-batch under the 1F1B A2A
#: overlap but for the warm-up and cool-down and the dispatch's SMs; NVIDIA reports the overlap adds CPU
#: synchronisation), 25.11/26.02 GB200 (1.26-1.28).  The other named candidates are already parts of the step: the
#: permute and unpermute (model.py MEMORY_OPS), the optimizer's memory traffic (t_opt), the release's interleaved-1F1B
#: bubble (chi_mb), the dispatchers' and attention's published rates (--efficiency published), the casts of every
#: linear input and routed copy (Q_C).
#: Counting kernels from a CPU trace of Megatron-Core (memsym trace) would count its unfused local ops, not the
#: Transformer Engine kernels these runs launched (fused permute, router, RoPE and cross-entropy), so it is not a count
#: of theirs.


def test_each_row_is_consistent_as_published():
    """The page's own arithmetic: GA = GBS / (MBS DP) with DP = GPUs / (TP PP CP), and each row cites the page and the
    release's scripts its command's settings come from."""
    for r in ROWS:
        dp = r["gpus"] // (r["tp"] * r["pp"] * r["cp"])
        assert r["gpus"] == dp * r["tp"] * r["pp"] * r["cp"] and r["ga"] * r["mbs"] * dp == r["gbs"], r["id"]
        assert "megatron-bridge" in r["source"] and r["release"] in r["source"] and r["system"] in r["source"]
        assert f"--global-batch {r['gbs']} " in r["command"] and f"--gpu {r['gpu']} " in r["command"], r["id"]
        assert "Megatron-Bridge" in r["flags"] and "@" in r["flags"], r["id"]  # where its launch settings come from


def _predict(capsys, row, *extra):
    argv = shlex.split(row["command"]) + list(extra)
    assert argv[:2] == ["memsym", "estimate"]
    code, out, err = run(capsys, *argv[1:])
    assert code == 0, (row["id"], err)
    return json.loads(out)["time"]


@pytest.mark.parametrize("extra, within_at_least, ordered_at_least", [
    (("--efficiency", "peak"), WITHIN_20_AT_LEAST, ORDERED_AT_LEAST), ((), PUBLISHED_WITHIN_20_AT_LEAST, 0)])
def test_ratios_parts_share_and_order(capsys, extra, within_at_least, ordered_at_least):
    got = {r["id"]: _predict(capsys, r, *extra) for r in ROWS}
    lines, within = [" ".join(extra) or "the defaults"], 0
    for r in ROWS:
        t = got[r["id"]]
        ratio = t["tokens_per_gpu_s"] / r["tokens_per_gpu_s"]
        within += abs(ratio - 1) <= 0.2
        p = t["parts"]
        share = "  ".join(f"{k} {p[k] / p['step']:.0%}" for k in ("compute", "recompute", "TP", "EP", "CP", "PP", "DP",
                                                                      "bubble", "optimizer") if p[k] > 0)
        share = share.replace("  ", f" (memory-bound {p['memory'] / p['step']:.0%})  ", 1)
        unexplained = "" if abs(ratio - 1) <= 0.2 else f" | unexplained {1 - 1 / ratio:.0%} of the measured step"
        lines.append(f"{r['id']:26s} published {r['tokens_per_gpu_s']:>6,} predicted {t['tokens_per_gpu_s']:>8,.0f} "
                     f"ratio {ratio:5.2f} | {share}{unexplained}")
        assert not extra or ratio >= 1, (r["id"], ratio)  # the peak is the upper bound: no run faster than it
    tables = defaultdict(list)
    for r in ROWS:
        tables[(r["release"], r["system"], r["precision"].split(" (")[0])].append(r)
    pairs = ordered = 0
    for key, rs in tables.items():
        for a, b in combinations(rs, 2):
            if a["tokens_per_gpu_s"] == b["tokens_per_gpu_s"]:
                continue
            pairs += 1
            published = a["tokens_per_gpu_s"] > b["tokens_per_gpu_s"]
            predicted = got[a["id"]]["tokens_per_gpu_s"] > got[b["id"]]["tokens_per_gpu_s"]
            ordered += published == predicted
            lines.append(f"order {key}: {a['id']} vs {b['id']}: published {'>' if published else '<'}, "
                         f"predicted {'>' if predicted else '<='}")
    lines.append(f"within +-20%: {within} of {len(ROWS)}; ordered as published: {ordered} of {pairs} pairs")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert within >= within_at_least and ordered >= ordered_at_least
