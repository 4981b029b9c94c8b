"""The generated evaluators (derivations/generated/, read by derivations/evaluate.py) against the sympy
terms they were printed from, evaluated by sympy itself (symbolic.numeric.exact: xreplace and exact
rational arithmetic) at configurations and views drawn at random: every base term of every model
structure, and every activation kind of a view."""
from __future__ import annotations

import random
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from derivations import build, config as cfg, evaluate as ev
from derivations.activations import View, view_terms
from derivations.config.values import named, symbol_keyed
from derivations.notation import expand_derived
from symbolic import numeric

MODELS = [cfg.PRESETS[k] for k in ("deepseek-v3", "deepseek-v2", "deepseek-v2-lite")]
#: Structures the presets do not cover (tied embeddings; V3 without routing bias).
MODELS += [replace(cfg.PRESETS["deepseek-v3"], tie_word_embeddings=True, name=""),
           replace(cfg.PRESETS["deepseek-v2-lite"], topk_method="noaux_tc", name="")]


@st.composite
def configurations(draw):
    model = draw(st.sampled_from(MODELS))
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if model.n_h % t == 0]))
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8, 16) if model.N % e == 0]))
    etp = draw(st.sampled_from([1, 2]))
    dp = ep * etp * draw(st.integers(1, 4))
    pp = draw(st.integers(1, min(16, model.l)))
    cp = draw(st.sampled_from([1, 2]))
    lay = cfg.Layout(dp=dp, tp=tp, pp=pp, ep=ep, etp=etp, cp=cp)
    tr = cfg.Training(mbs=draw(st.integers(1, 6)), seq=draw(st.sampled_from([512, 1024, 4096])),
                      zero=draw(st.integers(0, 3)), imbalance=draw(st.sampled_from([1, Fraction(3, 2)])),
                      schedule="1f1b", microbatches=draw(st.integers(1, 40)))
    stage = draw(st.integers(0, pp - 1))
    return model, lay, tr, stage


@settings(max_examples=25, deadline=None)
@given(configurations())
def test_every_term_equals_sympys(case):
    model, lay, tr, stage = case
    cfg.validate_layout(model, lay, tr.seq)
    comp = cfg.stage(model, lay, stage)
    extra = {"i_s": stage, "n_fl": 3}  # the schedule's symbols (device index, micro-batches in flight)
    values = dict(named(model, lay, tr, comp), **extra)
    subs = {**cfg.substitution(model, lay, tr, comp), **symbol_keyed(extra)}
    terms = build(model)
    gen = ev.Terms(model.structure, ev.derived(values))
    checked = 0
    for tid in terms:
        expr = expand_derived(terms[tid].expr)  # EDP, E_token by their sympy definitions (derivations/notation.py)
        if tid not in gen or not expr.free_symbols <= set(subs):
            continue
        assert Fraction(gen.term(tid)) == numeric.exact(expr, subs), tid
        checked += 1
    assert checked >= 75


def _view(rng):
    switches = {k: rng.choice(s.values) for k, s in cfg.CONVENTION_SWITCHES.items()}
    rc = rng.choice(["none", "full", "selective", "custom"])
    ops = tuple(sorted(rng.sample(sorted(cfg.RECOMPUTE_OPS), rng.randint(1, 3)))) if rc == "custom" else ()
    return View(rc, ops, rng.choice(["eager", "flash"]), rng.random() < 0.3,
                cfg.Conventions(**switches))


@pytest.mark.parametrize("seed", range(12))
def test_every_activation_kind_of_a_random_view_equals_sympys(seed):
    rng = random.Random(seed)
    view = _view(rng)
    model = rng.choice(MODELS)
    lay = cfg.Layout(dp=8, tp=rng.choice([1, 2]), pp=4, ep=8, etp=1, cp=rng.choice([1, 2]))
    tr = cfg.Training(mbs=rng.randint(1, 4), seq=rng.choice([512, 2048]))
    comp = cfg.stage(model, lay, rng.randint(0, 3))
    values = ev.derived(dict(named(model, lay, tr, comp)))
    subs = cfg.substitution(model, lay, tr, comp)
    got = ev.activation_values(view, model.q_lora, values)
    terms = view_terms(view, model.q_lora)
    for kind in ("mla", "moe", "dense", "head"):
        assert Fraction(got[kind]) == numeric.exact(expand_derived(terms[kind].expr), subs), (kind, view)


_JSON = st.recursive(st.integers(-3, 3) | st.sampled_from(["a", "b", "*", "+"]),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from("xyz"), inner,
                                                                                     max_size=3), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(_JSON, min_size=8, max_size=8), st.integers(0, 7))
def test_one_merged_tree_resolves_to_each_structure_s(values, absent):
    """symbolic/codegen.py ``merged`` writes one value for every assignment of three flags (a dict's entry
    absent in some) and derivations/evaluate.py ``resolve`` gives back each assignment's own, order and all (the
    generated files' dicts have sorted keys)."""
    import itertools
    import json

    from symbolic.codegen import merged
    flags = [dict(zip("pqr", bits)) for bits in itertools.product((True, False), repeat=3)]
    cases = [(f, json.loads(json.dumps({"k": v, **({"gone": v} if i != absent else {})}, sort_keys=True)))
             for i, (f, v) in enumerate(zip(flags, values))]
    one = merged(cases)
    for f, want in cases:
        got = ev.resolve(one, f)
        assert got == want and list(got) == list(want)
