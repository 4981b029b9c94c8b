"""The PDF of the report has no overfull box wider than 1 pt: pdflatex's log of report.tex is parsed
(too-wide tables wrap their long text columns, templates/macros.tex.j2)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from derivations import config as cfg

OVERFULL = re.compile(r"^Overfull \\[hv]box \((\d+(?:\.\d+)?)pt too (?:wide|high)\)", re.M)


def overfull(log: str):
    """[(points, line of the log)] of every overfull box pdflatex reported."""
    return [(float(m.group(1)), m.group(0)) for m in OVERFULL.finditer(log)]


def test_overfull_parser():
    log = "x\nOverfull \\hbox (143.39915pt too wide) in alignment at lines 459--464\nOverfull \\hbox (0.5pt too wide)\n"
    assert [p for p, _ in overfull(log)] == [143.39915, 0.5]


def test_pdf_log_has_no_overfull_hbox_over_1pt(tmp_path):
    if not shutil.which("pdflatex"):
        if os.environ.get("MEMSYM_REQUIRE_TEX"):
            pytest.fail("MEMSYM_REQUIRE_TEX is set but pdflatex is not installed")
        pytest.skip("pdflatex is not installed")
    from memsym.report import Context, publish
    ctx = Context.create(cfg.DEFAULT_MODEL, cfg.Layout(), cfg.Training(), 1)
    publish(ctx, str(tmp_path), ("tex",), lambda m: None)
    for _ in range(2):  # the second run sees the longtable widths of the first
        subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "report.tex"], cwd=tmp_path,
                       capture_output=True, timeout=300, check=True)
    log = (tmp_path / "report.log").read_text(encoding="utf-8", errors="replace")
    wide = [line for pts, line in overfull(log) if pts > 1.0]
    assert wide == []
