"""A JSON file read as bounded data (a model's ``config.json``): bytes, nesting and digits bounded, no field named
twice; every error built by the caller's ``error(path, field, message)``.
"""
from __future__ import annotations

import codecs
import errno
import json
import os
import re
import stat
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

#: error(path, field, message) -> the exception to raise
Error = Callable[[str, str, str], Exception]

_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


@dataclass(frozen=True)
class Bounds:
    """How much a file may hold; ``name``: the file a directory is read for; ``typical``, ``nests``: what such a
    file usually is and nests (said in errors)."""

    max_bytes: int
    max_depth: int
    max_digits: int
    name: str = "config.json"
    typical: str = "a few KiB"
    nests: int = 3
    reading: str = "the model config"


def type_name(x) -> str:
    """A JSON value's type as JSON names it."""
    return "null" if x is None else {bool: "boolean", str: "string", float: "number", list: "array",
                                     dict: "object"}.get(type(x), type(x).__name__)


def shown(x) -> str:
    """``repr(x)`` cut short: a value of a hostile file may be megabytes long."""
    text = repr(x)
    return text if len(text) <= 40 else f"{text[:24]}...({len(text)} characters)"


class _BigNumber(ValueError):
    """A JSON number with more digits than any field has (json would convert it whole)."""


class _Duplicate(ValueError):
    """A JSON object naming a field twice (json would keep the last silently)."""


def _object(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


def _nesting_offset(text: str, limit: int) -> Optional[int]:
    """The character offset where ``text`` (JSON) nests deeper than ``limit``, or None."""
    depth = 0
    for m in _NESTING.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > limit:
                return m.start()
        elif c in "]}":
            depth -= 1
    return None


def walk(data):
    """(value, depth) of every value in parsed ``data`` (JSON or TOML), containers before what they hold, without
    recursion."""
    stack = [(data, 1)]
    while stack:
        x, d = stack.pop()
        yield x, d
        if isinstance(x, (dict, list)):
            stack.extend((v, d + 1) for v in (x.values() if isinstance(x, dict) else x))


def stat_of(path: str, error: Error, reading: str = "the model config") -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(path, "file", "is a symbolic link loop (too many levels of symbolic links)") from None
        raise error(path, "file", f"cannot read {reading}: {exc.strerror or exc}") from None
    except ValueError:  # a NUL character
        raise error(path, "file", "is not a path (it holds a NUL character)") from None


def read_bounded(path: str, b: Bounds, error: Error) -> bytes:
    """At most ``b.max_bytes`` bytes of the regular file ``path`` (a device, FIFO, socket or
    directory is named as what it is, never opened for reading)."""
    st = stat_of(path, error, b.reading)
    if not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
        raise error(path, "file", f"is {kind}, not a {b.name} file")
    if st.st_size > b.max_bytes:
        raise error(path, "file", f"is {st.st_size} bytes; a {b.name} is {b.typical} (limit {b.max_bytes} bytes)")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise error(path, "file", f"cannot read {b.reading}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the stat above
            raise error(path, "file", "is not a regular file")
        chunks, n = [], 0
        while n <= b.max_bytes:
            chunk = os.read(fd, min(1 << 16, b.max_bytes + 1 - n))
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
    except OSError as exc:
        raise error(path, "file", f"cannot read {b.reading}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if n > b.max_bytes:
        raise error(path, "file", f"is larger than {b.max_bytes} bytes (stopped reading at byte {b.max_bytes + 1}); "
                                  f"a {b.name} is {b.typical}")
    return b"".join(chunks)


def read_raw(path, b: Bounds, error: Error) -> Tuple[bytes, str]:
    """(the bytes, the file): of ``path`` or of the ``b.name`` inside it when it is a directory (read
    once: what is parsed is what was read)."""
    path = os.fspath(path)
    if stat.S_ISDIR(stat_of(path, error).st_mode):
        path = os.path.join(path, b.name)
    return read_bounded(path, b, error), path


def _decoded(raw: bytes, path: str, b: Bounds, error: Error) -> Tuple[str, int]:
    """(the text, the bytes skipped for a byte-order mark)."""
    skip = 0
    if raw.startswith(codecs.BOM_UTF8):
        skip = len(codecs.BOM_UTF8)
    elif raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise error(path, "json", f"is UTF-16 (byte-order mark at byte 0); save the {b.name} as UTF-8")
    try:
        return raw[skip:].decode("utf-8"), skip
    except UnicodeDecodeError as exc:
        raise error(path, "json", f"not a UTF-8 JSON file ({exc.reason} at byte {exc.start + skip})") from None


def _number_at(text: str, digits: str) -> int:
    """Where the integer literal ``digits`` stands in ``text`` as a number of its own (not inside a string,
    a longer number or a float: the first such place; the decoder raised on it, so one exists)."""
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?', text):
        if m.group() == digits:
            return m.start()
    return text.find(digits)


def parse(raw: bytes, path: str, b: Bounds, error: Error) -> Dict:
    """The JSON object in the bytes ``raw`` read from ``path`` (named in errors), bounded as the module says."""
    text, skip = _decoded(raw, path, b, error)

    def at(pos: int) -> str:
        return f"byte {len(text[:pos].encode('utf-8')) + skip}"

    def parse_int(digits: str) -> int:
        if len(digits.lstrip("-")) > b.max_digits:
            raise _BigNumber(digits)
        return int(digits)
    too_deep = False
    try:
        data = json.loads(text, parse_int=parse_int, object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        raise error(path, "json", f"not valid JSON: {exc.msg} ({at(exc.pos)}, line {exc.lineno}, column "
                                  f"{exc.colno})") from None
    except _BigNumber as exc:
        raise error(path, "json", f"a number of {len(str(exc))} digits at {at(_number_at(text, str(exc)))}: no "
                                  f"config field has more than {b.max_digits}") from None
    except _Duplicate as exc:
        raise error(path, str(exc.args[0])[:64], f"field {shown(exc.args[0])} appears twice in one object") from None
    except RecursionError:
        data, too_deep = None, True
    deepest = max((d for x, d in walk(data) if isinstance(x, (dict, list))), default=0)
    if too_deep or deepest > b.max_depth:  # (a file holding null is not nested: refused below)
        pos = _nesting_offset(text, b.max_depth)
        where = at(pos) if pos is not None else "somewhere"
        raise error(path, "json", f"nested deeper than {b.max_depth} levels at {where} (a {b.name} nests {b.nests} "
                                  f"levels)") from None
    if not isinstance(data, dict):
        raise error(path, "json", f"a {b.name} holds a JSON object, got {type_name(data)}")
    return data
