"""Digests of code and data that go into the keys of the on-disk cache (:mod:`symbolic.cache`).

A cached value is only as right as its key: entries built from code are keyed by a hash of that
code's files (:func:`source_digest` of ``derivations/`` and ``symbolic/`` in ``derivations/terms.py``
and ``derivations/analyses/search.py``; :func:`tree_digest` of the code, ``paper/`` and
``templates/`` in ``memsym/report/forms.py``).  The code a process runs is what was on disk when it
started, so a file modified after that (:data:`START_NS`) gives no digest (None: no caching), and
every folder hashed here is remembered: once a file under one of them changes, :func:`hashed_changed`
says so and :func:`symbolic.cache.store` writes nothing more, since a key computed earlier may then
describe neither the code running nor the code on disk.
"""
from __future__ import annotations

import hashlib
import os
import time
from typing import Optional

#: When this module was imported (about when the process started): code changed later is not keyed.
#: (:mod:`symbolic.cache` imports this module, so this is no later than the cache's first use.)
START_NS = time.time_ns()
#: The roots whose digest this process used as a key (:func:`tree_digest`): an entry is stored only if
#: none of their files changed since the process started (:func:`hashed_changed`).
_HASHED: set = set()
#: Folders under the hashed roots that hold outputs, not inputs (compiled bytecode, ``paper/build``).
_SKIPPED = ("__pycache__", "build")


def source_digest(*packages) -> Optional[str]:
    """A hash of the Python sources of ``packages`` (module objects); None when one of them changed
    after this process started (the code running may not be the code on disk)."""
    return tree_digest(*(d for pkg in packages for d in getattr(pkg, "__path__", [])), suffix=".py")


def tree_digest(*roots, suffix: str = "") -> Optional[str]:
    """A hash of every file under the folders ``roots`` whose name ends with ``suffix`` (default: code
    and data alike; ``__pycache__`` and ``build`` output folders left out), with their relative paths;
    None when one of them was modified after this process started (:data:`START_NS`): a key of code
    that changed under a running process would describe code it does not run."""
    h = hashlib.sha256()
    _HASHED.update(str(r) for r in roots)
    for root in roots:
        root = str(root)
        h.update(b"\1")
        for d, dirs, files in os.walk(root):  # top-down, folders in sorted order
            dirs[:] = sorted(x for x in dirs if x not in _SKIPPED)
            for name in sorted(f for f in files if f.endswith(suffix)):
                path = os.path.join(d, name)
                try:
                    with open(path, "rb") as f:
                        if os.fstat(f.fileno()).st_mtime_ns > START_NS:
                            return None
                        data = f.read()
                except OSError:
                    data = b""
                h.update(os.fsencode(path[len(root):]) + b"\0" + data + b"\0")
    return h.hexdigest()[:32]


def changed_since_start(*roots) -> bool:
    """Whether a file under ``roots`` was modified after this process started."""
    for root in roots:
        for d, dirs, files in os.walk(str(root)):
            dirs[:] = [x for x in dirs if x not in _SKIPPED]
            for name in files:
                try:
                    if os.stat(os.path.join(d, name)).st_mtime_ns > START_NS:
                        return True
                except OSError:
                    return True
    return False


def hashed_changed() -> bool:
    """Whether a file under any folder this process hashed into a key (:func:`tree_digest`) was
    modified after the process started: a value computed since may be of neither version."""
    return changed_since_start(*sorted(_HASHED))
