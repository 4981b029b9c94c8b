"""Routing imbalance as an interval (issue 46 item 8): ``estimate`` under a stated skew (--imbalance F, or the bound
of Megatron-Core's --moe-expert-capacity-factor) shows balanced routing (F = 1) and F.  Expectations are written by
hand from the paper's M_1^E, from the estimate without a skew, or from Megatron-Core's own router and dispatcher
(megatron-core 0.16.1, the trace venv), never from the code under test."""
from __future__ import annotations

import json
import os
import random
from fractions import Fraction
from pathlib import Path

import pytest

from clirun import run  # tests/clirun.py
from derivations.config.training import capacity_imbalance

ROOT = Path(__file__).resolve().parent.parent
PROXY = ROOT / "paper" / "runs" / "mcore-proxy-h1024-selective-recompute.yaml"


def _json(capsys, *argv):
    code, out, err = run(capsys, "estimate", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_interval_by_hand(capsys):
    """The paper's stage 1 (4 MoE layers, EP 8): M_1^E's routed part (N/EP)(3 E_token h + 8 E_token h_E) with
    E_token = F b s N_r / N grows from F = 1 to 1.5 by 4 x 32 x (3 x 7168 + 8 x 2048) x 64 = 310,378,496 bytes."""
    r = _json(capsys, "--imbalance", "1.5")["routing"]
    assert r["F"] == [1, 1.5] and r["judged_at"] == 1.5
    assert r["activations"][1] - r["activations"][0] == 4 * 32 * (3 * 7168 + 8 * 2048) * 64 == 310_378_496
    assert r["total"][1] - r["total"][0] == 310_378_496


def test_the_ends_are_the_estimates_at_1_and_at_F(capsys):
    run_ = ("--gpus", "1024", "--memory", "device", "--hbm", "80GiB")
    plain, skewed = _json(capsys, *run_), _json(capsys, *run_, "--imbalance", "2")
    assert "routing" not in plain
    r = skewed["routing"]
    for key in ("activations", "total", "step_total"):
        assert r[key] == [plain["bytes"][key], skewed["bytes"][key]]
    for key in ("reserved", "device"):
        assert r[key] == [plain["memory"][key], skewed["memory"][key]]
    assert r["buffers"][0] == r["buffers"][1] == sum(b["bytes"] for b in plain["memory"]["buffers"])
    assert r["fits"] == {"memory device": [plain["memory"]["fits"], skewed["memory"]["fits"]]}


def test_a_layout_near_capacity_flips_its_verdict(capsys):
    """At 1024 GPUs (the paper's layout, flash attention) the device bytes are 88.81 GiB at F = 1 and 89.13 at 1.5;
    a capacity of 89.3 GiB less the CUDA context (0.37 GiB) holds the first only."""
    argv = ("estimate", "--gpus", "1024", "--memory", "device", "--hbm", "89.3GiB", "--imbalance", "1.5")
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "  memory device           fits  DOES NOT FIT" in out
    assert "  memory device: fits at balanced routing, does not fit at F = 1.5" in out
    assert "the verdicts above are judged at the upper end, F = 1.5" in out
    assert "DOES NOT FIT" in out.split("routing skew")[0]  # the verdict above the interval: at F = 1.5


def test_a_capacity_factor_from_the_cli_and_the_launch_file(capsys, tmp_path):
    """The proxy run: b s / (SP CP) = 4 x 4096 / 2 = 8192 tokens, top-4 of 32 experts: 1024 per expert; capacity
    factor 1.1 keeps ceil(1126.4) = 1127, F = 1127/1024; padded, F is exact (one end)."""
    lines = PROXY.read_text().splitlines()
    at = lines.index("MODEL_ARGS:") + 1
    path = tmp_path / "model_config.yaml"
    add = ["  --moe-expert-capacity-factor: 1.1", "  --moe-token-drop-policy: position"]
    path.write_text("\n".join(lines[:at] + add + lines[at:]) + "\n")
    r = _json(capsys, "--from-megatron", str(path), "--gpus", "8")["routing"]
    assert r["F"] == [1, 1127 / 1024] and "drop" not in r["skew"]
    path.write_text("\n".join(lines[:at] + add + ["  --moe-pad-expert-input-to-capacity: true"] + lines[at:]) + "\n")
    r = _json(capsys, "--from-megatron", str(path), "--gpus", "8")["routing"]
    assert r["F"] == [1127 / 1024] and "padded" in r["skew"]
    code, out, err = run(capsys, "estimate", "--from-megatron", str(path), "--gpus", "8", "--gpu", "h100")
    assert code == 0 and "worst EP rank's routed tokens at F = 1.10059" in out, err
    typed = _json(capsys, "--capacity-factor", "1.25")["routing"]  # the paper's: 2048 tokens, 64 per expert, 80 kept
    assert typed["F"] == [1, 1.25]
    for argv, what in ((("--pad-to-capacity",), "give --capacity-factor"),
                       (("--capacity-factor", "1.25", "--imbalance", "2"), "give one"),
                       (("--capacity-factor", "0"), "capacity factor"),
                       (("--capacity-factor", "1", "--seq", "1", "--tp", "2"), "must divide")):
        code, _, err = run(capsys, "estimate", *argv)
        assert code == 2 and what in err and len(err.strip().splitlines()) == 1, err


def test_a_capacity_below_balanced_routing_says_it_is_counted_at_1(capsys):
    """The paper's 2048 tokens, 64 per expert: capacity factor 0.5 keeps 32, each EP rank's 32 experts 1024 of the
    2048 x 8 / 8 balanced copies, F = 1/2, counted (and said) at F = 1, padded or not."""
    for pad in ((), ("--pad-to-capacity",)):
        out = _json(capsys, "--capacity-factor", "0.5", *pad)
        assert "routing" not in out
        assert "capacity factor 0.5 bounds F at 1/2 < 1: counted at balanced routing F = 1" in out["assumptions"]
    code, out, err = run(capsys, "estimate", "--help-all")
    assert code == 0 and "below 1: counted at F = 1" in " ".join(out.split()), err


def test_all_stages_says_it_shows_the_upper_end_only(capsys):
    """--all-stages prints no interval: it says every stage is at F, in its text and JSON."""
    said = "routing skew: every stage at its upper end, F = 1.5"
    code, out, err = run(capsys, "estimate", "--imbalance", "1.5", "--all-stages")
    assert code == 0 and said in out, err
    assert any(a.startswith(said) for a in _json(capsys, "--imbalance", "1.5", "--all-stages")["assumptions"])
    assert said not in run(capsys, "estimate", "--all-stages")[1]


def test_sensitivity_says_the_skew_it_applies(capsys):
    """sensitivity's default b s / SP = 4096 / 2 = 2048 tokens, 64 per expert: capacity factor 2 keeps 128, each EP
    rank's 32 experts 4096 of 2048 x 8 / 8 balanced copies, F = 2, as --imbalance 2; said in its header and JSON,
    and nothing said without a skew."""
    for argv in (("--capacity-factor", "2"), ("--imbalance", "2")):
        code, out, err = run(capsys, "sensitivity", *argv)
        assert code == 0 and "b=1 s=4096; imbalance F=2\n" in out, err
        code, out, err = run(capsys, "sensitivity", *argv, "--json")
        assert code == 0 and json.loads(out)["training"]["imbalance"] == 2, err
    code, out, err = run(capsys, "sensitivity", "--json")
    assert code == 0 and "imbalance" not in json.loads(out)["training"], err


def test_a_capacity_factor_too_long_is_refused_for_its_length(capsys):
    """1e-31 written out (33 characters) is in (0, 1e6]: refused for the length, and the message says the limit."""
    code, _, err = run(capsys, "estimate", "--capacity-factor", "0." + "0" * 30 + "1")
    assert code == 2 and "at most 32 characters" in err and len(err.strip().splitlines()) == 1, err


def test_the_launch_files_capacity_flags_are_read_as_megatron_reads_them(capsys, tmp_path):
    """A switch given a value, a list for the one number and padding without a factor (Megatron's argparse and
    TransformerConfig.__post_init__ refuse them) are refused on one line naming the file and the launch flag."""
    lines = PROXY.read_text().splitlines()
    at = lines.index("MODEL_ARGS:") + 1
    path = tmp_path / "model_config.yaml"
    for add, what in ((["  --moe-expert-capacity-factor: 1.1", "  --moe-pad-expert-input-to-capacity: maybe"],
                       "--moe-pad-expert-input-to-capacity 'maybe': a switch takes no value"),
                      (["  --moe-expert-capacity-factor: [1]"], "--moe-expert-capacity-factor takes one value"),
                      (["  --moe-pad-expert-input-to-capacity: true"],
                       "--moe-pad-expert-input-to-capacity without --moe-expert-capacity-factor")):
        path.write_text("\n".join(lines[:at] + add + lines[at:]) + "\n")
        code, _, err = run(capsys, "estimate", "--from-megatron", str(path), "--gpus", "8")
        assert code == 2 and f"{path}: {what}" in err and len(err.strip().splitlines()) == 1, err
        assert "--pad-to-capacity" not in err and "give --capacity-factor" not in err, err


# ------------------------------------------------------------------ against Megatron-Core's own router (trace venv)
def _megatron():
    try:
        import torch
        from megatron.core.transformer.moe import moe_utils
    except ImportError:
        if os.environ.get("MEMSYM_REQUIRE_TRACE"):
            raise
        pytest.skip("megatron-core and torch (the trace venv) not installed")
    return torch, moe_utils


@pytest.mark.parametrize("tokens,experts,topk,factor,ep", [(64, 8, 2, 1.0, 4), (40, 16, 4, 1.1, 4), (10, 8, 2, 1.5, 2),
                                                           (96, 32, 4, 1.25, 8), (7, 8, 1, 0.6, 2), (20, 4, 2, 3.0, 2),
                                                           (30, 8, 4, 2.0, 4), (12, 16, 2, 4.0, 2)])
def test_the_bound_is_megatron_cores(tokens, experts, topk, factor, ep):
    """Each of EP source ranks routes its tokens through Megatron-Core's apply_router_token_dropping: top-k of
    random scores, skewed towards rank 0's experts, and the extreme: each token's top-k on rank 0's experts, dealt
    round-robin.  The most an EP rank's experts receive is F = capacity_imbalance x balanced routing's (sources x
    tokens x topk / EP), reached by the extreme; under pad_to_capacity every rank receives exactly that (drop
    policies probs and position)."""
    torch, mu = _megatron()
    local, balanced = experts // ep, tokens * topk  # ep sources' tokens x topk over ep ranks
    rng = random.Random(tokens * experts + topk)
    for policy in ("probs", "position"):
        for pad in (False, True):
            if pad and mu.get_capacity(tokens * topk, experts, factor) > tokens:
                continue  # Megatron's padded permute takes at most the tokens there are
            f = capacity_imbalance(tokens, experts, topk, factor, ep, pad)
            worst = 0
            for extreme in (False, True):
                received = torch.zeros(experts)
                for _ in range(ep):
                    chosen = [{(i * topk + j) % local for j in range(min(topk, local))} for i in range(tokens)]
                    scores = torch.tensor([[(2 + rng.random() if e in chosen[i] else rng.random()) if extreme else
                                            rng.random() * (3 if e < local else 1) for e in range(experts)]
                                           for i in range(tokens)])
                    top = torch.topk(scores, topk, dim=1).indices
                    routing_map = torch.zeros(tokens, experts, dtype=torch.bool).scatter(1, top, True)
                    probs = torch.softmax(scores, dim=1) * routing_map
                    _, final = mu.apply_router_token_dropping(probs, routing_map, topk, factor, policy, pad)
                    received += final.sum(dim=0)
                per_rank = received.view(ep, local).sum(dim=1)
                if pad:
                    assert all(Fraction(int(x)) == f * balanced for x in per_rank)
                worst = max(worst, int(per_rank.max()))
            assert worst == f * balanced, (policy, pad, worst, f * balanced)
