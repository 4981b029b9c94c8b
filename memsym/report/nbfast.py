"""A notebook's HTML as nbconvert's ``HTMLExporter`` makes it, byte for byte, without importing nbconvert.

Importing nbconvert (0.55 s: nbclient, jupyter_client, bs4, soupsieve, bleach, jsonschema) and its
per-notebook passes (bleach's sanitiser on each highlighted cell, BeautifulSoup parsing and printing the
whole 300 kB page) were most of a report's HTML.  Here the same Jinja templates (nbconvert's ``lab`` and
``base``, ours in ``templates/nbconvert/memsym``, found on the paths nbconvert searches, in its order) are
rendered by our own environment with exact equivalents of the filters our notebooks reach:

- ``highlight_code``: pygments, as nbconvert's ``Highlight2HTML`` calls it;
- ``markdown2html``: mistune with nbconvert's math-aware block and inline parsers and its renderer (their
  code, :mod:`.nbmarkdown`);
- ``clean_html`` of highlighted code: the identity (bleach keeps pygments' ``div``, ``pre`` and ``span``
  with their classes; what it re-escapes is undone by the page pass below);
- ``ansi2html`` of text without escape codes: ``markupsafe.escape``;
- nbconvert's last pass (BeautifulSoup with ``html.parser``: ``tabindex="0"`` on the cells' input wrappers
  and outputs, ``alt`` on images without one, the page printed again) by :class:`_Canonical`: the same
  tokenizer (``html.parser``) and what BeautifulSoup's tree builder and ``minimal`` formatter do with it
  (sorted attributes, multi-valued attributes joined by one space, void elements as ``<br/>``, text
  escaped as ``&``, ``<``, ``>``, whitespace-only strings outside ``pre`` collapsed to one newline or
  space, unclosed elements closed with their parent).

Anything else (a filter or construct our notebooks do not use, other versions of the packages whose
behaviour is reproduced here, a user's ``custom.css``) raises :class:`Unsupported`, and the caller
converts with nbconvert.  tests/test_nbfast.py compares both on every notebook of several reports.
"""
from __future__ import annotations

import html as _html
import os
import re
from html.parser import HTMLParser
from typing import Dict, List, Optional

#: Versions whose behaviour is reproduced here (nbconvert's templates, filters and exporter; BeautifulSoup's
#: tree builder and printer; bleach's treatment of pygments' markup), as the project's constraints pin them.
VERIFIED = {"nbconvert": ("7.17.",), "beautifulsoup4": ("4.15.",), "bleach": ("6.4.",), "mistune": ("3.",)}
TEMPLATE = "memsym"
#: nbconvert's HTMLExporter display priority (``display_data_priority``)
PRIORITY = ("application/vnd.jupyter.widget-view+json", "application/javascript", "text/html", "text/markdown",
            "image/svg+xml", "text/vnd.mermaid", "text/latex", "image/png", "image/jpeg", "text/plain")


class Unsupported(Exception):
    """Something this module does not reproduce: convert with nbconvert."""


_AVAILABLE: Optional[bool] = None


