"""Verify hand derivations: derivations.verify (a formula against a term) and the
printers of memsym.verdict; the formula language itself is tested in tests/test_formula_*.py."""
import json
import subprocess
import sys
from fractions import Fraction

import pytest
import sympy as sp

from derivations import notation as nt
from memsym.cli import main
from derivations.paper.verify import paper_defaults, verify
from memsym.verdict import latex, text, to_json
from symbolic.formula import FormulaError, parse

b, s, h, h_E, n_h, d_h, d_hr, d_c, d_cq = nt.b, nt.s, nt.h, nt.h_E, nt.n_h, nt.d_h, nt.d_hr, nt.d_c, nt.d_cq

# The paper's M_1^A text (Sec. 5, at TP = SP = 2), label and line break included, as a user would paste it.
DIGEST_M1A = """M_1^A = 4bsh/2 + 2bs(d_cq + d_c) + 4bs(d_h + d_hr) n_h/2 + 2bs d_h n_h/2
          + 5 b n_h s^2/2 + 2bs d_h n_h/2 + bsh/2"""
DROPPED = DIGEST_M1A.replace("4bs(d_h + d_hr) n_h/2", "4bs(d_h + d_hr) n_h")
LATEX_M1A = (r"\frac{4bsh}{2} + 2bs\left(d_c^{\prime} + d_c\right) + \frac{4bs\left(d_h + d_h^R\right)n_h}{2}"
             r" + \frac{2bs\,d_h n_h}{2} + \frac{5 b n_h s^{2}}{2} + \frac{2 b s \cdot d_h n_h}{2} + \frac{bsh}{2}")
LATEX_DROPPED = LATEX_M1A.replace(r"\frac{4bs\left(d_h + d_h^R\right)n_h}{2}", r"4bs\left(d_h + d_h^R\right)n_h")
TP2 = {"TP": 2, "SP": 2}


# ------------------------------------------------------------------ acceptance
def test_digest_m1a_equal_at_tp2_sp2():
    r = verify(DIGEST_M1A, "act.mla.layer", assume=TP2)
    assert r.equal and r.exit_code == 0
    assert r.difference == 0 and r.monomials == [] and r.bytes_at_paper == 0


def test_dropping_the_qk_half_names_the_difference_and_its_bytes():
    r = verify(DROPPED, "act.mla.layer", assume=TP2)
    assert not r.equal and r.exit_code == 1
    # term minus formula: the formula counts the q/k tensors twice
    assert sp.expand(r.difference + 2 * b * s * (d_h + d_hr) * n_h) == 0
    monos = {m.monomial: (m.term_coeff, m.formula_coeff, m.parts) for m in r.monomials}
    assert monos[b * s * d_hr * n_h][:2] == (2, 4)
    assert monos[b * s * d_h * n_h][:2] == (4, 6)
    assert set(monos[b * s * d_hr * n_h][2]) == {"q", "k"}
    # b=1, s=4096: 2 * 4096 * (128 + 64) * 128 bytes more in the formula
    assert r.bytes_at_paper == -2 * 1 * 4096 * (128 + 64) * 128 == -201326592
    out = text(r)
    assert "NOT EQUAL" in out and "2*b*s*n_h*(d_h + d_hr)" in out and "201,326,592" in out
    assert "(q + k)" in out


def test_latex_spelling_gives_the_same_verdicts():
    assert verify(LATEX_M1A, "act.mla.layer", assume=TP2).equal
    r = verify(LATEX_DROPPED, "act.mla.layer", assume=TP2)
    assert not r.equal
    assert sp.expand(r.difference + 2 * b * s * (d_h + d_hr) * n_h) == 0
    assert r.bytes_at_paper == -201326592
    assert parse(LATEX_M1A) == parse(DIGEST_M1A.split("=", 1)[1])


@pytest.mark.parametrize("formula, against, extra", [
    ("10bsh + 8bs(d_cq + d_c) + 16bs d_h n_h + 8bs d_hr n_h + 10 b n_h s^2", "act.stage:mla", {}),
    ("4bsh", "act.stage.full:mla", {}),
    ("20bsh + 16bsN + 8bsN_r + 4bs (N_r/N)(96h + 256h_E) + 32bsh_E", "act.stage:moe", {"N": 256, "N_s": 1}),
    ("4bsh + 8bsN_r", "act.stage.full:moe", {}),
    ("8bsh + 8bsN_r", "act.stage.full", {}),
])
def test_table10_rows_at_ep8_tp2_sp2_cp1_four_layers(formula, against, extra):
    assume = {"EP": 8, "TP": 2, "SP": 2, "CP": 1, "L_m": 4, "L_d": 0, "e_H": 0, "e_E": 0, **extra}
    assert verify(formula, against, assume=assume).equal
    # the --stage shorthand says the same
    assert verify(formula, against, assume={"EP": 8, "TP": 2, "SP": 2, **extra}, stage=1).equal
    assert not verify(formula + " + bsh", against, assume=assume).equal


