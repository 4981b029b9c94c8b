"""``report.pdf``: the generated ``.tex`` compiled by a TeX engine found on PATH."""
from __future__ import annotations

from typing import Callable, Optional
import shutil
import os
import subprocess
import tempfile
from pathlib import Path

#: TeX engines tried in order for ``--format pdf``.
TEX_ENGINES = ("pdflatex", "xelatex", "lualatex", "latexmk")


class PdfError(RuntimeError):
    """The TeX engine failed on the generated ``.tex`` (a template bug, not bad input)."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


def find_tex_engine() -> Optional[str]:
    return next((engine for engine in TEX_ENGINES if shutil.which(engine)), None)


def compile_pdf(tex: str, engine: str, progress: Optional[Callable[[str], None]] = None) -> bytes:
    """The PDF's bytes of ``tex`` (two passes, fixed dates, ``-no-shell-escape``: its text can run nothing)."""
    env = dict(os.environ, SOURCE_DATE_EPOCH="0", FORCE_SOURCE_DATE="1")
    if engine == "latexmk":
        cmds = [["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "report.tex"]]
    else:
        cmds = [[engine, "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "report.tex"]] * 2
    with tempfile.TemporaryDirectory(prefix="memsym-tex-") as d:
        Path(d, "report.tex").write_text(tex, encoding="utf-8")
        for i, cmd in enumerate(cmds):
            if progress:
                progress(f"compiling report.pdf with {engine}"
                         + (f" (pass {i + 1}/{len(cmds)})" if len(cmds) > 1 else ""))
            try:
                run = subprocess.run(cmd, cwd=d, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
            except subprocess.TimeoutExpired:
                raise PdfError(f"{engine} did not finish within 600 s") from None
            log_path = Path(d, "report.log")
            log = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else \
                run.stdout.decode("utf-8", "replace")
            if run.returncode != 0 or not Path(d, "report.pdf").exists():
                first = next((ln for ln in log.splitlines() if ln.startswith("!")), f"exit code {run.returncode}")
                raise PdfError(f"{engine} failed on report.tex: {first.lstrip('! ').strip()}", log)
        return Path(d, "report.pdf").read_bytes()
