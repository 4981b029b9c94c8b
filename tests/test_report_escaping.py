"""User text reaches every report format as text: a config.json in a folder whose name is markup
(HTML that would run script, a Markdown link, ``$`` maths, backticks, ``{{``) gives a report.md,
notebooks and HTML pages that show the name as typed and run nothing.

The config's path is in the report's setting ("model: <name> (read from <path>)") and in every
notebook's first code cell (templates/notebook/setup.py.j2).  One report is written for
all the checks (``report_run``); the HTML pages are opened in headless Chromium (the ``browser``
fixture of tests/conftest.py).  Escaping: memsym/report/text.py md_escape, the HTML templates'
autoescape and class memsym-literal (memsym/report/offline.py), ``repr`` in code cells.
"""
from __future__ import annotations

import ast
import html
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsym.report.text import md_escape, one_line

ROOT = Path(__file__).resolve().parent.parent
SET = "document.body.setAttribute('data-xss','1')"
IMG = f'<img src=x onerror="{SET}">'
SCRIPT = f"<script>{SET}</script>"
#: A file name holds no "/": the closed <script> spans two folders, so the path holds SCRIPT whole and
#: the model's name (the inner folder) an <img>, a script element left open, and Markdown syntax.
OUTER = SCRIPT.split("/")[0]
NAME = ("script>" + IMG + " [link](javascript:alert(1)) $x$ `tick` {{ y }} \\(m\\) &amp; *b* _i_ #h "
        "www.x.y a@b.c " + SCRIPT.split("</")[0])
assert "/" not in NAME
#: The model's name comes from the config's content (derivations/config/hfconfig.py shape_name), its path
#: (holding NAME and SCRIPT) from the user: the setting's model line shows both.
MODEL = "deepseek_v3 (h 256, 3 layers, 8 experts)"
TITLE = f"Training memory of {MODEL}, derived symbolically"


def _tex_required() -> bool:
    return bool(shutil.which("pdflatex")) or bool(os.environ.get("MEMSYM_REQUIRE_TEX"))


@pytest.fixture(scope="module")
def report_run(tmp_path_factory):
    """(config path, output folder) of one ``memsym report`` of tests/data/tiny in the hostile folder."""
    base = tmp_path_factory.mktemp("escaping")
    folder = base / OUTER / NAME
    folder.mkdir(parents=True)
    config = folder / "config.json"
    shutil.copy(ROOT / "tests" / "data" / "tiny" / "config.json", config)
    assert SCRIPT in str(config)
    out = base / "out"
    formats = "md,html,ipynb,tex" + (",pdf" if _tex_required() else "")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "memsym", "report", "--model", str(config), "--dp", "1", "--tp", "1",
                        "--pp", "1", "--ep", "1", "--stage", "0", "--out", str(out), "--format", formats],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr
    return config, out


def _html_files(out: Path):
    files = sorted(out.glob("*.html"))
    assert len(files) == 13 and (out / "report.html") in files   # report.html and 12 notebooks
    return files


