"""Notebooks: one executable notebook per section of the report (nbformat, nbclient, nbconvert).

Each notebook starts with a configuration cell (model, layout, training, stage: the
report's, editable) that builds a :class:`memsym.report.Context` ``S``; the cells below
show the section's equations (``S.equation(id)``: the paper's form, the closed form, the
value) and tables (``S.table(key)``) and the term itself (``S.terms[id]``, which Jupyter
renders as LaTeX through ``Term._repr_latex_``).  A user overrides a symbol with
``S.subs[nt.s] = 8192`` and re-runs.

Cell sources come from the templates in ``templates/notebook/``.  Notebooks are executed
with nbclient in one kernel for all of them (the venv's python, found without any
installed kernel spec), converted to HTML with nbconvert through the ``memsym`` template
in ``templates/nbconvert/``, and normalised so regeneration is byte-identical: stable cell
ids, execution counts renumbered per notebook, no timing metadata.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from functools import lru_cache
from typing import Callable, Optional, Sequence

from derivations import families
from derivations.config import ModelSpec
from symbolic.resources import TEMPLATES_DIR

from .extras import report_extra
from .offline import math_scripts
from .rendering import environment, render_block

#: The nbconvert template (templates/nbconvert/memsym) the notebooks' HTML is made with.
NBCONVERT_TEMPLATE = "memsym"
#: The kernel spec written into every notebook (what Jupyter shows when a user opens it).
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def stem(section) -> str:
    """File stem of a section's notebook: ``report-07-activations``."""
    return f"report-{section.number:02d}-{section.key}"


def _call(cls_name: str, obj, keep: Sequence[str] = ()) -> str:
    """``cfg.Layout(dp=32, ...)``: the fields in ``keep`` always (the ones a reader edits),
    the others only when they differ from their default."""
    args = []
    for f in dataclasses.fields(obj):
        val = getattr(obj, f.name)
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        if f.name in keep or val != default:  # a nested dataclass (Training.conventions) as cfg.<Class>(...)
            text = _call("cfg." + type(val).__name__, val) if dataclasses.is_dataclass(val) else repr(val)
            args.append(f"{f.name}={text}")
    return f"{cls_name}({', '.join(args)})"


def model_source(model) -> str:
    """The model as notebook code: ``cfg.load_model('deepseek-v3')`` for a preset, else its fields
    (``cfg.ModelSpec(...)``): the notebook evaluates the model the report did, never a config file read
    again (it may have changed since)."""
    if model.source == "preset":
        return f"cfg.load_model({model.name!r})"
    fields = tuple(f.name for f in dataclasses.fields(model))
    if type(model) is ModelSpec:
        return _call("cfg.ModelSpec", model, fields)
    cls = type(model)  # another family's spec, from its config module
    return _call(f"importlib.import_module({cls.__module__!r}).{cls.__qualname__}", model, fields)


def family_source(model) -> str:
    """The lines that make ``model``'s family known to a kernel when it is not one of derivations/families/
    (registered in the report's process, such as a test's toy): its package's folder on sys.path, the
    family registered and its evaluators generated, as the report's process did.  Empty for DeepSeek."""
    fam = families.get(model.family)
    if fam.config.startswith("derivations.families."):
        return ""
    package = fam.config.rsplit(".", 1)[0]
    root = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules[package].__file__)))
    return (f"import importlib, sys\n"
            f"sys.path.insert(0, {root!r})  # the family {fam.name!r}: not shipped with memsym\n"
            f"from derivations import families as _families, generate as _generate\n"
            f"_generate.install(_families.register(importlib.import_module({package!r}).FAMILY))\n")


def setup_source(ctx) -> str:
    env = environment("notebook")
    return env.get_template("notebook/setup.py.j2").render(
        family=family_source(ctx.model),
        model=model_source(ctx.model), source=None if ctx.model.source == "preset" else ctx.model.source,
        layout=_call("cfg.Layout", ctx.layout, ("dp", "tp", "pp", "ep", "etp", "cp")),
        training=_call("cfg.Training", ctx.training, ("mbs", "seq", "zero", "recompute")),
        stage=ctx.stage.index).rstrip("\n")


