"""Activation variants: recomputation views, flash attention, FP8 caching, CP, imbalance, precision.

Each variant is pinned by hand-written per-tensor formulas (the paper's Sec. 5 lists,
with the documented extensions: CP divides the sequence, ETP an expert's intermediate
size) or by numbers worked out by hand below, never by the terms compared with themselves.
"""
import json
import subprocess
import sys
from fractions import Fraction

import pytest
import sympy as sp

from derivations.activations import View, view_terms
from derivations import config as cfg
from derivations import notation as nt
from memsym.cli import build_parser, main
from symbolic.numeric import exact

SCORE_KEYS = {"softmax", "score_mask", "score_dropout"}

# ------------------------------------------------------------------ the paper's tensor lists, by hand
# Symbols only from the notation; B_a = 2 (BF16), B_k = 1 (masks) in the paper.
b, s, h, h_E, n_h, N, N_r, N_s = nt.b, nt.s, nt.h, nt.h_E, nt.n_h, nt.N, nt.N_r, nt.N_s
d_cq, d_c, d_h, d_hr, d_v = nt.d_cq, nt.d_c, nt.d_h, nt.d_hr, nt.d_v
TP, SP, CP, EP, ETP, B_a, B_k = nt.TP, nt.SP, nt.CP, nt.EP, nt.ETP, nt.B_a, nt.B_k
BS = b * s / CP                                   # tokens of the device's sequence shard
E_TOK = b * s * N_r / (N * CP)                    # E_token at F = 1 (Table 9, / CP)
H_NORM_IN = B_a * BS * h / SP                     # layer (sublayer) input
H_NORM_OUT = B_a * BS * h / SP                    # RMSNorm output (down-projection / router input)
H_LATENT = B_a * BS * (d_cq + d_c)                # c_Q and c_KV, not split
H_QK = 2 * B_a * BS * (d_h + d_hr) * n_h / TP     # q and k with their RoPE parts
H_V = B_a * BS * d_v * n_h / TP
H_SCORES = (2 * B_a + B_k) * b * n_h * s * s / (TP * CP)   # softmax, dropout mask, dropout output
H_ATTN_OUT = B_a * BS * d_v * n_h / TP
H_OUT_MASK = B_k * BS * h / SP
M1A = H_NORM_IN + H_NORM_OUT + H_LATENT + H_QK + H_V + H_SCORES + H_ATTN_OUT + H_OUT_MASK
H_ROUTER = 2 * B_a * BS * N                       # logits and probabilities, not split by SP
H_ROUTING = B_a * BS * N_r
H_ROUTED = N / EP * (B_a * E_TOK * h + B_k * E_TOK * h + 4 * B_a * E_TOK * h_E / ETP)
H_SHARED = N_s * (B_a * BS * h + B_k * BS * h + 4 * B_a * BS * h_E)
M1E = H_NORM_IN + H_NORM_OUT + H_ROUTER + H_ROUTING + H_ROUTED + H_SHARED
M2A = H_NORM_IN
M2E = H_NORM_IN + H_ROUTING


def same(term_or_expr, hand):
    e = term_or_expr.expr if hasattr(term_or_expr, "expr") else term_or_expr
    return sp.expand(nt.expand_derived(e).xreplace({nt.F: 1}) - hand) == 0