def test_table10_moe_row_needs_n_over_ep_32():
    r = verify("20bsh + 16bsN + 8bsN_r + 4bs (N_r/N)(96h + 256h_E) + 32bsh_E", "act.stage:moe",
               assume={"EP": 8, "TP": 2, "SP": 2, "N_s": 1}, stage=1)
    assert not r.equal  # 96h + 256h_E encodes N/EP = 32: true only at N = 256
    assert r.bytes_at_paper == 0  # ... which is the paper's N
    assert verify("20bsh + 16bsN + 8bsN_r + 4bs (N_r/N)(96h + 256h_E) + 32bsh_E", "act.stage:moe",
                  assume={"EP": "N/32", "TP": 2, "SP": 2, "N_s": 1}, stage=1).equal


def test_python_api_shape():
    r = verify("4bsh/2 + 2bs(d_cq + d_c) + 4bs(d_h + d_hr)n_h/2 + 2bs d_h n_h/2 + 5b n_h s^2/2 + 2bs d_h n_h/2"
               " + bsh/2", "act.mla.layer", assume={"TP": 2, "SP": 2})
    assert r.equal is True and r.difference == 0 and r.monomials == [] and r.bytes_at_paper == Fraction(0)
    d = to_json(r)
    assert d["equal"] is True and d["against"] == "act.mla.layer" and d["assumptions"] == {"TP": "2", "SP": "2"}
    json.dumps(d)


# ------------------------------------------------------------------ printers
def test_one_printer_family_renders_the_same_verdict_three_ways():
    r = verify(DROPPED, "act.mla.layer", assume=TP2)
    out, tex, d = text(r), latex(r), to_json(r)
    assert out.splitlines()[0] == "memsym verify: NOT EQUAL" and tex.startswith("% memsym verify: NOT EQUAL")
    assert list(d) == ["equal", "verdict", "against", "provenance", "meaning", "unit", "formula_text", "formula",
                       "formula_latex", "assumptions", "defaults", "term_side", "formula_side", "difference",
                       "difference_latex", "difference_expanded", "monomials", "paper_config", "value_at_paper",
                       "bytes_at_paper", "gib_at_paper", "explanation", "hints", "warnings"]
    assert d["difference"] in out and d["bytes_at_paper"] == -201326592
    assert len(d["monomials"]) == len(r.monomials) == tex.split("\\hline")[1].count("\\\\")  # one row each
    assert "\\begin{tabular}" in tex and "% at the paper's configuration" in tex


def test_printers_of_an_equal_verdict():
    r = verify(DIGEST_M1A, "act.mla.layer", assume=TP2)
    out, tex, d = text(r), latex(r), to_json(r)
    assert "both sides = " in out and "at the paper's configuration" not in out
    assert "&= 0" in tex and "tabular" not in tex and "% at the paper" not in tex
    assert d["difference"] == "0" and d["monomials"] == [] and d["bytes_at_paper"] == 0 and d["explanation"] == []


def test_unknown_names_cite_the_help_that_lists_the_symbols():
    with pytest.raises(FormulaError, match=r"\(list them with `memsym verify --help`\)"):
        verify("bsx", "act.mla.layer")
    with pytest.raises(FormulaError, match="see `memsym verify --help`"):
        verify("bsh", "act.mla.layer", assume="TP=b.s")


# ------------------------------------------------------------------ safety
MALICIOUS = [
    "__import__('os').system('touch {marker}')",
    "exec(\"open('{marker}', 'w')\")",
    "eval('1')", "lambda: 0", "().__class__.__bases__[0].__subclasses__()", "h.__class__", "b;import os",
    "open('{marker}','w').write('x')", "h if b else s", "[x for x in ()]", "{{'a': 1}}", "b @ s", "`ls`", "$(ls)",
]


