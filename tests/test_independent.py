"""memsym's per-device estimate against the independent hand-written formula (tests/independent.py).

First the hand formula is anchored to the paper's printed / re-derived numbers (Tables 3-10; exact values as in
paper/printed.toml), then a property test compares it, exactly and component by component, with
``derivations.device.estimate`` over random valid layouts: TP, EP, ETP, CP > 1, SP on or off,
any PP and stage, ZeRO 0-3, recomputation none or full, micro-batch and sequence length.
"""
from fractions import Fraction
from math import gcd

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import independent as ind
from derivations import config as cfg
from derivations.assembly.device import estimate

V3 = ind.MODELS["deepseek-v3"]
GIB = 2 ** 30
STAGE1 = dict(L_d=0, L_m=4, e_E=0, e_H=0)          # a 4-MoE-layer stage (Tables 6, 8, 10)
PAPER = dict(DP=32, TP=2, SP=2, CP=1, EP=8, ETP=1)  # Table 5 (+ SP = TP, CP = 1, Table 9)


# ------------------------------------------------------------------ the hand formula against the paper
def test_stage_split_is_table_4():
    assert ind.stage_split(61, 16) == [4] * 15 + [1]
    assert ind.stage_composition(V3, 16, 0) == (3, 1, 1, 0)
    assert ind.stage_composition(V3, 16, 7) == (0, 4, 0, 0)
    assert ind.stage_composition(V3, 16, 15) == (0, 1, 0, 1)


@pytest.mark.parametrize("index, want", [(0, 14_184_415_232), (1, 46_029_144_064), (15, 12_433_965_056)])
def test_unsplit_stage_params_are_table_4(index, want):
    """With TP = EP = ETP = 1 a device holds its whole stage (exact, as in paper/printed.toml)."""
    L_d, L_m, e_E, e_H = ind.stage_composition(V3, 16, index)
    P_n, P_m = ind.params(V3, TP=1, EP=1, ETP=1, L_d=L_d, L_m=L_m, e_E=e_E, e_H=e_H)
    assert P_n + P_m == want


def test_device_params_are_table_6():
    P_n, P_m = ind.params(V3, TP=2, EP=8, ETP=1, **STAGE1)
    assert (P_n, P_m) == (429_719_552, 5_820_645_376)


@pytest.mark.parametrize("zero, gib", [(0, "81.495"), (1, "40.448"), (2, "19.924"), (3, "9.662")])
def test_model_states_are_table_8(zero, gib):
    states = ind.model_states(V3, DP=32, TP=2, CP=1, EP=8, ETP=1, zero=zero, **STAGE1)
    assert round(sum(states.values()) / GIB, 3) == Fraction(gib)
    if zero == 3:
        assert states["weights"] == 2 * 741_009_408  # the ZeRO shard P_n/DP + P_m/EDP (exact, as in paper/printed.toml)


def test_activations_are_table_10():
    none = ind.activations(V3, TP=2, SP=2, CP=1, EP=8, ETP=1, b=1, s=4096, L_d=0, L_m=4, e_H=0)
    assert none == 23_177_723_904 + 1_493_434_368
    full = ind.activations(V3, TP=2, SP=2, CP=1, EP=8, ETP=1, b=1, s=4096, L_d=0, L_m=4, e_H=0, recompute="full")
    assert full == 8 * 4096 * 7168 + 8 * 4096 * 8 == 235_143_168   # 8bsh + 8bsN_r
    # Table 10 is linear in b apart from nothing: b = 2 doubles every term
    assert ind.activations(V3, TP=2, SP=2, CP=1, EP=8, ETP=1, b=2, s=4096, L_d=0, L_m=4, e_H=0) == 2 * none


def test_cp_halves_the_activations_and_keeps_the_replica_counts():
    """CP = 2 at half the DP: each device holds s/2 of the sequence; ZeRO shards are unchanged."""
    one = ind.per_device(V3, b=1, s=4096, zero=1, **STAGE1, **PAPER)
    two = ind.per_device(V3, b=1, s=4096, zero=1, **STAGE1, **dict(PAPER, DP=16, CP=2))
    assert two["activations"] * 2 == one["activations"]
    assert two["optimizer"] == one["optimizer"] == 8 * 741_009_408


