"""The output cache of ``memsym estimate``: a repeated command prints what it printed, without sympy.

``memsym estimate ...`` is a pure function of its command line, the files the command line names
(a Hugging Face ``config.json`` given as ``--model``), memsym's own code and data, and sympy's
version.  On success (exit 0) the process keeps what it wrote to stdout and stderr in the on-disk
cache (:mod:`symbolic.cache`, kind ``output``), keyed by all of them; the next process given the
same command line finds the entry before importing anything heavy and writes it out byte for byte.
That is the whole of the cold start of a repeated estimate (about 0.04 s here against 0.23 s for
``import sympy``); a command line not seen before runs in full (1.3-1.6x ``import sympy`` here:
sympy's own import is most of it) and is kept.

What makes an entry stale: any byte of any file under ``memsym/``, ``derivations/``, ``symbolic/``
or ``paper/`` (code and data alike), sympy's ``release.py``, the Python version, a ``MEMSYM_*``
variable, or the content of a file named on the command line.  Not kept (always run in full): a
command line naming a folder, a special file, ``-`` or a file over :data:`MAX_NAMED_BYTES`; a run
that fails, is interrupted or exits through argparse (``--help``); ``main(argv)`` called from
Python (only the ``memsym`` process itself reads or writes entries, so tests and the API always
compute).  ``MEMSYM_CACHE=0`` turns it off with every other cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from importlib.util import find_spec
from typing import List, Optional

#: The subcommands whose output is kept: read-only, stdout only, deterministic.
COMMANDS = ("estimate",)
#: A named file larger than this is not hashed (the command itself refuses a config.json this big).
MAX_NAMED_BYTES = 1 << 22
#: Entries kept at most (the oldest dropped when a new one is written): a few KiB each.
MAX_ENTRIES = 256
_PACKAGES = ("memsym", "derivations", "symbolic")


def _roots() -> Optional[List[str]]:
    """The folders whose every file the output may depend on: memsym's packages and paper/ beside them."""
    roots = []
    for name in _PACKAGES:
        spec = find_spec(name) if name not in sys.modules else sys.modules[name].__spec__
        if spec is None or not spec.submodule_search_locations:
            return None
        roots.extend(spec.submodule_search_locations)
    paper = os.path.join(os.path.dirname(roots[0]), "paper")
    return roots + ([paper] if os.path.isdir(paper) else [])


def _named_file(token: str) -> Optional[bytes]:
    """b'' for a token that names nothing; the path and content hash of a regular file it names;
    None (do not keep) when it names something else or a file too large to hash."""
    candidates = [token] + ([token.split("=", 1)[1]] if token.startswith("--") and "=" in token else [])
    out = b""
    for path in candidates:
        if path == "-":
            return None
        if not path or not os.path.lexists(path):
            continue
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_NAMED_BYTES:
            return None
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_NAMED_BYTES + 1)
        except OSError:
            return None
        out += os.path.abspath(path).encode() + b"\0" + hashlib.sha256(data).digest()
    return out


def key(argv: List[str]) -> Optional[str]:
    """The entry's key for ``argv`` (the words after ``memsym``), or None when this command line is
    not kept (see the module's docstring)."""
    from symbolic import cache
    if not cache.enabled() or not argv or argv[0] not in COMMANDS:
        return None
    roots = _roots()
    sympy = find_spec("sympy")
    if roots is None or sympy is None or not sympy.submodule_search_locations:
        return None
    files = []
    for token in argv:
        named = _named_file(token)
        if named is None:
            return None
        files.append(named)
    release = cache.read(os.path.join(sympy.submodule_search_locations[0], "release.py"))
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("MEMSYM_"))
    return cache.key("output", json.dumps(argv), b"".join(files).hex(), release, sys.version_info[:3], env,
                     cache.tree_digest(*roots))


def _path(k: str) -> str:
    from symbolic import cache
    return os.path.join(cache.directory("output"), k + ".json")


def replay(k: str) -> bool:
    """Write the kept stdout and stderr of entry ``k``; False (nothing written) when there is none."""
    from symbolic import cache
    data = cache.read(_path(k))
    if data is None:
        return False
    try:
        entry = json.loads(data)
        out, err = entry["stdout"], entry["stderr"]
        if not isinstance(out, str) or not isinstance(err, str):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        cache.discard(_path(k))
        return False
    try:
        if err:
            sys.stderr.write(err)
            sys.stderr.flush()
        sys.stdout.write(out)
        sys.stdout.flush()
    except BrokenPipeError:  # `memsym estimate | head -1`: as the full run, exit 0
        pass
    return True


class _Tee:
    """A text stream that writes through to ``stream`` and keeps a copy.  A caller that reaches past
    the text layer (``buffer``, ``fileno``) may write what the copy misses: the run is then not kept."""

    def __init__(self, stream):
        self._stream, self.kept, self.bypassed = stream, [], False

    def write(self, s):
        self.kept.append(s)
        return self._stream.write(s)

    def __getattr__(self, name):
        if name in ("buffer", "fileno", "detach"):
            self.bypassed = True
        return getattr(self._stream, name)


class Recorder:
    """``with Recorder(k) as r: ...; r.keep()``: the streams written inside are kept as entry ``k``
    when :meth:`keep` is called (a successful run), else forgotten."""

    def __init__(self, k: str):
        self.k = k

    def __enter__(self):
        self._saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = self.out, self.err = _Tee(sys.stdout), _Tee(sys.stderr)
        return self

    def __exit__(self, *exc):
        sys.stdout, sys.stderr = self._saved
        return False

    def keep(self) -> None:
        from symbolic import cache
        if self.out.bypassed or self.err.bypassed:
            return
        entry = {"stdout": "".join(self.out.kept), "stderr": "".join(self.err.kept)}
        if cache.write(_path(self.k), json.dumps(entry).encode()):
            _evict(os.path.dirname(_path(self.k)))


def _evict(folder: str, most: int = MAX_ENTRIES) -> None:
    """Keep the newest ``most`` entries of ``folder`` (by modification time): every command line kept
    would otherwise grow the cache for ever."""
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".json")]
        if len(names) <= most:
            return
        paths = sorted((os.path.join(folder, n) for n in names), key=lambda p: os.stat(p).st_mtime_ns)
    except OSError:
        return
    from symbolic import cache
    for path in paths[:len(paths) - most]:
        cache.discard(path)
