"""Offline maths for the HTML outputs: the vendored KaTeX inlined, rendering to MathML; nothing is fetched."""
from __future__ import annotations

from functools import lru_cache

from symbolic.resources import TEMPLATES_DIR

VENDOR = TEMPLATES_DIR / "vendor" / "katex"
REPORT_DELIMITERS = '[{left: "\\\\[", right: "\\\\]", display: true}, {left: "\\\\(", right: "\\\\)", display: false}]'
#: The class of elements holding user text that must read as typed: ``$x$`` in a path stays ``$x$``.
LITERAL = "memsym-literal"
NOTEBOOK_DELIMITERS = ('[{left: "$$", right: "$$", display: true}, {left: "\\\\[", right: "\\\\]", display: true}, '
                       '{left: "\\\\(", right: "\\\\)", display: false}, {left: "$", right: "$", display: false}]')


def _script(js: str) -> str:
    return "<script>\n" + js.replace("</", "<\\/") + "\n</script>"


@lru_cache(maxsize=None)
def math_scripts(notebook: bool = False) -> str:
    """The <script> elements that typeset the page's LaTeX as MathML, offline."""
    katex = (VENDOR / "katex.min.js").read_text(encoding="utf-8")
    auto = (VENDOR / "auto-render.min.js").read_text(encoding="utf-8")
    delimiters = NOTEBOOK_DELIMITERS if notebook else REPORT_DELIMITERS
    run = ('document.addEventListener("DOMContentLoaded", function () {\n'
           f'  renderMathInElement(document.body, {{delimiters: {delimiters}, output: "mathml", '
           'throwOnError: false, ignoredTags: ["script", "noscript", "style", "textarea", "pre", "code"], '
           f'ignoredClasses: ["{LITERAL}"]}});\n'
           '  document.body.setAttribute("data-math", "rendered");\n});')
    return "\n".join((_script(katex), _script(auto), _script(run)))
