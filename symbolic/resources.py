"""Where ``paper/`` and ``templates/`` live: the repository's folders, or in a regular install the packages
``memsym_paper`` and ``memsym_templates``."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def _locate(folder: str, installed: str) -> Path:
    here = _ROOT / folder
    if here.is_dir():
        return here
    spec = importlib.util.find_spec(installed)
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return here


PAPER_DIR = _locate("paper", "memsym_paper")
TEMPLATES_DIR = _locate("templates", "memsym_templates")


def build_dir() -> Path:
    """Default output folder of ``memsym report``: ``./memsym-report`` under the current
    directory, never a folder of the checkout or of the installed package."""
    return Path.cwd() / "memsym-report"
