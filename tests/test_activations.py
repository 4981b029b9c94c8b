"""Sec. 5, Tables 9-10: activation terms, checked structurally against the paper's formulas."""
import sympy as sp

from derivations import config as cfg
from derivations import notation as nt
from derivations.notation import (B_a, B_k, CP, EP, ETP, L_d, L_m, N, N_r, N_s, SP, TP, b, d_c, d_cq, d_h, d_hr, d_v,
                               e_H, expand_derived, h, h_E, n_h, s)
from symbolic.numeric import exact

PAPER = {TP: 2, SP: 2, CP: 1, EP: 8, ETP: 1, B_a: 2, B_k: 1, d_v: d_h, **{nt.F: 1}}  # F = 1: balanced routing
R = sp.Rational


def at(expr, extra=None):
    sub = dict(PAPER)
    sub.update(extra or {})
    return sp.expand(expand_derived(expr).xreplace(sub))


def test_mla_layer_is_the_papers_M1A(terms):
    # Sec. 5, TP2@SP2@CP1
    m1a = (4 * b * s * h / 2 + 2 * b * s * (d_cq + d_c) + 4 * b * s * (d_h + d_hr) * n_h / 2 + 2 * b * s * d_h * n_h / 2
           + 5 * b * n_h * s ** 2 / 2 + 2 * b * s * d_h * n_h / 2 + b * s * h / 2)
    assert at(terms["act.mla.layer"].expr) == sp.expand(m1a)
    assert at(terms["act.mla.layer.full"].expr) == sp.expand(2 * b * s * h / 2)


def test_moe_layer_is_the_papers_M1E(terms):
    E = b * s * N_r / N
    m1e = 4 * b * s * h / 2 + 4 * b * s * N + 2 * b * s * N_r + 32 * (3 * E * h + 8 * E * h_E) + 1 * (
        3 * b * s * h + 8 * b * s * h_E)
    assert at(terms["act.moe.layer"].expr, {N: 256, N_s: 1}) == sp.expand(m1e.subs(N, 256))
    assert at(terms["act.moe.layer.full"].expr) == sp.expand(2 * b * s * h / 2 + 2 * b * s * N_r)


def test_table10_rows_are_four_times_the_layer_terms(terms):
    st = terms["act.stage"]
    four = {L_m: 4, L_d: 0, e_H: 0}
    assert at(st.part("mla").expr, four) == at(4 * terms["act.mla.layer"].expr)
    assert at(st.part("moe").expr, four) == at(4 * terms["act.moe.layer"].expr)
    # Table 10 printed rows (Sec. 5), with N/EP = 32 substituted as the paper does
    mla10 = (10 * b * s * h + 8 * b * s * (d_cq + d_c) + 16 * b * s * d_h * n_h + 8 * b * s * d_hr * n_h
             + 10 * b * n_h * s ** 2)
    moe10 = (20 * b * s * h + 16 * b * s * N + 8 * b * s * N_r + 4 * b * s * (N_r / N) * (96 * h + 256 * h_E)
             + 32 * b * s * h_E)
    assert at(st.part("mla").expr, four) == sp.expand(mla10)
    assert at(st.part("moe").expr, {**four, N: 256, N_s: 1}) == sp.expand(moe10.subs(N, 256))
    full = terms["act.stage.full"]
    assert at(full.expr, four) == sp.expand(8 * b * s * h + 8 * b * s * N_r)


def test_activations_are_linear_in_b_and_at_most_quadratic_in_s(terms):
    for tid in ("act.stage", "act.stage.full", "act.layer"):
        e = terms[tid].base_expr
        assert sp.degree(sp.expand(e), b) == 1
        assert sp.degree(sp.expand(e), s) <= 2
    assert sp.degree(sp.expand(terms["act.stage.full"].base_expr), s) == 1


def test_full_recompute_keeps_only_layer_inputs_and_routing(terms):
    keys = [p.key for p in terms["act.moe.layer.full"].parts]
    assert keys == ["norm_in", "routing"]
    assert [p.key for p in terms["act.mla.layer.full"].parts] == ["norm_in"]


def test_stage0_and_last_stage_include_dense_and_head_extensions(v3, terms):
    lay, tr = cfg.Layout(), cfg.Training()
    s0 = cfg.substitution(v3, lay, tr, cfg.stage(v3, lay, 0))
    st = terms["act.stage"]
    assert exact(st.part("dense").expr, s0) == 3 * exact(terms["act.dense.layer"], s0)
    s15 = cfg.substitution(v3, lay, tr, cfg.stage(v3, lay, 15))
    assert exact(st.part("head").expr, s15) == exact(terms["act.head"], s15) > 0
    assert exact(st.part("head").expr, s0) == 0
