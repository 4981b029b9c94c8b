"""The digest of the code the report is made from (a part of every key of the report's caches), without sympy:
what a key of a report served from plain data needs before anything else is loaded."""
from __future__ import annotations

import os
import re
import sys
from functools import lru_cache
from typing import Sequence, Tuple

from symbolic import digests
import derivations
import memsym
import symbolic
from symbolic.resources import PAPER_DIR, TEMPLATES_DIR


@lru_cache(maxsize=None)
def code_digest() -> str:
    """A hash of every file the report is made from: code, the paper's data and the templates."""
    return digests.tree_digest(*derivations.__path__, *symbolic.__path__, *memsym.__path__, PAPER_DIR, TEMPLATES_DIR)


#: What the HTML of a notebook depends on besides its cells (nbconvert and what it renders with).
HTML_PACKAGES = ("nbconvert", "nbformat", "ipython", "mistune", "pygments", "jinja2", "markupsafe", "bleach",
                 "nh3", "traitlets", "beautifulsoup4", "jupyterlab_pygments", "jupyter_core", "defusedxml")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions(packages: Sequence[str]) -> Tuple:
    """((package, version or None), ...): the version in the name of the first ``<name>-<version>.dist-info``
    folder on ``sys.path``, as :func:`importlib.metadata.version` finds the package (one listing of each folder
    instead of a search per package: a few milliseconds, not a tenth of a second)."""
    found = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for n in names:
            if n.endswith(".dist-info"):
                name, _, version = n[:-len(".dist-info")].partition("-")
                found.setdefault(_normal(name), version or None)
    return tuple((p, found.get(_normal(p))) for p in packages)
