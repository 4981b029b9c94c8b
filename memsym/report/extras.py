"""The report extra (``memsym[report]``) the notebooks need; a missing package is a ConfigError naming it."""
from __future__ import annotations

import importlib.util
from contextlib import contextmanager

from symbolic.errors import ConfigError

#: What the report extra installs (notebooks built, formatted, run by a reader, converted).
REPORT_MODULES = ("nbformat", "nbclient", "nbconvert", "jupyter_client", "ipykernel")
#: The formats written from notebooks.
NOTEBOOK_FORMATS = ("ipynb", "html")


def installed(name: str) -> bool:
    """Whether the module ``name`` can be imported (found, not imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def require_report(formats, typed: bool = True, command: str = "report") -> None:
    """ConfigError unless the report extra is installed, when ``formats`` (``typed`` or defaults) need notebooks."""
    needs = [f for f in NOTEBOOK_FORMATS if f in formats]
    missing = [m for m in REPORT_MODULES if not installed(m)] if needs else []
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        what = f"--format {','.join(needs)} needs" if typed else \
            f"{command} writes {','.join(needs)} by default, which need"
        other = " (or use --format tex,md,pdf)" if command == "report" else ""
        raise ConfigError("extra", f"{what} the report extra ({', '.join(missing)} {verb} not installed): "
                                   f"pip install 'memsym[report]'{other}")


@contextmanager
def report_extra(what: str = "notebooks"):
    """Imports inside this block raise ConfigError naming the report extra when a package is missing."""
    try:
        yield
    except ImportError as exc:
        raise ConfigError("extra", f"{what} needs the report extra ({exc.name or str(exc)} is not installed): "
                                   f"pip install 'memsym[report]'") from None
