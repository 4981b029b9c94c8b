"""The report: the paper's sections as data of a Context, rendered by Jinja, published.  The names load on first
use (PEP 562), so importing :mod:`.formats` loads no sympy."""
from __future__ import annotations

import importlib

#: {name: the submodule defining it}, loaded on first use.
_NAMES = {
    **dict.fromkeys(("C", "Cell", "Equation", "G", "I", "M", "Paragraph", "Report", "Section", "Stub", "T",
                     "Table"), "blocks"),
    "Context": "context", "equation": "equations", "para": "equations",
    **dict.fromkeys(("TEX_ENGINES", "PdfError", "compile_pdf", "find_tex_engine"), "pdf"),
    **dict.fromkeys(("DEFAULT_FORMATS", "FORMATS", "parse_formats"), "formats"),
    **dict.fromkeys(("Published", "publish"), "publishing"),
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
