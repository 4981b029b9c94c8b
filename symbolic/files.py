"""Output files: written atomically, so a failed run never leaves a half-written file."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path, data) -> None:
    """Write ``data`` (str or bytes) to ``path`` through a temporary file in the same
    directory and ``os.replace``: readers see the old file or the whole new one, and a
    failure leaves no partial file (the temporary file is removed)."""
    if isinstance(data, str):
        raw = data.encode("utf-8")
    elif isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
    else:
        raise TypeError(f"write_atomic writes str or bytes, got {type(data).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def check_out_file(path) -> None:
    """Fail early (ConfigError, exit 2) if the file ``path`` cannot be written: its directory is
    missing or not writable, or ``path`` is a directory.  Nothing is created here."""
    from .errors import ConfigError
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise ConfigError("output", f"cannot write {path}: directory {d} does not exist")
    if os.path.isdir(path):
        raise ConfigError("output", f"cannot write {path}: it is a directory")
    if not os.access(d, os.W_OK):
        raise ConfigError("output", f"cannot write {path}: directory {d} is not writable")


def check_out_dir(path) -> Path:
    """``path`` as an output folder, checked before any work is done (nothing is created
    here): ConfigError (exit 2) naming it when it is a file, or when it cannot be created
    or written because its nearest existing ancestor is a file or not writable."""
    from .errors import ConfigError
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError("output", f"--out {path}: exists and is not a directory")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError("output", f"--out {path}: cannot create the directory ({probe} is not a directory)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError("output", f"--out {path}: {probe} is not writable")
    return path
