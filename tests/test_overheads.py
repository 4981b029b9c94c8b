"""Sec. 6 overheads: fragmentation adds 5% to 30% of the allocated memory and
communication buffers take 0.8 to 2 GB (GiB) per device; the peak is allocated + fragmentation
+ buffers at either end.

Every expected number here is hand arithmetic on the paper's printed/re-derived totals
(Secs. 3 and 5; exact values as in paper/printed.toml), not a value taken from the code under test.
"""
import json
from fractions import Fraction

import pytest

from derivations import config as cfg
from derivations.assembly.device import estimate
from memsym.cli import main

GIB = 2 ** 30
# The paper's ranges (Sec. 6), written out.
LOW = {"f_frag": Fraction(5, 100), "buffers": Fraction(8, 10) * GIB}
HIGH = {"f_frag": Fraction(30, 100), "buffers": 2 * GIB}

# Allocated bytes on one device of stage 1 at the reference layout (DP32 TP2 PP16 EP8), b = 1,
# s = 4096, by hand from the paper's formulas:
PARAMS = 6_250_364_928              # Table 6 params/device
SHARD = 741_009_408                 # P_n/DP + P_m/EDP (exact, as in paper/printed.toml)
ACT_NONE = 23_177_723_904 + 1_493_434_368   # Table 10, MLA + MoE, AC none, b = 1 (exact, as in paper/printed.toml)
ACT_FULL = 8 * 4096 * 7168 + 8 * 4096 * 8   # Table 10, AC full: 8bsh + 8bsN_r = 235,143,168
ALLOCATED = {
    # ZeRO none: 2 + 4 + 8 bytes per parameter, all replicated (Table 8 row "none")
    (0, "none"): 14 * PARAMS + ACT_NONE,                  # 112,176,267,264
    # ZeRO os: weights and gradients replicated, optimizer sharded (Table 8 row "os")
    (1, "none"): 6 * PARAMS + 8 * SHARD + ACT_NONE,
    # ZeRO os+g+params: everything sharded (Table 8 last row, 9.662 GiB)
    (3, "full"): 14 * SHARD + ACT_FULL,                   # 10,609,274,880
}


def test_the_hand_totals():
    """The allocations above, restated as paper/printed.toml pins them (so a typo here shows)."""
    assert ALLOCATED[(0, "none")] == 112_176_267_264
    assert ACT_FULL == 235_143_168
    assert ALLOCATED[(3, "full")] == 10_609_274_880
    assert round(Fraction(14 * SHARD, GIB), 3) == Fraction("9.662")     # Table 8, os+g+params
    assert round(Fraction(14 * PARAMS, GIB), 3) == Fraction("81.495")   # Table 8, none (exact)


@pytest.mark.parametrize("zero, recompute", sorted(ALLOCATED))
def test_overheads_at_both_ends_of_the_paper_ranges(v3, zero, recompute):
    est = estimate(v3, cfg.Layout(), cfg.Training(zero=zero, recompute=recompute), 1)
    alloc = ALLOCATED[(zero, recompute)]
    assert est.bytes["total"] == alloc
    for end, r in (("low", LOW), ("high", HIGH)):
        o = est.overheads[end]
        assert o["f_frag"] == r["f_frag"]
        assert o["fragmentation"] == alloc * r["f_frag"]
        assert o["buffers"] == r["buffers"]
        assert o["peak"] == alloc + alloc * r["f_frag"] + r["buffers"]


def test_overheads_at_the_papers_layout_written_out(v3):
    """ZeRO none, no recomputation, b = 1: the numbers spelled out to the byte."""
    o = estimate(v3, cfg.Layout(), cfg.Training(), 1).overheads
    # 112,176,267,264 / 20 = 5,608,813,363.2; 0.8 GiB = 858,993,459.2
    assert o["low"]["fragmentation"] == Fraction(56_088_133_632, 10)
    assert o["low"]["buffers"] == Fraction(8_589_934_592, 10)
    assert o["low"]["peak"] == Fraction(1_186_440_740_864, 10)   # 112,176,267,264 + both
    # 3 x 112,176,267,264 / 10 = 33,652,880,179.2; 2 GiB = 2,147,483,648
    assert o["high"]["fragmentation"] == Fraction(336_528_801_792, 10)
    assert o["high"]["buffers"] == 2_147_483_648
    assert o["high"]["peak"] == Fraction(1_479_766_310_912, 10)


def test_estimate_json_reports_the_overheads(capsys):
    assert main(["estimate", "--json"]) == 0
    o = json.loads(capsys.readouterr().out)["overheads"]
    alloc = ALLOCATED[(0, "none")]
    for end, r in (("low", LOW), ("high", HIGH)):
        want = {"f_frag": r["f_frag"], "fragmentation": alloc * r["f_frag"], "buffers": r["buffers"],
                "peak": alloc * (1 + r["f_frag"]) + r["buffers"],
                # no recomputation, the paper's view: the step's peak is the end of the forward
                "step_peak": alloc * (1 + r["f_frag"]) + r["buffers"]}
        assert set(o[end]) == set(want)
        for k, v in want.items():
            # JSON numbers: integers exactly, the tenths as the nearest float
            assert o[end][k] == (int(v) if v.denominator == 1 else float(v)), (end, k)


def test_estimate_text_prints_the_peaks(capsys):
    assert main(["estimate"]) == 0
    out = capsys.readouterr().out
    # 118,644,074,086.4 / 2^30 = 110.496 GiB; 147,976,631,091.2 / 2^30 = 137.814 GiB
    assert "peak 110.50 GiB" in out and "peak 137.81 GiB" in out
    assert "+5.22 GiB" in out and "+31.34 GiB" in out  # 5,608,813,363.2 and 33,652,880,179.2 bytes


def test_the_sec6_peak_formula_and_its_ends():
    from derivations.assembly import overheads as totals
    from derivations.notation import M_buf, f_frag
    assert totals.overhead_values("low") == {f_frag: Fraction(1, 20), M_buf: Fraction(8_589_934_592, 10)}
    assert totals.overhead_values("high") == {f_frag: Fraction(3, 10), M_buf: 2_147_483_648}
    assert totals.overhead_values("none") == {f_frag: 0, M_buf: 0}
    alloc = ALLOCATED[(0, "none")]
    assert totals.peak(alloc, Fraction(3, 10), 2 * GIB) == Fraction(1_479_766_310_912, 10)
    got = totals.at_ends(alloc)["low"]
    assert got == {"f_frag": Fraction(1, 20), "fragmentation": Fraction(56_088_133_632, 10),
                   "buffers": Fraction(8_589_934_592, 10), "peak": Fraction(1_186_440_740_864, 10)}
