"""Publishing: every requested format rendered in memory, then written atomically.

Files: ``report.tex`` / ``.md`` / ``.html`` / ``.pdf`` and one notebook per section,
``report-NN-<section>.ipynb`` (``ipynb``) and its HTML (``html``).  For ``ipynb`` the notebooks
execute in one kernel in a background thread while this process builds the report; for ``html``
alone no kernel runs: the cells' outputs are the blocks this process computed, formatted as the
kernel formats them (:func:`memsym.report.notebook.build_notebook`), so the HTML is the same.
"""
from __future__ import annotations

import queue
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from symbolic.exact import count
from symbolic.files import write_atomic  # noqa: F401  (re-exported: memsym.report.write_atomic)
from symbolic.files import write_tree
from symbolic.resources import build_dir

from . import notebook as nbm
from . import rendering
from .extras import NOTEBOOK_FORMATS, require_report
from .formats import DEFAULT_FORMATS, FORMATS, parse_formats  # noqa: F401  (re-exported)
from .pdf import TEX_ENGINES, PdfError, compile_pdf, find_tex_engine
from .sections import complete_report, outline_report


def default_out_dir() -> Path:
    """``./memsym-report`` under the current directory (never the installed package's tree)."""
    return build_dir()


@dataclass
class Published:
    """What :func:`publish` did: files written (sorted), notes for the user, a PDF error."""

    written: List = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    error: Optional[str] = None


class _NotebookRun:
    """The sections' notebooks executing in ``kernel`` on a background thread."""

    def __init__(self, ctx, plan, kernel, say):
        self.kernel, self.finished = kernel, queue.Queue()
        self.items = [(nbm.stem(s), s.key, nbm.build_notebook(ctx, plan, s)) for s in plan.sections if s.notebook]
        self.worker = threading.Thread(target=self._run, args=(say,), name="memsym-notebooks", daemon=True)
        self.worker.start()

    def _run(self, say) -> None:
        try:
            self.kernel.execute([nb for _, _, nb in self.items], progress=say,
                                done=lambda i, nb: self.finished.put(i))
        except BaseException as exc:  # re-raised in the main thread
            self.finished.put(exc)
        finally:
            self.kernel.shutdown()

    def links(self) -> Tuple[Tuple[str, str], ...]:
        return tuple((stem, key) for stem, key, _ in self.items)

    def results(self):
        """(stem, executed notebook) as each one finishes; a failure is re-raised here."""
        for _ in self.items:
            item = self.finished.get()
            if isinstance(item, BaseException):
                self.worker.join()
                raise item
            stem, _, nb = self.items[item]
            yield stem, nb
        self.worker.join()


def publish(ctx, out_dir=None, formats: Sequence[str] = DEFAULT_FORMATS,
            progress: Optional[Callable[[str], None]] = None) -> Published:
    """Build the report of ``ctx`` and write the requested formats to ``out_dir``.

    Everything is rendered in memory first and written at the end all or nothing
    (:func:`symbolic.files.write_tree`: a temporary folder beside ``out_dir``, renamed into
    place), so a failure, a full disk or Ctrl-C leaves ``out_dir`` as it was (a PDF failure
    still writes the other files and reports the engine's first error).  The report is laid out once:
    the notebooks are built from the outline and run while the same outline is computed for the other formats.
    """
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    formats = tuple(f for f in FORMATS if f in formats)
    result, outputs = Published(), {}
    say = progress or (lambda msg: None)
    kernel = None
    if any(f in formats for f in NOTEBOOK_FORMATS):
        require_report(formats)
    if "ipynb" in formats:   # executed notebooks; HTML alone shows the outputs computed here (no kernel)
        say("starting a kernel and laying out the notebooks")
        kernel = nbm.Kernel().start(warm=nbm.warm_source(ctx))  # it boots while the report is laid out
    run = None
    try:
        plan = outline_report(ctx)
        run = _NotebookRun(ctx, plan, kernel, say) if kernel is not None else None
        _render_all(ctx, plan, out, formats, run, outputs, result, say)
    except BaseException:
        if kernel is not None:
            _stop(kernel, run)                  # do not leave a kernel behind
        raise
    say(f"writing {count(len(outputs), 'file')} to {out}")
    stale = () if "report.pdf" not in outputs else ("report.log",)  # the log of an earlier failed compile
    result.written.extend(write_tree(out, outputs, remove=stale))  # all or nothing (symbolic/files.py)
    return result


def _stop(kernel, run: Optional[_NotebookRun]) -> None:
    """Stop the notebooks' kernel after a failure or Ctrl-C.  While the worker thread runs a
    notebook, the kernel process is killed and the worker, which then fails at once, shuts its
    client down itself: tearing the client's sockets down from this thread as well leaves zmq
    waiting for ever.  Before the worker starts, the kernel is shut down here."""
    if run is None or not run.worker.is_alive():
        kernel.shutdown()
        return
    try:
        if kernel.km is not None and kernel.km.has_kernel:
            kernel.km.signal_kernel(signal.SIGKILL)
    except Exception:  # already gone
        pass
    run.worker.join(timeout=2)
    if run.worker.is_alive() and kernel._dir is not None:  # still waiting on the dead kernel: the
        try:                                                 # process is ending, leave no folder
            kernel._dir.cleanup()
        except OSError:
            pass


def _render_all(ctx, plan, out: Path, formats, run: Optional[_NotebookRun], outputs: Dict[str, object],
                result: Published, say) -> None:
    """The rendering half of :func:`publish`: report formats, PDF, notebooks as they finish."""
    say(f"building the report ({ctx.model.name}, stage {ctx.stage.index})")
    report = complete_report(ctx, plan, progress=lambda m: say("  " + m))
    if "html" in formats and run is not None:
        report.notebooks = run.links()
    elif "html" in formats:
        report.notebooks = tuple((nbm.stem(s), s.key) for s in plan.sections if s.notebook)
    for fmt in ("tex", "md", "html"):
        if fmt in formats or (fmt == "tex" and "pdf" in formats):
            say(f"rendering report.{fmt}")
            outputs[f"report.{fmt}"] = rendering.render(report, fmt)
    if "pdf" in formats:                        # pdflatex runs while the kernel works
        _add_pdf(out, outputs, result, say)
    if run is None and "html" in formats:       # the notebooks' outputs from the blocks computed above
        outputs.update(_notebooks_html(ctx, plan, report, say))
    if run is not None:
        if "html" in formats:
            nbm.html_exporter()                 # load nbconvert while the kernel works
        for stem, nb in run.results():          # convert each notebook as soon as it has run
            if "ipynb" in formats:
                outputs[f"{stem}.ipynb"] = nbm.to_ipynb(nb)
            if "html" in formats:
                outputs[f"{stem}.html"] = nbm.to_html(nb, stem)


def _notebooks_html(ctx, plan, report, say) -> Dict[str, str]:
    """{``report-NN-<section>.html``: HTML} of the notebooks, their outputs from ``report``'s blocks."""
    out = {}
    for o, d in zip(plan.sections, report.sections):
        if o.notebook:
            say(f"converting notebook {nbm.stem(o)}")
            out[f"{nbm.stem(o)}.html"] = nbm.to_html(nbm.build_notebook(ctx, plan, o, computed=d.blocks), nbm.stem(o))
    return out


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
