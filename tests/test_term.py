import pytest
import sympy as sp

from derivations.notation import SP, TP, b, h, s
from symbolic.render import term_latex
from symbolic.term import Part, Term, Terms, combine


def test_term_is_sum_of_parts_and_rows_merge_for_display():
    t = Term("x.t", "test", "bytes", "Sec. 5.1", (
        Part("a", "a", (2, b, s, h), (SP,), row="x"),
        Part("c", "c", (2, b, s, h), (SP,), row="x"),
        Part("d", "d", (1, b, s, h), (SP,)),
    ))
    assert sp.simplify(t.expr - 5 * b * s * h / SP) == 0
    shown = sp.latex(t.display({SP: 2}), order="none")
    assert shown == r"\frac{4 b s h}{2} + \frac{b s h}{2}"


def test_display_keeps_paper_order_and_closed_form_simplifies():
    t = Term("x.t", "test", "bytes", "p", (Part("a", "a", (4, b, s, h), (TP,)),))
    assert term_latex(t, {TP: 2}) == r"\frac{4 b s h}{2}"
    assert sp.simplify(t.closed - 4 * b * s * h / TP) == 0


def test_duplicate_part_keys_and_bad_units_are_refused():
    with pytest.raises(ValueError):
        Term("x", "m", "bytes", "p", (Part("a", "a", (b,)), Part("a", "a", (s,))))
    with pytest.raises(ValueError):
        Term("x", "m", "GB", "p", (Part("a", "a", (b,)),))


def test_registry_names_closest_ids():
    reg = Terms()
    reg.add(Term("act.mla.layer", "m", "bytes", "p", (Part("a", "a", (b,)),)))
    with pytest.raises(KeyError, match="act.mla.layer"):
        reg["act.mla.layr"]
    with pytest.raises(ValueError):
        reg.add(Term("act.mla.layer", "m", "bytes", "p", (Part("a", "a", (b,)),)))


def test_combine_keeps_coefficients():
    t = Term("x", "m", "params", "p", (Part("a", "a", (h,)),))
    c = combine("y", "m", "params", "p", [("two", "twice", 2, t)])
    assert c.expr == 2 * h