@pytest.mark.parametrize("payload", MALICIOUS)
def test_malicious_inputs_refused_and_nothing_runs(payload, tmp_path):
    marker = tmp_path / "pwned"
    text = payload.format(marker=marker)
    with pytest.raises(FormulaError):
        verify(text, "act.mla.layer", assume=TP2)
    assert not marker.exists()


def test_malicious_input_through_the_cli_exits_2_and_executes_nothing(tmp_path):
    marker = tmp_path / "pwned"
    for payload in (f"__import__('os').system('touch {marker}')", f"exec(\"open('{marker}','w')\")"):
        p = subprocess.run([sys.executable, "-m", "memsym", "verify", payload, "--against", "act.mla.layer"],
                           capture_output=True, text=True)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "Traceback" not in p.stderr and p.stderr.startswith("memsym verify: error:")
        assert not marker.exists()


def test_no_python_evaluation_or_sympy_string_parsing(monkeypatch, terms):
    """The formula path never reaches eval/exec, parse_expr or sympy's LaTeX parsers."""
    import builtins
    import sympy.parsing.latex as sympy_latex
    import sympy.parsing.sympy_parser as sympy_parser
    text(verify(DROPPED, "act.mla.layer", assume=TP2))  # first use: lazy imports (which exec module code)

    def forbidden(*a, **k):
        raise AssertionError("user text reached an evaluator")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(sympy_parser, "parse_expr", forbidden)
    monkeypatch.setattr(sp, "parse_expr", forbidden, raising=False)
    monkeypatch.setattr(sympy_latex, "parse_latex", forbidden)
    assert verify(DIGEST_M1A, "act.mla.layer", assume={"TP": "2", "SP": "TP"}).equal
    r = verify(LATEX_DROPPED, "act.mla.layer", assume=["TP=2", "SP=2"])
    assert not r.equal and text(r) and latex(r) and to_json(r)


def test_limits_refused_after_the_assumptions():
    with pytest.raises(FormulaError, match="too large"):  # assumptions that chain into a huge expansion
        verify("b", "act.stage", assume="h=(b+s)^8 s=(b+v)^8")
    assert verify("2bsh/2 + 1/(b+s) - 1/(b+s)", "act.mla.layer.full", assume={"SP": 2}).equal
    assert verify("(2bsh(b+s)/2)/(b+s)", "act.mla.layer.full", assume={"SP": 2}).equal
    r = verify("2bsh/2 + 1/(b+s)", "act.mla.layer.full", assume={"SP": 2})
    assert not r.equal and sp.simplify(r.difference + 1 / (b + s)) == 0


# ------------------------------------------------------------------ substitution rules
def test_assumptions_in_a_circle_refused():
    with pytest.raises(FormulaError, match="circle"):
        verify("bsh", "act.mla.layer.full", assume="SP=TP TP=SP")


def test_relation_assumption_sp_equals_tp():
    assert verify("2bsh/TP", "act.mla.layer.full", assume="SP=TP").equal


def test_byte_symbols_take_the_paper_values_unless_mentioned():
    assert nt.B_a in paper_defaults() and paper_defaults()[nt.CP] == 1
    # not mentioned: B_a = 2
    assert verify("2bsh/2", "act.mla.layer.full", assume={"SP": 2}).equal
    # mentioned: B_a stays symbolic on both sides
    r = verify("B_a bsh/2", "act.mla.layer.full", assume={"SP": 2})
    assert r.equal and nt.B_a not in r.defaults
    assert not verify("2 B_a bsh/2", "act.mla.layer.full", assume={"SP": 2}).equal
    # CP mentioned stays symbolic; not mentioned is 1
    assert verify("2bsh/(2CP)", "act.mla.layer.full", assume={"SP": 2}).equal
    assert not verify("2bsh/(4CP)", "act.mla.layer.full", assume={"SP": 2}).equal


def test_derived_symbols_expanded_on_both_sides():
    r = verify("4bsh/2 + 4bsN + 2bsN_r + 32(3 b s N_r/N h + 8 E_token h_E) + 3bsh + 8bsh_E", "act.moe.layer",
               assume={"SP": 2, "EP": 8, "N": 256, "N_s": 1})
    assert r.equal
    assert verify("DP TP/(EP ETP)", "act.mla.layer.full", assume={"SP": 2}).equal is False
    assert parse("EDP") == nt.EDP


def test_missing_assumption_hint():
    r = verify(DIGEST_M1A, "act.mla.layer")
    assert not r.equal
    assert any("TP" in h and "SP" in h and "--assume" in h for h in r.hints)


