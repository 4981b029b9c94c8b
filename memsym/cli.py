"""The ``memsym`` command: parsing, printing and exit codes; only the chosen subcommand's module is imported.

Exit codes: 0 success, 1 a negative verdict (verify: not equal; reproduce: an unexplained disagreement), 2 bad
input (one line on stderr, never a traceback), 130 interrupted (Ctrl-C; one line).
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import importlib
import os
import re
import sys
from typing import List, Optional

from .commands import COMMANDS
from .lines import HELP_ALL, near_choice, one_line
from . import __version__


class _Brief:
    """A help formatter's brevity (``--help``): an option's help to its first clause; ``--help-all``: whole."""

    def _expand_help(self, action):
        return _first_clause(super()._expand_help(action))

    def start_section(self, heading):
        super().start_section(_first_clause(heading, 4) if heading else heading)

    def add_usage(self, usage, actions, groups, prefix=None):  # the positionals only: the options follow
        super().add_usage(usage, [a for a in actions if not a.option_strings], groups, prefix)

    def add_text(self, text):  # the description (the first text added; not the epilog): its first sentence
        described, self._described = getattr(self, "_described", False), True
        if text and text is not argparse.SUPPRESS and "%(prog)" not in text and not described:
            first = re.split(_SENTENCE_END, text.strip(), maxsplit=1)[0]
            text = first + ("" if first == text.strip() else " (more: --help-all)")
        super().add_text(text)


#: A sentence's end: a full stop and a space, not an abbreviation's ("Sec. 6", "e.g. 80GiB", "et al. 2022").
_SENTENCE_END = r"(?<!Sec\.)(?<!e\.g\.)(?<!i\.e\.)(?<!al\.)(?<!Eq\.)(?<=\.)\s"


def _first_clause(text: str, shortest: int = 12) -> str:
    """``text`` without its parentheses (nested ones whole), to its first clause."""
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\s*\([^()]*\)", "", text)
    cut = re.search(r"; |: |" + _SENTENCE_END + r"|, e\.g\.|, default|, when |, one |, each ", text)
    return text[:cut.start()].rstrip(" ,") if cut and cut.start() >= shortest else text


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2), no abbreviated options (``--gpu`` is not ``--gpus``), and a value
    starting with ``-`` and a digit (``--hbm -80GiB``) read as the option's value, so its own check names it."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        if not HELP_ALL[0]:
            self.formatter_class = type("BriefFormatter", (_Brief, self.formatter_class), {})
        self._negative_number_matcher = re.compile(r"^-\.?\d")
        self._argv: List[str] = []

    def parse_known_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message):  # one line, exit 2
        unknown, prog = re.match(r"unrecognized arguments: (.*)$", message), self.prog
        if unknown:  # (found by the top parser after the subcommand's: named by the subcommand's prog)
            parser = self._named()
            message, prog = message + _did_you_mean(parser, unknown.group(1).split()), parser.prog
        message = near_choice(message)  # a mistyped subcommand or choice: the nearest choices
        m = re.match(r"argument (\S+?)(?:/\S+)?: expected one argument$", message)
        if m:  # name the value that was taken for an option: `--model -cfg.json`
            opt = m.group(1)
            after = [b for a, b in zip(self._argv, self._argv[1:]) if a == opt and b.startswith("-")]
            if after:
                message += f" (got {after[0]!r}, read as an option; write {opt}={after[0]} for a value starting with -)"
        self.exit(2, f"{prog}: error: {one_line(message)}\n")

    def _named(self) -> argparse.ArgumentParser:
        """The parser of the subcommand named on the command line (this one if none is)."""
        subs = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
        command = next((w for w in self._argv if subs is not None and w in subs.choices), None)
        return subs.choices[command] if command is not None else self


def _did_you_mean(parser: argparse.ArgumentParser, words: List[str]) -> str:
    """`` (did you mean --tp?)`` for the unknown options among ``words``: ``parser``'s own options nearest to each,
    by difflib's ratio of the names without their common ``--`` (with it, ``--schedule`` was ``--help``'s), or
    nothing."""
    options = {s[2:]: s for a in parser._actions for s in a.option_strings if s.startswith("--")}
    options["help-all"] = "--help-all"
    hints = []
    for word in words:
        if word.startswith("--"):
            near = difflib.get_close_matches(word.split("=", 1)[0][2:], list(options), n=3, cutoff=0.6)
            if near:
                hints.append(f"{word.split('=', 1)[0]}: did you mean {' or '.join(options[n] for n in near)}?")
    return f" ({'; '.join(hints)})" if hints else ""


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, that subcommand is built in full and the others are listed
    by name and one-line help (what ``memsym --help`` shows) without importing them."""
    parser = _Parser(prog="memsym", description="Symbolic GPU-memory derivations for DeepSeek-style training "
                                                "(Zhang & Su, arXiv 2502.07846), exact and reproducible.")
    parser.add_argument("--version", action="version", version=f"memsym {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, text in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(f".commands.{name}", __package__).add_parser(sub)
        else:
            sub.add_parser(name, help=text)
    if only is None or only:  # a subcommand built: bound its options (derivations/config/limits.py)
        from .argtypes import apply_limits
        apply_limits(parser)
    return parser


def _command(argv: List[str]) -> Optional[str]:
    """The subcommand named on the command line (the first word that is one), if any."""
    return next((a for a in argv if a in COMMANDS), None)


def main(argv: Optional[List[str]] = None) -> int:
    process = argv is None  # the memsym process itself, not main(argv) called from Python
    argv = sys.argv[1:] if argv is None else list(argv)
    for stream in (sys.stdout, sys.stderr):  # a name typed with undecodable bytes still prints
        if hasattr(stream, "reconfigure") and getattr(stream, "errors", None) == "strict":
            stream.reconfigure(errors="backslashreplace")
    try:
        rc = _dispatch(argv)
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's 128 + SIGINT; outputs are all-or-nothing
        print("memsym: interrupted", file=sys.stderr)
        if process:  # exit now, not through a notebook kernel client's exit handlers (they can wait for ever)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            os._exit(130)
        return 130
    if process and _command(argv) is not None:  # no cycle collection at exit (0.3 s on a report's sympy objects)
        gc.freeze()
    return rc


def _dispatch(argv: List[str]) -> int:
    """Parse ``argv`` and run its subcommand (``--help-all``: the help with every switch)."""
    HELP_ALL[0] = "--help-all" in argv  # (every call: an earlier one may have asked)
    if HELP_ALL[0]:
        argv = ["--help" if a == "--help-all" else a for a in argv]
    from symbolic.errors import ConfigError
    try:  # a damaged package data file is refused while the parser is built, too
        parser = build_parser(only=_command(argv) or "")
        args = parser.parse_args(argv)
        if not getattr(args, "run", None):
            parser.print_help()
            return 2
        from .commands.common import finish
        finish(args)  # presets resolved (typed > recipe > conventions > default), contradictions refused
        if getattr(args, "csv", None) or getattr(args, "plot", None):  # a file to write: writable, before any work
            from .plots import check_output, check_writable
            if getattr(args, "csv", None):
                check_writable(args.csv)
            if getattr(args, "plot", None):
                check_output(args.plot)
        return int(args.run(args) or 0)
    except ConfigError as exc:  # the form of argparse's own errors (_Parser.error): one prefix for every refusal
        print(f"{_prefix(argv)}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a path given on the command line that cannot be read or written
        print(one_line(f"{_prefix(argv)}: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")),
              file=sys.stderr)
        return 2


def _prefix(argv: List[str]) -> str:
    """``memsym CMD`` (``memsym`` before a subcommand is named): what every error line starts with."""
    return " ".join(["memsym"] + [c for c in [_command(argv)] if c])


if __name__ == "__main__":
    sys.exit(main())
