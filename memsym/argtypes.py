"""Bounded argument types of the command line, each checked against derivations/config/limits.py when argparse
reads it (one clear line, exit 2, before any work); ``apply_limits`` fits them to a parser's options by dest."""
from __future__ import annotations

import argparse
import os
import re
import stat
from fractions import Fraction

from derivations import config as cfg
from derivations.config import limits as L
from derivations.config.limits import (DECIMAL_PATTERN, INT_PATTERN, MAX_DIGITS, LAYERS, HBM,
                                       MAX_NUMBER_CHARS, MAX_ARG_CHARS, CONFIG_BYTES, IMBALANCE)
from symbolic.units import parse_size

from .lines import HELP_ALL

_INT = re.compile(INT_PATTERN)


def _shown(text) -> str:
    """``text`` quoted for a message, cut short when long."""
    text = str(text)
    return repr(text) if len(text) <= 40 else f"{text[:24]!r}...({len(text)} characters)"


def _int_text(text: str, kind: str, low=None, limit=None) -> int:
    """An integer in ASCII digits (not '٣', '１６' or '1_000'), at most MAX_DIGITS digits, >= ``low``, in ``limit``."""
    s = str(text).strip()
    if not _INT.fullmatch(s):
        raise argparse.ArgumentTypeError(f"expected {kind} (ASCII digits 0-9), got {_shown(text)}")
    digits = s.lstrip("+-").lstrip("0")
    if len(digits) > MAX_DIGITS:
        if limit is not None and not s.startswith("-"):
            raise argparse.ArgumentTypeError(limit.message("the value", s))
        raise argparse.ArgumentTypeError(f"{_shown(text)} has {len(digits)} digits: integers here have at most "
                                         f"{MAX_DIGITS}")
    val = int(s)
    if low is not None and val < low:
        raise argparse.ArgumentTypeError(f"expected {kind}, got {_shown(text)}")
    if limit is not None and not limit.low <= val <= limit.high:
        raise argparse.ArgumentTypeError(limit.message("the value", val))
    return val


def positive_int(text: str, limit=None) -> int:
    return _int_text(text, "a positive integer", 1, limit)


def nonneg_int(text: str, limit=None) -> int:
    return _int_text(text, "a non-negative integer", 0, limit)


def any_int(text: str, limit=None) -> int:
    return _int_text(text, "an integer", None, limit)


def int_list(text: str, limit=None, max_len=None, unique=False):
    """``"1,2,4"`` -> (1, 2, 4): ASCII integers, none empty (nor repeated if ``unique``), at most ``max_len``."""
    max_len = LAYERS if max_len is None else max_len
    items = str(text).split(",")
    if len(items) > max_len:
        what = f"--{limit.name.replace('_', '-')}" if limit is not None else "the list"
        raise argparse.ArgumentTypeError(f"{what} has {len(items)} entries; at most {max_len}")
    out = []
    for item in items:
        if not item.strip():
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {_shown(text)} (an empty entry)")
        try:
            out.append(_int_text(item, "comma-separated integers", None, limit))
        except argparse.ArgumentTypeError as exc:
            if limit is not None:
                raise
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {_shown(text)}") from exc
    twice = next((x for i, x in enumerate(out) if x in out[:i]), None) if unique else None
    if twice is not None:
        raise argparse.ArgumentTypeError(f"{_shown(text)} lists {twice} twice")
    return tuple(out)


def layer_counts(text: str):
    """``"3,2,2,1"`` -> (3, 2, 2, 1): ``--virtual-layers``' counts (a virtual stage may hold none)."""
    out = int_list(text)
    if any(x < 0 for x in out):
        raise argparse.ArgumentTypeError(f"expected non-negative layer counts, got {_shown(text)}")
    return out


def size_text(text: str) -> str:
    """A memory size (``80GiB``) checked against derivations.limits.HBM; the text itself is returned."""
    if len(str(text)) > MAX_NUMBER_CHARS or not str(text).isascii():
        raise argparse.ArgumentTypeError(f"cannot read the size {_shown(text)}: write e.g. 80GiB "
                                         f"(ASCII, at most {MAX_NUMBER_CHARS} characters)")
    try:
        val = parse_size(text)
    except cfg.ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if val > HBM.high:
        raise argparse.ArgumentTypeError(f"--hbm must be at most {HBM.domain} bytes ({HBM.why}), got {_shown(text)}")
    return text


