"""symbolic.formula.lexer: typed text -> tokens against the notation registry (never evaluated)."""
import pytest

from derivations import notation as nt# noqa: F401  (fills the registry)
from symbolic.formula import FormulaError, normalise, parse, spellings, strip_label, tokenize


def test_normalise_unwraps_latex_spellings():
    assert normalise(r"d_{cq}") == "d_cq"
    assert normalise(r"d_c^{\prime}") == "d_c'" and normalise(r"d_c^\prime") == "d_c'"
    assert normalise(r"d_h^{R}") == "d_h^R"
    assert normalise(r"E_{\text{token}}") == "E_token"


def test_strip_label_drops_a_label_that_is_not_made_of_symbols():
    assert strip_label("M_1^A = bsh").strip() == "bsh"
    assert strip_label("h = s") == "h = s"  # made of symbols: refused later for its '='


def test_tokens_of_a_formula():
    toks = tokenize("2bs\\left(d_cq + d_c\\right)^2")
    assert [t.kind for t in toks] == ["NUM", "SYM", "SYM", "LP", "SYM", "OP", "SYM", "RP", "OP", "NUM"]
    assert [t.value for t in toks if t.kind == "SYM"] == ["b", "s", "d_cq", "d_c"]
    assert [t.kind for t in tokenize("\\frac12")] == ["FRAC", "LP", "NUM", "RP", "LP", "NUM", "RP"]


def test_every_registry_name_and_spelling_means_its_symbol():
    for name, info in nt.REGISTRY.items():
        assert parse(name) == nt.SYMBOLS[name], name
    for spelling, name in spellings().items():
        assert parse(spelling) == nt.SYMBOLS[name], spelling


def test_sympy_names_never_become_sympy_objects():
    assert parse("N") == nt.N and parse("N").is_Symbol
    assert parse("N").is_positive and parse("N").is_integer
    for name in ("E", "S", "I", "O", "Q", "pi", "oo", "zoo", "sin", "Symbol", "exp"):
        with pytest.raises(FormulaError, match="unknown name"):
            parse(name)


def test_longest_match_and_unknown_capitals():
    with pytest.raises(FormulaError) as e:
        parse("L/PP")  # L is not a symbol of the notation (l is the layer count)
    assert "'L'" in str(e.value) and "L_m" in str(e.value)
    assert parse("EDP") == nt.EDP and parse("PP") == nt.PP and parse("DP") == nt.DP
    assert parse("L_m/PP") == nt.L_m / nt.PP and parse("lPP") == nt.l * nt.PP
    assert parse("EDPTP") == nt.EDP * nt.TP  # longest match first: EDP, then TP


def test_unknown_names_listed_with_closest_symbols():
    with pytest.raises(FormulaError) as e:
        parse("2bs(d_qc + d_x) + foo")
    msg = str(e.value)
    assert "'d_qc'" in msg and "'d_x'" in msg and "'foo'" in msg
    assert "closest known symbols" in msg and "d_cq" in msg
    assert e.value.constraint == "unknown-symbol"
    with pytest.raises(FormulaError, match=r"'x' \(in 'bsx'\)"):
        parse("bsx")
    with pytest.raises(FormulaError, match="h_E"):
        parse("h_X")


def test_messages_cite_where_symbols_are_listed_only_when_told():
    with pytest.raises(FormulaError) as e:
        tokenize("bsx")
    assert "list them" not in str(e.value)
    with pytest.raises(FormulaError, match=r"\(list them with `tool help`\)$"):
        tokenize("bsx", symbols_help="`tool help`")
    with pytest.raises(FormulaError, match=r"symbols of the notation \(see `tool help`\)"):
        tokenize("b = s", symbols_help="`tool help`")
    with pytest.raises(FormulaError, match=r"symbols of the notation, \+"):
        tokenize("b = s")
