"""Tokens of a typed formula (plain text or LaTeX), read against the notation registry (nothing is evaluated).

A leading label (``M_1^A =``) is dropped and LaTeX spellings normalised (``\\text{..}`` unwrapped, ``_{cq}`` ->
``_cq``, ``^{\\prime}`` -> ``'``).  The whitelist: numbers (decimals read exactly), the registered symbols in any
spelling, ``+ - * / ^ **``, brackets ``( ) [ ] { }``, ``\\frac`` ``\\cdot`` ``\\times`` ``\\div``
``\\left`` ``\\right``, sizes and spacing; anything else is refused.  A run of letters is split by longest
match against the spellings (``bsh`` is b*s*h); unknown names are listed with the closest symbols.
``symbols_help`` (every reader takes it) says where the symbols are listed; messages cite it.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Tuple

from ..errors import ConfigError
from ..notation import REGISTRY

MAX_DIGITS = 30        # digits of one number


class FormulaError(ConfigError):
    """A formula or an assumption that cannot be read (exit 2 in a command line)."""

    def __init__(self, message: str, constraint: str = "formula"):
        super().__init__(constraint, message)


_TEXT_WRAP = re.compile(r"\\(?:text|textrm|textit|mathrm|mathit|mathsf|mathbf|boldsymbol|operatorname)\s*"
                        r"\{\s*([A-Za-z0-9 ]+?)\s*\}")
_SUB_GROUP = re.compile(r"_\{\s*([A-Za-z0-9]+)\s*\}")
_PRIME = re.compile(r"\^\s*\{\s*(?:\\prime|')\s*\}|\^\s*\\prime(?![A-Za-z])|\\prime(?![A-Za-z])")
_SUP_LETTER = re.compile(r"\^\s*\{\s*([A-Za-z])\s*\}")
_LABEL = re.compile(r"^\s*[A-Za-z\\][A-Za-z0-9_^{}'\\ ]{0,40}=(?!=)")


def normalise(text: str) -> str:
    """The normalisation step applied to formulas and to the registry's spellings alike."""
    prev = None
    while prev != text:  # nested wrappers such as E_{\text{token}}
        prev = text
        text = _TEXT_WRAP.sub(lambda m: m.group(1).replace(" ", ""), text)
        text = _SUB_GROUP.sub(r"_\1", text)
    text = _PRIME.sub("'", text)
    text = _SUP_LETTER.sub(r"^\1", text)
    return text


def spellings() -> Dict[str, str]:
    """Every accepted spelling (normalised) -> the registry name of its symbol."""
    return _spellings(len(REGISTRY))


@lru_cache(maxsize=None)
def _spellings(size: int) -> Dict[str, str]:
    # keyed by the registry's size: a domain registers its symbols after this import
    out: Dict[str, str] = {name: name for name in REGISTRY}  # a name always means its own symbol
    for name, info in REGISTRY.items():
        for spelling in (info.latex, *info.aliases):
            out.setdefault(normalise(spelling).replace(" ", ""), name)  # first claim wins
    return out


@lru_cache(maxsize=None)
def _by_first_char(size: int) -> Dict[str, Tuple[str, ...]]:
    """Spellings by first character, longest first (for longest match)."""
    table: Dict[str, List[str]] = {}
    for key in _spellings(size):
        table.setdefault(key[0], []).append(key)
    return {k: tuple(sorted(v, key=len, reverse=True)) for k, v in table.items()}


def closest_symbols(word: str, n: int = 5) -> List[str]:
    """Registry names (and spellings) closest to ``word``, for error messages."""
    names = list(REGISTRY)
    known = spellings()
    close = difflib.get_close_matches(word, names, n=n, cutoff=0.4)
    if len(close) < n:
        for key in difflib.get_close_matches(word, list(known), n=n, cutoff=0.5):
            if known[key] not in close:
                close.append(known[key])
    if not close:  # a word made of letters: suggest symbols sharing its first letter
        close = [nm for nm in names if nm[0].lower() == word[0].lower()][:n]
    return close[:n]


@dataclass(frozen=True)
class Token:
    """One token: kind NUM, SYM, OP, LP, RP, FRAC or END; value the number text, symbol name,
    operator or bracket; pos its offset in the normalised text."""

    kind: str
    value: object
    pos: int

    def show(self) -> str:
        """The token as a message names it."""
        if self.kind == "END":
            return "the end of the formula"
        if self.kind == "FRAC":
            return "\\frac"
        return repr(str(self.value))


_NUM = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*'?")
_CMD = re.compile(r"\\([A-Za-z]+|[,;:! {}])")
_FRAC_DIGITS = re.compile(r"\\[dtc]?frac\s*([0-9])\s*([0-9])")
_SKIP_CMDS = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr",
              "Biggl", "Biggr", "quad", "qquad", "displaystyle", "textstyle", ",", ";", ":", "!", " "}
_MUL_CMDS = {"cdot", "times", "ast"}
_FRAC_CMDS = {"frac", "dfrac", "tfrac", "cfrac"}
OPEN = {"(": ")", "[": "]", "{": "}"}
_UNICODE_OPS = {"\u00d7": "*", "\u00b7": "*", "\u22c5": "*", "\u2212": "-", "\u00f7": "/"}
_REFUSED = {"'": "quotes", '"': "quotes", ".": "attribute access ('.')", "_": "names starting with '_'",
            "=": "'='", ",": "','", ":": "':'", ";": "';'"}


