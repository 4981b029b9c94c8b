"""Publishing: every requested format rendered in memory, then written all or nothing."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from symbolic.exact import count
from symbolic.files import write_tree
from symbolic.resources import build_dir

from . import notebook as nbm
from . import rendering
from .extras import NOTEBOOK_FORMATS, require_report
from .formats import DEFAULT_FORMATS, FORMATS, parse_formats  # noqa: F401  (re-exported)
from .pdf import TEX_ENGINES, PdfError, compile_pdf, find_tex_engine
from .sections import complete_report, outline_report


@dataclass
class Published:
    """What :func:`publish` did: files written (sorted), notes for the user, a PDF error."""

    written: List = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    error: Optional[str] = None


def publish(ctx, out_dir=None, formats: Sequence[str] = DEFAULT_FORMATS,
            progress: Optional[Callable[[str], None]] = None) -> Published:
    """Build the report of ``ctx`` and write ``formats`` to ``out_dir``, all or nothing (a PDF failure is reported)."""
    out = Path(out_dir) if out_dir is not None else build_dir()  # ./memsym-report, never the package's tree
    formats = tuple(f for f in FORMATS if f in formats)
    result, outputs = Published(), {}
    say = progress or (lambda msg: None)
    notebooks = any(f in formats for f in NOTEBOOK_FORMATS)
    if notebooks:
        require_report(formats)
    plan = outline_report(ctx)
    say(f"building the report ({ctx.model.name}, stage {ctx.stage.index})")
    report = complete_report(ctx, plan, progress=lambda m: say("  " + m))
    if "html" in formats:
        report.notebooks = tuple((nbm.stem(s), s.key) for s in plan.sections if s.notebook)
    for fmt in ("tex", "md", "html"):
        if fmt in formats or (fmt == "tex" and "pdf" in formats):
            say(f"rendering report.{fmt}")
            outputs[f"report.{fmt}"] = rendering.render(report, fmt)
    if "pdf" in formats:
        _add_pdf(out, outputs, result, say)
    for outline, section in zip(plan.sections, report.sections):
        if notebooks and outline.notebook:
            stem = nbm.stem(outline)
            say(f"converting notebook {stem}")
            nb = nbm.build_notebook(ctx, plan, outline, section.blocks)
            if "ipynb" in formats:
                outputs[f"{stem}.ipynb"] = nbm.to_ipynb(nb)
            if "html" in formats:
                outputs[f"{stem}.html"] = nbm.to_html(nb, stem)
    say(f"writing {count(len(outputs), 'file')} to {out}")
    stale = () if "report.pdf" not in outputs else ("report.log",)  # the log of an earlier failed compile
    result.written.extend(write_tree(out, outputs, remove=stale))  # all or nothing (symbolic/files.py)
    return result


def _add_pdf(out: Path, outputs: Dict[str, object], result: Published, say) -> None:
    """``report.pdf`` from ``outputs['report.tex']``, or a note (no engine) or an error (and its log)."""
    engine = find_tex_engine()
    if engine is None:
        result.notes.append(f"no TeX engine found on PATH ({', '.join(TEX_ENGINES)}): wrote report.tex only; "
                            f"install one (e.g. Debian texlive-latex-recommended) and compile it")
        return
    try:
        outputs["report.pdf"] = compile_pdf(outputs["report.tex"], engine, say)
    except PdfError as exc:
        result.error = f"{exc} (full log: {out / 'report.log'})"
        if exc.log:
            outputs["report.log"] = exc.log
