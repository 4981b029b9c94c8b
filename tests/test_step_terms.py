"""The peak over the whole step (derivations/assembly/step_terms.py): the presets' predicted step peak against
the peaks torch's own allocator counters measured over a real forward and backward (paper/traces/*-step.toml,
memsym/trace/step.py), and the paper view's rebuilt layer against the per-layer terms it is made of."""
from __future__ import annotations

import tomllib
import types
from pathlib import Path

import pytest

from derivations import config as cfg
from derivations.assembly import device

ROOT = Path(__file__).resolve().parents[1]
STEP_RECORDS = sorted((ROOT / "paper" / "traces").glob("*-step.toml"))

#: Step records no closed form predicts, and why (paper/traces/STEP.md says the same).
UNEXPLAINED = {}


def _predicted(rec):
    """(end-of-forward activations, step excess, its moment) of the preset at a record's settings, as the
    trace comparison builds the estimate (memsym/trace/compare.py ``_estimate``: one device, the preset's
    conventions, the cross-entropy backward's transient left out: the moments replace it)."""
    from memsym.trace.compare import _estimate
    from memsym.trace.records import config_path, settings_of
    st = settings_of(rec)
    # the router's counts the profiled step ran with (the expert loop's moment reads them; none: the bound)
    args = types.SimpleNamespace(model=config_path(rec), framework=rec["framework"],
                                 expert_tokens=rec["measured"]["step"].get("expert_tokens"), **st)
    est = _estimate(args, rec["framework"])
    b = est.to_json()["bytes"]
    end = sum(x["bytes"] for x in b["activations_by_layer"]) + b["activations_outside_layers"]
    return end, est.bytes["step"], est.term_ids["step"]


def test_there_are_step_records_of_every_policy_and_framework():
    seen = set()
    for path in STEP_RECORDS:
        rec = tomllib.loads(path.read_text())
        seen.add((rec["framework"], rec["settings"]["recompute"], rec["settings"]["mbs"]))
    for fw, policies in (("transformers", ("none", "full")), ("mcore", ("none", "full", "selective"))):
        for pol in policies:
            assert {(fw, pol, 1), (fw, pol, 2)} <= seen, (fw, pol)


@pytest.mark.parametrize("path", STEP_RECORDS, ids=[p.stem for p in STEP_RECORDS])
def test_the_presets_step_peak_equals_the_measured_one(path):
    rec = tomllib.loads(path.read_text())
    measured = rec["measured"]
    saved = sum(x["bytes"] for x in measured["activations_by_layer"]) + measured["activations_outside_layers"]
    end, step, moment = _predicted(rec)
    assert end == saved  # the end of the forward, per layer and outside, as every record (tests/test_traces.py)
    peak = measured["step"]["peak"]
    if path.stem in UNEXPLAINED:
        assert end + step != peak, f"{path.stem} is now predicted: remove it from UNEXPLAINED"
        assert end + step < peak  # recorded as unexplained: the preset is below, by what STEP.md names
        return
    assert end + step == peak, (path.stem, moment, peak - end - step)
    assert moment.startswith("step." + rec["framework"] + "."), moment


@pytest.mark.parametrize("policy", ["full", "selective"])
@pytest.mark.parametrize("mbs,seq", [(1, 4096), (3, 1000)])
def test_the_paper_views_rebuilt_layer_is_its_layer_without_recomputation(policy, mbs, seq):
    """The paper's view: the step excess of a stage of MoE layers is one MoE layer's activations without
    recomputation less what the policy keeps of it (the per-layer terms the paper's Table 10 checks, read
    from two estimates)."""
    model = cfg.load_model("deepseek-v3")
    layout = cfg.Layout()
    at = lambda r: device.estimate(model, layout, cfg.Training(mbs=mbs, seq=seq, recompute=r), 1)  # noqa: E731
    none, kept = at("none"), at(policy)
    want = none.bytes["activations_per_layer"] - kept.bytes["activations_per_layer"]
    assert kept.bytes["step"] == want
    assert kept.term_ids["step"] == f"step.paper.{'full' if policy == 'full' else 'partial'}.moe_layer"
    assert kept.bytes["step_total"] == kept.bytes["total"] + want
    assert none.bytes["step"] == 0 and none.term_ids["step"] == ""  # no recomputation: the end of the forward


def test_the_issue_example_no_longer_fits():
    """Issue 26: 1F1B, 64 micro-batches, ZeRO 1, full recomputation, b 5 on an H800 said 56.87 GiB, "fits";
    with the rebuilt MoE layer (28.72 GiB at b 5 without recomputation) it is above 80 GiB."""
    from derivations.analyses import budget
    model = cfg.load_model("deepseek-v3")
    tr = cfg.Training(mbs=5, zero=1, recompute="full", schedule="1f1b", microbatches=64)
    v = budget.verdict(model, cfg.Layout(), tr, 80 * 2 ** 30, search_changes=False)
    assert v.peaks["none"] > 80 * 2 ** 30
    est = device.estimate(model, cfg.Layout(), tr)
    assert est.bytes["total"] < 57 * 2 ** 30 < est.bytes["step_total"] == v.peaks["none"]


