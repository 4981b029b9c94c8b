"""symbolic.formula.parser: tokens -> sympy expression, bounded, never evaluated as Python."""
import pytest
import sympy as sp

from derivations import notation as nt
from symbolic.formula import MAX_DEPTH, MAX_LENGTH, FormulaError, parse, parse_formula, plain

b, s, h, h_E, n_h, d_h, d_hr, d_c, d_cq = nt.b, nt.s, nt.h, nt.h_E, nt.n_h, nt.d_h, nt.d_hr, nt.d_c, nt.d_cq


@pytest.mark.parametrize("text, expected", [
    ("bsh", b * s * h),
    ("bsh_E", b * s * h_E),
    ("bsN_r", b * s * nt.N_r),
    ("DP", nt.DP), ("EDP", nt.EDP), ("PP", nt.PP), ("ETP", nt.ETP), ("EP", nt.EP),
    ("l/PP", nt.l / nt.PP),
    ("N", nt.N), ("N_s N_r", nt.N_s * nt.N_r),
    ("d_cq", d_cq), ("d_c'", d_cq), ("d_{cq}", d_cq), ("d_c^{\\prime}", d_cq), ("d_{c}^{\\prime}", d_cq),
    ("d_hr", d_hr), ("d_h^R", d_hr), ("d_{h}^{R}", d_hr), ("d_h^{R}", d_hr),
    ("E_token", nt.E_token), ("E_{token}", nt.E_token), ("E_{\\text{token}}", nt.E_token),
    ("\\delta_{E}", nt.e_E), ("B_{a}", nt.B_a),
    ("n_hs^2", n_h * s ** 2), ("s^{2}", s ** 2), ("s**2", s ** 2), ("s^-1", 1 / s), ("2^3^2", sp.Integer(512)),
    ("-s^2", -s ** 2), ("2bs(d_{cq}+d_c)", 2 * b * s * (d_cq + d_c)),
    ("2bs\\left(d_{cq}+d_c\\right)", 2 * b * s * (d_cq + d_c)),
    ("2bs\\bigl[d_c + d_cq\\bigr]", 2 * b * s * (d_cq + d_c)),
    ("\\frac{4bsh}{2}", 2 * b * s * h), ("\\frac12 h", h / 2), ("\\dfrac{h}{TP}", h / nt.TP),
    ("3 \\cdot b \\times s", 3 * b * s), ("b\\,s\\;h\\!", b * s * h),
    ("0.5 h", h / 2), ("1.25h", sp.Rational(5, 4) * h),
    ("4bs (N_r/N)(96h + 256h_E)", 4 * b * s * nt.N_r / nt.N * (96 * h + 256 * h_E)),
    ("32*(3 E_token h + 8 E_token h_E)", 32 * (3 * nt.E_token * h + 8 * nt.E_token * h_E)),
    ("M_2^A = 2bsh/2", b * s * h),
])
def test_parses(text, expected):
    assert sp.expand(parse(text) - expected) == 0


def test_parsed_formula_names_its_symbols():
    p = parse_formula("M_1^A = 2bs(d_cq + d_c)")
    assert p.mentioned == {"b", "s", "d_cq", "d_c"} and p.text == "M_1^A = 2bs(d_cq + d_c)"


def test_plain_is_reread_by_the_parser():
    e = 2 * b * s * n_h * (d_h + d_hr) + sp.Rational(5, 2) * b * s ** 2 * n_h
    assert plain(e) == "(5*b*s**2*n_h)/2 + 2*b*s*n_h*(d_h + d_hr)"
    assert parse(plain(e)) == e


def test_implicit_multiplication_after_division_warns():
    p = parse_formula("bsh/2TP")
    assert sp.expand(p.expr - b * s * h * nt.TP / 2) == 0
    assert p.warnings and "left to right" in p.warnings[0]
    assert not parse_formula("bsh/(2TP)").warnings


