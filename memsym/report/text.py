"""Text for the report's formats: LaTeX names with braced scripts, and escaping per format."""
from __future__ import annotations

import re
import unicodedata

from symbolic.notation import latex_names

from ..lines import one_line as printable

_SCRIPT = re.compile(r"([_^])([A-Za-z0-9])(?![A-Za-z0-9{])")


def braced(name: str) -> str:
    """A LaTeX name with single-character scripts braced, as sympy prints them: ``d_h^R`` -> ``d_{h}^{R}``."""
    return _SCRIPT.sub(r"\1{\2}", name)


def report_names() -> dict:
    """``symbol_names`` for the report: the registry's paper LaTeX, braced (see :func:`braced`)."""
    return {k: braced(v) for k, v in latex_names().items()}


_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "<": r"\textless{}", ">": r"\textgreater{}"}
_TEX_RE = re.compile("|".join(re.escape(k) for k in _TEX_SPECIAL))
_DASHES = re.compile("-(?=-)")

#: Non-ASCII characters a pdflatex T1 font lacks, as LaTeX (others outside Latin-1 become '?').
_TEX_UNICODE = {"≥": r"\ensuremath{\geq}", "≤": r"\ensuremath{\leq}", "×": r"\ensuremath{\times}",
                "→": r"\ensuremath{\to}", "−": "-", "–": "--", "—": "---", "‘": "`", "’": "'", "“": "``",
                "”": "''", "…": r"\ldots{}", "≈": r"\ensuremath{\approx}", "·": r"\ensuremath{\cdot}",
                "δ": r"\ensuremath{\delta}", "Δ": r"\ensuremath{\Delta}", "α": r"\ensuremath{\alpha}",
                "β": r"\ensuremath{\beta}", "σ": r"\ensuremath{\sigma}", "μ": r"\ensuremath{\mu}"}


#: A superscript written in plain text: ``2^30``, ``W^{DQ}``, ``d_h^R``.
_SUPER = re.compile(r"\^(?:\{([^{}]*)\}|([A-Za-z0-9]+))")


def tex_escape(text) -> str:
    """Plain text made safe for LaTeX; a superscript typed in text (``2^30``, ``W^{DQ}``) set as one."""
    text = str(text)
    if "^" in text:
        parts, last = [], 0
        for m in _SUPER.finditer(text):
            parts += [_escape(text[last:m.start()]), r"\textsuperscript{" + _escape(m.group(1) or m.group(2)) + "}"]
            last = m.end()
        return "".join(parts) + _escape(text[last:])
    return _escape(text)


def _escape(text: str) -> str:
    # a control character (C0, DEL, C1: a path may hold one) stops pdflatex: shown as its code, \x7f
    out = _TEX_RE.sub(lambda m: _TEX_SPECIAL[m.group(0)], printable(text))
    out = _DASHES.sub("-{}", out)   # "--conventions" stays two hyphens, not an en dash
    if out.isascii():
        return out
    return "".join(ch if ord(ch) < 256 else _TEX_UNICODE.get(ch, "?") for ch in out)


#: Markdown punctuation, backslash-escaped (CommonMark): code, emphasis, links, tables, autolinks, headings, maths.
_MD_PUNCT = "\\`*_{}[]()#|~$:@"
#: Raw HTML, autolinks and entity references: written as entities, which every renderer shows as text.
_MD_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MD_RE = re.compile("[" + re.escape(_MD_PUNCT + "".join(_MD_HTML)) + "]|(?<=[Ww]{3})\\.|\r\n|"
                    "[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]")


def _md_sub(m) -> str:
    c = m.group(0)
    if c in _MD_HTML:
        return _MD_HTML[c]
    return "\\" + c if c in _MD_PUNCT or c == "." else " "


def md_escape(text) -> str:
    """Plain text made literal in a line of Markdown: punctuation escaped, ``& < >`` as entities, line breaks as
    spaces, control and bidirectional-format characters as their codes."""
    return _codes(_MD_RE.sub(_md_sub, str(text)))


def one_line(text) -> str:
    """Text made one line (for a ``# comment`` in a notebook's code cell), control characters as their codes."""
    return _codes(" ".join(str(text).splitlines()))


def _codes(text: str) -> str:
    """``text`` with its control and format characters (but tab) as their codes (``\\x1b``, ``\\u202e``)."""
    if text.isprintable():
        return text
    return "".join("\\" + repr(c)[2:-1] if c != "\t" and unicodedata.category(c) in ("Cc", "Cf") else c
                   for c in text)
