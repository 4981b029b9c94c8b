"""Every printed number of the paper (paper/printed.toml), exact and lambdified."""
from fractions import Fraction

import pytest

from derivations.reproduce import run
from derivations import reference

RESULTS = run()


@pytest.mark.parametrize("result", RESULTS, ids=[r.entry.id for r in RESULTS])
def test_entry_agrees_or_is_a_known_discrepancy(result):
    assert result.status in ("agrees", "discrepancy"), (
        f"{result.entry.place}: printed {result.entry.printed}, derived {result.derived_text()} ({result.status})")
    # the lambdified path tells the same story as the exact one
    assert abs(result.numeric - float(result.derived)) <= 1e-9 * max(1.0, abs(float(result.derived)))


def test_the_digest_discrepancies_are_reported_with_causes():
    disc = {r.entry.id: r for r in RESULTS if r.status == "discrepancy"}
    assert {"t3.moe.gb", "t4.stage0.params", "t8.none.total", "t8.os.total"} <= set(disc)
    for r in disc.values():
        assert r.entry.discrepancy


def test_paper_data_covers_the_tables():
    tables = {r.entry.table for r in RESULTS if r.entry.source == "paper"}
    assert {"Table 3", "Table 4", "Table 6", "Table 8"} <= tables


def _entry(**kw):
    base = dict(id="x", table="T", row="r", column="c", printed="1", value=Fraction(1), unit="params",
                decimals=0, terms=("params.mla",), at={})
    base.update(kw)
    return reference.Entry(**base)


def test_an_unexplained_disagreement_fails():
    r = reference.judge(_entry(value=Fraction(5)), Fraction(7), 7.0, "params", 2)
    assert r.status == "UNEXPLAINED" and not r.ok


def test_a_recorded_cause_that_no_longer_applies_is_stale():
    r = reference.judge(_entry(value=Fraction(7), discrepancy="old cause"), Fraction(7), 7.0, "params", 2)
    assert r.status == "stale" and not r.ok


def test_rounding_to_printed_precision():
    assert reference.rounds_to(Fraction("21.434"), Fraction("21.43"), 2)
    assert not reference.rounds_to(Fraction("21.434"), Fraction("21.44"), 2)
    # GB of a parameter term: params x B_w
    r = reference.judge(_entry(unit="GB", value=Fraction("2"), decimals=0), Fraction(2 ** 30), 2.0 ** 30, "params", 2)
    assert r.status == "agrees"


def test_malformed_data_file_is_named(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[entry]]\nid = "e1"\ntable = "T"\n')
    with pytest.raises(ValueError, match="e1"):
        reference.load(bad)