def available() -> bool:
    """Whether the installed packages are the versions reproduced here (checked once per process)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        from importlib import metadata
        try:
            _AVAILABLE = all(metadata.version(p).startswith(v) for p, v in VERIFIED.items())
        except metadata.PackageNotFoundError:
            _AVAILABLE = False
    return _AVAILABLE


# ----------------------------------------------------------------------------- the template environment
def _template_paths(extra_base: str) -> List[str]:
    """TemplateExporter._template_paths for template ``memsym`` in ``extra_base`` (nbconvert 7.17)."""
    import json

    from jupyter_core.paths import jupyter_path
    roots = jupyter_path()
    names, name = [], TEMPLATE
    while name is not None:
        names.append(name)
        conf, found = {}, False
        for base in [extra_base] + [os.path.join(r, "nbconvert", "templates") for r in roots]:
            tdir = os.path.join(base, name)
            found = found or os.path.exists(tdir)
            cfile = os.path.join(tdir, "conf.json")
            if os.path.exists(cfile):
                with open(cfile) as f:
                    got = json.load(f)
                conf = {**got, **conf}  # recursive_update(got, conf): only base_template is read here
        if not found:
            raise Unsupported(f"no template {name!r}")
        name = conf.get("base_template")
    paths = []
    for name in names:
        for base in [extra_base] + [os.path.join(r, "nbconvert", "templates") for r in roots]:
            p = os.path.join(base, name)
            if os.path.exists(p):
                paths.append(p)
    for r in roots:
        paths += [r, os.path.join(r, "nbconvert", "templates"), os.path.join(r, "nbconvert", "templates", "compatibility")]
    paths += [p for p in (os.path.join(r, "nbconvert", "templates") for r in roots) if os.path.exists(p)]
    return paths


def _unsupported(name):
    def f(*a, **k):
        raise Unsupported(f"filter {name}")
    return f


_FILTERS_UNSUPPORTED = ("indent", "markdown2asciidoc", "get_lines", "highlight2html", "highlight2latex",
                        "ipython2python", "posix_path", "markdown2latex", "markdown2rst", "comment_lines",
                        "strip_ansi", "strip_dollars", "html2text", "add_anchor", "ansi2latex", "wrap_text",
                        "escape_latex", "citation2latex", "path2url", "add_prompts", "ascii_only",
                        "prevent_list_blocks", "get_metadata", "convert_pandoc", "text_base64",
                        "strip_trailing_newline")

_FILES_URL = re.compile(r'(src|href)\=([\'"]?)/?files/')
_MD_FILES_URL = re.compile(r"(!?)\[(?P<caption>.*?)\]\(/?files/(?P<location>.*?)\)")


class _Exporter:
    """The environment, the pygments objects and the head's CSS, made once per process."""

    def __init__(self, templates_dir: str):
        import json

        import jinja2
        import markupsafe
        from jinja2 import ChoiceLoader, DictLoader, Environment, FileSystemLoader
        from jupyter_core.paths import jupyter_config_dir
        from jupyterlab_pygments import JupyterStyle
        from pygments.formatters import HtmlFormatter

        from . import nbmarkdown
        if os.path.isfile(os.path.join(jupyter_config_dir(), "custom", "custom.css")):
            raise Unsupported("custom.css")  # nbconvert may inline it
        self.paths = _template_paths(templates_dir)
        fs = FileSystemLoader(self.paths)

        class _Tolerant(jinja2.BaseLoader):  # nbconvert's ExtensionTolerantLoader
            def get_source(self, environment, template):
                try:
                    return fs.get_source(environment, template)
                except jinja2.TemplateNotFound:
                    if template.endswith(".html.j2"):
                        return fs.get_source(environment, template[: -len(".html.j2")])
                    raise

            def list_templates(self):
                return fs.list_templates()

        env = Environment(loader=ChoiceLoader([_Tolerant(), DictLoader({"<memory>": ""})]),  # noqa: S701
                          extensions=["jinja2.ext.loopcontrols"])

        def no_uuid():
            raise Unsupported("uuid4")
        env.globals["uuid4"] = no_uuid
        for name in _FILTERS_UNSUPPORTED:
            env.filters[name] = _unsupported(name)
        escape = markupsafe.escape

        def ansi2html(text):
            if "\x1b" in text:
                raise Unsupported("ANSI escape codes")
            return escape(text)

        def strip_files_prefix(text):
            text = _FILES_URL.sub(r"\1=\2", text)
            return _MD_FILES_URL.sub(r"\1[\2](\3)", text)

        @jinja2.pass_context
        def markdown2html(context, source):
            cell = context.get("cell", {})
            if cell.get("attachments"):
                raise Unsupported("attachments")
            try:
                return nbmarkdown.markdown2html(source)
            except nbmarkdown.NotReproduced as exc:
                raise Unsupported(str(exc)) from None

        def clean_html(text):
            if text is not self._last_highlight:
                raise Unsupported("clean_html of other than highlighted code")
            return text

        def filter_data_type(output):
            for fmt in PRIORITY:
                if fmt in output:
                    if fmt == PRIORITY[0]:
                        raise Unsupported("widgets")
                    return [fmt]
            raise Unsupported("no mime type")

        env.filters.update({
            "markdown2html": markdown2html, "ansi2html": ansi2html, "filter_data_type": filter_data_type,
            "strip_files_prefix": strip_files_prefix, "json_dumps": json.dumps,
            "escape_html": lambda s: _html.escape(str(s)),
            "escape_html_keep_quotes": lambda s: _html.escape(str(s), quote=False),
            "escape_html_script": lambda s: s.replace("/", "\\/"),
            "clean_html": clean_html, "highlight_code": self._highlight,
        })
        self.env = env
        self.template = env.get_template("index.html.j2")
        self.css = HtmlFormatter(style=JupyterStyle).get_style_defs(".highlight")
        self._formatter = HtmlFormatter(cssclass=_html.escape(" highlight hl-python"))
        self._lexers: Dict[str, object] = {}
        self._last_highlight = None

    def _highlight(self, source, language=None, metadata=None):
        from pygments import highlight
        from pygments.lexers import get_lexer_by_name
        if language or self.language != "python" or (metadata and "magics_language" in metadata):
            raise Unsupported("another language")
        lexer = self._lexers.get("python")
        if lexer is None:
            lexer = self._lexers["python"] = get_lexer_by_name("python")
        out = highlight(source if len(source) > 0 else " ", lexer, self._formatter)
        self._last_highlight = out
        return out

    def convert(self, nb, name: str, math: str) -> str:
        info = nb.get("metadata", {}).get("language_info", {})
        self.language = info.get("pygments_lexer", info.get("name", None))
        if self.language != "python" or "widgets" in nb.get("metadata", {}):
            raise Unsupported("language or widgets")
        for cell in nb["cells"]:
            if cell.get("cell_type") == "code" and cell.get("source", "").startswith("%%"):
                raise Unsupported("cell magic")  # HighlightMagicsPreprocessor
            if cell.get("cell_type") not in ("code", "markdown"):
                raise Unsupported("cell type")
            for out in cell.get("outputs", ()):
                if out.get("output_type") not in ("execute_result", "display_data"):
                    raise Unsupported("output type")
        resources = _Resources(
            metadata=_Resources(name=name), memsym_math=math, output_extension=".html", deprecated=_unsupported("deprecated"),
            theme="light", include_css=_unsupported("include_css"), include_lab_theme=_unsupported("include_lab_theme"),
            include_js=_unsupported("include_js"), include_url=_unsupported("include_url"),
            require_js_url="https://cdnjs.cloudflare.com/ajax/libs/require.js/2.1.10/require.min.js",
            mathjax_url="https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe",
            mermaid_js_url="https://cdnjs.cloudflare.com/ajax/libs/mermaid/11.10.0/mermaid.esm.min.mjs",
            mermaid_layout_elk_js_url="https://cdnjs.cloudflare.com/ajax/libs/mermaid-layout-elk/0.1.9/"
                                      "mermaid-layout-elk.esm.min.mjs",
            jquery_url="https://cdnjs.cloudflare.com/ajax/libs/jquery/2.0.3/jquery.min.js",
            jupyter_widgets_base_url="https://unpkg.com/", widget_renderer_url="", html_manager_semver_range="*",
            should_sanitize_html=False, language_code="en", should_not_encode_svg=False,
            inlining={"css": [self.css]}, raw_mimetypes=["text/html", ""], output_mimetype="text/html",
            global_content_filter={"include_code": True, "include_markdown": True, "include_raw": True,
                                   "include_unknown": True, "include_input": True, "include_output": True,
                                   "include_output_stdin": True, "include_input_prompt": True,
                                   "include_output_prompt": True, "no_prompt": False})
        text = self.template.render(nb=nb, resources=resources).lstrip("\r\n")
        return canonical(text)