def test_hand_lists_are_the_digest_formulas():
    """The lists above, at the paper's bytes and CP = ETP = 1, d_v = d_h, are the printed M_1^A,
    M_1^E, M_2^A, M_2^E with SP = TP = 2 and N/EP = 32 (Sec. 5, copied literally)."""
    paper = {B_a: 2, B_k: 1, CP: 1, ETP: 1, d_v: d_h, TP: 2, SP: 2, EP: N / 32}
    E = b * s * N_r / N
    digest = {
        "M1A": 4 * b * s * h / 2 + 2 * b * s * (d_cq + d_c) + 4 * b * s * (d_h + d_hr) * n_h / 2
        + 2 * b * s * d_h * n_h / 2 + 5 * b * n_h * s ** 2 / 2 + 2 * b * s * d_h * n_h / 2 + b * s * h / 2,
        "M1E": 4 * b * s * h / 2 + 4 * b * s * N + 2 * b * s * N_r + 32 * (3 * E * h + 8 * E * h_E)
        + N_s * (3 * b * s * h + 8 * b * s * h_E),
        "M2A": 2 * b * s * h / 2, "M2E": 2 * b * s * h / 2 + 2 * b * s * N_r}
    for name, hand in (("M1A", M1A), ("M1E", M1E), ("M2A", M2A), ("M2E", M2E)):
        assert sp.expand(hand.subs(paper) - digest[name]) == 0, name
    # Table 10, AC none, 4-layer stage: 10bsh + 8bs(d_cq + d_c) + 16bs d_h n_h + 8bs d_hr n_h + 10 b n_h s^2
    assert sp.expand(4 * M1A.subs(paper) - (10 * b * s * h + 8 * b * s * (d_cq + d_c) + 16 * b * s * d_h * n_h
                                            + 8 * b * s * d_hr * n_h + 10 * b * n_h * s ** 2)) == 0


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def paper_subs(v3, stage=1, training=None):
    lay = cfg.Layout()
    return cfg.substitution(v3, lay, training or cfg.Training(), cfg.stage(v3, lay, stage))


# ------------------------------------------------------------------ recomputation views
def test_paper_terms_are_the_papers_tensor_lists(terms):
    """The registered paper terms and the views View() / View('full') are the hand-written lists."""
    for view, sfx, mla, moe in ((View(), "", M1A, M1E), (View("full"), ".full", M2A, M2E)):
        vt = view_terms(view)
        for kind, tid, hand in (("mla", "act.mla.layer", mla), ("moe", "act.moe.layer", moe)):
            assert vt[kind].id == tid + sfx
            assert same(vt[kind], hand) and same(terms[tid + sfx], hand), (tid, sfx)
        assert vt["stage"].id == "act.stage" + sfx


def test_paper_stage_at_table_10(terms, v3):
    """act.stage at stage 1 (4 MoE layers), b = 1: the exact bytes (as in paper/printed.toml)."""
    sub = paper_subs(v3)
    assert exact(terms["act.stage"], sub) == 23_177_723_904 + 1_493_434_368
    assert exact(terms["act.stage.full"], sub) == 235_143_168


def test_selective_is_none_minus_exactly_the_score_tensors(terms):
    none, sel = terms["act.mla.layer"], terms["act.mla.layer.selective"]
    assert {p.key for p in none.parts} - {p.key for p in sel.parts} == SCORE_KEYS
    assert same(sel, M1A - H_SCORES)
    assert same(sum(none.part(k).expr for k in SCORE_KEYS), H_SCORES)
    # the MoE layer has no score tensor: selective keeps the paper's term (and its id)
    assert view_terms(View("selective"))["moe"].id == "act.moe.layer"
    assert same(view_terms(View("selective"))["moe"], M1E)
    stage = sp.expand(terms["act.stage"].base_expr - terms["act.stage.selective"].base_expr)
    assert same(stage, (nt.L_d + nt.L_m) * H_SCORES)


