"""Sec. 3, Table 6: the split/replicate rules per device."""
import sympy as sp

from derivations import config as cfg
from derivations.notation import EP, ETP, N, N_s, TP, h, h_E
from symbolic.numeric import exact


def test_mla_per_device_splits_exactly_the_tp_split_matrices(terms):
    mla = terms["params.mla"]
    dev = terms["static.layer.mla"].expr
    split = sum(p.expr for p in mla.parts if "tp_split" in p.tags)
    repl = sum(p.expr for p in mla.parts if "replicated" in p.tags)
    assert sp.expand(dev - split / TP - repl) == 0


def test_moe_per_device(terms):
    dev = terms["static.layer.moe"].expr
    assert sp.expand(dev - (N * h + N / (EP * ETP) * 3 * h * h_E + N_s * 3 * h * h_E)) == 0


def test_table6_stage_is_four_moe_layers(v3, terms):
    sub = cfg.substitution(v3, cfg.Layout(), cfg.Training(), cfg.stage(v3, cfg.Layout(), 1))
    per_layer = exact(terms["static.layer.mla"], sub) + exact(terms["static.layer.norm"], sub)
    assert exact(terms["static.device.non_moe"], sub) == 4 * per_layer
    assert exact(terms["static.device.moe"], sub) == 4 * exact(terms["static.layer.moe"], sub)


def test_total_is_non_moe_plus_moe(terms):
    t = terms["static.device.total"].expr
    assert sp.expand(t - terms["static.device.non_moe"].expr - terms["static.device.moe"].expr) == 0


def test_tp1_ep1_device_holds_the_whole_stage_minus_nothing(v3, terms):
    """With no parallelism a device holds the stage's parameters (Table 4) exactly."""
    lay = cfg.Layout(dp=1, tp=1, pp=16, ep=1, etp=1)
    for idx in (0, 1, 15):
        comp = cfg.stage(v3, lay, idx)
        sub = cfg.substitution(v3, lay, cfg.Training(), comp)
        assert exact(terms["static.device.total"], sub) == exact(terms["params.stage"], sub)
