"""memsym reproduce: every printed number of the paper against the derived one."""
from __future__ import annotations

import sys
import textwrap

from symbolic.files import check_out_dir

from ..report.extras import require_report
from ..report.formats import DEFAULT_FORMATS
from . import common
from .report import write


def add_parser(sub):
    common.build(sub, "reproduce", run)


def run(args) -> int:
    if args.out:
        require_report(DEFAULT_FORMATS, typed=False,
                       command="reproduce --out")  # a missing extra or a bad --out fails before the table is printed
        check_out_dir(args.out)
    code = _verdict(args)
    if args.out:
        from ..report import Context
        code = max(code, write(Context.create(), args.out, DEFAULT_FORMATS,
                               stream=sys.stderr if args.json else sys.stdout))
    return code


def _verdict(args) -> int:
    from derivations.paper.reproduce import run as reproduce
    from derivations.paper.formulas import run as check_formulas, summary_lines
    results = reproduce(args.data)
    formulas = check_formulas()  # the printed formulas of Sec. 5.1-5.2 and Table 10 (paper/formulas.toml)
    bad = [r for r in results if not r.ok]
    failing = [c for c in formulas if not c.ok]
    if args.json:
        common.print_json({"ok": not bad and not failing, "formulas": [c.to_json() for c in formulas], "entries": [
            {"id": r.entry.id, "source": r.entry.source, "place": r.entry.place, "printed": r.entry.printed,
             "unit": r.entry.unit, "derived": r.derived_text(), "derived_exact": r.derived_exact,
             "status": r.status, "cause": r.entry.discrepancy} for r in results]})
        return 1 if bad or failing else 0
    print("memsym reproduce: Zhang & Su (arXiv 2502.07846), DeepSeek-v3 at DP32 TP2 PP16 EP8")
    for source, title in (("paper", "printed numbers of the paper"), ("digest sec. 9", "exact re-derivations")):
        rows = [r for r in results if r.entry.source == source]
        if not rows:
            continue
        print(f"\n{title} ({len(rows)}; GiB = 2^30 bytes, the paper's \"GB\"; B params = billions of parameters)")
        cells = [(r.entry.place, _with_unit(_grouped(r.entry.printed), r.entry.unit),
                  _with_unit(r.derived_text(), r.entry.unit), STATUS_TEXT.get(r.status, r.status)) for r in rows]
        wp = max(len(c[0]) for c in cells) + 2   # the full place: rows are told apart
        wv = max(max(len(c[1]), len(c[2])) for c in cells) + 2
        print(f"  {'place':<{wp}}{'printed':>{wv}}{'derived':>{wv}}  status")
        for place, printed, derived, status in cells:
            print(f"  {place:<{wp}}{printed:>{wv}}{derived:>{wv}}  {status}")
    disc = [r for r in results if r.status == "discrepancy"]
    print(f"\ndiscrepancies with known causes ({len(disc)}):")
    for r in disc:
        print(textwrap.fill(f"{r.entry.place}: printed {_with_unit(r.entry.printed, r.entry.unit)}, derived "
                            f"{_with_unit(r.derived_text(), r.entry.unit)}: {r.entry.discrepancy}", width=100,
                            initial_indent="  ", subsequent_indent="      ", break_on_hyphens=False))
    n_ok = sum(1 for r in results if r.status == "agrees")
    print("\n" + "\n".join(summary_lines(formulas)))
    print(f"\nsummary: {len(results)} entries, {n_ok} agree, {len(disc)} known discrepancies, {len(bad)} unexplained; "
          f"{len(formulas)} printed formulas, {len(formulas) - len(failing)} verified, {len(failing)} failing")
    for r in bad:
        print(f"  {r.status}: {r.entry.place}: printed {_with_unit(r.entry.printed, r.entry.unit)}, derived "
              f"{_with_unit(r.derived_text(), r.entry.unit)}")
    for c in failing:
        print(f"  {c.status}: {c.formula.place}: {c.detail()}")
    return 1 if bad or failing else 0


#: how the text shows a status: a discrepancy recorded with its cause is explained, not alarming
STATUS_TEXT = {"discrepancy": "known discrepancy (explained)"}


def _grouped(text: str) -> str:
    """A printed integer with thousands separators (1510162432 -> 1,510,162,432), else as printed."""
    s = str(text)
    return f"{int(s):,}" if s.isdigit() else s


def _with_unit(text: str, unit: str) -> str:
    """A printed or derived number with its unit: GiB (the paper's "GB"), "B params", params, bytes."""
    text = str(text)
    if unit == "B":
        return (text if text.endswith("B") else text + "B") + " params"
    return f"{text} {dict(GB='GiB').get(unit, unit)}"