def test_selective_cli_equals_none_minus_the_10_b_nh_s2_terms(capsys, v3):
    none = run_json(capsys, "estimate", "--stage", "1")["bytes"]["activations"]
    sel = run_json(capsys, "estimate", "--recompute", "selective", "--stage", "1")["bytes"]["activations"]
    b, n_h, s = 1, v3.n_h, 4096
    assert none - sel == 10 * b * n_h * s ** 2  # Table 10's 10 b n_h s^2 (4 layers x 5 b n_h s^2 / TP, TP = 2)
    assert sel == 3196321792  # stage 1 under selective recomputation, b = 1


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
    assert [p.key for p in vt["mla"].parts] == ["norm_in", "latent", "softmax", "score_mask", "score_dropout",
                                                "attn_out", "out_mask"]
    assert same(vt["mla"], M1A - H_NORM_OUT - H_QK - H_V)
    assert [p.key for p in vt["moe"].parts] == ["norm_in", "router", "routing", "routed", "shared"]
    assert same(vt["moe"], M1E - H_NORM_OUT)
    head = vt["head"]
    assert [p.key for p in head.parts] == ["norm_in", "logits", "loss"]  # DeepSeek recomputes every RMSNorm
    # custom:score is selective: the MLA without its scores, the MoE whole
    sc = view_terms(View("custom", ("score",)))
    assert same(sc["mla"], M1A - H_SCORES) and same(sc["moe"], M1E)


def test_custom_swiglu_and_mask_reach_inside_the_expert_rows(terms):
    vt = view_terms(View("custom", ("mask", "swiglu")))["moe"]
    # kept per routed expert: its tokens' input and the gate/up outputs (3 E h + 8 E h_E lose mask and SwiGLU outputs)
    assert same(vt.part("routed").expr, N / EP * (B_a * E_TOK * h + 2 * B_a * E_TOK * h_E / ETP))
    assert same(vt.part("shared").expr, N_s * (B_a * BS * h + 2 * B_a * BS * h_E))
    assert same(vt, M1E - N / EP * (B_k * E_TOK * h + 2 * B_a * E_TOK * h_E / ETP)
                - N_s * (B_k * BS * h + 2 * B_a * BS * h_E))


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
    stats = 4 * b * n_h * s / (TP * CP)            # FP32 log-sum-exp per query row and head
    assert same(terms["act.mla.layer.flash"], M1A - H_SCORES + stats)
    # selective with flash drops the statistics too: the same as selective with eager attention
    assert View("selective", attention="flash").suffix == ".selective"
    assert same(view_terms(View("selective", attention="flash"))["mla"], M1A - H_SCORES)


def test_flash_cli_has_no_s2_dependence(capsys):
    """Doubling s doubles flash activations exactly (no s^2 term); eager grows faster."""
    a = run_json(capsys, "estimate", "--attention", "flash", "--seq", "4096")["bytes"]["activations"]
    b = run_json(capsys, "estimate", "--attention", "flash", "--seq", "8192")["bytes"]["activations"]
    # eager 24,671,158,272 (exact, as in paper/printed.toml) - 4 layers x 5 b n_h s^2 / TP + 4 layers x 4 b n_h s / TP
    assert a == 24_671_158_272 - 4 * 5 * 128 * 4096 ** 2 // 2 + 4 * 4 * 128 * 4096 // 2 == 3_200_516_096
    assert b == 2 * a
    e1 = run_json(capsys, "estimate", "--seq", "4096")["bytes"]["activations"]
    e2 = run_json(capsys, "estimate", "--seq", "8192")["bytes"]["activations"]
    assert e2 > 2 * e1