@pytest.mark.parametrize("ops", ["ffn", "latent", "score", "router", "norm,swiglu"])
def test_no_recomputation_policy_is_judged_above_none(ops):
    """A policy rebuilds at most what it dropped: its step's peak is never above no recomputation's (the
    review: a policy that drops nothing under flash attention was judged not to fit where none fits)."""
    model, layout = cfg.load_model("deepseek-v3"), cfg.Layout()
    for attention in ("eager", "flash"):
        at = lambda r, o=(): device.estimate(model, layout, cfg.Training(recompute=r, recompute_ops=o,  # noqa: E731
                                                                         attention=attention), 1)
        none, custom = at("none"), at("custom", tuple(ops.split(",")))
        assert custom.bytes["step_total"] <= none.bytes["step_total"], (ops, attention)


def test_a_dualpipe_device_judges_the_backward_of_both_its_stages():
    """DualPipe: devices i and PP-1-i hold the same two stages; the step's moments of either stage count on
    both (the review: the head's backward was missing on device 0 under --conventions transformers)."""
    from derivations.config.switches import with_preset, with_switch
    model, layout = cfg.load_model("deepseek-v3"), cfg.Layout(pp=4)
    tr = with_preset(cfg.Training(seq=256, schedule="dualpipe", microbatches=16), "transformers")
    tr = with_switch(tr, "experts", "grouped")  # the head binds (the loop experts' zero gradient would, every stage)
    first, last = device.estimate(model, layout, tr, 0), device.estimate(model, layout, tr, 3)
    assert first.bytes["step"] == last.bytes["step"] > 0
    assert first.term_ids["step"] == last.term_ids["step"] == "step.transformers.none.head"


def test_context_parallelism_does_not_grow_the_framework_moments():
    """A CP rank holds its s / CP tokens: the step excess falls with CP (the review: it grew)."""
    from derivations.config.switches import with_preset
    model = cfg.load_model(str(ROOT / "tests" / "data" / "variants" / "small.json"))
    steps = []
    for cp in (1, 2, 4):
        tr = with_preset(cfg.Training(seq=1024), "mcore")
        est = device.estimate(model, cfg.Layout(dp=1, tp=1, pp=1, ep=1, etp=1, cp=cp), tr, 0)
        steps.append(est.bytes["step"])
    assert steps[0] > steps[1] > steps[2] > 0


@pytest.mark.parametrize("path", [p for p in STEP_RECORDS if "-loop" in p.stem and p.stem.startswith("hf-")],
                         ids=lambda p: p.stem)
def test_without_the_routing_the_loop_moment_is_a_bound(path):
    """``estimate`` does not know a run's routing: the expert loop's moment then reads no token copies at the stage's
    last layer, the bound STEP.md derives for any routing, never below the measured peak."""
    rec = tomllib.loads(path.read_text())
    rec["measured"]["step"].pop("expert_tokens")
    end, step, moment = _predicted(rec)
    assert end + step >= rec["measured"]["step"]["peak"]
    if "-full" in path.stem:
        assert moment == "step.transformers.full.expert_loop"


def test_a_traced_routing_is_read_layer_by_layer():
    from derivations.assembly.step_names import routing
    kinds = ((0, "dense"), (1, "moe"), (2, "dense"), (3, "moe"))
    rows = routing(((1, (0, 5, 0, 7, 2)), (3, (9, 0, 0))), kinds)
    # layer 1: the last two experts used get 2 and 7 copies; two layers after it, one MoE; layer 3 used one expert
    assert rows == [{"j_l": 2, "j_m": 1, "n_a": 2, "n_b": 7}]
    assert routing((), kinds) is None  # not known: every routing symbol reads 0
    # a MoE layer without counts takes the bound at its place
    assert routing(((3, (1, 1)),), kinds) == [{"j_l": 2, "j_m": 1, "n_a": 0, "n_b": 0},
                                              {"j_l": 0, "j_m": 0, "n_a": 1, "n_b": 1}]


def test_one_expert_per_device_has_no_second_expert_to_visit():
    """The expert loop's transient is made from the second expert a device's backward visits: with EP = N a device
    holds one expert and the moment does not occur (the review: it did)."""
    from derivations.config.switches import with_preset
    model = cfg.load_model("deepseek-v3")
    for ep, has in ((256, False), (8, True)):
        tr = with_preset(cfg.Training(seq=256, attention="flash"), "transformers")
        est = device.estimate(model, cfg.Layout(dp=256, tp=1, pp=1, ep=ep, etp=1), tr, 0)
        assert (est.term_ids["step"] == "step.transformers.none.expert_loop") == has, (ep, est.term_ids["step"])


@pytest.mark.parametrize("tokens", [((99, (5,) * 8),), ((0, (64,) * 8),), ((1, (64,) * 7),), ((1, (0,) * 8),),
                                    ((1, (64,) * 8), (1, (64,) * 8)), ((1, (-1,) + (73,) * 7),)])
def test_a_routing_that_is_not_the_models_is_refused(tokens):
    from dataclasses import replace
    from derivations.config.switches import with_preset
    from symbolic.errors import ConfigError
    model = cfg.load_model(str(ROOT / "tests" / "data" / "tiny" / "config.json"))
    tr = replace(with_preset(cfg.Training(mbs=1, seq=256, recompute="full"), "transformers"), expert_tokens=tokens)
    with pytest.raises(ConfigError, match="expert_tokens entry"):
        device.estimate(model, cfg.Layout(dp=1, tp=1, pp=1, ep=1, etp=1), tr)
