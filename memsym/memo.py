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

Trust: an entry is written and read through :mod:`symbolic.cache` (this user's folder only, HMAC
authenticated: an edited or planted entry is deleted and the command runs in full).  The key is
made from the exact bytes of each named file, and those bytes are what the run parses
(:mod:`symbolic.pinned`), so a file rewritten during a run can never leave one version's numbers
under another's key; a run during which memsym's own files changed is not kept.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from importlib.util import find_spec
from typing import Dict, List, Optional

#: The subcommands whose output is kept: read-only, stdout only, deterministic.
COMMANDS = ("estimate",)
#: A named file larger than this is not hashed (the command itself refuses a config.json this big).
MAX_NAMED_BYTES = 1 << 22
#: The cache kind of the entries (bounded by symbolic.cache.LIMITS).
KIND = "output"
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


def _named_file(token: str, pins: Dict[str, bytes]) -> Optional[bytes]:
    """b'' for a token that names nothing; the path and content hash of a regular file it names
    (its bytes kept in ``pins``: the run parses exactly those); None (do not keep) when it names
    something else or a file too large to hash."""
    candidates = [token] + ([token.split("=", 1)[1]] if token.startswith("--") and "=" in token else [])
    out = b""
    for path in candidates:
        if path == "-":
            return None
        try:
            if not path or not os.path.lexists(path):
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except (OSError, ValueError):
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_NAMED_BYTES:
                return None
            data = os.read(fd, MAX_NAMED_BYTES + 1)
            while data and len(data) <= MAX_NAMED_BYTES:
                more = os.read(fd, MAX_NAMED_BYTES + 1 - len(data))
                if not more:
                    break
                data += more
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(data) > MAX_NAMED_BYTES:
            return None
        pins[os.path.abspath(path)] = data
        out += os.fsencode(os.path.abspath(path)) + b"\0" + hashlib.sha256(data).digest()
    return out


def key(argv: List[str]) -> Optional[str]:
    """The entry's key for ``argv`` (the words after ``memsym``), or None when this command line is
    not kept (see the module's docstring).  The bytes of every file it names are pinned
    (:mod:`symbolic.pinned`): the run parses the bytes the key was made from, never a later version."""
    from symbolic import cache, pinned
    if not cache.enabled() or not argv or argv[0] not in COMMANDS or sys.stdout is None or sys.stderr is None:
        return None  # (a closed stdout or stderr: the run writes nothing to keep)
    roots = _roots()
    sympy = find_spec("sympy")
    if roots is None or sympy is None or not sympy.submodule_search_locations:
        return None
    files, pins = [], {}
    for token in argv:
        named = _named_file(token, pins)
        if named is None:
            return None
        files.append(named)
    code = cache.tree_digest(*roots)
    if code is None:
        return None
    try:
        with open(os.path.join(sympy.submodule_search_locations[0], "release.py"), "rb") as f:
            release = f.read()
    except OSError:
        return None
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("MEMSYM_"))
    for path, data in pins.items():
        pinned.pin(path, data)
    return cache.key("output", json.dumps(argv), b"".join(files).hex(), release, sys.version_info[:3], env, code)


def replay(k: str) -> bool:
    """Write the kept stdout and stderr of entry ``k`` (authenticated: :func:`symbolic.cache.load`);
    False (nothing written) when there is none."""
    from symbolic import cache
    data = cache.load(KIND, k)
    if data is None:
        return False
    try:
        entry = json.loads(data)
        out, err = entry["stdout"], entry["stderr"]
        if not isinstance(out, str) or not isinstance(err, str):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        return False
    try:
        if err:
            sys.stderr.write(err)
            sys.stderr.flush()
        sys.stdout.write(out)
        sys.stdout.flush()
    except BrokenPipeError:  # `memsym estimate | head -1`: as the full run, exit 0
        pass  # (any other OSError, a full disk: the caller says it in one line, as the full run does)
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
        """Store the run's output, unless it bypassed the copy or found the cache unusable (its stderr then
        says so, which a later run must not repeat); :func:`symbolic.cache.store` refuses it if memsym's
        code or data changed while it ran (the output may then be of neither version)."""
        from symbolic import cache
        if self.out.bypassed or self.err.bypassed or cache.warned():
            return
        entry = {"stdout": "".join(self.out.kept), "stderr": "".join(self.err.kept)}
        cache.store(KIND, self.k, json.dumps(entry).encode())
