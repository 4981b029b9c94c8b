"""symbolic.formula.assumptions: NAME=VALUE read in the formula language, and substitution."""
from fractions import Fraction

import pytest

from derivations import notation as nt
from symbolic.formula import FormulaError, parse_assumptions, substitute, symbol_of


def test_assumptions_forms_and_errors():
    assert parse_assumptions(None) == {}
    assert parse_assumptions("TP=2 SP=2") == {nt.TP: 2, nt.SP: 2}
    assert parse_assumptions(["TP=2,SP=TP"]) == {nt.TP: 2, nt.SP: nt.TP}
    assert parse_assumptions({"d_h^R": 64, nt.N: Fraction(256)}) == {nt.d_hr: 64, nt.N: 256}
    assert parse_assumptions("EP=N/32") == {nt.EP: nt.N / 32}
    with pytest.raises(FormulaError, match="NAME=VALUE"):
        parse_assumptions(["TP2"])
    with pytest.raises(FormulaError, match="closest known symbols: TP"):
        parse_assumptions({"TPP": 2})
    with pytest.raises(FormulaError, match="assumed twice"):
        parse_assumptions(["TP=2", "TP=4"])
    with pytest.raises(FormulaError, match="empty value"):
        parse_assumptions({"TP": " "})


def test_symbol_of_any_spelling():
    assert symbol_of("d_{cq}") == nt.d_cq and symbol_of(nt.TP) == nt.TP
    with pytest.raises(FormulaError, match="unknown symbol"):
        symbol_of("XX")


@pytest.mark.parametrize("assume", ["TP=0", "TP=-2", "TP=2.5", "SP=1/2", "b=0", "h=-1"])
def test_values_respect_the_symbols_domain(assume):
    with pytest.raises(FormulaError) as e:
        parse_assumptions(assume)
    assert e.value.constraint == "assumption" and assume.split("=")[0] in str(e.value)


def test_too_large_assumptions_refused():
    with pytest.raises(FormulaError, match="too large"):
        parse_assumptions("h=(b+s+v+l)^8 s=(b+v+l+N)^8")


def test_substitute_follows_chains_and_refuses_circles():
    assert substitute(nt.b * nt.SP, {nt.SP: nt.TP, nt.TP: 2}) == 2 * nt.b
    assert substitute(nt.E_token, {nt.CP: 1}) == nt.F * nt.b * nt.s * nt.N_r / nt.N  # derived symbols expanded
    with pytest.raises(FormulaError, match="circle"):
        substitute(nt.b * nt.SP, {nt.SP: nt.TP, nt.TP: nt.SP})
