import sympy as sp

from derivations import notation as nt


def test_symbols_are_plain_sympy_symbols_with_assumptions():
    for name, sym in nt.SYMBOLS.items():
        assert type(sym) is sp.Symbol, name
        assert sym.name == name
    for name in ("h", "h_E", "h_F", "d_h", "n_h", "d_cq", "d_hr", "d_c", "N", "N_s", "N_r", "l", "v",
                 "b", "s", "DP", "TP", "PP", "EP", "ETP", "SP", "CP"):
        assert nt.SYMBOLS[name].is_integer and nt.SYMBOLS[name].is_positive, name


def test_paper_latex_names():
    names = nt.latex_names()
    assert names[nt.d_cq] == "d_c'"
    assert names[nt.d_hr] == "d_h^R"
    assert sp.latex(nt.E_token, symbol_names=names) == "E_{token}"


def test_sympy_names_are_owned_by_the_registry():
    # N, E... must be our symbols, not sympy's N() function or Euler's E
    assert nt.N is nt.SYMBOLS["N"] and isinstance(nt.N, sp.Symbol)
    assert nt.N != sp.S.Exp1


def test_derived_definitions():
    assert nt.expand_derived(nt.E_token) == nt.F * nt.b * nt.s * nt.N_r / (nt.N * nt.CP)  # F = 1: the paper's
    assert nt.expand_derived(nt.EDP) == nt.DP * nt.TP * nt.CP / (nt.EP * nt.ETP)  # the paper: CP = 1
    assert nt.expand_derived(nt.h) == nt.h


def test_every_registry_entry_has_meaning_and_source():
    for info in nt.REGISTRY.values():
        assert info.meaning and info.source and info.latex and info.role