def path_text(text: str) -> str:
    """A path typed on the command line: not empty (the current folder), no NUL byte, at most MAX_ARG_CHARS."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (name a file or folder; . for the current folder)")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a path (it holds a NUL character)")
    if len(text) > MAX_ARG_CHARS or len(text.encode("utf-8", "surrogateescape")) > 4096:
        raise argparse.ArgumentTypeError(f"path of {len(text)} characters: at most 4096 bytes")
    return text


def data_file(text: str) -> str:
    """A data file read whole (``--data``): a regular file of at most CONFIG_BYTES bytes (anything else unopened)."""
    path_text(text)
    try:
        st = os.stat(text)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a regular file")
    if st.st_size > CONFIG_BYTES:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is {st.st_size} bytes; at most {CONFIG_BYTES}")
    return text


#: Options holding a path (checked by path_text; --data by data_file) and a memory size (size_text), by dest.
PATH_DESTS = ("model", "out", "csv", "plot")
SIZE_DESTS = ("hbm",)
_INT_TYPES = {"positive_int": positive_int, "nonneg_int": nonneg_int, "int": any_int}


def _bounded(fn, **limits):
    parse = lambda text: fn(text, **limits)
    parse.__name__ = fn.__name__
    return parse


def bounded_text(text: str) -> str:
    """Any argument without a type of its own: at most MAX_ARG_CHARS characters."""
    if len(text) > MAX_ARG_CHARS:
        raise argparse.ArgumentTypeError(f"argument of {len(text)} characters: at most {MAX_ARG_CHARS}")
    return text


def _text_bounded(fn):

    def parse(text):
        bounded_text(text)
        return fn(text) if fn is not None else text
    parse.__name__ = getattr(fn, "__name__", "value")
    return parse


def apply_limits(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Bound every option of ``parser`` and its subcommands by derivations.limits, by dest: integers and lists by
    their limits, paths and sizes by their checks, every other argument by its length."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                apply_limits(sub)
            continue
        fn = action.type
        name = getattr(fn, "__name__", None)
        if fn is int_list:
            action.type = _bounded(int_list, limit=L.option(action.dest), max_len=L.LIST_LENGTHS.get(action.dest),
                                   unique=action.dest in L.SET_OPTIONS)
        elif fn is int or name in _INT_TYPES:
            action.type = _bounded(_INT_TYPES.get(name, any_int), limit=L.option(action.dest))
        elif fn is None and action.dest == "data":
            action.type = data_file
        elif fn is None and action.dest in PATH_DESTS:
            action.type = path_text
        elif fn is None and action.dest in SIZE_DESTS:
            action.type = size_text
        elif action.nargs != 0:
            action.type = _text_bounded(fn)
    return parser


def dtype_bytes(text: str) -> int:
    try:
        return cfg.DTYPES[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown data type {text!r}: use one of {', '.join(cfg.DTYPES)}") from None


def checked_by(parse):
    """The argparse type of ``parse`` (a reader of derivations/config): its ConfigError as the option's error."""

    def read(text: str):
        try:
            return parse(text)
        except cfg.ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return read


#: ``--recompute custom:norm,mla_up`` -> (policy, operators); ``--offload-activations``, ``--cuda-graphs`` -> names
recompute_policy, offload_modules = checked_by(cfg.parse_recompute), checked_by(cfg.parse_offload)
cuda_graphs = checked_by(cfg.parse_cuda_graphs)


_DECIMAL = re.compile(DECIMAL_PATTERN)


def unit_fraction(text: str) -> Fraction:
    """A fraction in (0, 1] typed as a decimal (0.45) or a ratio (9/20): an efficiency of the step-time model."""
    s = str(text).strip()
    parts = s.split("/")
    if len(s) > MAX_NUMBER_CHARS or len(parts) > 2 or not all(_DECIMAL.fullmatch(x.strip()) for x in parts):
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1] in ASCII digits (e.g. 0.5 or 1/2, at most "
                                         f"{MAX_NUMBER_CHARS} characters), got {_shown(text)}")
    try:
        val = Fraction(parts[0].strip()) / (Fraction(parts[1].strip()) if len(parts) == 2 else 1)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {_shown(text)}") from None
    if not 0 < val <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {_shown(text)}")
    return val


def imbalance_factor(text: str) -> Fraction:
    if len(text) > MAX_NUMBER_CHARS or not _DECIMAL.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"imbalance F must be a decimal number >= 1 in ASCII digits (e.g. 1.25, "
                                         f"at most {MAX_NUMBER_CHARS} characters), got {_shown(text)}")
    try:
        val = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"imbalance F must be a number >= 1, got {text!r}") from None
    if val < 1:
        raise argparse.ArgumentTypeError(f"imbalance F must be >= 1 (1 is balanced routing), got {text!r}")
    if val > IMBALANCE:
        raise argparse.ArgumentTypeError(f"imbalance F must be at most 1e6 (an expert cannot receive more than "
                                         f"every token: F <= N / N_r), got {_shown(text)}")
    return val


def capacity_factor(text: str) -> Fraction:
    """Megatron-Core's --moe-expert-capacity-factor (TransformerConfig moe_expert_capacity_factor): a decimal > 0."""
    try:
        val = Fraction(text.strip()) if len(text) <= MAX_NUMBER_CHARS and _DECIMAL.fullmatch(text.strip()) else 0
    except ZeroDivisionError:
        val = 0
    if not 0 < val <= IMBALANCE:
        raise argparse.ArgumentTypeError(f"the capacity factor must be a decimal number in (0, 1e6] in ASCII digits "
                                         f"(e.g. 1.25, at most {MAX_NUMBER_CHARS} characters), got {_shown(text)}")
    return val


def explicit(namespace) -> set:
    """The option dests typed on the command line (as opposed to defaults, a recipe's or a launch file's)."""
    if not hasattr(namespace, "_explicit"):
        setattr(namespace, "_explicit", set())
    return namespace._explicit


def help_all(text: str) -> str:
    """An option's help listed by ``--help-all`` only (``--help`` stays short: issue 43)."""
    return text if HELP_ALL[0] else argparse.SUPPRESS