def allowed(symbols_help: str = "") -> str:
    """What a formula may contain, for messages."""
    where = f" (see {symbols_help})" if symbols_help else ""
    return (f"numbers, symbols of the notation{where}, + - * / ^ **, brackets ( ) [ ] {{ }} "
            "and the LaTeX commands \\frac \\cdot \\times \\div \\left \\right and spacing")


def snippet(text: str, pos: int) -> str:
    """The text around ``pos``, for messages."""
    return text[max(0, pos - 12):pos + 12].replace("\n", " ")


def strip_label(text: str) -> str:
    """Drop a leading ``M_1^A =`` (a name not itself made of known symbols: ``h = s`` is refused)."""
    m = _LABEL.match(text)
    if m and "=" not in text[m.end():]:
        try:
            tokenize(normalise(text[:m.end() - 1]))
        except FormulaError:
            return text[m.end():]
    return text


class _Lexer:
    """One pass over a normalised formula; unknown names are collected, not raised at once."""

    def __init__(self, text: str, symbols_help: str):
        self.text, self.help = text, symbols_help
        self.size = len(REGISTRY)
        self.toks: List[Token] = []
        self.unknown: List[Tuple[str, str]] = []   # (word, the run of letters it is in)

    def run(self) -> List[Token]:
        text, n, i = self.text, len(self.text), 0
        while i < n:
            c = text[i]
            if c.isspace() or c == "~":
                i += 1
            elif "0" <= c <= "9" or (c == "." and i + 1 < n and "0" <= text[i + 1] <= "9"):
                i = self.number(i)
            elif text.startswith("**", i):
                self.toks.append(Token("OP", "^", i))
                i += 2
            elif c in "+-*/^" or c in _UNICODE_OPS:
                self.toks.append(Token("OP", _UNICODE_OPS.get(c, c), i))
                i += 1
            elif c in OPEN or c in ")]}":
                self.toks.append(Token("LP" if c in OPEN else "RP", c, i))
                i += 1
            elif ("a" <= c <= "z") or ("A" <= c <= "Z") or c == "\\":
                i = self.word(i)
            else:
                raise FormulaError(f"{_REFUSED.get(c, repr(c))} not allowed in a formula (near "
                                   f"{snippet(text, i)!r}); allowed: {allowed(self.help)}")
        if self.unknown:
            self.refuse_unknown()
        return self.toks

    def number(self, i: int) -> int:
        m = _NUM.match(self.text, i)
        digits = m.group(0).replace(".", "")
        if len(digits) > MAX_DIGITS:
            raise FormulaError(f"number too long ({len(digits)} digits, at most {MAX_DIGITS}) near "
                               f"{snippet(self.text, i)!r}", "formula-limit")
        self.toks.append(Token("NUM", m.group(0), i))
        return m.end()

    def word(self, i: int) -> int:
        """A symbol (longest match), a LaTeX command, or an unknown name starting at ``i``."""
        text = self.text
        match = next((key for key in _by_first_char(self.size).get(text[i], ()) if text.startswith(key, i)), None)
        if match is not None and not text.startswith("_", i + len(match)):
            self.toks.append(Token("SYM", _spellings(self.size)[match], i))
            return i + len(match)
        if text[i] == "\\":
            return self.command(i)
        m = _WORD.match(text, i)
        start = i
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_") and text[start - 1].isascii():
            start -= 1
        ctx = _WORD.match(text, start)
        word = m.group(0)
        self.unknown.append((word, ctx.group(0) if ctx and ctx.group(0) != word else ""))
        return m.end()

    def command(self, i: int) -> int:
        text = self.text
        m = _FRAC_DIGITS.match(text, i)
        if m:  # \frac12
            self.toks += [Token("FRAC", None, i), Token("LP", "{", i), Token("NUM", m.group(1), m.start(1)),
                          Token("RP", "}", i), Token("LP", "{", i), Token("NUM", m.group(2), m.start(2)),
                          Token("RP", "}", i)]
            return m.end()
        m = _CMD.match(text, i)
        if not m:
            raise FormulaError(f"a lone backslash near {snippet(text, i)!r}; allowed: {allowed(self.help)}")
        cmd, i = m.group(1), m.end()
        if cmd in _SKIP_CMDS:
            return i + 1 if cmd in ("left", "right") and i < len(text) and text[i] == "." else i
        if cmd in _MUL_CMDS:
            self.toks.append(Token("OP", "*", m.start()))
        elif cmd == "div":
            self.toks.append(Token("OP", "/", m.start()))
        elif cmd in _FRAC_CMDS:
            self.toks.append(Token("FRAC", None, m.start()))
        elif cmd in "{}":
            self.toks.append(Token("LP" if cmd == "{" else "RP", cmd, m.start()))
        else:
            raise FormulaError(f"LaTeX command \\{cmd} is not supported; allowed: {allowed(self.help)}")
        return i

    def refuse_unknown(self):
        names, seen = [], set()
        for word, ctx in self.unknown:
            label = f"{word!r}" + (f" (in {ctx!r})" if ctx else "")
            if label not in seen:
                seen.add(label)
                names.append((label, word))
        close: List[str] = []
        for _, word in names:
            close += [c for c in closest_symbols(word) if c not in close]
        where = f" (list them with {self.help})" if self.help else ""
        raise FormulaError(f"unknown name{'s' * (len(names) > 1)} {', '.join(l for l, _ in names)}; "
                           f"closest known symbols: {', '.join(close[:8]) or 'none'}{where}", "unknown-symbol")


def tokenize(text: str, symbols_help: str = "") -> List[Token]:
    """Tokens of a (normalised) formula; FormulaError names what is not allowed."""
    return _Lexer(text, symbols_help).run()