class _Resources(dict):
    """nbconvert's ResourcesDict: a missing key reads as ``""``."""

    def __missing__(self, key):
        return ""


_EXPORTERS: Dict[str, _Exporter] = {}


def to_html(nb, name: str, templates_dir: str, math: str) -> str:
    """The HTML of notebook ``nb`` (plain nodes) as nbconvert's exporter with the ``memsym`` template makes it,
    or :class:`Unsupported`."""
    if not available():
        raise Unsupported("package versions")
    ex = _EXPORTERS.get(templates_dir)
    if ex is None:
        ex = _EXPORTERS[templates_dir] = _Exporter(templates_dir)
    return ex.convert(nb, name, math)


# ----------------------------------------------------------------------------- BeautifulSoup's pass
_VOID = frozenset(("area", "base", "br", "col", "embed", "hr", "img", "input", "keygen", "link", "menuitem", "meta",
                   "param", "source", "track", "wbr", "basefont", "bgsound", "command", "frame", "image", "isindex",
                   "nextid", "spacer"))
_LISTS = {"*": frozenset(("class", "accesskey", "dropzone")), "a": frozenset(("rel", "rev")),
          "link": frozenset(("rel", "rev")), "td": frozenset(("headers",)), "th": frozenset(("headers",)),
          "form": frozenset(("accept-charset",)), "object": frozenset(("archive",)), "area": frozenset(("rel",)),
          "icon": frozenset(("sizes",)), "iframe": frozenset(("sandbox",)), "output": frozenset(("for",))}
