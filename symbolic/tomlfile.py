"""A TOML file read as bounded data (``tomllib``: data only, nothing executed), bounded as :mod:`symbolic.jsonfile`
bounds JSON; every problem is one error built by the caller's ``error(path, field, message)``."""
from __future__ import annotations

import tomllib
from contextlib import contextmanager
from typing import Dict, Iterator

from .errors import ConfigError
from .jsonfile import Bounds, Error, read_bounded, walk

#: a data file shipped in the package (derivations/config/*.toml and the like)
PACKAGE = Bounds(max_bytes=1 << 20, max_depth=8, max_digits=40, name="TOML data file", typical="a few dozen KiB",
                 reading="memsym's package data")


def _check(data, b: Bounds, path: str, error: Error) -> None:
    """Depth and integer sizes of parsed ``data``."""
    for x, d in walk(data):
        if isinstance(x, (dict, list)) and d > b.max_depth:
            raise error(path, "toml", f"nested deeper than {b.max_depth} levels (a {b.name} nests {b.nests})")
        if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 10 ** b.max_digits:
            raise error(path, "toml", f"an integer of more than {b.max_digits} digits: no {b.name} field has one")


def read(path, b: Bounds, error: Error) -> Dict:
    """The tables of the TOML file ``path``, bounded as the module says."""
    path = str(path)
    raw = read_bounded(path, b, error)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(path, "toml", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return loads(text, path, b, error)


def loads(text: str, path: str, b: Bounds, error: Error) -> Dict:
    """The tables of ``text`` (read from ``path``), nesting and integers bounded by ``b``."""
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise error(path, "toml", f"nested too deeply to be a {b.name}") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError, or an integer past Python's 4,300-digit conversion limit
        text = str(exc).split(";")[0] if not isinstance(exc, tomllib.TOMLDecodeError) else str(exc)
        raise error(path, "toml", f"not a {b.name}: {text}") from None
    _check(data, b, path, error)
    return data


@contextmanager
def package_data(path) -> Iterator[Dict]:
    """``with package_data(path) as data:`` the tables of a data file of the package, read as the block reads them:
    the file unreadable or not TOML, or a key the block asks for missing or a value of the wrong kind or range
    (KeyError, TypeError, ValueError, ConfigError in the block), is one ConfigError ``<file>: <what is wrong>``."""
    data = read(path, PACKAGE, lambda p, _, message: ConfigError("package-data", f"{p}: {message}"))
    with damaged(path):
        yield data


@contextmanager
def damaged(path) -> Iterator[None]:
    """``with damaged(path):`` a block that interprets the package's data file ``path`` (read earlier): a key it lacks
    or a value of the wrong kind (KeyError, TypeError, ValueError, AttributeError, IndexError, ImportError) is one
    ConfigError ``<file>: <what is wrong>``, never a traceback."""
    try:
        yield
    except KeyError as exc:
        raise ConfigError("package-data", f"{path}: lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError, IndexError, ImportError) as exc:
        raise ConfigError("package-data", f"{path}: {exc}") from None