def build_notebook(ctx, report, section, computed: Optional[Sequence] = None):
    """The notebook of one report section (nbformat.v4): unexecuted, or with ``computed`` (the section's
    blocks computed, :func:`memsym.report.sections.complete_report`) its code cells' outputs filled in as
    the kernel shows them (IPython's display formatter of each block and term), without a kernel."""
    with report_extra():
        # lazy: nbformat (only this path needs it)
        from nbformat import v4
    env = environment("notebook")
    cells = []

    def add(kind, source, shows=(), display=False):
        cell_id = f"{section.key}-{len(cells):02d}"  # stable ids (not nbformat's random ones)
        if kind == "md":
            cells.append(v4.new_markdown_cell(source, id=cell_id))
            return
        cell = v4.new_code_cell(source, id=cell_id)
        if computed is not None:
            cell.outputs = [_output(obj, display) for obj in shows]
        cells.append(cell)

    add("md", env.get_template("notebook/title.md.j2").render(report=report, section=section).rstrip("\n"))
    add("code", setup_source(ctx))
    blocks = list(section.blocks)
    i = 0
    while i < len(blocks):
        block = blocks[i]
        if block.kind == "paragraph":
            add("md", render_block(block, "md").strip("\n"))
        elif block.kind == "table":
            add("code", env.get_template("notebook/table.py.j2").render(block=block).rstrip("\n"),
                shows=computed[i:i + 1] if computed is not None else ())
        else:
            # a run of equations: the first term as Jupyter renders it, then one cell showing them all
            # (a cell costs ~15 ms of kernel round trip; the report's sections hold dozens of terms)
            first = i
            run = [block]
            while i + 1 < len(blocks) and blocks[i + 1].kind == "equation":
                i += 1
                run.append(blocks[i])
            add("code", env.get_template("notebook/term.py.j2").render(block=block).rstrip("\n"),
                shows=(ctx.terms[block.term_id],) if computed is not None else ())
            add("code", env.get_template("notebook/equations.py.j2").render(blocks=run).rstrip("\n"),
                shows=computed[first:i + 1] if computed is not None else (), display=True)
        i += 1
    nb = v4.new_notebook(cells=cells, metadata={"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"},
                                                "title": f"{section.number}. {section.title}"})
    if computed is not None:
        normalise(nb)
    return nb


@lru_cache(maxsize=None)
def _formatter():
    """IPython's display formatter: what the kernel turns a cell's value into (its MIME bundle); one per process."""
    with report_extra():
        # lazy: IPython (only this path needs it)
        from IPython.core.formatters import DisplayFormatter
    return DisplayFormatter()


def _output(obj, display: bool):
    """The output a kernel records for ``obj``: a cell's value (execute_result) or ``display(obj)``."""
    # lazy: nbformat (only this path needs it)
    from nbformat import v4
    data, metadata = _formatter().format(obj)
    if display:
        return v4.new_output("display_data", data=data, metadata=metadata)
    return v4.new_output("execute_result", data=data, metadata=metadata, execution_count=None)


def to_ipynb(nb) -> str:
    """The notebook's ``.ipynb`` text."""
    with report_extra():
        # lazy: nbformat (only this path needs it)
        import nbformat
    return nbformat.writes(nb) + "\n"


@lru_cache(maxsize=None)
def html_exporter():
    """nbconvert's HTMLExporter with the ``memsym`` template of ``templates/nbconvert/`` (one per process)."""
    with report_extra("HTML notebooks"):
        # lazy: nbconvert (only this path needs it)
        from nbconvert import HTMLExporter
    # optimistic_validation: the notebook is checked against the schema once, after the preprocessors,
    # not after each of them (the same notebooks pass or fail)
    return HTMLExporter(template_name=NBCONVERT_TEMPLATE, optimistic_validation=True,
                        extra_template_basedirs=[str(TEMPLATES_DIR / "nbconvert")])


def to_html(nb, name: str) -> str:
    """The notebook's HTML: nbconvert's HTMLExporter with the ``memsym`` template (offline MathML for LaTeX,
    :func:`memsym.report.offline.math_scripts`)."""
    body, _ = html_exporter().from_notebook_node(nb, resources={"metadata": {"name": name},
                                                                "memsym_math": math_scripts(notebook=True)})
    return body


class _VenvKernelSpecs:
    """Kernel specs resolved to this interpreter: a fresh venv with ipykernel installed needs
    no ``jupyter kernelspec install`` and a user-level ``python3`` spec cannot redirect us."""

    @staticmethod
    def manager():
        with report_extra():
            # lazy: modules this module's importers do not need (loaded only on this path)
            from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

        class VenvKernelSpecManager(KernelSpecManager):
            def get_kernel_spec(self, kernel_name, *args, **kwargs):
                return KernelSpec(argv=[sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher",
                                        "-f", "{connection_file}"],
                                  display_name=KERNELSPEC["display_name"], language="python",
                                  env={"PYDEVD_DISABLE_FILE_VALIDATION": "1"})

            def find_kernel_specs(self):
                return {KERNELSPEC["name"]: ""}

        return VenvKernelSpecManager()


