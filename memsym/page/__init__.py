"""``memsym page``: one self-contained HTML calculator: :mod:`memsym.page.data`'s data and printed functions, the
controls of :mod:`memsym.page.form` (form.html.j2) and the scripts of templates/page/; nothing from the network."""
from __future__ import annotations

import html
import json
from pathlib import Path

import jinja2

from symbolic.files import write_atomic
from symbolic.resources import TEMPLATES_DIR

from .. import __version__
from .data import generate
from .form import behaviour, controls
from .options import checks_js

PAGE_NAME = "memsym-calculator.html"


def script_json(obj) -> str:
    """JSON safe inside a <script> element: no ``<`` (so no ``</script`` and no ``<!--``, which would end the
    element or open the HTML parser's escaped state) and no ``-->``, each written as the JSON escape JavaScript
    reads back as the same text."""
    return json.dumps(obj, separators=(",", ":")).replace("<", "\\u003c").replace("-->", "--\\u003e")


def render(data=None, models=(), progress=None) -> str:
    """The page's HTML; ``data``: a :func:`memsym.page.data.generate` result to reuse; ``models``: (argument,
    ModelSpec) pairs the page offers instead of DeepSeek's presets (``memsym page --model FILE``, any family's);
    ``progress``: told what is being built (a line each step)."""
    d = dict(generate(models=models, progress=progress) if data is None else data)
    fns, mathml, search_js = d.pop("fns"), d.pop("mathml"), d.pop("search_js")
    folder = Path(TEMPLATES_DIR) / "page"
    read = lambda name: (folder / name).read_text(encoding="utf-8")  # noqa: E731
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), autoescape=False, keep_trailing_newline=True)
    form = controls(d)
    d["form"] = behaviour(form)
    given = list(d["models"])
    subject = (f"{d['options']['default_model']}-style models (Zhang & Su, arXiv 2502.07846)" if not given else
               "; ".join(f"{n}, a {d['families'][d['models'][n]['family']]['title']} model" for n in given)
               + ", by the method of Zhang & Su (arXiv 2502.07846)")
    return env.get_template("page.html.j2").render(
        form=env.overlay(autoescape=True).get_template("form.html.j2").render(form=form).strip(),
        data_json=script_json(d), fns=",\n".join(fns), mathml_json=script_json(mathml),
        scripts=[*(read(f) for f in ("runtime.js", "inputs.js")), checks_js(), read("ui.js"), search_js,
                 read("search.js")],
        version=__version__, subject=html.escape(subject))


def write(out_dir, models=(), progress=None) -> Path:
    """Write the page into ``out_dir`` (created if needed), atomically; its path (``progress``: see :func:`render`)."""
    path = Path(out_dir) / PAGE_NAME
    write_atomic(path, render(models=models, progress=progress))
    return path
