"""Notebooks, one per section of the report: a configuration cell building a Context ``S``, then the section's
equations, tables and terms (cells from ``templates/notebook/``), with the report's values as a kernel formats them
(no kernel runs; fixed ids and counts: byte-identical); HTML by nbconvert with ``templates/nbconvert/memsym``.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from functools import lru_cache
from itertools import groupby
from typing import Sequence

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
    """``cfg.Layout(dp=32, ...)``: the fields in ``keep``, and the others that differ from their default."""
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
    """The model as notebook code: ``cfg.load_model(name)`` for a preset, else its fields."""
    if model.source == "preset":
        return f"cfg.load_model({model.name!r})"
    fields = tuple(f.name for f in dataclasses.fields(model))
    if type(model) is ModelSpec:
        return _call("cfg.ModelSpec", model, fields)
    cls = type(model)  # another family's spec, from its config module
    return _call(f"importlib.import_module({cls.__module__!r}).{cls.__qualname__}", model, fields)


def family_source(model) -> str:
    """The lines registering ``model``'s family in a kernel when it is not shipped (a test's toy); else empty."""
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


def build_notebook(ctx, report, section, computed: Sequence):
    """The notebook of one report section (nbformat.v4), each code cell with the outputs a kernel records for it
    (IPython's display formatter of ``computed``, the section's blocks, and the terms)."""
    with report_extra():
        from nbformat import v4
    env = environment("notebook")
    cells = []

    def add(source, shows=None, display=False):
        cell_id = f"{section.key}-{len(cells):02d}"  # stable ids (not nbformat's random ones)
        if shows is None:
            cells.append(v4.new_markdown_cell(source, id=cell_id))
            return
        n = sum(c.cell_type == "code" for c in cells) + 1
        cells.append(v4.new_code_cell(source, id=cell_id, execution_count=n,
                                      outputs=[_output(obj, display, n) for obj in shows]))

    render = lambda name, **kw: env.get_template(f"notebook/{name}").render(**kw).rstrip("\n")
    add(render("title.md.j2", report=report, section=section))
    add(setup_source(ctx), shows=())
    for equations, run in groupby(enumerate(section.blocks), key=lambda item: item[1].kind == "equation"):
        run = list(run)
        if equations:  # a run of equations: the first term as Jupyter renders it, then one cell showing them all
            (first, block), last = run[0], run[-1][0]
            add(render("term.py.j2", block=block), shows=(ctx.terms[block.term_id],))
            add(render("equations.py.j2", blocks=[b for _, b in run]), shows=computed[first:last + 1], display=True)
            continue
        for i, block in run:
            if block.kind == "paragraph":
                add(render_block(block, "md").strip("\n"))
            else:
                add(render("table.py.j2", block=block), shows=computed[i:i + 1])
    return v4.new_notebook(cells=cells, metadata={"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"},
                                                  "title": f"{section.number}. {section.title}"})


@lru_cache(maxsize=None)
def _formatter():
    """IPython's display formatter: what the kernel turns a cell's value into (its MIME bundle); one per process."""
    with report_extra():
        from IPython.core.formatters import DisplayFormatter
    return DisplayFormatter()


def _output(obj, display: bool, count: int):
    """The output a kernel records for ``obj``: the value of cell ``count`` (execute_result) or ``display(obj)``."""
    from nbformat import v4
    data, metadata = _formatter().format(obj)
    if display:
        return v4.new_output("display_data", data=data, metadata=metadata)
    return v4.new_output("execute_result", data=data, metadata=metadata, execution_count=count)


def to_ipynb(nb) -> str:
    """The notebook's ``.ipynb`` text."""
    with report_extra():
        import nbformat
    return nbformat.writes(nb) + "\n"


@lru_cache(maxsize=None)
def html_exporter():
    """nbconvert's HTMLExporter with the ``memsym`` template of ``templates/nbconvert/`` (one per process)."""
    with report_extra("HTML notebooks"):
        from nbconvert import HTMLExporter
    # optimistic_validation: the schema checked once, after the preprocessors
    return HTMLExporter(template_name=NBCONVERT_TEMPLATE, optimistic_validation=True,
                        extra_template_basedirs=[str(TEMPLATES_DIR / "nbconvert")])


def to_html(nb, name: str) -> str:
    """The notebook's HTML (:func:`html_exporter`, offline MathML)."""
    body, _ = html_exporter().from_notebook_node(nb, resources={"metadata": {"name": name},
                                                                "memsym_math": math_scripts(notebook=True)})
    return body
