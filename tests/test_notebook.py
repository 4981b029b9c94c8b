"""Notebooks: one per report section, its outputs the report's blocks, converted with nbconvert."""

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
    """Every notebook, as ipynb and HTML."""
    out = tmp_path_factory.mktemp("nb")
    res = rp.publish(ctx, out, ("ipynb", "html"))
    return out, res


def test_one_notebook_per_section(published, ctx):
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


def test_notebooks_html_is_the_same_whatever_else_is_written(published, ctx, tmp_path):
    out, _ = published
    rp.publish(ctx, tmp_path, ("html",))
    for path in out.glob("*.html"):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


def test_the_notebooks_run_in_a_kernel_and_show_what_was_written(published, same_in_a_kernel):
    out, _ = published
    same_in_a_kernel(sorted(out.glob("*.ipynb")))


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
    plan = rp.outline_report(ctx)
    done = rp.complete_report(ctx, plan)
    i = next(i for i, s in enumerate(plan.sections) if s.key == "overheads")
    a, b = (nbm.build_notebook(ctx, plan, plan.sections[i], done.sections[i].blocks) for _ in range(2))
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
