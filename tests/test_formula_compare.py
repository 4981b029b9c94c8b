"""symbolic.formula.compare: equivalence by monomial under assumptions and conventions."""
import pytest
import sympy as sp

from derivations import notation as nt
from symbolic.formula import FormulaError, Leaf, carriers, compare, monomial_rank, multiples

b, s, h, TP, SP, B_a = nt.b, nt.s, nt.h, nt.TP, nt.SP, nt.B_a


def test_equal_under_assumptions():
    c = compare(2 * b * s * h / TP, b * s * h, {TP: sp.Integer(2)})
    assert c.equal and c.difference == 0 and c.coefficients == {}
    assert c.left == b * s * h and c.substitution == {TP: 2}


def test_difference_and_differing_coefficients():
    c = compare(2 * b * s * h + b * s, 3 * b * s * h + b * s)
    assert not c.equal and c.difference == -b * s * h
    assert c.coefficients == {b * s * h: (2, 3)} and c.delta == {b * s * h: -1}


def test_conventions_apply_only_to_symbols_not_mentioned_nor_assumed():
    conv = {B_a: sp.Integer(2), SP: sp.Integer(1)}
    c = compare(B_a * b * s * h, 2 * b * s * h, conventions=conv)
    assert c.equal and c.conventions == {B_a: 2}  # SP is in neither side: not reported
    c = compare(B_a * b * s * h, B_a * b * s * h, conventions=conv, mentioned={B_a})
    assert c.equal and c.conventions == {} and c.left.has(B_a)
    c = compare(B_a * b * s * h / SP, b * s * h / 2, {SP: sp.Integer(4)}, conv)
    assert c.equal and c.substitution[SP] == 4  # assumptions win


def test_sums_in_denominators_use_a_common_denominator():
    assert compare(b + 1 / (b + s) - 1 / (b + s), b).equal
    c = compare(b, b + 1 / (b + s))
    assert not c.equal and sp.simplify(c.difference + 1 / (b + s)) == 0


def test_size_limit_names_the_side():
    with pytest.raises(FormulaError, match="expanding the formula"):
        compare(b, h * s, {h: (b + s) ** 8, s: (b + nt.v) ** 8}, sides=("the term", "the formula"))


def test_carriers_and_multiples():
    leaves = [Leaf("x", "the x", "", {b * s: 2}), Leaf("y", "the y", "", {b * s: 1, b * h: 1}),
              Leaf("z", "the z", "", {b * h: 3})]
    assert carriers(b * s, leaves) == ("x", "y") and carriers(s, leaves) == ()
    assert multiples({b * h: -6}, leaves) == [(-2, ["z"], ["the z"])]
    assert multiples({b * h: 1, s: 1}, leaves) == []


def test_multiples_prefer_rows_and_whole_combined_summands():
    row = [Leaf("q", "q", "qk", {b * s: 1}), Leaf("k", "k", "qk", {b * h: 1})]
    assert multiples({b * s: 2, b * h: 2}, row) == [(2, ["q", "k"], ["q", "k"])]
    combined = [Leaf("m.q", "q", "", {b * s: 1}), Leaf("m.k", "k", "", {b * h: 1})]
    assert multiples({b * s: 1, b * h: 1}, combined) == [(1, ["m"], ["all of m"])]


def test_monomials_rank_in_the_registered_factor_order():
    assert sorted([nt.d_h * b, b * s], key=monomial_rank) == [b * s, nt.d_h * b]
