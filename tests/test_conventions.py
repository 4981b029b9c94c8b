"""Other sources reproduced exactly under their own assumptions (issue 8)."""
import pytest

from symbolic import config as cfg
from symbolic.notation import D
from symbolic.numeric import exact

V3 = cfg.PRESETS["deepseek-v3"]


@pytest.fixture(scope="module")
def terms():
    from derivations import build
    return build(V3)


def test_megatron_most_loaded_shard(terms):
    # Megatron-LM theoretical_memory_usage.py, DeepSeek-v3 with its MTP layer, DP32 TP2 PP16 EP8 (issue 8)
    tr = cfg.Training(zero=1).with_bytes(B_1=4, B_2=4)
    subs = cfg.substitution(V3, cfg.Layout(), tr, cfg.whole_model(V3))
    subs[D] = 1
    assert exact(terms["conv.megatron.params"], subs) == 7579073152
    states = sum(exact(terms[f"conv.megatron.{c}"], subs)
                 for c in ("weights.replicated", "gradients.replicated", "optimizer.sharded"))
    assert states == 55649283312
    # beta(d) = 6 + 12/d: the distributed optimizer is ZeRO-1 with FP32 moments
    p = terms["conv.megatron.params"]
    n = exact(p.part("tp_split").expr, subs) + exact(p.part("replicated").expr, subs)
    e = exact(p.part("experts").expr, subs)
    from fractions import Fraction
    assert states == n * (6 + Fraction(12, 32)) + e * (6 + Fraction(12, 8))


def test_modelzoo_layer_activations(terms):
    subs = cfg.substitution(V3, cfg.Layout(), cfg.Training(), cfg.stage(V3, cfg.Layout(), 1))
    assert exact(terms["conv.modelzoo.layer"], subs) == 1203765248
    assert exact(terms["conv.modelzoo.layer.full"], subs) == 29360128