# ----------------------------------------------------------------------------- Markdown
class _Tags(HTMLParser):
    """Every start tag of an HTML fragment, and its text."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def test_report_md_holds_the_name_as_escaped_text(report_run):
    config, out = report_run
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "<img" not in md and "<script" not in md and "onerror" in md
    assert f"# {md_escape(TITLE)}\n" in md
    assert f"- **model**: {md_escape(f'{MODEL} (read from {config})')}\n" in md
    assert "&lt;img src=x onerror=" in md                      # what a reader of the file sees
    head = md.split("\n## ")[0]                                # title, subtitle, setting
    for render in _renderers(anchors=False):
        page = _Tags(render(head))
        assert set(page.tags) <= {"h1", "p", "ul", "li", "strong"}, page.tags
        assert TITLE in "".join(page.text) and f"model: {MODEL} (read from {config})" in "".join(page.text)


# Markdown that renderers turn back into exactly the text: nbconvert's (the notebooks' HTML), mistune's
# and, where installed, CommonMark's reference port (GitHub and JupyterLab are CommonMark).
_PIECES = st.one_of(st.sampled_from([*"\\`*_{}[]()#|~$:@&<>!+-.=\"' /", "www.", "http://", "\\(", "$$", "]", "](",
                                     IMG, SCRIPT, "&amp;", "&#36;", "\\begin{x}", "{{ y }}", "\r\n", "\n", "\t"]),
                    # (control and format characters are shown as their codes: tested below)
                    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Cf")))


def _renderers(anchors: bool = True):
    """Markdown renderers: nbconvert's (which adds an anchor link to headings: ``anchors``), mistune's
    with GFM's autolinks, and CommonMark's reference port where installed."""
    import mistune
    from nbconvert.filters.markdown_mistune import markdown2html_mistune
    out = [markdown2html_mistune] if anchors else []
    out.append(mistune.create_markdown(escape=False, plugins=["strikethrough", "table", "url"]))
    try:
        from markdown_it import MarkdownIt
        out.append(MarkdownIt("commonmark").enable(["table", "strikethrough"]).render)
    except ImportError:
        pass
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=10).map("".join))
def test_md_escape_renders_as_the_text_itself(text):
    flat = " ".join(text.replace("\r\n", "\n").splitlines()) if text.splitlines() else text
    for render in _renderers():
        got = render("a " + md_escape(text) + " b")
        assert got.startswith("<p>") and got.endswith("</p>\n"), (text, got)
        assert "<" not in got[3:-5], (text, got)                  # no element: text only
        assert html.unescape(got[3:-5]).split() == ("a " + flat + " b").split(), (text, got)


def test_comment_filter_keeps_a_notebook_comment_on_one_line():
    assert one_line("a\nimport os\r\nb\u2028c") == "a import os b c"


# ----------------------------------------------------------------------------- notebooks
def test_notebooks_ran_and_hold_the_model_as_a_literal(report_run):
    config, out = report_run
    books = sorted(out.glob("report-*.ipynb"))
    from memsym.report.sections import SECTIONS
    assert len(books) == sum(s.notebook for s in SECTIONS) == 12  # one per section, the step time's included
    for path in books:
        nb = json.loads(path.read_text(encoding="utf-8"))
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert all(c["execution_count"] for c in code), path.name          # executed by the report's kernel
        assert not [o for c in code for o in c["outputs"] if o["output_type"] == "error"], path.name
        setup = "".join(code[0]["source"])
        call = next(n for n in ast.walk(ast.parse(setup)) if isinstance(n, ast.Call)
                    and getattr(n.func, "attr", "") == "ModelSpec")  # the model as read, never read again
        source = next(k.value for k in call.keywords if k.arg == "source")
        assert ast.literal_eval(source) == str(config)
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                src = "".join(cell["source"])
                assert "<img" not in src and "<script" not in src, path.name
                tags = set(_Tags(src).tags)
                assert tags <= {"span"}, (path.name, tags)             # ours: class memsym-literal
        title = "".join(nb["cells"][0]["source"])
        assert md_escape(TITLE) in title


def test_tex_and_pdf_hold_the_name_escaped(report_run):
    _, out = report_run
    tex = (out / "report.tex").read_text(encoding="utf-8")
    assert "<img" not in tex and r"\textless{}img src=x onerror=" in tex
    if _tex_required():
        assert (out / "report.pdf").read_bytes().startswith(b"%PDF")


# ----------------------------------------------------------------------------- in a browser
_PROBE = """
const hits = [];
if (document.body.hasAttribute('data-xss')) hits.push('body has data-xss');
for (const s of document.scripts) if (s.text.includes('data-xss')) hits.push('script: ' + s.text.slice(0, 60));
for (const i of document.querySelectorAll('img'))
  if (i.getAttribute('onerror') !== null || i.getAttribute('src') === 'x')
  hits.push('img: ' + i.outerHTML.slice(0, 60));
for (const e of document.querySelectorAll('*')) for (const a of e.attributes)
  if (a.name.startsWith('on') || /^\\s*javascript:/i.test(a.value)) hits.push(e.tagName + ' ' + a.name);
const lit = [...document.querySelectorAll('.memsym-literal')];
return {hits: hits, math: document.body.getAttribute('data-math'),
        literal: lit.map((e) => e.textContent), typeset: lit.some((e) => e.querySelector('math') !== null)};
"""


def test_every_html_page_runs_nothing_and_shows_the_name(report_run, browser):
    _, out = report_run
    for page in _html_files(out):
        browser.get(page.as_uri())
        got = browser.execute_script(_PROBE)
        assert got["hits"] == [], (page.name, got["hits"])
        assert got["math"] == "rendered", page.name                   # the maths script ran to its end
        assert not got["typeset"], page.name                           # $x$ of the name stays text
        assert any(t.strip() == TITLE or t.startswith(TITLE) for t in got["literal"]), (page.name, got["literal"])
        if page.name == "report.html":
            assert browser.execute_script("return document.title") == TITLE
            assert any(NAME in t for t in got["literal"])              # the setting's model line


def test_control_and_bidi_characters_of_a_path_are_shown_as_codes(tmp_path):
    """ESC, BEL and U+202E in a config's path reach report.md as their codes, never raw (``cat report.md`` would
    obey them: colours, a bell, text reversed), and report.tex likewise."""
    import json
    import subprocess
    import sys

    from derivations.config.presets import preset_path
    data = json.loads(open(preset_path("deepseek-v2-lite")).read())
    data["num_hidden_layers"] = 5
    path = tmp_path / "c\x1b[31m\x07\u202ed.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "rep"
    p = subprocess.run([sys.executable, "-m", "memsym", "report", "--model", str(path), "--pp", "1", "--dp", "8",
                        "--ep", "8", "--out", str(out), "--format", "md,tex,html"], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    for f in out.iterdir():  # report.md, report.tex, report.html and every notebook's HTML (a code cell's comment)
        text = f.read_text(encoding="utf-8")
        assert not any(c in text for c in "\x1b\x07\u202e"), f.name
    page = subprocess.run([sys.executable, "-m", "memsym", "page", "--model", str(path), "--out", str(tmp_path / "pg")],
                          capture_output=True, text=True, timeout=600)
    assert page.returncode == 0, page.stderr
    text = next((tmp_path / "pg").iterdir()).read_text(encoding="utf-8")
    assert not any(c in text for c in "\x1b\x07\u202e") and "x1b" in text
    assert "x1b" in (out / "report.md").read_text(encoding="utf-8")