class NotebookError(RuntimeError):
    """A notebook cell failed while executing (a bug in memsym or a template, not bad input)."""


class Kernel:
    """One IPython kernel (this interpreter) shared by the notebooks of a report.

    ``start()`` launches it and returns at once, so the kernel boots while the caller lays
    out the notebooks; ``execute()`` runs notebooks in it, in order, through one client."""

    def __init__(self):
        self.km = None
        self.kc = None
        self._dir = None

    def start(self, warm: str = "") -> "Kernel":
        """Launch the kernel; ``warm`` is code it runs first (imports), while we keep working."""
        with report_extra():
            # lazy: modules this module's importers do not need (loaded only on this path)
            from jupyter_client import KernelManager
        self._dir = tempfile.TemporaryDirectory(prefix="memsym-kernel-")
        cwd = self._dir.name
        self.km = KernelManager(kernel_name=KERNELSPEC["name"], kernel_spec_manager=_VenvKernelSpecs.manager(),
                                transport="ipc")
        self.km.connection_file = os.path.join(cwd, "kernel.json")
        self.km.ip = os.path.join(cwd, "kernel-ipc")
        self._null = open(os.devnull, "w")
        self.km.start_kernel(cwd=cwd, stdout=self._null, stderr=self._null)
        if warm:
            self.kc = self.km.client()
            self.kc.start_channels()
            self.kc.execute(warm, silent=True, store_history=False)
        return self

    def execute(self, notebooks: Sequence, timeout: int = 120, progress: Optional[Callable[[str], None]] = None,
                done: Optional[Callable[[int, object], None]] = None) -> None:
        """Execute ``notebooks`` in place (``done(i, nb)`` after each).  Each notebook re-imports
        what it uses, so it runs the same alone in Jupyter; execution counts are renumbered
        per notebook afterwards."""
        with report_extra():
            # lazy: nbformat (only this path needs it)
            from nbclient import NotebookClient
            from nbclient.exceptions import CellExecutionError
        if self.km is None:
            self.start()
        for i, nb in enumerate(notebooks):
            if progress:
                progress(f"executing notebook {i + 1}/{len(notebooks)}: {nb.metadata.get('title', '')}")
            client = NotebookClient(nb, km=self.km, timeout=timeout, record_timing=False, allow_errors=False,
                                    kernel_name=KERNELSPEC["name"], resources={"metadata": {"path": self._dir.name}})
            client.kc = self.kc
            try:
                client.execute(cleanup_kc=False)
            except CellExecutionError as exc:
                lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
                raise NotebookError(f"notebook {nb.metadata.get('title', '?')!r} failed: "
                                    f"{lines[-1] if lines else exc}") from None
            self.kc = client.kc
            normalise(nb)
            if done:
                done(i, nb)

    def shutdown(self) -> None:
        try:
            if self.kc is not None:
                self.kc.stop_channels()
            if self.km is not None and self.km.has_kernel:
                self.km.shutdown_kernel(now=True)
        finally:
            if self._dir is not None:
                self._null.close()
                self._dir.cleanup()
            self.km = self.kc = self._dir = None

    def __enter__(self):
        return self if self.km is not None else self.start()

    def __exit__(self, *exc):
        self.shutdown()


def execute(notebooks: Sequence, timeout: int = 120, progress: Optional[Callable[[str], None]] = None) -> None:
    """Execute ``notebooks`` in place, in order, in one kernel (a kernel start per notebook
    would dominate the time)."""
    with Kernel() as kernel:
        kernel.execute(notebooks, timeout, progress)


def normalise(nb) -> None:
    """Remove what varies between runs: execution counts follow the cells (1, 2, ...),
    no timing or kernel metadata, the kernel spec and language info fixed."""
    n = 0
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        n += 1
        cell.execution_count = n
        for out in cell.get("outputs", []):
            if "execution_count" in out:
                out["execution_count"] = n
            out.get("metadata", {}).pop("execution", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata.pop("widgets", None)


def warm_source(ctx) -> str:
    """What the kernel imports and builds before the first notebook (same process: later cells reuse it)."""
    return (family_source(ctx.model) + "import memsym.report, symbolic.render, symbolic.numeric\n"
            "from derivations import config as cfg\n"
            "from derivations import build as _build\n"
            f"_build({model_source(ctx.model)})\n"
            "memsym.report.rendering.environment('md').get_template('macros.md.j2')\n"
            "del cfg, _build\n")
