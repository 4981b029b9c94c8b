"""nbconvert's HTML without nbconvert (memsym/report/nbfast.py): the same bytes as nbconvert's HTMLExporter
with the memsym template, for every notebook of reports of several configurations, and nbconvert's for what
it does not reproduce."""
import json

import pytest

pytest.importorskip("nbconvert")   # the report extra
pytest.importorskip("bs4")

from memsym import report as rp                     # noqa: E402
from memsym.report import nbfast, nbhtml            # noqa: E402
from memsym.report import notebook as nbm           # noqa: E402
from memsym.report.offline import math_scripts      # noqa: E402
from derivations import config as cfg               # noqa: E402
from symbolic.resources import TEMPLATES_DIR        # noqa: E402

if not nbfast.available():
    pytest.skip("nbfast reproduces other versions of nbconvert, bs4 and bleach", allow_module_level=True)

CONFIGS = [
    {},
    {"training": cfg.Training(seq=8192, recompute="selective", attention="flash")},
    {"model": "deepseek-v2-lite", "layout": cfg.Layout(dp=8, tp=1, pp=2, ep=2)},
]


def _nbconvert(nb, name):
    body, _ = nbhtml.html_exporter().from_notebook_node(
        nb, resources={"metadata": {"name": name}, "memsym_math": math_scripts(notebook=True)})
    return body


def _fast(nb, name):
    return nbfast.to_html(nb, name, str(TEMPLATES_DIR / "nbconvert"), math_scripts(notebook=True))


@pytest.mark.parametrize("config", range(len(CONFIGS)))
def test_every_notebook_of_a_report_is_nbconverts_html(config):
    ctx = rp.Context.create(**CONFIGS[config])
    plan = rp.outline_report(ctx)
    done = rp.complete_report(ctx, plan)
    for o, d in zip(plan.sections, done.sections):
        if o.notebook:
            stem = nbm.stem(o)
            nb = nbm.build_notebook(ctx, plan, o, computed=d.blocks)
            assert _fast(nb, stem) == _nbconvert(nb, stem), stem
            # as a helper gets it: plain JSON, checked there
            sent = nbm.build_notebook(ctx, plan, o, computed=d.blocks, sent=True)
            assert nbhtml.html_of_json(nbhtml.to_json(sent), stem) == _nbconvert(nb, stem), stem


MARKDOWN = [
    "# Title with *emphasis* & `code`\n\nText with $x_{1} < y$ and $$\\frac{a}{b}$$ and a [link](http://x.org).",
    "| a | b |\n|:--|--:|\n| 1 & 2 | <span class=\"memsym-literal\">x &amp; y</span> |\n\n- item\n- **bold**",
    "Quotes \"double\" and 'single', an ellipsis..., a non-breaking&nbsp;space and &#182; and \\$5.",
    "```\nplain code <b>\n```\n\n> quoted\n\n1. one\n2. two\n\n---\n\nline  \nbreak",
    "<div class=\"a  b\" id=x>raw <br> html</div>\n\ntext <img src=\"a.png\"> after",
]


@pytest.mark.parametrize("text", MARKDOWN)
def test_markdown_cells_and_outputs(text):
    from nbformat import v4
    nb = v4.new_notebook(metadata={"language_info": {"name": "python"}, "title": "T <&> \"q\""})
    nb.cells = [v4.new_markdown_cell(text, id="c-00"),
                v4.new_code_cell("x = {'a': 1}  # <comment> & \"q\"\nprint(x)", id="c-01", execution_count=1,
                                 outputs=[v4.new_output("execute_result", {"text/plain": "A <&> 'b'",
                                                                            "text/markdown": text},
                                                        execution_count=1),
                                          v4.new_output("display_data", {"text/plain": "x",
                                                                         "text/latex": "$\\displaystyle x < y$"})]),
                v4.new_code_cell("", id="c-02")]
    nb = json.loads(json.dumps(nb))  # plain nodes, as a helper reads them
    from nbformat.notebooknode import from_dict
    nb = from_dict(nb)
    try:
        fast = _fast(nb, "n")
    except nbfast.Unsupported:
        return  # converted by nbconvert
    assert fast == _nbconvert(nb, "n")


def test_what_it_does_not_reproduce_goes_to_nbconvert():
    from nbformat import v4
    nb = v4.new_notebook(metadata={"language_info": {"name": "python"}})
    nb.cells = [v4.new_code_cell("1", id="c-00", execution_count=1,
                                 outputs=[v4.new_output("stream", name="stdout", text="\x1b[31mred\x1b[0m")])]
    with pytest.raises(nbfast.Unsupported):
        _fast(nb, "n")
    assert nbhtml.to_html(nb, "n") == _nbconvert(nb, "n")


def test_canonical_is_beautifulsoups_print():
    """The last pass alone, on markup the quick tokenizer reads and on markup it leaves to html.parser."""
    from bs4 import BeautifulSoup
    pages = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8" />\n<style>a > b { }</style>'
        '<script>if (a < b && c) { x = "</div>"; }</script></head>\n<body class="jp-Notebook">\n'
        '<div class="jp-Cell-inputWrapper  x" id=\'i"d\' data-a="1 &amp; 2">  \n  <span></span><br>text &gt; '
        '&quot;q&quot; &#39;s&#39; &#x27;\n<pre>  \n  </pre><img src="a"><div class="jp-OutputArea-output" '
        'title="a\'b&quot;c">x</div></div>\n</body>\n</html>\n',
        "<p>unclosed <b>bold <i>it</p> after</b> &amp x <p/> </br> <BR/>",
        "<p>&copy; <!-- c --></p>",  # left to nbconvert
    ]
    for page in pages:
        soup = BeautifulSoup(page, features="html.parser")
        for elem in soup.select(".jp-Notebook div.jp-Cell-inputWrapper"):
            elem.attrs["tabindex"] = "0"
        for elem in soup.select(".jp-Notebook div.jp-OutputArea-output"):
            elem.attrs["tabindex"] = "0"
        for elem in soup.select("img:not([alt])"):
            elem.attrs["alt"] = "No description has been provided for this image"
        try:
            got = nbfast.canonical(page)
        except nbfast.Unsupported:
            continue
        assert got == str(soup)


def test_the_template_paths_are_nbconverts():
    assert nbfast._template_paths(str(TEMPLATES_DIR / "nbconvert")) == nbhtml.html_exporter().template_paths


def test_a_helpers_conversion_imports_no_nbconvert():
    """What a helper process runs (html_of_json of a report's notebook) loads neither nbconvert nor bs4."""
    import subprocess
    import sys
    ctx = rp.Context.create()
    plan = rp.outline_report(ctx)
    o = plan.sections[0]
    done = rp.complete_report(ctx, plan)
    text = nbhtml.to_json(nbm.build_notebook(ctx, plan, o, computed=done.sections[0].blocks, sent=True))
    code = ("import sys, json\nfrom memsym.report import nbhtml\n"
            "html = nbhtml.html_of_json(sys.stdin.read(), 'n')\n"
            "print(json.dumps([html.startswith('<!DOCTYPE html>'), 'nbconvert' in sys.modules, 'bs4' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [True, False, False]