# ------------------------------------------------------------------ property test: memsym against the hand formula
def _divisors(n, cap):
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


@st.composite
def configurations(draw):
    name = draw(st.sampled_from(sorted(ind.MODELS)))
    m = ind.MODELS[name]
    tp = draw(st.sampled_from([t for t in _divisors(m["n_h"], 16) if m["h_F"] % t == 0]))
    ep = draw(st.sampled_from(_divisors(m["N"], 64)))
    etp = draw(st.sampled_from(_divisors(m["h_E"], 8)))
    cp = draw(st.sampled_from([1, 2, 4, 8]))
    unit = ep * etp // gcd(ep * etp, tp * cp)      # DP must make DP TP CP divisible by EP ETP
    dp = unit * draw(st.integers(1, 4))
    pp = draw(st.one_of(st.integers(1, 20), st.just(m["l"])))
    stage = draw(st.integers(0, pp - 1))
    sp_on = draw(st.booleans())
    SP = tp if sp_on else 1
    seq = SP * cp * draw(st.integers(1, 1024))
    return dict(name=name, dp=dp, tp=tp, pp=pp, ep=ep, etp=etp, cp=cp, sp=None if sp_on else 1, stage=stage,
                mbs=draw(st.integers(1, 8)), seq=seq, zero=draw(st.integers(0, 3)),
                recompute=draw(st.sampled_from(["none", "full"])))


def _check(c):
    m = ind.MODELS[c["name"]]
    layout = cfg.Layout(dp=c["dp"], tp=c["tp"], pp=c["pp"], ep=c["ep"], etp=c["etp"], cp=c["cp"], sp=c["sp"])
    training = cfg.Training(mbs=c["mbs"], seq=c["seq"], zero=c["zero"], recompute=c["recompute"])
    est = estimate(cfg.PRESETS[c["name"]], layout, training, c["stage"])
    L_d, L_m, e_E, e_H = ind.stage_composition(m, c["pp"], c["stage"])
    assert (est.stage.dense, est.stage.moe, int(est.stage.embedding), int(est.stage.head)) == (L_d, L_m, e_E, e_H)
    P_n, P_m = ind.params(m, TP=c["tp"], EP=c["ep"], ETP=c["etp"], L_d=L_d, L_m=L_m, e_E=e_E, e_H=e_H)
    assert (est.params["non_moe"], est.params["moe"]) == (P_n, P_m)
    want = ind.per_device(m, DP=c["dp"], TP=c["tp"], SP=layout.SP, CP=c["cp"], EP=c["ep"], ETP=c["etp"],
                          b=c["mbs"], s=c["seq"], L_d=L_d, L_m=L_m, e_E=e_E, e_H=e_H, zero=c["zero"],
                          recompute=c["recompute"])
    got = {k: est.bytes[k] for k in want}
    assert got == want, c


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(configurations())
@example(dict(name="deepseek-v3", dp=32, tp=2, pp=16, ep=8, etp=1, cp=1, sp=None, stage=1, mbs=1, seq=4096,
              zero=0, recompute="none"))                                    # the paper's Tables 6, 8, 10
@example(dict(name="deepseek-v3", dp=16, tp=2, pp=16, ep=8, etp=1, cp=2, sp=None, stage=1, mbs=2, seq=8192,
              zero=1, recompute="none"))                                    # CP = 2: EDP = DP TP CP/(EP ETP)
@example(dict(name="deepseek-v3", dp=4, tp=2, pp=16, ep=16, etp=1, cp=4, sp=None, stage=0, mbs=1, seq=4096,
              zero=3, recompute="full"))                                    # EP spans DP x TP x CP
@example(dict(name="deepseek-v3", dp=1, tp=8, pp=61, ep=8, etp=2, cp=8, sp=1, stage=60, mbs=3, seq=640,
              zero=2, recompute="none"))                                    # the head stage, SP off, ETP 2
@example(dict(name="deepseek-v2", dp=5, tp=4, pp=7, ep=5, etp=2, cp=2, sp=None, stage=0, mbs=1, seq=1024,
              zero=3, recompute="none"))                                    # v2: dense layer 0, N = 160
def test_estimate_equals_the_independent_formula(c):
    _check(c)
