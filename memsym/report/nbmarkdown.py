"""nbconvert's ``markdown2html`` filter (nbconvert 7.17, ``filters/markdown_mistune.py`` and ``add_anchor`` of
``filters/strings.py``, with mistune 3), without importing nbconvert: the math-aware block and inline
parsers and the renderer are nbconvert's code (BSD-3-Clause, Copyright (c) IPython Development Team),
less what the HTML exporter never enables (embedded images; attachments are refused by the caller,
:mod:`.nbfast`).
"""
from __future__ import annotations

from html import escape
from typing import Any, Iterable, Optional
from urllib.parse import quote
from xml.etree.ElementTree import Element

from defusedxml import ElementTree
from mistune import BlockParser, HTMLRenderer, InlineParser, Markdown, import_plugin



class NotReproduced(Exception):
    """Markdown whose HTML this module does not reproduce (the caller converts with nbconvert)."""


MISTUNE_V3_ATX = "atx_heading" in BlockParser.SPECIFICATION


def _dotall(pattern: str) -> str:
    return f"(?s:{pattern})"


class MathBlockParser(BlockParser):
    """Multiline math as one paragraph (nbconvert's)."""

    ATX_HEADING_WITHOUT_LEADING_SPACES = (
        r"^ {0,3}(?P<atx_1>#{1,6})(?!#+)(?P<atx_2>[ \t]*(.*?)?)$"
        if MISTUNE_V3_ATX
        else r"^ {0,3}(?P<axt_1>#{1,6})(?!#+)(?P<axt_2>[ \t]*(.*?)?)$"
    )
    MULTILINE_MATH = _dotall(
        r"(?<!\\)[$]{2}.*?(?<!\\)[$]{2}"
        "|"
        r"\\\\\[.*?\\\\\]"
        "|"
        r"\\begin\{(?P<math_env_name>[a-z]*\*?)\}.*?\\end\{(?P=math_env_name)\}"
    )
    SPECIFICATION = {
        **BlockParser.SPECIFICATION,
        ("atx_heading" if MISTUNE_V3_ATX else "axt_heading"): ATX_HEADING_WITHOUT_LEADING_SPACES,
        "multiline_math": MULTILINE_MATH,
    }
    DEFAULT_RULES = ("multiline_math", *BlockParser.DEFAULT_RULES)  # type: ignore[assignment]

    def parse_multiline_math(self, m, state) -> int:
        state.add_paragraph(m[0])
        return m.end()


class MathInlineParser(InlineParser):
    """``$$...$$``, ``\\[...\\]``, ``\\(...\\)``, ``$...$`` and ``\\begin{foo}...\\end{foo}`` (nbconvert's)."""

    BLOCK_MATH_TEX = _dotall(r"(?<!\\)\$\$(?P<math_block_tex>.*?)(?<!\\)\$\$")
    BLOCK_MATH_LATEX = _dotall(r"(?<!\\)\\\\\[(?P<math_block_latex>.*?)(?<!\\)\\\\\]")
    INLINE_MATH_TEX = _dotall(r"(?<![$\\])\$(?P<math_inline_tex>.+?)(?<![$\\])\$")
    INLINE_MATH_LATEX = _dotall(r"(?<!\\)\\\\\((?P<math_inline_latex>.*?)(?<!\\)\\\\\)")
    LATEX_ENVIRONMENT = _dotall(
        r"\\begin\{(?P<math_env_name>[a-z]*\*?)\}"
        r"(?P<math_env_body>.*?)"
        r"\\end\{(?P=math_env_name)\}"
    )
    SPECIFICATION = {
        **InlineParser.SPECIFICATION,
        "block_math_tex": BLOCK_MATH_TEX,
        "block_math_latex": BLOCK_MATH_LATEX,
        "inline_math_tex": INLINE_MATH_TEX,
        "inline_math_latex": INLINE_MATH_LATEX,
        "latex_environment": LATEX_ENVIRONMENT,
    }
    DEFAULT_RULES = (  # type: ignore[assignment]
        "block_math_tex",
        "block_math_latex",
        "inline_math_tex",
        "inline_math_latex",
        "latex_environment",
        *InlineParser.DEFAULT_RULES,
    )

    def parse_block_math_tex(self, m, state) -> int:
        state.append_token({"type": "block_math", "raw": m.group("math_block_tex")})
        return m.end()

    def parse_block_math_latex(self, m, state) -> int:
        state.append_token({"type": "block_math", "raw": m.group("math_block_latex")})
        return m.end()

    def parse_inline_math_tex(self, m, state) -> int:
        state.append_token({"type": "inline_math", "raw": m.group("math_inline_tex")})
        return m.end()

    def parse_inline_math_latex(self, m, state) -> int:
        state.append_token({"type": "inline_math", "raw": m.group("math_inline_latex")})
        return m.end()

    def parse_latex_environment(self, m, state) -> int:
        attrs = {"name": m.group("math_env_name"), "body": m.group("math_env_body")}
        state.append_token({"type": "latex_environment", "attrs": attrs})
        return m.end()


def _html2text(element) -> str:
    if isinstance(element, str):
        try:
            element = ElementTree.fromstring(element)
        except Exception:
            return element
    text = element.text or ""
    for child in element:
        text += _html2text(child)
    text += element.tail or ""
    return text


def add_anchor(html: str, anchor_link_text: str = "¶") -> str:
    """nbconvert's ``add_anchor``: an id and an anchor link on a heading."""
    try:
        h = ElementTree.fromstring(html)
    except Exception:
        return html
    link = quote(_html2text(h).replace(" ", "-"), safe="?/:@!$&'()*+,;=")
    h.set("id", link)
    a = Element("a", {"class": "anchor-link", "href": "#" + link})
    try:
        a.append(ElementTree.fromstring(anchor_link_text))
    except Exception:
        a.text = anchor_link_text
    h.append(a)
    return ElementTree.tostring(h).decode(encoding="utf-8")


class IPythonRenderer(HTMLRenderer):
    """nbconvert's renderer with the HTML exporter's settings (no escaping, anchors, no embedded images)."""

    def __init__(self):
        super().__init__(False, True)

    def block_code(self, code: str, info: Optional[str] = None) -> str:
        if info:
            raise NotReproduced("fenced code with a language")
        return super().block_code(code, info=info)

    def heading(self, text: str, level: int, **attrs: Any) -> str:
        return str(add_anchor(super().heading(text, level, **attrs)))

    def escape_html(self, text: str) -> str:
        return escape(text, quote=False)

    def block_math(self, body: str) -> str:
        return f"$${self.escape_html(body)}$$"

    def multiline_math(self, text: str) -> str:
        return text

    def latex_environment(self, name: str, body: str) -> str:
        name, body = self.escape_html(name), self.escape_html(body)
        return f"\\begin{{{name}}}{body}\\end{{{name}}}"

    def inline_math(self, body: str) -> str:
        return f"${self.escape_html(body)}$"

    def image(self, text: str, url: str, title: Optional[str] = None) -> str:
        if url.startswith("attachment:"):
            raise NotReproduced("attachment")
        return super().image(text, url, title)


PLUGINS: Iterable[str] = ("strikethrough", "table", "url", "task_lists", "def_list")


def markdown2html(source: str) -> str:
    """nbconvert's HTMLExporter.markdown2html of ``source`` (a cell without attachments)."""
    md = Markdown(IPythonRenderer(), MathBlockParser(), MathInlineParser(hard_wrap=False),
                  [import_plugin(p) for p in PLUGINS])
    return str(md(source))