_RAW = frozenset(("script", "style"))
_PRESERVE = frozenset(("pre", "textarea"))
_SPACES = frozenset("\x20\x0a\x09\x0c\x0d")
_NONSPACE = re.compile(r"\S+")
#: Named references read here as BeautifulSoup reads them (another: nbconvert).
_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "nbsp": "\xa0"}
_FOCUSABLE = ("jp-Cell-inputWrapper", "jp-OutputArea-output")
_ALT = "No description has been provided for this image"


def _text(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _attr(v: str) -> str:
    v = _text(v)
    if '"' in v:
        if "'" in v:
            return '"' + v.replace('"', "&quot;") + '"'
        return "'" + v + "'"
    return '"' + v + '"'


class _Canonical(HTMLParser):
    """What ``str(BeautifulSoup(page, 'html.parser'))`` prints, after nbconvert's edits (see the module)."""

    def __init__(self):
        super().__init__(convert_charrefs=False)  # as BeautifulSoup's parser: references below
        self.out: List[str] = []
        self.stack: List[tuple] = []   # (name, classes)
        self.data: List[str] = []
        self.preserve = 0
        self.notebook = 0              # open elements with class jp-Notebook

    def _flush(self):
        if not self.data:
            return
        s = "".join(self.data)
        self.data = []
        raw = bool(self.stack) and self.stack[-1][0] in _RAW
        if not self.preserve and all(c in _SPACES for c in s):
            s = "\n" if "\n" in s else " "
        self.out.append(s if raw else _text(s))

    def handle_data(self, data):
        self.data.append(data)

    def handle_entityref(self, name):
        if name not in _ENTITIES:
            raise Unsupported(f"entity {name}")
        self.data.append(_ENTITIES[name])

    def handle_charref(self, name):
        try:
            n = int(name[1:], 16) if name[:1] in "xX" else int(name)
        except ValueError:
            raise Unsupported("character reference") from None
        if not (32 <= n < 127 or n in (9, 10) or 160 <= n < 0xD800 or 0xE000 <= n < 0x110000):
            raise Unsupported("character reference")  # BeautifulSoup's replacements and windows-1252 reading
        self.data.append(chr(n))

    def handle_starttag(self, tag, attrs):
        self._flush()
        d: Dict[str, object] = {}
        lists = _LISTS["*"] | _LISTS.get(tag, frozenset())
        for k, v in attrs:
            v = "" if v is None else v
            d[k] = _NONSPACE.findall(v) if k in lists else v
        classes = d.get("class", ())
        if tag == "meta" and "charset" in d and d["charset"] != "utf-8":
            raise Unsupported("charset")
        if self.notebook and tag == "div" and any(c in classes for c in _FOCUSABLE):
            d["tabindex"] = "0"
        if tag == "img" and "alt" not in d:
            d["alt"] = _ALT
        parts = ["<", tag]
        for k, v in sorted(d.items()):
            parts += [" ", k, "=", _attr(" ".join(v) if isinstance(v, list) else v)]
        if tag in _VOID:
            parts.append("/>")
            self.out.append("".join(parts))
            return
        parts.append(">")
        self.out.append("".join(parts))
        notebook = "jp-Notebook" in classes
        self.stack.append((tag, notebook))
        self.notebook += notebook
        self.preserve += tag in _PRESERVE

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        self._flush()
        if tag in _VOID:
            if not any(name == tag for name, _ in self.stack):
                return
        if not any(name == tag for name, _ in self.stack):
            return
        while self.stack:
            name, notebook = self.stack.pop()
            self.notebook -= notebook
            self.preserve -= name in _PRESERVE
            self.out.append(f"</{name}>")
            if name == tag:
                break

    def handle_decl(self, decl):
        self._flush()
        if not decl.startswith("DOCTYPE "):
            raise Unsupported("declaration")
        self.out.append(f"<!{decl}>\n")

    def handle_comment(self, data):
        raise Unsupported("comment")

    def handle_pi(self, data):
        raise Unsupported("processing instruction")

    def unknown_decl(self, data):
        raise Unsupported("declaration")

    def close(self):
        super().close()
        self.close_quick()

    def close_quick(self):
        self._flush()
        while self.stack:
            name, _ = self.stack.pop()
            self.out.append(f"</{name}>")


_TOKEN = re.compile(r"<(?:(/)?([a-zA-Z][a-zA-Z0-9]*)((?:[ \t\n]+[a-zA-Z][-a-zA-Z0-9_:.]*"
                    r"(?:=(?:\"[^\"<>]*\"|'[^'<>]*'))?)*)[ \t\n]*(/)?>|!DOCTYPE ([a-z]+)>)|([^<&]+)|(&[^<&;]{1,8};)")
_ATTR = re.compile(r"([a-zA-Z][-a-zA-Z0-9_:.]*)(?:=(?:\"([^\"]*)\"|'([^']*)'))?")
_REF = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&nbsp;": "\xa0", "&#39;": "'", "&#x27;": "'"}
_REF_IN_VALUE = re.compile(r"&[^&]{0,8};|&")
_NUMERIC = re.compile(r"&#([0-9]{1,7}|[xX][0-9a-fA-F]{1,6});")


def _ref(text: str) -> str:
    """The character of reference ``text`` (``&amp;``, ``&#182;``) as html.parser and BeautifulSoup read it."""
    got = _REF.get(text)
    if got is None:
        m = _NUMERIC.fullmatch(text)
        if m is None:
            raise _Slow
        t = m.group(1)
        n = int(t[1:], 16) if t[0] in "xX" else int(t)
        if not (32 <= n < 127 or n in (9, 10) or 160 <= n < 0xD800 or 0xE000 <= n < 0x110000):
            raise _Slow
        got = chr(n)
    return got


def _value(v: str) -> str:
    if "&" not in v:
        return v
    return _REF_IN_VALUE.sub(lambda m: _ref(m.group(0)), v)


class _Slow(Exception):
    """A construct the quick tokenizer leaves to html.parser."""


def _quick(p: _Canonical, page: str) -> None:
    """Feed ``page`` to ``p`` as html.parser would, for the plain markup templates, pygments and mistune
    print (quoted attributes, the usual references, no comments); :class:`_Slow` otherwise."""
    pos, n = 0, len(page)
    match = _TOKEN.match
    while pos < n:
        m = match(page, pos)
        if m is None:
            raise _Slow
        pos = m.end()
        name = m.group(2)
        if name is not None:
            name = name.lower()
            if m.group(1):
                if m.group(3) or m.group(4):
                    raise _Slow
                p.handle_endtag(name)
                continue
            attrs = [(k.lower(), _value(a or b)) for k, a, b in _ATTR.findall(m.group(3))]  # no value: ""
            if m.group(4):
                p.handle_startendtag(name, attrs)
                continue
            p.handle_starttag(name, attrs)
            if name in _RAW:
                end = page.find(f"</{name}>", pos)
                if end < 0 or f"</{name}" in page[pos:end].lower():
                    raise _Slow
                if end > pos:
                    p.handle_data(page[pos:end])
                p.handle_endtag(name)
                pos = end + len(name) + 3
        elif m.group(5) is not None:
            p.handle_decl("DOCTYPE " + m.group(5))
        elif m.group(6) is not None:
            p.handle_data(m.group(6))
        else:
            p.handle_data(_ref(m.group(7)))


def canonical(page: str) -> str:
    """``page`` as nbconvert's last pass prints it (BeautifulSoup 4.15, ``html.parser``)."""
    if "\r" in page or "\x00" in page:
        raise Unsupported("control character")
    p = _Canonical()
    try:
        _quick(p, page)
        p.close_quick()
    except _Slow:
        p = _Canonical()
        p.feed(page)
        p.close()
    return "".join(p.out)
