"""Sensitivity, finite differences and budget solving, checked against exact evaluation."""
import json
import subprocess
import sys
from dataclasses import replace
from fractions import Fraction

import pytest
import sympy as sp

from derivations import config as cfg
from derivations import notation as nt
from derivations.analyses import sensitivity as S
from memsym.cli import main

V3 = cfg.PRESETS["deepseek-v3"]
GiB = 2 ** 30


def total(layout=None, training=None, stage=1, model=V3):
    from derivations.assembly import device
    # the total at the step's peak (derivations/assembly/step_terms.py), what fit and sensitivity judge
    return device.components(model, layout or cfg.Layout(), training or cfg.Training(), stage)["step_total"]


@pytest.fixture(scope="module")
def paper_s():
    return S.configuration(V3, cfg.Layout(), cfg.Training(), 1, S.parse_symbols("s,b,TP,PP,DP,EP,N_r"))


def by_name(results, name):
    return next(r for r in results[2] if r.name == name)


def test_ds_has_the_attention_score_term(paper_s):
    r = by_name(paper_s, "s")
    d = r.derivatives["total"]
    # 4 layers x 5 b n_h s^2 / TP at TP = 2: 10 b n_h s^2 per stage, derivative 20 b n_h s (largest first)
    assert S.text(d.paper).startswith("20*b*s*n_h")
    assert sp.expand(d.stage).coeff(nt.n_h * nt.s) == 40 * nt.b / (nt.CP * nt.TP)
    top = r.rows[0]
    assert (top.term, top.row) == ("act.mla.layer", "score") and top.multiplicity == 4
    assert top.value == 20 * 128 * 4096 and top.value / d.value > Fraction(9, 10)
    # activations are quadratic in s: the central difference is the derivative, exactly
    # (step 2: with SP = 2 the sequence must stay even)
    lo, hi = total(training=cfg.Training(seq=4094)), total(training=cfg.Training(seq=4098))
    assert d.value == (hi - lo) / 4
    assert d.elasticity == pytest.approx(float(4096 * d.value / total()))


def test_db_is_the_activation_per_sample(paper_s):
    d = by_name(paper_s, "b").derivatives
    assert d["total"].value == total(training=cfg.Training(mbs=2)) - total() == d["activations"].value
    assert d["weights"].value == 0 and d["activations"].elasticity == pytest.approx(1.0)
    shares = sum(x.share for k, x in d.items() if k != "total")
    assert shares == pytest.approx(d["total"].elasticity)


def test_tp_finite_difference_and_the_sp_tie(paper_s):
    r = by_name(paper_s, "TP")
    assert "SP = TP" in r.note
    nxt = next(f for f in r.finite if f.direction == "next")
    assert (nxt.before, nxt.after) == (2, 4)
    assert nxt.delta["total"] == total(cfg.Layout(tp=4)) - total()
    prev = next(f for f in r.finite if f.direction == "previous")
    assert prev.after == 1
    # the derivative ties SP to TP: compare with d/dTP of the expression with SP = TP
    from derivations.assembly import totals
    comps = totals.components(V3, cfg.Training())
    e = nt.expand_derived(sum((c.expr for c in comps.values()), 0)).xreplace({nt.SP: nt.TP})
    subs = cfg.substitution(V3, cfg.Layout(), cfg.Training(), cfg.stage(V3, cfg.Layout(), 1))
    from symbolic.numeric import exact
    assert r.derivatives["total"].value == exact(sp.diff(e, nt.TP), subs)


def test_pp_has_no_fake_derivative(paper_s):
    r = by_name(paper_s, "PP")
    assert not r.in_expression and not r.derivatives and "composition" in r.note
    nxt = next(f for f in r.finite if f.direction == "next")
    assert nxt.after == 17 and nxt.delta["total"] == total(cfg.Layout(pp=17)) - total()