# ------------------------------------------------------------------ FP8 caching
def test_fp8_changes_only_the_bytes_of_the_named_tensors(terms):
    B_f8, B_o = nt.B_f8, nt.B_o
    vt = view_terms(View(fp8=True))
    # the attention output in E5M6; the experts' inputs and gate/up outputs in FP8
    assert same(vt["mla"], M1A - H_ATTN_OUT + B_o * BS * d_v * n_h / TP)
    assert same(vt["moe"], M1E - (B_a - B_f8) * (N / EP * (E_TOK * h + 2 * E_TOK * h_E / ETP)
                                                  + N_s * (BS * h + 2 * BS * h_E)))
    to_bf16 = {B_f8: B_a, B_o: B_a}
    assert sp.expand(vt["stage"].expr.xreplace(to_bf16) - terms["act.stage"].expr) == 0
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
    sub = paper_subs(v3)
    # the routed-expert row at the paper's setting: E_token = 1 x 4096 x 8 / 256 = 128 tokens,
    # 32 experts x (3 x 128 x 7168 + 8 x 128 x 2048) = 32 x 4,849,664 = 155,189,248 bytes
    routed = 32 * (3 * 128 * 7168 + 8 * 128 * 2048)
    assert routed == 155_189_248
    for F in (Fraction(3, 2), 2):
        t = cfg.Training(imbalance=F)
        bal, unb = exact(terms["act.moe.layer"], sub), exact(terms["act.moe.layer"], paper_subs(v3, training=t))
        assert bal == 1_493_434_368 // 4           # Table 10 MoE, b = 1, per layer (exact, as in paper/printed.toml)
        assert unb - bal == (F - 1) * routed
    # d/dF of the per-layer term is the routed-expert row at F = 1
    assert same(sp.diff(terms["act.moe.layer"].base_expr, nt.F), H_ROUTED)
    with pytest.raises(cfg.ConfigError):
        cfg.validate_training(cfg.Training(imbalance=Fraction(1, 2)))


def test_imbalance_cli(capsys):
    a = run_json(capsys, "estimate")["bytes"]["activations"]
    b = run_json(capsys, "estimate", "--imbalance", "2")["bytes"]["activations"]
    assert a == 24_671_158_272 and b == a + 4 * 155_189_248  # 4 MoE layers, one more routed row each
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
    else:  # B_a 2 -> 4: every BF16 activation doubles, the 1-byte masks (B_k) do not
        # masks of one layer at stage 1, b = 1: b n_h s^2/TP + bsh/SP (MLA) + 32 E_token h + bsh (MoE)
        masks = 128 * 4096 ** 2 // 2 + 4096 * 7168 // 2 + 32 * 128 * 7168 + 4096 * 7168
        layer = (23_177_723_904 + 1_493_434_368) // 4     # exact, as in paper/printed.toml, per layer
        assert base["bytes"][key] == layer
        assert d["bytes"][key] == 2 * (layer - masks) + masks == 11_188_436_992
    assert d["training"]["bytes_per_element"] != base["training"]["bytes_per_element"]


def test_precision_symbols_differentiate(terms):
    assert sp.diff(terms["zero.optimizer.replicated"].expr, nt.B_1) != 0
    assert sp.diff(terms["act.stage.fp8"].base_expr, nt.B_f8) != 0


# ------------------------------------------------------------------ ids and help
def test_estimate_exposes_the_variant_term_ids_and_they_resolve(v3):
    from derivations import build
    from derivations.assembly.device import estimate
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
    # by hand, one layer at stage 1 (b = 1, s = 4096, TP = SP = 2, EP = 8; B_f8 = 1, B_o = 3/2):
    # MLA keeps its input, the latents, the flash statistics, the E5M6 attention output, the mask
    mla = 2 * 4096 * 7168 // 2 + 2 * 4096 * 2048 + 4 * 128 * 4096 // 2 + 3 * 4096 * 128 * 128 // 4 \
        + 4096 * 7168 // 2
    # MoE keeps its input, router tensors, routing, and per expert (E_token = 128 routed, 4096 shared):
    # FP8 input, mask, FP8 gate/up outputs, BF16 SwiGLU outputs = 1 t h + 1 t h + 2 t h_E + 4 t h_E
    expert = lambda t: t * 7168 + t * 7168 + 2 * t * 2048 + 4 * t * 2048
    moe = 2 * 4096 * 7168 // 2 + 4 * 4096 * 256 + 2 * 4096 * 8 + 32 * expert(128) + expert(4096)
    assert (mla, moe) == (112_197_632, 251_723_776)
    assert est.bytes["activations"] == 4 * (mla + moe)
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
