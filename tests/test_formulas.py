"""The paper's printed formulas (paper/formulas.toml) against the terms."""
import json

import pytest

from derivations.paper import formulas
from memsym.cli import main

FORMULAS = formulas.load()


def test_the_data_covers_sections_5_1_5_2_and_table_10():
    places = " | ".join(f.place for f in FORMULAS)
    for needle in ("M_1^A (no recomputation, TP2@SP2", "M_1^A without parallelism", "M_2^A", "M_1^E", "M_2^E",
                   "Table 10, MLA, AC none", "Table 10, MLA, AC full", "Table 10, MoE, AC none",
                   "Table 10, MoE, AC full"):
        assert needle in places, needle
    assert sum(1 for f in FORMULAS if f.latex) >= 6


@pytest.mark.parametrize("f", FORMULAS, ids=[f.id for f in FORMULAS])
def test_printed_formula_verifies(f):
    c = formulas.check(f)
    assert c.ok, c.detail()
    assert c.result.equal and (not f.latex or c.latex_result.equal)


@pytest.mark.parametrize("f", FORMULAS, ids=[f.id for f in FORMULAS])
def test_a_changed_formula_fails(f):
    """The check can fail: one extra bsh (4096 x 7168 = 29,360,128 bytes at b=1, s=4096) is noticed."""
    bad = formulas.Formula(f.id, f.place, f.text + " + bsh", f.term, f.assume, f.stage,
                           (f.latex + " + bsh") if f.latex else "")
    c = formulas.check(bad)
    assert not c.ok and c.status == "NOT EQUAL"
    assert c.result.bytes_at_paper == -4096 * 7168


def test_unreadable_formula_is_reported_not_raised():
    f = formulas.Formula("x", "nowhere", "bs(", "act.mla.layer", {})
    c = formulas.check(f)
    assert not c.ok and c.status == "UNREADABLE" and "ends too early" in c.detail()


def test_reproduce_includes_the_formula_check(capsys):
    assert main(["reproduce"]) == 0
    out = capsys.readouterr().out
    assert "printed formulas against the terms" in out
    assert f"{len(FORMULAS)} printed formulas, {len(FORMULAS)} verified, 0 failing" in out
    assert main(["reproduce", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is True and len(d["formulas"]) == len(FORMULAS) and all(x["ok"] for x in d["formulas"])


def test_reproduce_fails_on_a_wrong_formula(capsys, monkeypatch, tmp_path):
    text = (formulas.PAPER_DIR / "formulas.toml").read_text()
    (tmp_path / "formulas.toml").write_text(text.replace('text = "4bsh + 8bsN_r"', 'text = "4bsh + 4bsN_r"'))
    monkeypatch.setattr(formulas, "PAPER_DIR", tmp_path)
    assert main(["reproduce"]) == 1
    out = capsys.readouterr().out
    assert "NOT EQUAL: Table 10, MoE, AC full" in out and "1 failing" in out