def test_dp_next_valid_value_follows_validate_layout(paper_s):
    r = by_name(paper_s, "DP")
    nxt = next(f for f in r.finite if f.direction == "next")
    assert nxt.after == 36  # DP*TP must be divisible by EP*ETP = 8
    for dp in (33, 34, 35):
        with pytest.raises(cfg.ConfigError):
            cfg.validate_layout(V3, cfg.Layout(dp=dp))
    assert r.derivatives["total"].value == 0  # ZeRO 0: nothing is sharded over DP
    assert nxt.delta["total"] == 0


def test_model_dimension_finite_difference(paper_s):
    r = by_name(paper_s, "N_r")
    nxt = next(f for f in r.finite if f.direction == "next")
    assert nxt.delta["total"] == total(model=replace(V3, N_r=9)) - total()
    assert r.derivatives["total"].value == nxt.delta["total"]  # linear in N_r


def test_parse_symbols():
    assert S.parse_symbols("b, s,TP") == [nt.b, nt.s, nt.TP]
    assert S.parse_symbols("d_c'") == [nt.d_cq]
    for bad, needle in (("bogus", "unknown"), ("EDP", "derived"), ("f_frag", "Sec. 6"), ("z", "ZeRO"),
                        ("tp", "did you mean TP"), ("", "no symbol")):
        with pytest.raises(cfg.ConfigError, match=needle):
            S.parse_symbols(bad)


def test_closed_form_and_dominant_form_keep_the_value():
    e = 40 * nt.b * nt.n_h * nt.s / (nt.CP * nt.TP) + 3 * nt.b * nt.h / nt.CP - 7 * nt.h / nt.TP ** 2
    assert sp.expand(S.closed_form(e) - e) == 0
    subs = {nt.b: 1, nt.n_h: 128, nt.s: 4096, nt.CP: 1, nt.TP: 2, nt.h: 7168}
    at = e.xreplace({nt.CP: 1, nt.TP: 2})
    d = S.dominant_form(at, subs)
    assert sp.expand(sp.sympify(S.text(d), locals={x.name: x for x in nt.SYMBOLS.values()}) - at) == 0
    assert S.text(d).startswith("20*b*s*n_h")
    neg = S.dominant_form(-e.xreplace({nt.CP: 1}), subs)  # all negative over TP: shown as -(...)/TP
    assert S.text(neg).startswith("-40*b*s*n_h/TP")
    two = S.dominant_form(-(nt.b + 2 * nt.h) / nt.TP, subs)
    assert S.text(two) == "-(2*h + b)/TP"


# ----------------------------------------------------------------------------- budget solving
#: The Sec. 6 ranges written out here, independently of derivations.overheads: (f_frag, M_buf) at each end.
SEC6 = {"low": (Fraction(5, 100), Fraction(8, 10) * GiB), "high": (Fraction(30, 100), 2 * GiB)}


def peak(t, layout=None, stage=1, end="high"):
    f, buf = SEC6[end]
    return total(layout, t, stage) * (1 + f) + buf


@pytest.mark.parametrize("var, end, layout, training", [
    ("mbs", "low", cfg.Layout(), cfg.Training(zero=1)),
    ("mbs", "high", cfg.Layout(), cfg.Training(zero=3)),
    ("seq", "high", cfg.Layout(), cfg.Training(zero=1)),
    ("seq", "low", cfg.Layout(cp=2), cfg.Training(zero=2, seq=4096)),
    ("seq", "high", cfg.Layout(), cfg.Training(zero=2, recompute="full")),
])
def test_solve_gives_the_largest_value_that_fits(var, end, layout, training):
    from derivations.analyses.fit import solve
    res = solve(V3, layout, training, 80 * GiB, var, None, end)
    n, step = res["answer"], layout.SP * layout.cp if var == "seq" else 1
    assert n >= 1 and n % step == 0
    field = "mbs" if var == "mbs" else "seq"
    at = lambda v: replace(training, **{field: v})
    assert all(peak(at(n), layout, k, end) <= 80 * GiB for k in range(layout.pp))
    assert peak(at(n + step), layout, res["binding"].index, end) > 80 * GiB
    assert res["check"]["next"]["fits"] is False and res["check"]["value"]["fits"] is True
    root = res["root"]
    # quadratic in s: the scores without recomputation, and under full recomputation those of the layer its
    # backward rebuilds (the step's peak, derivations/assembly/step_terms.py)
    assert root.degree == (2 if var == "seq" else 1)
    assert n <= root.root < n + step


