"""The report: the paper's sections as data, rendered to LaTeX, Markdown and HTML, published.

The model (built once from the terms of a :class:`Context`): :mod:`.blocks` (cells,
tables, equations, sections), :mod:`.context`, :mod:`.equations`, :mod:`.tables`,
:mod:`.sections`.  Rendering: :mod:`.text` (LaTeX names, escaping) and :mod:`.rendering`
(the Jinja templates in ``templates/``).  Publishing: :mod:`.publishing` (atomic files),
:mod:`.pdf` (a TeX engine), :mod:`.notebook` (one executed notebook per section; needs the
report extra, :mod:`.extras`).
"""
from __future__ import annotations

from .blocks import A, C, Cell, Equation, G, I, M, Paragraph, Report, Section, Stub, T, Table  # noqa: F401
from .context import Context  # noqa: F401
from .equations import equation, para  # noqa: F401
from .pdf import TEX_ENGINES, PdfError, compile_pdf, find_tex_engine  # noqa: F401
from .publishing import (DEFAULT_FORMATS, FORMATS, Published, default_out_dir, parse_formats,  # noqa: F401
                         publish, write_atomic)
from .rendering import environment, render, render_block  # noqa: F401
from .sections import (SECTIONS, SectionSpec, build_report, complete_report, outline_report,  # noqa: F401
                        section_term_ids)
from .tables import TABLE_SOURCES, TABLES  # noqa: F401
