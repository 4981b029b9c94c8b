"""Keyword options -> a command's options namespace (the API, ``memsym runs``, a launch file): each keyword read by its
option's own type and stored by its own action (as typed), with argparse's messages; no argv is built."""
from __future__ import annotations

import argparse
import importlib
from typing import Any, Mapping, Sequence

from symbolic.errors import ConfigError

from ..lines import near_choice
from ..argtypes import apply_limits


def _subparser(command: str) -> argparse.ArgumentParser:
    """The command's parser as the command line builds it, its options bounded (apply_limits)."""
    root = argparse.ArgumentParser(prog="memsym")
    sub = root.add_subparsers(dest="command")
    importlib.import_module(f"memsym.commands.{command}").add_parser(sub)
    apply_limits(root)
    return sub.choices[command]


def _error(command: str, action: argparse.Action, message: str) -> ConfigError:
    """argparse's own message for ``action`` (``argument --mbs: ...``), as the command line prints it."""
    return ConfigError("argument", f"memsym {command}: {argparse.ArgumentError(action, message)}")


def _converted(command: str, parser, action: argparse.Action, text: str):
    """``text`` through the option's type and choices: argparse's own conversion and check of one value."""
    try:
        value = parser._get_value(action, text)
        parser._check_value(action, value)
    except argparse.ArgumentError as exc:
        raise ConfigError("argument", near_choice(f"memsym {command}: {exc}")) from None
    return value


def _text(value) -> str:
    """A keyword's value as its option reads it: lists joined by commas (``mbs=(1, 2)`` is ``--mbs 1,2``)."""
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)


def _store(command: str, parser, ns, action: argparse.Action, value) -> None:
    """One keyword stored by its option's action (True for a flag; a list for an option of several values)."""
    opt = next((o for o in action.option_strings if o.startswith("--")), (action.option_strings or [None])[0])
    if action.nargs == 0:
        if value is not True:
            raise _error(command, action, f"is a flag: give True (or False to leave it out), got {value!r}")
        action(parser, ns, None, opt)
    elif action.nargs in ("+", "*"):
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        action(parser, ns, [_converted(command, parser, action, str(v)) for v in items], opt)
    else:
        action(parser, ns, _converted(command, parser, action, _text(value)), opt)


def namespace(command: str, options: Mapping[str, Any], positional: Sequence[Any] = ()) -> argparse.Namespace:
    """The options namespace of ``command`` for keyword ``options`` (dests; None, or False for a flag: the default)
    and ``positional`` values.  An unknown keyword is a TypeError; a bad or missing value a ConfigError."""
    parser = _subparser(command)
    ns = argparse.Namespace(command=command)
    for action in parser._actions:
        if action.dest is not argparse.SUPPRESS and action.default is not argparse.SUPPRESS:
            default = action.default
            if isinstance(default, str):  # as argparse converts a text default (unchecked, as it does)
                try:
                    default = parser._get_value(action, default)
                except argparse.ArgumentError as exc:
                    raise ConfigError("argument", f"memsym {command}: {exc}") from None
            setattr(ns, action.dest, default)
    for key, value in parser._defaults.items():
        setattr(ns, key, value)
    slots = [a for a in parser._actions if not a.option_strings]
    for action, value in zip(slots, positional):
        _store(command, parser, ns, action, value)
    flags = {a.dest: a for a in parser._actions if a.option_strings}
    given = set()
    for key, value in options.items():
        action = flags.get(key)
        if action is None:
            valid = ", ".join(sorted(d for d in flags if d not in ("help", "json")))
            raise TypeError(f"{command}() got an unexpected keyword {key!r}; valid: {valid}")
        if value is None or (value is False and action.nargs == 0):
            continue
        if isinstance(value, bool) and action.nargs != 0:
            raise _error(command, action, f"takes a value, not {value!r}")
        _store(command, parser, ns, action, value)
        given.add(key)
    missing = [a for a in flags.values() if a.required and a.dest not in given]
    missing += [a for a in slots[len(positional):] if a.nargs not in ("?", "*")]
    if missing:
        names = ", ".join("/".join(a.option_strings) or a.metavar or a.dest for a in missing)
        raise ConfigError("argument", f"memsym {command}: the following arguments are required: {names}")
    return ns
