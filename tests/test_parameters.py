"""Sec. 1-2: matrices (Table 2), layers (Table 3), stages (Table 4), built from the matrices."""
import pytest
import sympy as sp

from derivations import config as cfg
from derivations.notation import L_d, L_m, N, N_s, d_c, d_cq, d_h, d_hr, e_E, e_H, h, h_E, h_F, n_h, v
from symbolic.numeric import exact


def test_mla_matrices_are_table_2(terms):
    mla = terms["params.mla"]
    shapes = {p.key: sp.Mul(*p.num) for p in mla.parts}
    assert shapes["W_DQ"] == d_cq * h
    assert shapes["W_UQ"] == d_h * n_h * d_cq
    assert shapes["W_QR"] == d_hr * n_h * d_cq
    assert shapes["W_KR"] == d_hr * h
    split = {p.key for p in mla.parts if "tp_split" in p.tags}
    assert split == {"W_UQ", "W_UK", "W_UV", "W_O"}


def test_layer_kinds_are_built_from_modules(terms):
    dense = terms["params.layer.dense"].expr
    moe = terms["params.layer.moe"].expr
    mla, norm = terms["params.mla"].expr, terms["params.norm"].expr
    assert sp.expand(dense - mla - norm - 3 * h * h_F) == 0
    assert sp.expand(moe - mla - norm - N * h - (N + N_s) * 3 * h * h_E) == 0
    assert sp.expand(norm - (2 * h + d_cq + d_c)) == 0


def test_stage_term_composition(terms):
    st = terms["params.stage"].expr
    d, m = terms["params.layer.dense"].expr, terms["params.layer.moe"].expr
    assert sp.expand(st - (L_d * d + L_m * m + e_E * v * h + e_H * v * h)) == 0


@pytest.mark.parametrize("pp", [1, 2, 3, 4, 7, 8, 15, 16, 30, 31, 61])
def test_sum_of_stages_equals_total(v3, pp):
    from derivations.assembly.device import stage_params
    rows, total = stage_params(v3, cfg.Layout(pp=pp))
    assert sum(r[1] for r in rows) == total
    assert len(rows) == pp


def test_checkpoint_rows_are_separate(v3, terms):
    t = terms["params.stage.checkpoint"]
    assert [p.key for p in t.parts] == ["paper", "final_norm", "router_bias"]
    whole = cfg.substitution(v3, None, None, cfg.whole_model(v3))
    assert exact(t.part("final_norm").expr, whole) == v3.h
    assert exact(t.part("router_bias").expr, whole) == 58 * v3.N


def test_models_without_query_compression_use_one_query_matrix():
    from derivations import build
    lite = cfg.PRESETS["deepseek-v2-lite"]
    t = build(lite)
    keys = [p.key for p in t["params.mla"].parts]
    assert "W_Q" in keys and "W_DQ" not in keys
    assert d_cq not in t["params.norm"].expr.free_symbols
