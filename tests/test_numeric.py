"""Lambdified functions equal exact evaluation (property test over random valid layouts)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from derivations import config as cfg
from symbolic import numeric
from derivations.notation import SYMBOLS

V3 = cfg.PRESETS["deepseek-v3"]
IDS = ("static.device.total", "zero.optimizer.sharded", "zero.gradients.sharded", "act.stage", "act.stage.full")


@st.composite
def layouts(draw):
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    ep = draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
    etp = draw(st.sampled_from([1, 2]))
    k = draw(st.integers(1, 8))
    dp = ep * etp * k  # makes DP*TP divisible by EP*ETP
    pp = draw(st.integers(1, 61))
    cp = draw(st.sampled_from([1, 2]))
    lay = cfg.Layout(dp=dp, tp=tp, pp=pp, ep=ep, etp=etp, cp=cp)
    stage = draw(st.integers(0, pp - 1))
    tr = cfg.Training(mbs=draw(st.integers(1, 8)), seq=draw(st.sampled_from([1024, 2048, 4096, 8192])))
    return lay, stage, tr


@settings(max_examples=40, deadline=None)
@given(layouts())
def test_numeric_equals_exact(case):
    from derivations import build
    lay, stage, tr = case
    cfg.validate_layout(V3, lay, tr.seq)
    terms = build(V3)
    subs = cfg.substitution(V3, lay, tr, cfg.stage(V3, lay, stage))
    for tid in IDS:
        ex = numeric.exact(terms[tid], subs)
        nu = numeric.evaluate(terms[tid], subs)
        assert abs(float(nu) - float(ex)) <= 1e-12 * max(1.0, float(ex)), tid
        if ex.denominator == 1 and ex < 2 ** 53:
            assert int(round(float(nu))) == ex, tid


def test_compiled_function_is_cached_and_vectorised():
    from derivations import build
    t = build(V3)["act.stage"]
    args = sorted(numeric._expr(t).free_symbols, key=lambda x: x.name)
    f1 = numeric.compile(t, args)
    f2 = numeric.compile(t, args)
    assert f1 is f2
    base = cfg.substitution(V3, cfg.Layout(), cfg.Training(), cfg.stage(V3, cfg.Layout(), 1))
    cols = [np.full(3, base[a]) if a != SYMBOLS["b"] else np.array([1, 2, 4]) for a in args]
    out = f1(*cols)
    exact1 = numeric.exact(t, base)
    assert list(out) == [float(exact1), float(2 * exact1), float(4 * exact1)]


def test_missing_values_are_a_config_error():
    import pytest
    from derivations import build
    with pytest.raises(cfg.ConfigError, match="no value"):
        numeric.exact(build(V3)["act.stage"], {})
