"""Rendering: the engine's term LaTeX and closed forms (symbolic.render), the report's LaTeX
names, text escaping and Jinja environments (memsym.report.text, memsym.report.rendering)."""
from fractions import Fraction

import pytest
import sympy as sp

from derivations import notation as nt
from memsym.report import rendering, text
from symbolic import render


def test_braced_names_typeset_like_the_registry_and_are_greppable():
    assert text.braced("n_h") == "n_{h}"
    assert text.braced("d_h^R") == "d_{h}^{R}"
    assert text.braced("d_c'") == "d_{c}'"
    assert text.braced("E_{token}") == "E_{token}"      # already braced: untouched
    assert text.braced(r"\delta_{E}") == r"\delta_{E}"
    names = text.report_names()
    assert names[nt.n_h] == "n_{h}" and names[nt.d_cq] == "d_{c}'"
    # every registry symbol has a name, and no name is left with a bare one-character script
    for sym, name in names.items():
        assert text._SCRIPT.search(name) is None, (sym, name)


def test_term_latex_keeps_its_default_and_takes_names(terms):
    mla = terms["act.mla.layer"]
    par = {nt.TP: 2, nt.SP: 2, nt.CP: 1, nt.B_a: 2, nt.B_k: 1}
    default = render.term_latex(mla, par)
    assert default.startswith(r"\frac{4 b s h}{2} + 2 b s \left(d_c' + d_c\right)")
    braced = render.term_latex(mla, par, names=text.report_names())
    assert r"\frac{5 b n_{h} s^{2}}{2}" in braced
    assert sp.latex(mla.display(par), order="none", symbol_names=text.report_names()) == braced


def test_tex_environment_uses_latex_safe_delimiters(tmp_path):
    (tmp_path / "t.tex.j2").write_text(r"\section{((( title|tex )))} {{ kept }} %% comment "
                                       r"((* if n *))((( n|num )))((* endif *))")
    env = rendering.environment("tex", tmp_path)
    out = env.get_template("t.tex.j2").render(title="a_b & 50%", n=6250364928)
    assert out == r"\section{a\_b \& 50\%} {{ kept }} %% comment 6,250,364,928"


def test_filters_exact_numbers_and_gib():
    env = rendering.environment("md")
    assert env.from_string("{{ x|num }}").render(x=Fraction(12500729856)) == "12,500,729,856"
    assert env.from_string("{{ x|gib }}").render(x=12500729856) == "11.64"
    assert env.from_string("{{ x|md }}").render(x="a|b_c") == r"a\|b\_c"
    assert rendering.environment("md") is env        # compiled once per process


def test_html_environment_autoescapes():
    env = rendering.environment("html")
    assert env.from_string("{{ x }}").render(x="<b>&") == "&lt;b&gt;&amp;"


def test_unknown_environment_kind():
    with pytest.raises(ValueError):
        rendering.environment("docx")


@pytest.mark.parametrize("tid", ["act.mla.layer", "act.moe.layer", "zero.optimizer.sharded", "static.device.total"])
def test_closed_expr_is_the_term(terms, tid):
    t = terms[tid]
    subs = {nt.TP: 2, nt.SP: 2, nt.CP: 1, nt.EP: 8, nt.ETP: 1, nt.DP: 32, nt.EDP: 8, nt.L_d: 0, nt.L_m: 4,
            nt.e_E: 0, nt.e_H: 0, **nt.PAPER_BYTES}
    closed = render.closed_expr(t, subs)
    assert sp.expand(closed - nt.expand_derived(t.expr).xreplace(subs).xreplace(nt.DEFINITIONS)) == 0
    assert render.closed_expr(t) == t.closed


def test_long_closed_forms_print_breakable(terms):
    closed = render.closed_expr(terms["act.mla.layer"], {nt.TP: 2, nt.SP: 2, nt.CP: 1, nt.B_a: 2, nt.B_k: 1})
    latex = render.expr_latex(closed, names=text.report_names(), long_frac_ratio=2)
    assert latex.startswith(r"\frac{b s}{2} \left(")


def test_tex_escape_handles_unicode_a_t1_font_lacks():
    assert text.tex_escape("F ≥ 1, δ_E, café") == r"F \ensuremath{\geq} 1, \ensuremath{\delta}\_E, café"
    assert text.tex_escape("日") == "?"


def test_tex_escape_keeps_double_hyphens_of_options():
    # pdflatex turns "--" into an en dash and "---" into an em dash; an option name must print as typed
    assert text.tex_escape("--conventions mcore --kernels te") == "-{}-conventions mcore -{}-kernels te"
    assert text.tex_escape("a---b") == "a-{}-{}-b"
    assert text.tex_escape("1-2 en–dash") == "1-2 en--dash"


def test_tex_escape_sets_a_superscript_typed_in_text_as_one():
    # the PDF showed "2ˆ30 bytes" and "Wˆ{DQ}": a caret in running text is a superscript, escaped inside
    assert text.tex_escape("GiB = 2^30 bytes") == r"GiB = 2\textsuperscript{30} bytes"
    assert text.tex_escape("W^{DQ}, d_h^R") == r"W\textsuperscript{DQ}, d\_h\textsuperscript{R}"
    assert text.tex_escape("a ^ b") == r"a \textasciicircum{} b"
    assert text.tex_escape("x^{a_b}") == r"x\textsuperscript{a\_b}"
