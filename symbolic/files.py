"""Output files: written atomically, so a failed run never leaves a half-written file
(:func:`write_atomic`), and sets of files written all or nothing (:func:`write_tree`)."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import tempfile
import threading
from contextlib import suppress
from pathlib import Path

from .errors import ConfigError


def write_atomic(path, data) -> None:
    """Write ``data`` (str or bytes) to ``path`` through a temporary file and ``os.replace``: readers see the old
    file or the whole new one, and a failure leaves no partial file."""
    if isinstance(data, str):
        raw = data.encode("utf-8", "backslashreplace")  # a path's undecodable bytes shown escaped
    elif isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
    else:
        raise TypeError(f"write_atomic writes str or bytes, got {type(data).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # an existing file keeps its mode; a new one gets what open() would give it under the user's umask
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mode = 0o666 & ~_umask()
    try:  # (a folder access() calls writable that is not, /proc for root: the error names the user's path)
        fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process's umask, read without changing it (Linux's /proc/self/status), else set and restored."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_out_file(path) -> None:
    """Fail early (ConfigError, exit 2) if the file ``path`` cannot be written: its directory is
    missing or not writable, or ``path`` is a directory.  Nothing is created here."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise ConfigError("output", f"cannot write {path}: directory {d} does not exist")
    if os.path.isdir(path):
        raise ConfigError("output", f"cannot write {path}: it is a directory")
    if os.path.lexists(path) and (os.path.islink(path) or not stat.S_ISREG(os.lstat(path).st_mode)):
        # the file is replaced whole (write_atomic): a link, a FIFO or a device would be replaced, not written to
        raise ConfigError("output", f"cannot write {path}: it is not a regular file (a link, a device or a pipe); "
                                    f"name a file")
    if not os.access(d, os.W_OK):
        raise ConfigError("output", f"cannot write {path}: directory {d} is not writable")


def check_out_dir(path) -> Path:
    """``path`` as an output folder, checked before any work (nothing left created): ConfigError when it is a file or
    cannot be created or written."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError("output", f"--out {path}: exists and is not a directory")
    probe = path
    while not probe.exists():
        if probe.is_symlink():  # a link to nothing: the folder could not be made there
            raise ConfigError("output", f"--out {path}: {probe} is a symbolic link to nothing "
                                        f"({os.readlink(probe)})")
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError("output", f"--out {path}: cannot create the directory ({probe} is not a directory)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError("output", f"--out {path}: {probe} is not writable")
    try:  # what access() does not see (root in /proc, a read-only mount): a folder made there and removed at once
        tempfile.TemporaryDirectory(dir=probe, prefix=".memsym-probe-").cleanup()
    except OSError as exc:
        raise ConfigError("output", f"--out {path}: cannot create a directory in {probe} ({_describe(exc)})") from None
    return path


def _describe(exc: OSError) -> str:
    return exc.strerror or str(exc)


def write_tree(out, files, remove=()) -> list:
    """Write the files ``{name: str or bytes}`` into the folder ``out`` all or nothing (``remove``: stale files
    deleted with them): staged and flushed beside ``out``, then renamed into place (:func:`_commit`).  After any
    failure ``out`` holds its previous files; the error is a ConfigError naming the file.  The paths written."""
    out = Path(out)
    names = sorted(files)
    for name in names:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"write_tree writes plain file names, got {name!r}")
    created = []  # parent folders made here, removed again on failure
    probe = out.parent
    while not probe.exists():
        created.append(probe)
        probe = probe.parent
    staging, mask = None, _umask()
    try:
        for d in reversed(created):
            d.mkdir()
        staging = Path(tempfile.mkdtemp(dir=str(out.parent), prefix=f".{out.name}.", suffix=".tmp"))
        for name in names:
            data = files[name]
            raw = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else bytes(data)
            try:
                with open(staging / name, "wb") as fh:
                    fh.write(raw)
                    fh.flush()
                    os.fsync(fh.fileno())
                try:  # a file written again keeps its mode; a new one gets the user's umask
                    mode = stat.S_IMODE(os.stat(out / name).st_mode)
                except OSError:
                    mode = 0o666 & ~mask
                os.chmod(staging / name, mode)
            except OSError as exc:
                raise ConfigError("output", f"cannot write {out / name}: {_describe(exc)}; {out} is unchanged") \
                    from None
        _commit(staging, out, names, remove, 0o777 & ~mask)
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        for d in created:
            with suppress(OSError):
                d.rmdir()
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return [out / name for name in names]


def _commit(staging: Path, out: Path, names, remove, folder_mode: int) -> None:
    """Move the staged files into ``out``: one rename of the folder when ``out`` is new, else one rename per file
    with the old copies set aside and put back on failure; SIGINT held until the end."""
    held = []
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    if main:
        signal.signal(signal.SIGINT, lambda *a: held.append(a))
    try:
        try:
            if not out.exists():
                os.chmod(staging, folder_mode)
                os.rename(staging, out)
                return
            old = staging / ".old"
            old.mkdir()
            moved, kept = [], []
            try:
                for name in list(names) + [n for n in remove if n not in names]:
                    target = out / name
                    if target.is_dir() and not target.is_symlink():
                        raise ConfigError("output", f"cannot write {target}: it is a directory; {out} is unchanged")
                    if os.path.lexists(target):
                        os.rename(target, old / name)
                        kept.append(name)
                    if name in names:
                        os.rename(staging / name, target)
                        moved.append(name)
            except BaseException:
                for name in moved:  # put the previous set back
                    with suppress(OSError):
                        os.rename(out / name, staging / name)
                for name in kept:
                    with suppress(OSError):
                        os.rename(old / name, out / name)
                raise
        except OSError as exc:
            raise ConfigError("output", f"cannot write {exc.filename or out}: {_describe(exc)}; {out} is unchanged") \
                from None
    finally:
        if main:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
        if held:
            raise KeyboardInterrupt
