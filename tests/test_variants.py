"""Activation variants (issue 7): recomputation views, flash attention, FP8 caching, CP, imbalance, precision.

Each variant is pinned by its relation to the paper's terms, not by a number pasted from a run.
"""
import json
import subprocess
import sys
from fractions import Fraction

import pytest
import sympy as sp

from derivations.activations import View, mla_tensors, moe_tensors, view_terms
from derivations import config as cfg
from derivations import notation as nt
from memsym.cli import build_parser, main
from symbolic.numeric import exact

SCORE_KEYS = {"softmax", "score_mask", "score_dropout"}


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def paper_subs(v3, stage=1, training=None):
    lay = cfg.Layout()
    return cfg.substitution(v3, lay, training or cfg.Training(), cfg.stage(v3, lay, stage))


# ------------------------------------------------------------------ recomputation views
def test_paper_terms_are_the_paper_view(terms):
    """The registered paper terms are exactly the views View() and View('full')."""
    for view, sfx in ((View(), ""), (View("full"), ".full")):
        vt = view_terms(view)
        for kind, tid in (("mla", "act.mla.layer"), ("moe", "act.moe.layer"), ("stage", "act.stage")):
            assert vt[kind].id == tid + sfx
            assert sp.expand(vt[kind].expr - terms[tid + sfx].expr) == 0


def test_selective_is_none_minus_exactly_the_score_tensors(terms):
    none, sel = terms["act.mla.layer"], terms["act.mla.layer.selective"]
    assert {p.key for p in none.parts} - {p.key for p in sel.parts} == SCORE_KEYS
    scores = sum(none.part(k).expr for k in SCORE_KEYS)
    assert sp.expand(none.expr - sel.expr - scores) == 0
    assert sp.expand(scores - (2 * nt.B_a + nt.B_k) * nt.b * nt.n_h * nt.s ** 2 / (nt.TP * nt.CP)) == 0
    # the MoE layer has no score tensor: selective keeps the paper's term (and its id)
    assert view_terms(View("selective"))["moe"].id == "act.moe.layer"
    stage = sp.expand(terms["act.stage"].base_expr - terms["act.stage.selective"].base_expr)
    assert stage == sp.expand((nt.L_d + nt.L_m) * scores)


def test_selective_cli_equals_none_minus_the_10_b_nh_s2_terms(capsys, v3):
    none = run_json(capsys, "estimate", "--stage", "1")["bytes"]["activations"]
    sel = run_json(capsys, "estimate", "--recompute", "selective", "--stage", "1")["bytes"]["activations"]
    b, n_h, s = 1, v3.n_h, 4096
    assert none - sel == 10 * b * n_h * s ** 2  # Table 10's 10 b n_h s^2 (4 layers x 5 b n_h s^2 / TP, TP = 2)
    assert sel == 3196321792  # the acceptance figure


def test_full_view_keeps_only_checkpoints():
    vt = view_terms(View("full"))
    assert [p.key for p in vt["mla"].parts] == ["norm_in"]
    assert [p.key for p in vt["moe"].parts] == ["norm_in", "routing"]
    assert vt["head"].id == "act.head"  # outside the layers: kept whole, as the paper's act.stage.full does
    # full recomputation ignores the kernel and FP8 caching
    assert View("full", attention="flash", fp8=True).suffix == ".full"


def test_custom_drops_the_named_operators_only(terms):
    view = View("custom", ("norm", "mla_up"))
    vt = view_terms(view)
    assert vt["mla"].id == "act.mla.layer.custom-norm-mla_up"
    assert [p.key for p in vt["mla"].parts] == [p.key for p in terms["act.mla.layer"].parts
                                                if p.key not in ("down_in", "q", "k", "v")]
    assert [p.key for p in vt["moe"].parts] == [p.key for p in terms["act.moe.layer"].parts if p.key != "router_in"]
    head = vt["head"]
    assert [p.key for p in head.parts] == ["norm_in", "logits", "loss"]  # DeepSeek recomputes every RMSNorm
    # custom:score is selective
    assert sp.expand(view_terms(View("custom", ("score",)))["stage"].expr - terms["act.stage.selective"].expr) == 0


def test_custom_swiglu_and_mask_reach_inside_the_expert_rows(terms):
    base = terms["act.moe.layer"]
    vt = view_terms(View("custom", ("mask", "swiglu")))["moe"]
    E, h, h_E = nt.E_token, nt.h, nt.h_E
    routed = sp.expand(base.part("routed").expr - vt.part("routed").expr)
    assert sp.expand(routed - nt.N / nt.EP * (nt.B_k * E * h + 2 * nt.B_a * E * h_E / nt.ETP)) == 0
    shared = sp.expand(base.part("shared").expr - vt.part("shared").expr)
    assert sp.expand(shared - nt.N_s * (nt.B_k * nt.b * nt.s * h + 2 * nt.B_a * nt.b * nt.s * h_E) / nt.CP) == 0