def test_params_term_bytes_use_bf16_weights():
    r = verify("d_cq h + d_h n_h d_cq + d_hr n_h d_cq + d_c h + d_h n_h d_c + d_hr h + d_h n_h d_c", "params.mla")
    assert not r.equal  # W^O (h d_h n_h) left out
    assert sp.expand(r.difference - h * d_h * n_h) == 0
    assert r.value_at_paper == 7168 * 128 * 128 and r.bytes_at_paper == 2 * 7168 * 128 * 128
    assert r.monomials[0].parts == ("W_O",)


# ------------------------------------------------------------------ command line
def run_cli(capsys, *argv):
    rc = main(list(argv))
    return rc, capsys.readouterr()


def test_cli_exit_codes_and_outputs(capsys):
    rc, out = run_cli(capsys, "verify", DIGEST_M1A, "--against", "act.mla.layer", "--assume", "TP=2", "SP=2")
    assert rc == 0 and "EQUAL" in out.out
    rc, out = run_cli(capsys, "verify", DROPPED, "--against", "act.mla.layer", "--assume", "TP=2", "SP=2", "--json")
    d = json.loads(out.out)
    assert rc == 1 and d["equal"] is False and d["bytes_at_paper"] == -201326592
    assert sp.expand(parse(d["difference"]) + 2 * b * s * (d_h + d_hr) * n_h) == 0
    assert {m["monomial"] for m in d["monomials"]} == {"b*s*n_h*d_h", "b*s*n_h*d_hr"}
    rc, out = run_cli(capsys, "verify", LATEX_DROPPED, "--against", "act.mla.layer", "--assume", "TP=2", "SP=2",
                      "--latex")
    assert rc == 1 and "\\begin{align*}" in out.out and "d_h^R" in out.out and "\\text{term}" in out.out


@pytest.mark.parametrize("argv, needle", [
    (["verify", "bsx", "--against", "act.mla.layer"], "unknown name 'x'"),
    (["verify", "bsh", "--against", "act.mla.layr"], "act.mla.layer"),
    (["verify", "bsh", "--against", "act.stage:mlx"], "parts"),
    (["verify", "bsh", "--against", "act.mla.layer", "--assume", "XX=2"], "unknown symbol"),
    (["verify", "__import__('os')", "--against", "act.mla.layer"], "not allowed"),
    (["verify", "b" * 5000, "--against", "act.mla.layer"], "too long"),
])
def test_cli_bad_input_exits_2_with_one_line(capsys, argv, needle):
    rc, out = run_cli(capsys, *argv)
    assert rc == 2
    assert needle in out.err and len(out.err.strip().splitlines()) == 1 and out.out == ""


def test_terms_lists_parts_for_term_part_selection(capsys):
    rc, out = run_cli(capsys, "terms", "--parts")
    assert rc == 0 and "act.stage:mla" in out.out and "act.mla.layer:q" in out.out


def test_help_shows_two_worked_examples():
    p = subprocess.run([sys.executable, "-m", "memsym", "verify", "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    assert "worked examples" in p.stdout
    assert "  1. " in p.stdout and "  2. " in p.stdout
    assert p.stdout.count("memsym verify \"") + p.stdout.count("memsym verify '") >= 2
    assert "act.stage:moe" in p.stdout and "--assume TP=2 SP=2" in p.stdout


def test_help_examples_do_what_they_say(capsys):
    """The commands printed in --help give the verdicts it announces."""
    import shlex
    from memsym.cli import build_parser
    epilog = build_parser("verify")._subparsers._group_actions[0].choices["verify"].epilog  # (options.toml)
    cmds = []
    for block in epilog.split("memsym verify ")[1:]:
        text = block.split("\n\n")[0].replace("\\\n", " ")
        argv = shlex.split(text.replace("\n", " "))
        cmds.append(argv)
    assert len(cmds) == 3
    assert [run_cli(capsys, "verify", *argv)[0] for argv in cmds] == [0, 0, 0]


# ------------------------------------------------------------------ robustness
@pytest.mark.parametrize("assume", ["TP=0", "TP=-2", "TP=2.5", "SP=1/2", "b=0", "h=-1"])
def test_assumptions_must_respect_the_symbols_domain(assume):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "memsym", "verify", "bsh", "--against", "act.mla.layer",
                        "--assume", assume], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert assume.split("=")[0] in p.stderr