def test_solve_structural_root_is_sympys():
    from derivations.analyses.fit import solve
    res = solve(V3, cfg.Layout(), cfg.Training(zero=1), 80 * GiB, "mbs", None, "high")
    struct = res["root"].structural
    names = {x.name for x in struct.free_symbols}
    assert names == {"M_HBM", "M_buf", "f_frag", "S", "A_1"}
    assert res["answer"] == 0  # 1.3 x 63.4 GiB + 2 GiB > 80 GiB: nothing fits at the conservative end
    assert res["least"]["zero"] == 2 and res["least"]["recompute"] == "selective"


def test_fit_cli_acceptance(capsys):
    assert main(["fit", "--hbm", "80GiB", "--solve", "mbs", "--zero", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert isinstance(d["mbs"], int) and d["closed_form"]["structural"] and d["closed_form"]["at_layout"]
    assert d["check"]["next"]["value"] == d["mbs"] + 1 and d["check"]["next"]["fits"] is False
    assert d["fits"] == (d["mbs"] >= 1)
    assert main(["fit", "--hbm", "80GiB", "--solve", "mbs", "--zero", "1", "--overheads", "low", "--json"]) == 0
    low = json.loads(capsys.readouterr().out)
    assert low["mbs"] == 1 and low["fits"] and low["check"]["value"]["fits"]


def test_fit_cli_text_nothing_fits(capsys):
    assert main(["fit", "--hbm", "40GiB", "--zero", "0"]) == 0
    out = capsys.readouterr().out
    assert "nothing fits" in out and "b* =" in out


def test_sensitivity_cli_acceptance(capsys):
    assert main(["sensitivity", "--wrt", "s", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    (e,) = d["sensitivities"]
    tot = e["derivative"]["total"]
    assert tot["paper"].startswith("20*b*s*n_h")
    assert tot["value"] == (total(training=cfg.Training(seq=4098)) - total(training=cfg.Training(seq=4094))) / 4
    assert e["rows"][0]["row"] == "score" and e["rows"][0]["derivative"] == "20*b*s*n_h"
    assert d["bytes"]["total"] == sum(d["bytes"][k] for k in ("weights", "gradients", "optimizer", "activations"))


def test_sensitivity_cli_text_latex(capsys):
    assert main(["sensitivity", "--wrt", "s,PP", "--latex"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # lines fold at 100 columns
    assert "20 b s n_{h}" in out or "20 b s n_h" in out
    assert "acts only through the stage composition" in out


@pytest.mark.parametrize("argv, needle", [
    (["sensitivity", "--wrt", "EDP"], "derived"), (["sensitivity", "--tp", "3"], "n_h"),
    (["fit", "--hbm", "80GiB", "--stage", "16"], "stage"), (["fit", "--hbm", "nope"], "size"),
    (["fit", "--hbm", "80GiB", "--schedule", "dualpipe", "--pp", "15", "--dp", "32"], "DualPipe"),
    (["fit", "--hbm", "80"], "unit"), (["fit", "--hbm", "80GiB", "--gpu", "h100"], "not both"),
])
def test_bad_input_exits_2(argv, needle):
    p = subprocess.run([sys.executable, "-m", "memsym", *argv], capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and needle in p.stderr


def test_fit_reports_the_answer_at_every_end_of_the_overhead_ranges(capsys):
    import json
    from memsym.cli import main
    assert main(["fit", "--hbm", "80GiB", "--solve", "mbs", "--zero", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    ends = d["by_overheads"]
    assert ends["high"] == d["mbs"]  # the default end is the conservative one
    assert ends["high"] <= ends["low"] <= ends["none"]


def test_least_recomputation_prefers_selective_over_full():
    from derivations.analyses.fit import solve
    res = solve(V3, cfg.Layout(), cfg.Training(zero=1), 80 * GiB, "mbs", None, "high")
    assert res["least"]["recompute"] == "selective"  # fits at 58.45 GiB; full (54.87) recomputes more
