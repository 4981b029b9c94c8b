"""The on-disk cache of memsym: built terms, search kernels, the report and ``estimate``'s output.

Where: ``$MEMSYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/memsym``, else ``~/.cache/memsym``; one
folder per kind of entry under it (``terms/``, ``search/``, ``report/``, ``kernels/``).
``MEMSYM_CACHE=0`` turns every cache off.  A cache never changes a number: an entry is either the
value its key describes, or it is deleted and recomputed.  How that is kept true:

* **Only this user's folders.**  The cache folder and every folder under it must be owned by the
  current user and not writable by group or others (memsym creates them 0700, files 0600).
  Otherwise memsym uses no cache and says so once on stderr, as ssh does with keys and pip with its
  cache.  Every folder and file below the cache folder is opened relative to the folder's
  descriptor with ``O_NOFOLLOW``: a symbolic link inside the cache is never followed.
* **Every entry authenticated.**  An entry is ``MAGIC``, an HMAC-SHA256 and then its kind, its key
  and its payload; the HMAC covers all three, keyed by 32 random bytes kept 0600 in the cache
  folder (``key``), made on first use.  An entry whose HMAC, kind or key does not match (edited,
  planted, written under another key or with another key file) is deleted and recomputed: nothing
  read from the cache is unpickled or executed unless it verifies.
* **Keys from what is computed.**  Callers key an entry by everything its value depends on (the
  model's values, a hash of the code's files, the exact bytes of a named file that are then parsed).
  Code hashes (:mod:`symbolic.digests`: ``tree_digest``, ``source_digest``) are refused (None: no
  caching) when a file under them changed after this process started, since the code running may
  then differ from the code hashed; once one has, :func:`store` writes nothing more.
* **Bounded, and only its own files evicted.**  Each kind keeps at most :data:`LIMITS` entries and
  bytes, the oldest dropped first; eviction deletes only files named as this cache names its entries
  (``<32 hex>.entry``, and its own temporary files), never anything else in the folder.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import os
import pickle
import re
import secrets
import shutil
import stat
import sys
import time
from typing import Callable, Dict, Optional, Tuple

from . import digests, notices

#: Bumped whenever what a cache entry holds would change for the same key (generated code, pickled terms).
CODE_VERSION = "2"
#: The first bytes of every entry (the format's version).
MAGIC = b"memsym-cache 2\n"
#: The file holding the per-user HMAC key, in the cache folder (made by memsym; never replaced once there).
KEY_FILE = ".memsym-key"
KEY_BYTES = 32
#: {kind: (entries, bytes)} kept at most per kind (the kind's first path component); others: DEFAULT_LIMIT.
LIMITS: Dict[str, Tuple[int, int]] = {
    "terms": (64, 256 << 20),
    "search": (64, 64 << 20),
    "report": (2048, 256 << 20),
    "kernels": (64, 256 << 20),
}
DEFAULT_LIMIT = (256, 64 << 20)
#: The largest entry read back (a terms registry pickles to a few hundred KiB).
MAX_ENTRY_BYTES = 64 << 20
#: Temporary files older than this (a process killed while writing) are removed by eviction.
STALE_TEMP_SECONDS = 3600

_ENTRY = re.compile(r"^[0-9a-f]{32}\.entry$")
_KEY = re.compile(r"^[0-9a-f]{32}$")
_TEMP = re.compile(r"^\.tmp-[0-9]+-[0-9a-f]{16}$")
_KIND = re.compile(r"^[a-z][a-z0-9-]{0,31}(/[a-z][a-z0-9-]{0,31})*$")

_state: Dict = {"base": None, "fd": None, "key": None, "warned": False, "pending": None}
#: When True (the ``memsym`` command sets it), the one warning is kept for :func:`pending_warning`
#: instead of printed: the command prints it after a successful run, so an error stays one line.
DEFER_WARNING = False  # (or symbolic.notices.DEFER, which the memsym process sets)


def enabled() -> bool:
    return os.environ.get("MEMSYM_CACHE", "1").strip().lower() not in ("0", "off", "no", "false")


def base_dir() -> str:
    """The cache folder (not checked; see :func:`_root`)."""
    base = os.environ.get("MEMSYM_CACHE_DIR")
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                            "memsym")
    return base


def key(*parts) -> str:
    """A hex digest of ``parts`` (texts) and the code version: an entry's name."""
    h = hashlib.sha256(CODE_VERSION.encode())
    for p in parts:
        h.update(b"\0" + (p if isinstance(p, bytes) else str(p).encode("utf-8", "surrogateescape")))
    return h.hexdigest()[:32]


