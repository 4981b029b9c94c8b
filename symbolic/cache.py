"""The on-disk cache of memsym: compiled kernels and built terms, under the user's cache directory.

``$MEMSYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/memsym``, else ``~/.cache/memsym``.  Set
``MEMSYM_CACHE=0`` to turn it off.  Entries are keyed by a hash of what they were made from
and :data:`CODE_VERSION`; a file that cannot be read is ignored (and rebuilt by its caller),
and writes are atomic (a temporary file renamed), so concurrent processes never see half a file.
A cache never changes a number: an entry is either the value its key describes or ignored.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Optional

#: Bumped whenever what a cache entry holds would change for the same key (generated code, pickled terms).
CODE_VERSION = "1"


def enabled() -> bool:
    return os.environ.get("MEMSYM_CACHE", "1") not in ("0", "off", "no", "false")


def directory(kind: str) -> str:
    """The cache folder for ``kind`` (created on demand by :func:`write`)."""
    base = os.environ.get("MEMSYM_CACHE_DIR")
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                            "memsym")
    return os.path.join(base, kind)


def key(*parts) -> str:
    """A hex digest of ``parts`` (texts) and the code version."""
    h = hashlib.sha256(CODE_VERSION.encode())
    for p in parts:
        h.update(b"\0" + str(p).encode())
    return h.hexdigest()[:32]


def read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def write(path: str, data: bytes) -> bool:
    """Atomically write ``data``; False (and nothing written) when the folder is not writable."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return True
    except OSError:
        return False


def discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def source_digest(*packages) -> str:
    """A hash of the Python sources of ``packages`` (module objects): a cache keyed by it is stale the
    moment any of their code changes, whatever CODE_VERSION says."""
    return tree_digest(*(d for pkg in packages for d in getattr(pkg, "__path__", [])), suffix=".py")


def tree_digest(*roots, suffix: str = "") -> str:
    """A hash of every file under the folders ``roots`` whose name ends with ``suffix`` (default: code
    and data alike, a package's JSON or TOML as well as its Python; ``__pycache__`` left out), with their
    relative paths."""
    h = hashlib.sha256()
    for root in roots:
        root = str(root)
        h.update(b"\1")
        for d, dirs, files in os.walk(root):  # top-down, folders in sorted order
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for name in sorted(f for f in files if f.endswith(suffix)):
                path = os.path.join(d, name)
                h.update(path[len(root):].encode() + b"\0" + (read(path) or b"") + b"\0")
    return h.hexdigest()[:32]


def pickled(kind: str, parts, make):
    """``make()``, kept as a pickle under ``kind`` keyed by ``parts``: loaded when present and readable,
    else made and written.  A file that fails to load (corrupted, written by other code) is rebuilt."""
    import pickle
    if not enabled():
        return make()
    path = os.path.join(directory(kind), key(*parts) + ".pickle")
    data = read(path)
    if data is not None:
        try:
            return pickle.loads(data)
        except Exception:
            discard(path)
    value = make()
    try:
        write(path, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # not picklable: the cache is only an optimisation
        pass
    return value
