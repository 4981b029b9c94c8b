"""Publishing: every requested format rendered in memory, then written atomically.

Files: ``report.tex`` / ``.md`` / ``.html`` / ``.pdf`` and one notebook per section,
``report-NN-<section>.ipynb`` (``ipynb``) and its HTML (``html``).  For ``ipynb`` the notebooks
execute in one kernel in a background thread while this process builds the report; for ``html``
alone no kernel runs: the cells' outputs are the blocks this process computed, formatted as the
kernel formats them (:func:`memsym.report.notebook.build_notebook`), so the HTML is the same.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from symbolic.files import write_atomic  # noqa: F401  (re-exported: memsym.report.write_atomic)
from symbolic.files import write_tree
from symbolic.exact import count

from . import cached, rendering
from .extras import NOTEBOOK_FORMATS, require_report
from .formats import DEFAULT_FORMATS, FORMATS, parse_formats  # noqa: F401  (re-exported)
from .pdf import TEX_ENGINES, PdfError, compile_pdf, find_tex_engine
from .sections import outline_report
import signal
from symbolic.resources import build_dir

#: Seconds to wait for a notebook's HTML from the helper process before converting it here.
CONVERT_TIMEOUT = 300


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
        # lazy: modules this module's importers do not need (loaded only on this path)
        from . import notebook as nbm
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
            progress: Optional[Callable[[str], None]] = None, converter=None, make_plan: bool = False) -> Published:
    """Build the report of ``ctx`` and write the requested formats to ``out_dir``.

    Everything is rendered in memory first and written at the end all or nothing
    (:func:`symbolic.files.write_tree`: a temporary folder beside ``out_dir``, renamed into
    place), so a failure, a full disk or Ctrl-C leaves ``out_dir`` as it was (a PDF failure
    still writes the other files and reports the engine's first error).  The report is laid out once: the notebooks are built from the outline
    and run while the same outline is computed for the other formats.  ``converter``: a
    :class:`~memsym.report.converter.Converter` the caller started (``memsym report`` starts it
    before loading the report's modules), used for the notebooks' HTML and closed here.  ``make_plan``
    (``memsym report``): when the report is computed afresh, store its plan (:mod:`.plan`, :mod:`.planmake`).
    """
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    formats = tuple(f for f in FORMATS if f in formats)
    result, outputs = Published(), {}
    say = progress or (lambda msg: None)
    kernel = None
    if any(f in formats for f in NOTEBOOK_FORMATS):
        require_report(formats)
    if "ipynb" in formats:   # executed notebooks; HTML alone shows the outputs computed here (no kernel)
        # lazy: notebook needs nbformat, nbclient and nbconvert (optional; only this path needs them)
        from . import notebook as nbm
        say("starting a kernel and laying out the notebooks")
        kernel = nbm.Kernel().start(warm=nbm.warm_source(ctx))  # it boots while the report is laid out
    run = None
    if converter is not None and ("html" not in formats or kernel is not None):
        converter.close(failed=True)            # HTML from the kernel's notebooks, or none
        converter = None
    try:
        if "html" in formats and kernel is None and converter is None:
            # lazy: modules this module's importers do not need (loaded only on this path)
            from .converter import Converter
            converter = Converter.start()       # loads nbconvert while the report is computed
        plan = outline_report(ctx)
        run = _NotebookRun(ctx, plan, kernel, say) if kernel is not None else None
        if converter is not None and cached.has_notebook_html(ctx, plan):
            converter.close(failed=True)        # the notebooks' HTML is in the cache: nothing to convert
            converter = None
        tracing = make_plan and _plannable(ctx, plan, formats)
        if tracing:
            from .planmake import tracer
            ctx.__dict__["_tracer"] = tracer(ctx.training.seq)
        try:
            report = _render_all(ctx, plan, out, formats, run, outputs, result, say, converter)
        finally:
            ctx.__dict__.pop("_tracer", None)
    except BaseException:
        if kernel is not None:
            _stop(kernel, run)                  # do not leave a kernel behind
        if converter is not None:
            converter.close(failed=True)
        raise
    if converter is not None:
        converter.close()
    say(f"writing {count(len(outputs), 'file')} to {out}")
    stale = () if "report.pdf" not in outputs else ("report.log",)  # the log of an earlier failed compile
    result.written.extend(write_tree(out, outputs, remove=stale))  # all or nothing (symbolic/files.py)
    if tracing and _traced(report):  # computed afresh (not read from the cache): its plan, once the files are out
        _make_plan(ctx, plan, report, outputs, formats, say)
    return result


def _make_plan(ctx, outline, report, outputs, formats, say) -> None:
    """Store the plan of ``report`` (:func:`memsym.report.planmake.make`); a plan is an optimisation: whatever
    goes wrong making it is said and the report stands as written."""
    from .planmake import make
    try:
        made = make(ctx, outline, report, outputs, formats, say)
    except Exception as exc:  # the files are written; the next report of this configuration is computed
        say(f"no plan: {type(exc).__name__}: {exc}")
        made = False
    say("making the report's plan" + ("" if made else ": none"))


def _plannable(ctx, outline, formats) -> bool:
    """Whether a plan of this report can be made (:mod:`.plan`: tex, md and html only, a key)."""
    from . import plan as P
    fmts = tuple(f for f in FORMATS if f in formats)
    return bool(fmts) and all(f in P.PLAN_FORMATS for f in fmts) and cached.report_key(ctx, outline) is not None


def _traced(report) -> bool:
    """Whether a number of ``report`` carries its expression (:class:`.plan.Traced`)."""
    from .plan import Traced
    for s in report.sections:
        for b in s.blocks:
            if isinstance(getattr(b, "value", None), Traced):
                return True
    return False


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
                result: Published, say, converter=None) -> None:
    """The rendering half of :func:`publish`: report formats, PDF, notebooks as they finish."""
    say(f"building the report ({ctx.model.name}, stage {ctx.stage.index})")
    pending: Dict[str, Tuple[object, object]] = {}
    done = None
    if run is None and converter is not None and "html" in formats:
        # each section's notebook goes to the helper as soon as the section is computed: the
        # conversions run while the next sections and the report's formats are computed here
        done = lambda i, section: _submit(ctx, plan, plan.sections[i], section, converter, pending)  # noqa: E731
    report = cached.complete_report(ctx, plan, progress=lambda m: say("  " + m), done=done)
    if "html" in formats and run is not None:
        report.notebooks = run.links()
    elif "html" in formats:
        # lazy: modules this module's importers do not need (loaded only on this path)
        from . import notebook as nbm
        report.notebooks = tuple((nbm.stem(s), s.key) for s in plan.sections if s.notebook)
    for fmt in ("tex", "md", "html"):
        if fmt in formats or (fmt == "tex" and "pdf" in formats):
            say(f"rendering report.{fmt}")
            outputs[f"report.{fmt}"] = cached.rendered(ctx, plan, report, fmt,
                                                       lambda fmt=fmt: rendering.render(report, fmt))
    if "pdf" in formats:                        # pdflatex runs while the kernel works
        _add_pdf(out, outputs, result, say)
    if run is None and "html" in formats:       # the notebooks' outputs from the blocks computed above
        outputs.update(cached.notebook_html(ctx, plan, report,
                                            lambda: _notebooks_html(ctx, plan, report, say, converter, pending)))
    if run is not None:
        from . import notebook as nbm
        if "html" in formats and not nbm.fast():
            nbm.html_exporter()                 # load nbconvert while the kernel works
        for stem, nb in run.results():          # convert each notebook as soon as it has run
            if "ipynb" in formats:
                outputs[f"{stem}.ipynb"] = nbm.to_ipynb(nb)
            if "html" in formats:
                outputs[f"{stem}.html"] = nbm.to_html(nb, stem)
    return report


def _submit(ctx, plan, outline, section, converter, pending: Dict[str, Tuple[object, object]]) -> None:
    """Send the notebook of ``outline`` (its blocks computed: ``section``) to ``converter``; kept in
    ``pending`` as {stem: (notebook, pending HTML)}."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from . import notebook as nbm
    if outline.notebook:  # checked against the schema by the helper, or here if it fails (_notebooks_html)
        nb = nbm.build_notebook(ctx, plan, outline, computed=section.blocks, sent=True)
        pending[nbm.stem(outline)] = (nb, converter.submit(nb, nbm.stem(outline)))


def _notebooks_html(ctx, plan, report, say, converter=None,
                    pending: Optional[Dict[str, Tuple[object, object]]] = None) -> Dict[str, str]:
    """{``report-NN-<section>.html``: HTML} of the notebooks, their outputs from ``report``'s blocks;
    converted by ``converter`` (a :class:`~memsym.report.converter.Converter`, which loaded nbconvert
    while the report was computed) when there is one, here if it fails or hangs.  ``pending``: the
    notebooks already sent to ``converter`` (:func:`_submit`), by stem."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from . import notebook as nbm
    pending = dict(pending or {})
    stems = [nbm.stem(o) for o in plan.sections if o.notebook]
    if converter is not None:
        say(f"converting {count(len(stems), 'notebook')} in a helper process")
        for o, d in zip(plan.sections, report.sections):
            if o.notebook and nbm.stem(o) not in pending:
                _submit(ctx, plan, o, d, converter, pending)
    out = {}
    for o, d in zip(plan.sections, report.sections):
        if o.notebook and nbm.stem(o) not in pending:
            say(f"converting notebook {nbm.stem(o)}")
            out[nbm.stem(o)] = nbm.to_html(nbm.build_notebook(ctx, plan, o, computed=d.blocks), nbm.stem(o))
    for stem, (nb, html) in pending.items():
        try:
            out[stem] = html.get(timeout=CONVERT_TIMEOUT)
        except Exception:                   # the helper process failed or hangs: convert here
            out[stem] = nbm.html_of_json(nbm.to_json(nb), stem)  # as a helper converts it
    return {f"{stem}.html": out[stem] for stem in stems}


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