# ----------------------------------------------------------------------------- the folders
def _one_line(text: str) -> str:
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in str(text))


def _warn(why: str) -> None:
    """Say once per process why (a part of) the cache is not used (one line; deferred under the command)."""
    if _state["warned"]:
        return
    _state["warned"] = True
    message = _one_line(f"memsym: cache not used ({why}); computing without it (set MEMSYM_CACHE_DIR to a "
                        f"private folder, or MEMSYM_CACHE=0 to silence this)")
    if DEFER_WARNING or notices.DEFER:
        _state["pending"] = message
        return
    try:
        print(message, file=sys.stderr)
    except (OSError, ValueError, AttributeError):
        pass


def warned() -> bool:
    """Whether this process found (a part of) the cache unusable (its output then says so)."""
    return bool(_state["warned"])


def pending_warning():
    """The deferred warning (:data:`DEFER_WARNING`), once; None when there is none."""
    message, _state["pending"] = _state["pending"], None
    return message


def _trusted(st: os.stat_result) -> Optional[str]:
    """None when a folder with status ``st`` is this user's alone, else why not."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        who = {0o022: "group and others", 0o020: "group", 0o002: "others"}[st.st_mode & 0o022]
        return f"writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _root() -> Optional[int]:
    """A descriptor of the cache folder when it is safe to use (created 0700 if missing), else None."""
    if not enabled():
        return None
    base = os.path.abspath(base_dir())
    if _state["base"] == base:
        return _state["fd"]
    if _state["fd"] is not None:
        try:
            os.close(_state["fd"])
        except OSError:
            pass
    _state.update(base=base, fd=None, key=None)
    try:
        parent = os.path.dirname(base)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o700, exist_ok=True)
        try:
            os.mkdir(base, 0o700)
        except FileExistsError:
            pass
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    except (OSError, ValueError) as exc:
        _warn(f"cannot use {base}: {getattr(exc, 'strerror', None) or exc}")
        return None
    why = _trusted(os.fstat(fd))
    if why:
        os.close(fd)
        _warn(f"{base} is {why}")
        return None
    _state["fd"] = fd
    return fd


def _subdir(kind: str, create: bool = True) -> Optional[int]:
    """A descriptor of the folder of ``kind`` (``report/forms``: nested) under the cache folder, each
    component this user's alone and no symbolic link; None when there is none or it is not safe."""
    if not _KIND.match(kind):
        raise ValueError(f"cache kind {kind!r}")
    fd = _root()
    if fd is None:
        return None
    current = fd
    for name in kind.split("/"):
        try:
            if create:
                try:
                    os.mkdir(name, 0o700, dir_fd=current)
                except FileExistsError:
                    pass
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=current)
        except OSError as exc:
            if current != fd:
                os.close(current)
            if exc.errno in (errno.ENOENT,) and not create:
                return None
            what = {errno.ELOOP: "a symbolic link", errno.ENOTDIR: "not a folder"}.get(exc.errno, exc.strerror)
            _warn(f"cannot use {os.path.join(_state['base'], kind)}: {what}")
            return None
        if current != fd:
            os.close(current)
        current = nxt
        why = _trusted(os.fstat(current))
        if why:
            os.close(current)
            _warn(f"{os.path.join(_state['base'], kind)} is {why}")
            return None
    return current


