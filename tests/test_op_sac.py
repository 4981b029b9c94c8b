"""torchtitan's op-level selective checkpointing (--conventions torchtitan, --selective torchtitan-op): the bytes a
layer keeps, counted by hand from torchtitan@99fee810's code (derivations/activations/op_sac.py names the lines), and
issue 46's acceptance on the DeepSeek-V3 16B job of torchtitan issue #1789 through the preset and the job configs."""
import json

import pytest

from memsym.cli import main

# deepseek_v3 16B (deepseekv3_configs['16B']): dim 2048, moe_inter_dim 1408, 2 shared experts, 64 experts, top 6,
# inter_dim 10944, vocab 102400; b 8, s 4096 on one rank (TP 1): T tokens, BF16 activations
T, H, HE, NS, N, K, HF, V = 8 * 4096, 2048, 1408, 2, 64, 6, 10944, 102400
NORM = 2 * T * H + 4 * T  # an RMSNorm outside the checkpoints: its BF16 input and FP32 rstd (fused kernel)
MLA = NORM + 2 * T * H  # + the attention norm's output: the fully checkpointed attention's input
MOE_EP1 = NORM + 2 * T * H + 2 * T * N + 2 * T * NS * HE  # + the MoE's input, gate (mm 1) and shared w3 (mm 3)
A2A = 2 * (2 * T * K * H)  # the dispatch and combine all_to_all_single outputs, T x top-k token-copies each
DENSE = NORM + 2 * T * H + 2 * T * HF + 2 * T * H  # + the FFN's input, w1 (mm 1) and w2 (mm 3) outputs
HEAD = NORM + 2 * T * H + 2 * T * V + 16 * T + 8 * T  # + head input, logits, compiled loss's stats+labels, ids
CAPACITY = 7911 * 2 ** 30 // 100 - 400 * 10 ** 6  # the H100's usable bytes (config/gpus.toml, paper/runs.toml)
JOBS = "paper/runs/torchtitan-dsv3-16b-fsdp8-"


def estimate(capsys, *argv):
    assert main(["estimate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def typed(ep, mbs):
    return ("--model", "deepseek-v2-lite", "--conventions", "torchtitan", "--recompute", "selective", "--dp", "8",
            "--tp", "1", "--pp", "1", "--sp", "1", "--ep", str(ep), "--etp", "1", "--zero", "3", "--mbs", str(mbs),
            "--seq", "4096")


@pytest.mark.parametrize("ep", [1, 8])
def test_each_layer_keeps_what_torchtitans_policy_saves(capsys, ep):
    got = estimate(capsys, *typed(ep, 8))["bytes"]
    layers = {row["kind"]: row["bytes"] for row in got["activations_by_layer"]}
    assert layers == {"dense": MLA + DENSE, "moe": MLA + MOE_EP1 + (A2A if ep > 1 else 0)}
    assert got["activations_outside_layers"] == HEAD


@pytest.mark.parametrize("ep, mbs, fits", [(8, 8, False), (8, 4, True), (1, 8, True)])
def test_the_16b_job_is_judged_as_it_ran_through_the_preset_and_the_job_configs(capsys, ep, mbs, fits):
    """Issue 46: local batch 8 with EP 8 ran out of memory on 8 H100s; EP 8 at batch 4 and EP 1 at batch 8 ran."""
    name = {(8, 8): "ep8-oom", (8, 4): "ep8-lbs4", (1, 8): "ep1-fits"}[ep, mbs]
    by_preset = estimate(capsys, *typed(ep, mbs))["bytes"]["step_total"]
    by_file = estimate(capsys, "--from-torchtitan", JOBS + name + ".toml", "--gpus", "8")["bytes"]["step_total"]
    assert by_preset == by_file
    assert (by_file < CAPACITY) is fits, by_file / 2 ** 30


def test_core_attention_selective_is_unchanged_by_the_switch(capsys):
    plain = estimate(capsys, "--recompute", "selective")["bytes"]
    assert estimate(capsys, "--recompute", "selective", "--selective", "core-attention")["bytes"] == plain
    # what --recompute selective saves, typed beside another policy: refused on one line (review of issue 46)
    assert main(["estimate", "--recompute", "none", "--selective", "torchtitan-op"]) == 2
    err = capsys.readouterr().err
    assert "--selective torchtitan-op" in err and len(err.strip().splitlines()) == 1, err
