"""Every printed number of the paper (paper/printed.toml), exact and lambdified."""
from fractions import Fraction

import pytest

from derivations.paper.reproduce import run
from derivations.paper import reference

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
        assert r.entry.pinned is not None and r.derived_exact == r.entry.pinned


# The exact values the discrepancies pin, by hand from the paper's formulas (Secs. 3-4; Table 7 bytes).
PER_DEVICE = 6_250_364_928          # Table 6 total params/device (stages 1-14)
SHARD = 741_009_408                 # P_n/DP + P_m/EDP at the reference layout (exact, as in paper/printed.toml)
HAND_PINS = {
    "t3.moe.gb": 2 * 11_507_286_016,                                  # MoE layer params x B_w
    "t4.stage0.params": 1_510_162_432 + 2 * 583_483_392 + 11_507_286_016,  # layers 0, 1-2, 3
    "t6.mla.gb": 2 * 429_654_016,
    "t6.nonmoe.gb": 2 * (429_654_016 + 65_536),
    "t8.none.total": (2 + 4 + 8) * PER_DEVICE,
    "t8.os.total": (2 + 4) * PER_DEVICE + 8 * SHARD,
}


def test_the_pins_are_the_hand_derived_values():
    pinned = {r.entry.id: r.entry.pinned for r in RESULTS if r.entry.pinned is not None}
    assert pinned == {k: Fraction(v) for k, v in HAND_PINS.items()}
    # every entry with a cause pins its value (the loader refuses one that does not)
    assert all(r.entry.pinned is not None for r in RESULTS if r.entry.discrepancy)


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


def test_a_wrong_pinned_value_fails_even_with_a_cause():
    """A discrepancy is excused only at its pinned exact value: a derived value one unit off fails."""
    e = _entry(value=Fraction(5), discrepancy="rounding in the paper", pinned=Fraction(7))
    assert reference.judge(e, Fraction(7), 7.0, "params", 2).status == "discrepancy"
    r = reference.judge(e, Fraction(8), 8.0, "params", 2)
    assert r.status == "MISMATCH" and not r.ok
    # a pin on an agreeing entry is checked too
    r = reference.judge(_entry(value=Fraction(7), pinned=Fraction(6)), Fraction(7), 7.0, "params", 2)
    assert r.status == "MISMATCH" and not r.ok
    # GB entry of a parameter term: the pin is in bytes (params x B_w)
    gb = _entry(unit="GB", value=Fraction(3), decimals=0, discrepancy="cause", pinned=Fraction(2 * 2 ** 30))
    assert reference.judge(gb, Fraction(2 ** 30), 2.0 ** 30, "params", 2).status == "discrepancy"
    assert reference.judge(gb, Fraction(2 ** 30 + 1), 2.0 ** 30, "params", 2).status == "MISMATCH"


def test_a_cause_without_a_pin_fails():
    r = reference.judge(_entry(value=Fraction(5), discrepancy="cause"), Fraction(7), 7.0, "params", 2)
    assert r.status == "UNPINNED" and not r.ok


def _data_file(tmp_path, old, new):
    src = (reference.PAPER_DIR / "printed.toml").read_text()
    assert src.count(old) == 1
    path = tmp_path / "printed.toml"
    path.write_text(src.replace(old, new))
    return path


def test_a_wrong_pin_in_the_data_file_fails_reproduce(tmp_path):
    path = _data_file(tmp_path, 'derived_exact = "23014572032"', 'derived_exact = "23014572033"')
    bad = {r.entry.id: r.status for r in run(path) if not r.ok}
    assert bad == {"t3.moe.gb": "MISMATCH"}
    from memsym.cli import main
    assert main(["reproduce", "--data", str(path)]) == 1


@pytest.mark.parametrize("old, new, match", [
    ('derived_exact = "23014572032"', "", "derived_exact"),                       # cause without a pin
    ('derived_exact = "23014572032"', "derived_exact = 23014572032.0", "exact"),  # a float is not exact
    ('derived_exact = "23014572032"', 'derived_exact = "about 2.3e10"', "t3.moe.gb.*exact"),
])
def test_malformed_pins_are_rejected(tmp_path, old, new, match):
    path = _data_file(tmp_path, old, new)
    with pytest.raises(ValueError, match=match):
        reference.load(path)


def test_reproduce_exits_2_naming_an_unpinned_discrepancy(tmp_path, capsys):
    from memsym.cli import main
    path = _data_file(tmp_path, 'derived_exact = "43430264832"', "")
    assert main(["reproduce", "--data", str(path)]) == 2
    err = capsys.readouterr().err
    assert "t8.os.total" in err and "derived_exact" in err and "Traceback" not in err


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
