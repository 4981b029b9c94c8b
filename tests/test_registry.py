"""The term registry is immutable: configurations live in overlays, never in the cached base."""
import pytest

from derivations import build, configured, variant
from derivations import config as cfg
from derivations.assembly.conventions import with_preset
from derivations.assembly.device import estimate
from symbolic.term import Part, Term

V3 = cfg.PRESETS["deepseek-v3"]


def snapshot(reg):
    return [(tid, t.expr) for tid, t in reg.items()]


def test_build_is_frozen_and_unchanged_by_estimates_under_three_conventions_and_a_report(tmp_path):
    before = snapshot(build(V3))
    n = len(before)
    for preset in ("paper", "megatron", "modelzoo"):
        estimate(V3, cfg.Layout(), with_preset(cfg.Training(), preset), 1)
    estimate(V3, cfg.Layout(), cfg.Training(recompute="custom", recompute_ops=("norm",), attention="flash"), 1)
    from memsym import report
    report.build_report(report.Context.create(model=V3, training=cfg.Training(recompute="custom",
                                                                             recompute_ops=("mla_up",))))
    assert snapshot(build(V3)) == before and len(build(V3)) == n
    with pytest.raises(TypeError, match="frozen"):
        build(V3).add(Term("x.y", "m", "bytes", "p", (Part("a", "a", (1,)),)))
    with pytest.raises(TypeError):
        build(V3)["params.mla"] = None
    reg = build(V3)
    with pytest.raises(TypeError):
        reg |= {"x": None}
    with pytest.raises(TypeError):
        reg._frozen = False
    assert len(build(V3)) == n


def test_overlay_holds_exactly_the_configurations_terms():
    t = cfg.Training(recompute="custom", recompute_ops=("norm", "swiglu"), attention="flash", fp8=True)
    reg = configured(V3, t)
    assert reg.frozen and set(build(V3)) <= set(reg)
    assert variant(V3, t).act["stage"] in reg and variant(V3, t).act["stage"] not in build(V3)
    mz = configured(V3, cfg.Training(conventions=cfg.Conventions(shared_expert="tp")))
    assert "static.device.moe.shared-tp" in mz and "static.device.moe.shared-tp" not in reg
    assert configured(V3, t) is reg  # cached: the same frozen object for the same configuration
