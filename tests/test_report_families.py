"""The report of a model after DeepSeek-V3 (issue 27): DeepSeek-V3.2-Exp's (the DeepSeek family's sections, with
its indexer) and DeepSeek-V4-Flash's (its own family's sections and equations: no MLA) compile with pdflatex
without an overfull box wider than 1 pt, in every format."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_pdf_overflow import overfull

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("model,has,lacks", [
    ("paper/models/deepseek-v3.2-exp.json", ("params.indexer", "act.mla.layer", "n_{I}"), ("act.csa.layer",)),
    ("paper/models/deepseek-v4-flash.json", ("params.compressor.csa", "act.csa.layer", "act.hca.layer", "params.hc",
                                             "T_{C}", "n_{hc}"), ("params.mla", "act.mla.layer")),
])
def test_report_of_a_newer_model(tmp_path, model, has, lacks):
    if not shutil.which("pdflatex"):
        if os.environ.get("MEMSYM_REQUIRE_TEX"):
            pytest.fail("MEMSYM_REQUIRE_TEX is set but pdflatex is not installed")
        pytest.skip("pdflatex is not installed")
    out = tmp_path / "report"
    subprocess.run([sys.executable, "-m", "memsym", "report", "--model", model, "--format", "tex,pdf,md,html",
                    "--out", str(out)], cwd=ROOT, check=True, capture_output=True, timeout=900)
    for name in ("report.tex", "report.pdf", "report.md", "report.html"):
        assert (out / name).stat().st_size > 10_000, name
    tex = (out / "report.tex").read_text(encoding="utf-8")
    for x in has:
        assert x.replace("_", "\\_") in tex or x in tex, x
    for x in lacks:
        assert x.replace("_", "\\_") not in tex and x not in tex, x
    for _ in range(2):  # the second run sees the longtable widths of the first
        subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "report.tex"], cwd=out,
                       capture_output=True, timeout=300, check=True)
    log = (out / "report.log").read_text(encoding="utf-8", errors="replace")
    assert [line for pts, line in overfull(log) if pts > 1.0] == []