def test_parse_recompute_canonical_and_errors():
    assert cfg.parse_recompute("custom:mla_up,norm") == ("custom", ("norm", "mla_up"))
    assert cfg.parse_recompute("selective") == ("selective", ())
    with pytest.raises(cfg.ConfigError) as e:
        cfg.parse_recompute("custom:norm,bogus")
    assert "bogus" in str(e.value) and all(op in str(e.value) for op in cfg.RECOMPUTE_OPS)
    with pytest.raises(cfg.ConfigError):
        cfg.validate_training(cfg.Training(recompute="custom", recompute_ops=("nope",)))
    with pytest.raises(cfg.ConfigError):
        cfg.validate_training(cfg.Training(recompute="none", recompute_ops=("norm",)))


def test_unknown_operator_exits_2_listing_the_valid_ones():
    p = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--recompute", "custom:norm,foo"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "foo" in p.stderr and "mla_up" in p.stderr and "swiglu" in p.stderr


# ------------------------------------------------------------------ attention kernel
def test_flash_keeps_no_s_squared_term(terms):
    for tid in ("act.mla.layer.flash", "act.layer.flash", "act.stage.flash"):
        e = terms[tid].base_expr
        assert sp.diff(e, nt.s, 2) == 0, tid              # linear in s: no s^2 tensor
        assert sp.diff(e, nt.s) != 0
    assert sp.diff(terms["act.stage"].base_expr, nt.s, 2) != 0  # the paper's eager view has one


def test_flash_replaces_scores_by_fp32_row_statistics(terms):
    none, flash = terms["act.mla.layer"], terms["act.mla.layer.flash"]
    scores = sum(none.part(k).expr for k in SCORE_KEYS)
    stats = 4 * nt.b * nt.n_h * nt.s / (nt.TP * nt.CP)
    assert sp.expand(flash.expr - (none.expr - scores + stats)) == 0
    # selective with flash drops the statistics too: the same term as selective with eager attention
    assert View("selective", attention="flash").suffix == ".selective"
    assert sp.expand(view_terms(View("selective", attention="flash"))["mla"].expr
                     - terms["act.mla.layer.selective"].expr) == 0


def test_flash_cli_has_no_s2_dependence(capsys):
    """Doubling s doubles flash activations exactly (no s^2 term); eager grows faster."""
    a = run_json(capsys, "estimate", "--attention", "flash", "--seq", "4096")["bytes"]["activations"]
    b = run_json(capsys, "estimate", "--attention", "flash", "--seq", "8192")["bytes"]["activations"]
    assert b == 2 * a
    e1 = run_json(capsys, "estimate", "--seq", "4096")["bytes"]["activations"]
    e2 = run_json(capsys, "estimate", "--seq", "8192")["bytes"]["activations"]
    assert e2 > 2 * e1


# ------------------------------------------------------------------ FP8 caching
def test_fp8_changes_only_the_bytes_of_the_named_tensors(terms):
    to_bf16 = {nt.B_f8: nt.B_a, nt.B_o: nt.B_a}
    for kind in ("mla", "moe", "stage"):
        base = terms[{"mla": "act.mla.layer", "moe": "act.moe.layer", "stage": "act.stage"}[kind]]
        fp8 = view_terms(View(fp8=True))[kind]
        assert sp.expand(fp8.expr.xreplace(to_bf16) - base.expr) == 0, kind
    mla = view_terms(View(fp8=True))["mla"]
    assert mla.part("attn_out").num[0] == nt.B_o   # input of the Linear after attention: E5M6
    moe = view_terms(View(fp8=True))["moe"]
    d = sp.expand(terms["act.moe.layer"].part("routed").expr - moe.part("routed").expr)
    E = nt.E_token
    assert sp.expand(d - nt.N / nt.EP * (nt.B_a - nt.B_f8) * (E * nt.h + 2 * E * nt.h_E / nt.ETP)) == 0
    assert nt.B_f8 in terms["act.stage.fp8"].free_symbols and nt.B_o in terms["act.stage.fp8"].free_symbols


def test_fp8_cli_saves_exactly_the_named_bytes(capsys, v3):
    base = run_json(capsys, "estimate")["bytes"]["activations_per_layer"]
    fp8 = run_json(capsys, "estimate", "--fp8-activations")["bytes"]["activations_per_layer"]
    b, s, h, h_E, n_h, d_v = 1, 4096, v3.h, v3.h_E, v3.n_h, v3.d_v
    E = Fraction(b * s * v3.N_r, v3.N)
    attn = Fraction(b * s * d_v * n_h, 2) * (2 - Fraction(3, 2))          # B_a 2 -> B_o 3/2, / TP
    routed = Fraction(v3.N, 8) * (2 - 1) * (E * h + 2 * E * h_E)           # N/EP experts, B_a 2 -> B_f8 1
    shared = v3.N_s * (2 - 1) * (b * s * h + 2 * b * s * h_E)
    assert base - fp8 == attn + routed + shared