def private_dir(kind: str) -> Optional[str]:
    """The path of the folder of ``kind`` when it is safe (this user's, no link), for code that must
    name files by path (numba's own cache: :mod:`symbolic.compiled`); None otherwise."""
    fd = _subdir(kind)
    if fd is None:
        return None
    os.close(fd)
    return os.path.join(_state["base"], *kind.split("/"))


# ----------------------------------------------------------------------------- the key
def _read_fd(fd: int, limit: int) -> Optional[bytes]:
    chunks, n = [], 0
    while n <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - n))
        if not chunk:
            break
        chunks.append(chunk)
        n += len(chunk)
    return None if n > limit else b"".join(chunks)


def _open_own(name: str, dir_fd: int, limit: int) -> Optional[bytes]:
    """The bytes of the regular file ``name`` in ``dir_fd`` if it is this user's and at most ``limit``
    bytes; None (nothing followed, nothing blocked on) otherwise."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > limit:
            return None
        return _read_fd(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _hmac_key() -> Optional[bytes]:
    """The per-user HMAC key (:data:`KEY_FILE` in the cache folder, 0600), made when missing.  A file
    of that name that is not such a key (another size, owner or mode, a link, a folder) is never
    replaced (it may not be memsym's): the cache is then not used, and the warning says so."""
    fd = _root()
    if fd is None:
        return None
    if _state["key"] is not None:
        return _state["key"]
    for _ in range(3):
        try:
            st = os.stat(KEY_FILE, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            _warn(f"cannot read {os.path.join(_state['base'], KEY_FILE)}: {exc.strerror}")
            return None
        if st is not None:
            data = _open_own(KEY_FILE, fd, KEY_BYTES) if stat.S_ISREG(st.st_mode) else None
            if data is None or len(data) != KEY_BYTES or st.st_mode & 0o077:
                _warn(f"{os.path.join(_state['base'], KEY_FILE)} is not memsym's private key (a 0600 file of "
                      f"{KEY_BYTES} bytes, yours): delete it to let memsym make a new one")
                return None
            _state["key"] = data
            return data
        tmp = _temp_name()
        try:
            t = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
            try:
                os.write(t, secrets.token_bytes(KEY_BYTES))
            finally:
                os.close(t)
            try:
                os.link(tmp, KEY_FILE, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
            except FileExistsError:
                pass  # another process made it first: read theirs
        except OSError as exc:
            _warn(f"cannot write its key in {_state['base']}: {exc.strerror}")
            return None
        finally:
            _unlink(tmp, fd)
    return None


def _temp_name() -> str:
    return f".tmp-{os.getpid()}-{secrets.token_hex(8)}"


def _unlink(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _mac(k: bytes, kind: str, name: str, payload: bytes) -> bytes:
    m = hmac.new(k, MAGIC, hashlib.sha256)
    m.update(kind.encode() + b"\0" + name.encode() + b"\0")
    m.update(payload)
    return m.digest()


# ----------------------------------------------------------------------------- entries
def _entry_name(k: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{32}", k):
        raise ValueError(f"cache key {k!r}")
    return k + ".entry"


def load(kind: str, k: str) -> Optional[bytes]:
    """The payload stored under ``kind`` and key ``k`` if it verifies (its HMAC, kind and key); an
    entry that does not is deleted.  None when there is none, or the cache is off or unsafe."""
    name = _entry_name(k)
    secret = _hmac_key()
    if secret is None:
        return None
    d = _subdir(kind, create=False)
    if d is None:
        return None
    try:
        data = _open_own(name, d, MAX_ENTRY_BYTES + 1024)
        if data is None:
            if _exists(name, d):  # a link, a FIFO, someone else's file, too large: never read, removed
                _unlink(name, d)
            return None
        head = len(MAGIC) + 32
        meta = (kind + "\0" + k + "\0").encode()
        if (data[:len(MAGIC)] == MAGIC and data[head:head + len(meta)] == meta
                and hmac.compare_digest(data[len(MAGIC):head], _mac(secret, kind, k, data[head + len(meta):]))):
            return data[head + len(meta):]
        _unlink(name, d)
        return None
    finally:
        os.close(d)


def exists(kind: str, k: str) -> bool:
    """Whether an entry of ``kind`` and key ``k`` is present (not whether it verifies: :func:`load` says)."""
    if _hmac_key() is None:
        return False
    d = _subdir(kind, create=False)
    if d is None:
        return False
    try:
        return _exists(_entry_name(k), d)
    finally:
        os.close(d)


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except OSError:
        return False


def store(kind: str, k: str, payload: bytes) -> bool:
    """Keep ``payload`` under ``kind`` and key ``k`` (atomically, 0600); then evict the kind's oldest
    entries beyond its limits.  False (nothing written) when the cache is off, unsafe or not writable."""
    name = _entry_name(k)
    secret = _hmac_key()
    if secret is None or len(payload) > MAX_ENTRY_BYTES or digests.hashed_changed():
        return False  # (code or data hashed into a key changed under this process: the value may be of neither)
    d = _subdir(kind)
    if d is None:
        return False
    tmp = _temp_name()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + _mac(secret, kind, k, payload) + (kind + "\0" + k + "\0").encode() + payload)
        except BaseException:
            _unlink(tmp, d)
            raise
        os.replace(tmp, name, src_dir_fd=d, dst_dir_fd=d)
        _evict(d, *LIMITS.get(kind.split("/")[0], DEFAULT_LIMIT))
        return True
    except OSError:
        _unlink(tmp, d)
        return False
    finally:
        os.close(d)


def _evict(d: int, most: int, most_bytes: int) -> None:
    """Keep the newest entries of the folder ``d`` within ``most`` files and ``most_bytes`` bytes;
    remove this cache's temporary files left by killed processes, and the folder an entry owns
    (``<key>/``: a numba kernel's, :mod:`symbolic.compiled`) when the entry goes or has been gone an
    hour.  Only this cache's own names are touched: any other file or folder stays."""
    mine, folders = [], []
    now = time.time()
    try:
        names = os.listdir(d)
    except OSError:
        return
    for name in names:
        entry, temp, folder = _ENTRY.match(name), _TEMP.match(name), _KEY.match(name)
        if not (entry or temp or folder):
            continue
        try:
            st = os.stat(name, dir_fd=d, follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid != os.geteuid():
            continue
        if folder and stat.S_ISDIR(st.st_mode):
            folders.append((name, st.st_mtime))
        elif not stat.S_ISREG(st.st_mode):
            continue
        elif temp:
            if now - st.st_mtime > STALE_TEMP_SECONDS:
                _unlink(name, d)
        elif entry:
            mine.append((st.st_mtime_ns, name, st.st_size))
    mine.sort(reverse=True)
    total, kept = 0, set()
    for i, (_, name, size) in enumerate(mine):
        total += size
        if i >= most or total > most_bytes:
            _unlink(name, d)
        else:
            kept.add(name[:-len(".entry")])
    for name, mtime in folders:
        if name not in kept and (now - mtime > STALE_TEMP_SECONDS or any(n == name + ".entry" for _, n, _ in mine)):
            shutil.rmtree(name, ignore_errors=True, dir_fd=d)


def pickled(kind: str, parts, make: Callable[[], object]):
    """``make()``, kept as an authenticated pickle under ``kind`` keyed by ``parts``.  ``parts``
    None (a key that cannot be trusted, see :func:`symbolic.digests.tree_digest`) or the cache off:
    just ``make()``.  A payload is unpickled only after its HMAC verifies (:func:`load`); one that then fails to
    load is deleted and rebuilt."""
    if parts is None or any(p is None for p in parts) or not enabled():
        return make()
    k = key(*parts)
    data = load(kind, k)
    if data is not None:
        try:
            return pickle.loads(data)  # authenticated: written by this user's memsym (load)
        except Exception:
            pass
    value = make()
    try:
        store(kind, k, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # not picklable: the cache is only an optimisation
        pass
    return value
