"""The report: the paper's sections as data, rendered to LaTeX, Markdown and HTML, published.

The model (built once from the terms of a :class:`Context`): :mod:`.blocks` (cells,
tables, equations, sections), :mod:`.context`, :mod:`.equations`, :mod:`.tables`,
:mod:`.sections`.  Rendering: :mod:`.text` (LaTeX names, escaping) and :mod:`.rendering`
(the Jinja templates in ``templates/``).  Publishing: :mod:`.publishing` (atomic files),
:mod:`.pdf` (a TeX engine), :mod:`.notebook` (one notebook per section, its outputs computed here, and its HTML
through nbconvert; needs the report extra, :mod:`.extras`).

The names below load on first use (PEP 562): importing :mod:`.formats` (what ``memsym report``
parses its options with) loads no sympy, so ``memsym --help`` stays instant.
"""
from __future__ import annotations

import importlib

#: {name: the submodule defining it}, loaded on first use.
_NAMES = {
    **dict.fromkeys(("A", "C", "Cell", "Equation", "G", "I", "M", "Paragraph", "Report", "Section", "Stub", "T",
                     "Table"), "blocks"),
    "Context": "context", "equation": "equations", "para": "equations",
    **dict.fromkeys(("TEX_ENGINES", "PdfError", "compile_pdf", "find_tex_engine"), "pdf"),
    **dict.fromkeys(("DEFAULT_FORMATS", "FORMATS", "parse_formats"), "formats"),
    **dict.fromkeys(("Published", "default_out_dir", "publish", "write_atomic"), "publishing"),
    **dict.fromkeys(("environment", "render", "render_block"), "rendering"),
    **dict.fromkeys(("SECTIONS", "SectionSpec", "build_report", "complete_report", "outline_report",
                     "section_term_ids"), "sections"),
    **dict.fromkeys(("TABLE_SOURCES", "TABLES"), "tables"),
}
__all__ = sorted(_NAMES)


def __getattr__(name):
    if name in _NAMES:
        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
        globals()[name] = value
        return value
    try:  # a submodule not imported yet (memsym.report.rendering after `import memsym.report`)
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_NAMES))