# ------------------------------------------------------------------ context parallelism, imbalance
def test_cp_divides_every_activation_tensor(terms, v3):
    for tid in ("act.stage", "act.stage.flash", "act.stage.full"):
        one = exact(terms[tid], {**paper_subs(v3), nt.CP: 1})
        two = exact(terms[tid], {**paper_subs(v3), nt.CP: 2})
        assert two * 2 == one, tid
    for k in SCORE_KEYS:  # scores: s/CP query rows against all s keys, split by TP
        assert set(terms["act.mla.layer"].part(k).den) == {nt.TP, nt.CP}


def test_imbalance_multiplies_the_busiest_ranks_tokens(terms, v3):
    assert nt.expand_derived(nt.E_token) == nt.F * nt.b * nt.s * nt.N_r / (nt.N * nt.CP)
    routed = terms["act.moe.layer"].part("routed")
    sub = paper_subs(v3)
    for F in (Fraction(3, 2), 2):
        t = cfg.Training(imbalance=F)
        bal, unb = exact(terms["act.moe.layer"], sub), exact(terms["act.moe.layer"], paper_subs(v3, training=t))
        assert unb - bal == (F - 1) * exact(routed.expr, sub)
    # d/dF of the per-layer term is the routed-expert row at F = 1
    d = sp.diff(terms["act.moe.layer"].base_expr, nt.F)
    assert sp.expand(d - nt.expand_derived(routed.expr).xreplace({nt.F: 1})) == 0
    with pytest.raises(cfg.ConfigError):
        cfg.validate_training(cfg.Training(imbalance=Fraction(1, 2)))


def test_imbalance_cli(capsys):
    a = run_json(capsys, "estimate")["bytes"]["activations"]
    b = run_json(capsys, "estimate", "--imbalance", "2")["bytes"]["activations"]
    assert b > a
    p = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--imbalance", "0.9"], capture_output=True,
                       text=True)
    assert p.returncode == 2 and "imbalance" in p.stderr and "Traceback" not in p.stderr


# ------------------------------------------------------------------ precision
@pytest.mark.parametrize("opt, key, factor", [
    (["--optimizer-dtype", "fp32"], "optimizer", Fraction(4 + 4 + 4, 4 + 2 + 2)),
    (["--master-dtype", "bf16"], "optimizer", Fraction(2 + 2 + 2, 4 + 2 + 2)),
    (["--grad-dtype", "bf16"], "gradients", Fraction(1, 2)),
    (["--weight-dtype", "fp8"], "weights", Fraction(1, 2)),
    (["--act-dtype", "fp32"], "activations_per_layer", None),
])
def test_precision_options_are_byte_symbols(capsys, opt, key, factor):
    base = run_json(capsys, "estimate")
    d = run_json(capsys, "estimate", *opt)
    if factor is not None:
        assert Fraction(d["bytes"][key]) == factor * base["bytes"][key]
    else:  # B_a 2 -> 4: every BF16 activation doubles, masks (B_k) and FP32 statistics do not
        assert base["bytes"][key] < d["bytes"][key] < 2 * base["bytes"][key]
    assert d["training"]["bytes_per_element"] != base["training"]["bytes_per_element"]


def test_precision_symbols_differentiate(terms):
    assert sp.diff(terms["zero.optimizer.replicated"].expr, nt.B_1) != 0
    assert sp.diff(terms["act.stage.fp8"].base_expr, nt.B_f8) != 0


# ------------------------------------------------------------------ ids and help
def test_estimate_exposes_the_variant_term_ids_and_they_resolve(v3):
    from derivations import build
    from derivations.device import estimate
    t = cfg.Training(recompute="custom", recompute_ops=("norm", "mla_up"), attention="flash", fp8=True)
    est = estimate(v3, cfg.Layout(), t, 1)
    ids = est.term_ids
    assert ids["activations"] == "act.stage.custom-norm-mla_up.flash.fp8"
    assert ids["activations_mla_layer"] == "act.mla.layer.custom-norm-mla_up.flash.fp8"
    from derivations import configured
    reg = configured(v3, t)
    for tid in ids.values():
        assert tid in reg
    assert ids["activations"] not in build(v3)  # the base registry is never written to
    assert exact(reg[ids["activations"]], est.subs) == est.bytes["activations"]


def _help(parser, name):
    sub = parser._subparsers._group_actions[0].choices[name]
    return {o: a.help for a in sub._actions for o in a.option_strings}


def test_every_new_option_has_help():
    helps = _help(build_parser(), "estimate")
    for opt in ("--recompute", "--attention", "--fp8-activations", "--imbalance", "--schedule", "--microbatches",
                "--vpp", "--weight-dtype", "--grad-dtype", "--master-dtype", "--optimizer-dtype", "--act-dtype",
                "--recipe", "--all-stages", "--cp"):
        assert helps.get(opt) and len(helps[opt]) > 20, opt
    assert "selective" in helps["--recompute"] and "custom" in helps["--recompute"]
