"""Notebooks as files and as HTML: ``.ipynb`` text, and HTML through nbconvert and the ``memsym``
template in ``templates/nbconvert/`` (offline MathML for LaTeX, :mod:`.offline`).

Kept apart from :mod:`.notebook` (which builds the notebooks from the report's blocks) so that the
helper processes converting notebooks (:mod:`.converter`) load nbconvert without sympy.
"""
from __future__ import annotations

import json

from symbolic.resources import TEMPLATES_DIR

from .extras import report_extra

NBCONVERT_TEMPLATE = "memsym"


def to_ipynb(nb) -> str:
    with report_extra():
        # lazy: nbformat (only this path needs it)
        import nbformat
    return nbformat.writes(nb) + "\n"


_EXPORTER = None


def html_exporter():
    """nbconvert's HTML exporter with the ``memsym`` template (created once)."""
    global _EXPORTER
    if _EXPORTER is None:
        with report_extra("HTML notebooks"):
            # lazy: nbconvert (only this path needs it)
            from nbconvert import HTMLExporter
        # optimistic_validation: the notebook is checked against the schema once, after the preprocessors,
        # not after each of the 12 (the same notebooks pass or fail; the checks were 5% of a conversion)
        exporter = HTMLExporter(template_name=NBCONVERT_TEMPLATE, optimistic_validation=True,
                                extra_template_basedirs=[str(TEMPLATES_DIR / "nbconvert")])
        exporter.template  # compile the template now
        _EXPORTER = exporter
    return _EXPORTER


#: Whether :func:`to_html` tries :mod:`.nbfast` (nbconvert's HTML without nbconvert) first.
FAST = True


def fast() -> bool:
    """Whether :func:`to_html` can make nbconvert's HTML without importing nbconvert (:mod:`.nbfast`)."""
    from . import nbfast  # lazy: plain Python until it converts
    return FAST and nbfast.available()


def to_html(nb, name: str, checked: bool = False) -> str:
    """HTML of a notebook through nbconvert and the ``memsym`` template (offline MathML for LaTeX): the
    same bytes from :mod:`.nbfast` without nbconvert where it reproduces them, else nbconvert's.
    ``checked``: ``nb`` passed nbformat's schema already (:func:`checked`), as nbconvert checks it."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from .offline import math_scripts
    if fast():
        from . import nbfast
        if not checked:
            with report_extra():
                # lazy: nbformat (only this path needs it)
                import nbformat
            nbformat.validate(nb, relax_add_props=True)  # what nbconvert checks after its preprocessors
        try:
            return nbfast.to_html(nb, name, str(TEMPLATES_DIR / "nbconvert"), math_scripts(notebook=True))
        except nbfast.Unsupported:
            pass
    body, _ = html_exporter().from_notebook_node(nb, resources={"metadata": {"name": name},
                                                                "memsym_math": math_scripts(notebook=True)})
    return body


def to_json(nb) -> str:
    """The notebook as plain JSON (what a :class:`~memsym.report.converter.Converter` is sent): its
    data as built, without the schema validation and formatting of :func:`to_ipynb`."""
    return json.dumps(nb, ensure_ascii=False)


def checked(nb):
    """``nb`` once nbformat's schema accepts it (a ValidationError otherwise)."""
    with report_extra():
        # lazy: nbformat (only this path needs it)
        import nbformat
    nbformat.validate(nb)
    return nb


def html_of_json(text: str, name: str) -> str:
    """:func:`to_html` of a notebook given as :func:`to_json` of it (the same notebook nodes), checked
    against nbformat's schema first: the report's process sends it unchecked, and without nbformat's
    version numbers when it built it without nbformat (``build_notebook(sent=True)``: set here)."""
    with report_extra():
        # lazy: nbformat (only this path needs it)
        from nbformat import v4
        from nbformat.notebooknode import from_dict
    nb = from_dict(json.loads(text))
    if nb.get("nbformat", 0) is None:
        nb["nbformat"] = v4.nbformat
    if nb.get("nbformat_minor", 0) is None:
        nb["nbformat_minor"] = v4.nbformat_minor
    return to_html(checked(nb), name, checked=True)


def html_of_text(text: str, name: str) -> str:
    """:func:`to_html` of a notebook given as its ``.ipynb`` text."""
    with report_extra():
        # lazy: nbformat (only this path needs it)
        import nbformat
    return to_html(nbformat.reads(text, as_version=4), name)
