"""Notebooks: one per report section, executed with nbclient, converted with nbconvert."""
import sys

import pytest

from derivations import notation as nt
from memsym import report as rp
from memsym.report import notebook as nbm
from memsym.report.text import report_names
from symbolic.numeric import exact
from symbolic.render import term_latex

nbformat = pytest.importorskip("nbformat")   # the report extra


@pytest.fixture(scope="module")
def ctx():
    return rp.Context.create()


@pytest.fixture(scope="module")
def published(ctx, tmp_path_factory):
    """Every notebook executed once (one kernel), as ipynb and HTML."""
    out = tmp_path_factory.mktemp("nb")
    res = rp.publish(ctx, out, ("ipynb", "html"))
    return out, res


def test_one_executed_notebook_per_section(published, ctx):
    out, res = published
    sections = rp.build_report(ctx, outline=True).sections
    names = sorted(p.name for p in res.written)
    for s in sections:
        assert f"{nbm.stem(s)}.ipynb" in names and f"{nbm.stem(s)}.html" in names
    assert "report.html" in names
    for s in sections:
        nb = nbformat.read(out / f"{nbm.stem(s)}.ipynb", as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
        for c in code:
            assert c.outputs or c is code[0], (s.key, c.source)      # every cell but the setup shows something
            assert all(o.output_type != "error" for o in c.outputs)
            assert "execution" not in c.metadata
        assert nb.metadata.kernelspec.name == "python3"


def test_html_alone_needs_no_kernel_and_matches_the_executed_notebooks(published, ctx, tmp_path, monkeypatch):
    """--format html without ipynb fills the cells' outputs from the report's own blocks (IPython's
    display formatter, no kernel): the notebooks and their HTML equal the executed ones byte for byte."""
    out, _ = published
    monkeypatch.setattr(nbm.Kernel, "start", lambda self, warm="": pytest.fail("a kernel was started"))
    rp.publish(ctx, tmp_path, ("html",))
    plan = rp.outline_report(ctx)
    done = rp.complete_report(ctx, plan)
    for outline, section in zip(plan.sections, done.sections):
        stem = nbm.stem(outline)
        assert (tmp_path / f"{stem}.html").read_bytes() == (out / f"{stem}.html").read_bytes(), stem
        nb = nbm.build_notebook(ctx, plan, outline, computed=section.blocks)
        assert nbm.to_ipynb(nb) == (out / f"{stem}.ipynb").read_text(), stem
    assert (tmp_path / "report.html").read_bytes() == (out / "report.html").read_bytes()


def _outputs(path, mime):
    nb = nbformat.read(path, as_version=4)
    return "\n".join(o.get("data", {}).get(mime, "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_activation_notebook_shows_the_sympy_formulas(published, ctx):
    out, _ = published
    path = next(out.glob("report-*-activations.ipynb"))
    md = _outputs(path, "text/markdown")
    for tid in ("act.mla.layer", "act.moe.layer", "act.mla.layer.full", "act.moe.layer.full"):
        formula = term_latex(ctx.terms[tid], ctx.display_subs(False), full=ctx.subs, names=report_names())
        assert formula in md, tid
    assert "$\\displaystyle" in _outputs(path, "text/latex")              # Term._repr_latex_ in Jupyter
    html = (out / path.name.replace(".ipynb", ".html")).read_text()
    assert 'output: "mathml"' in html and "mathjax" not in html.lower() and "M_{1}^{A}" in html  # offline maths


def test_regenerated_notebook_is_byte_identical(ctx):
    report = rp.build_report(ctx, outline=True)
    section = next(s for s in report.sections if s.key == "overheads")
    a, b = nbm.build_notebook(ctx, report, section), nbm.build_notebook(ctx, report, section)
    with nbm.Kernel() as kernel:                   # the second run sees a busier kernel: counts are renumbered
        kernel.execute([a])
        kernel.execute([b])
    assert nbm.to_ipynb(a) == nbm.to_ipynb(b)
    assert nbm.to_html(a, "x") == nbm.to_html(b, "x")


def test_setup_cell_rebuilds_the_configuration(ctx):
    source = nbm.setup_source(ctx)
    assert "S.subs[nt.s]" in source                                       # how to change a symbol
    ns = {}
    exec(compile(source, "setup", "exec"), ns)                             # our generated code, not user input
    assert ns["S"].subs == ctx.subs and ns["S"].stage == ctx.stage


def test_changing_a_symbol_changes_the_equation():
    ctx = rp.Context.create()
    before = ctx.equation("act.mla.layer")
    ctx.subs[nt.s] = 8192
    after = ctx.equation("act.mla.layer")
    assert after.value == exact(ctx.terms["act.mla.layer"], ctx.subs) > before.value
    assert after.paper == before.paper                                     # s is a symbol in the paper's form
    assert "s^{2}" in after._repr_markdown_()


def test_kernel_runs_this_interpreter():
    spec = nbm._VenvKernelSpecs.manager().get_kernel_spec("python3")
    assert spec.argv[0] == sys.executable                                  # no installed kernel spec needed


def test_failing_cell_is_reported(ctx):
    from nbformat import v4
    nb = v4.new_notebook(cells=[v4.new_code_cell("raise ValueError('boom')")])
    with pytest.raises(nbm.NotebookError, match="boom"):
        nbm.execute([nb])