@pytest.mark.parametrize("text, needle", [
    ("", "empty"), ("   ", "empty"), ("4bsh +", "ends too early"), ("(bsh", "expected ')'"),
    ("bsh)", "unmatched"), ("(bsh]", "expected ')'"), ("\\frac{b}", "denominator"), ("bsh/0", "division by zero"),
    ("b/(h-h)", "division by zero"), ("s^h", "exponents must be integers"), ("s^(1/2)", "integers"),
    ("\\sqrt{h}", "\\sqrt is not supported"), ("\\alpha h", "not supported"), ("h = s", "'='"),
    ("b, s", "','"), ("b \\", "backslash"), ("h'", "quotes"), ("b*é", "not allowed"), ("s\u00b2", "not allowed"),
    ("\u0661h", "not allowed"), ("b\x00s", "not allowed"),
])
def test_malformed_inputs(text, needle):
    with pytest.raises(FormulaError) as e:
        parse(text)
    assert needle in str(e.value)


def test_limits_refused():
    with pytest.raises(FormulaError, match="too long"):
        parse("b+" * (MAX_LENGTH // 2) + "b")
    with pytest.raises(FormulaError, match="nested too deeply"):
        parse("(" * (MAX_DEPTH + 5) + "b" + ")" * (MAX_DEPTH + 5))
    with pytest.raises(FormulaError, match="nested too deeply"):
        parse("-" * (MAX_DEPTH + 5) + "b")
    with pytest.raises(FormulaError, match="too large"):
        parse("(b+s+h+N+d_c+d_h+n_h+v)" * 6)
    with pytest.raises(FormulaError, match="too large"):
        parse("9^9^9")
    with pytest.raises(FormulaError, match="exponent"):
        parse("(b+s)^99")
    with pytest.raises(FormulaError, match="number too long"):
        parse("1" * 100 + "b")
    with pytest.raises(FormulaError, match="sums in denominators"):
        parse("+".join(f"1/(b+{i})" for i in range(1, 50)))
    with pytest.raises(FormulaError, match="too large"):  # a common denominator would multiply the numerators
        parse("(b+s)(h+N)(d_c+d_h)(n_h+v)(l+DP)(TP+PP)(EP+ETP)(SP+CP)(d_cq+d_hr) + 1/(b+s) + 1/(b+h)")
    # within the limits
    assert parse("(" * (MAX_DEPTH - 1) + "b" + ")" * (MAX_DEPTH - 1)) == b
    assert parse("1/(b+s) + 1/(b+h)") == 1 / (b + s) + 1 / (b + h)


def test_no_python_evaluation_or_sympy_string_parsing(monkeypatch):
    """Reading a formula never reaches eval/exec, parse_expr or sympy's LaTeX parsers."""
    import builtins
    import sympy.parsing.latex as sympy_latex
    import sympy.parsing.sympy_parser as sympy_parser

    def forbidden(*a, **k):
        raise AssertionError("user text reached an evaluator")

    parse("2bs(d_cq + d_c)")  # first use
    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(sympy_parser, "parse_expr", forbidden)
    monkeypatch.setattr(sp, "parse_expr", forbidden, raising=False)
    monkeypatch.setattr(sympy_latex, "parse_latex", forbidden)
    assert parse(r"\frac{4bsh}{2} + 2bs\left(d_c^{\prime} + d_c\right)") == 2 * b * s * h + 2 * b * s * (d_cq + d_c)
    with pytest.raises(FormulaError):
        parse("__import__('os').system('true')")


# ------------------------------------------------------------------ robustness
from hypothesis import given, settings, strategies as st  # noqa: E402

_ALPHABET = list("bshNE_{}()[]^*/+-.0123456789 '\\=:\"") + ["d_h", "d_cq", "\\frac", "\\left(", "\\right)",
                                                            "\\cdot", "n_h", "TP", "EDP", "s^2", "**"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=40), st.lists(st.sampled_from(_ALPHABET), max_size=25).map("".join)))
def test_any_text_parses_or_is_refused_cleanly(text):
    try:
        expr = parse(text)
    except FormulaError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert isinstance(expr, sp.Expr)
        assert expr.free_symbols <= set(nt.SYMBOLS.values())
