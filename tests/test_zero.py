"""Sec. 4, Tables 7-8: ZeRO sharding of weights, gradients and optimizer states."""
import pytest
import sympy as sp

from derivations.assembly.zero import component_terms
from derivations.notation import B_1, B_2, B_g, B_m, B_w, CP, DP, EDP, expand_derived


@pytest.mark.parametrize("z, sharded", [(0, set()), (1, {"optimizer"}), (2, {"optimizer", "gradients"}),
                                        (3, {"optimizer", "gradients", "weights"})])
def test_component_terms(z, sharded):
    ids = component_terms(z)
    assert {k for k, v in ids.items() if v.endswith(".sharded")} == sharded


def test_sharding_divides_non_moe_by_dp_and_moe_by_edp(terms):
    P_n = terms["static.device.non_moe"].expr
    P_m = terms["static.device.moe"].expr
    for comp, nbytes in (("weights", B_w), ("gradients", B_g), ("optimizer", B_m + B_1 + B_2)):
        rep = terms[f"zero.{comp}.replicated"].expr
        sh = terms[f"zero.{comp}.sharded"].base_expr
        assert sp.expand(rep - nbytes * (P_n + P_m)) == 0
        assert sp.simplify(sh - nbytes * (P_n / (DP * CP) + P_m / expand_derived(EDP))) == 0


def test_fp32_moments_are_one_substitution_away(v3):
    from derivations.assembly.device import estimate
    from derivations import config as cfg
    base = estimate(v3, cfg.Layout(), cfg.Training(), 1)
    fp32 = estimate(v3, cfg.Layout(), cfg.Training().with_bytes(B_1=4, B_2=4), 1)
    assert fp32.bytes["optimizer"] == base.bytes["optimizer"] * 12 / 8


def test_context_parallel_ranks_are_replicas_too(v3):
    """EDP = world/(PP EP ETP) = DP TP CP/(EP ETP); non-MoE states shard over DP CP."""
    from derivations.assembly.device import estimate
    from derivations import config as cfg
    a = estimate(v3, cfg.Layout(dp=32, cp=1), cfg.Training(zero=1), 1)
    b = estimate(v3, cfg.Layout(dp=16, cp=2), cfg.Training(zero=1), 1)
    assert cfg.Layout(dp=16, cp=2).edp == cfg.Layout(dp=32).edp == 8
    assert a.bytes["optimizer"] == b.bytes["optimizer"]  # same replica counts, same shards
    cfg.validate_layout(v3, cfg.Layout(dp=4, tp=2, cp=4, ep=16, pp=16), 4096)  # EP spans DP x TP x CP
