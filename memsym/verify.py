"""Verify hand derivations: a formula typed in the paper's notation against a term.

A researcher derives, say, one MLA layer's activations by hand (Sec. 5.1, M_1^A) and asks
whether ``4bsh/2 + 2bs(d_cq + d_c) + ...`` is what the model says.  :func:`verify` reads
the formula, applies the assumptions to both sides and decides equality symbolically;
when the two differ it reports the simplified difference (term minus formula), the
monomials that differ and which of the term's tensors carry them, and the difference in
bytes at the paper's configuration (DeepSeek-v3, Tables 5 and 9).

Reading a formula (the input is data: nothing in it is ever evaluated as Python)
---------------------------------------------------------------------------------
1. A leading label such as ``M_1^A =`` is dropped.  LaTeX spellings are normalised:
   ``\\text{..}``/``\\mathrm{..}`` are unwrapped, ``_{cq}`` becomes ``_cq``, ``^{\\prime}`` and
   ``^\\prime`` become ``'``, ``^{R}`` becomes ``^R``.
2. The text is tokenised against a whitelist: numbers (integers, decimals read exactly),
   the symbols of :mod:`symbolic.notation` in any of their spellings (name, aliases, the
   paper's LaTeX: ``d_cq``, ``d_c'``, ``d_{cq}``, ``d_h^R``, ``E_{token}``, ``\\delta_{E}``),
   ``+ - * / ^ **``, brackets ``( ) [ ] { }`` and the LaTeX commands ``\\frac``
   (``\\dfrac``, ``\\tfrac``), ``\\cdot``, ``\\times``, ``\\div``, ``\\left``, ``\\right``,
   ``\\big``-style sizes and spacing (``\\, \\; \\! \\quad``).  Anything else (quotes, dots
   after names, ``=``, ``:``, ``_`` at the start of a name, unknown commands) is refused.
3. A run of letters is split by longest match against the known spellings: ``bsh`` is
   b*s*h, ``bsh_E`` is b*s*h_E, while ``DP``, ``EDP``, ``PP``, ``d_cq``, ``N_r`` stay
   whole.  A run that cannot be split is an unknown name; all unknown names are listed
   with the closest known symbols.  ``N`` is the routed-expert count; ``E``, ``S``,
   ``I``, ``O``, ``Q`` are not symbols of the notation (and never sympy's objects).
4. Our own recursive-descent parser builds the sympy expression directly (no
   ``parse_expr``, no sympy LaTeX parser).  Implicit multiplication binds like ``*``,
   left to right: ``a/2b`` is (a/2)*b (a warning says so; write ``a/(2b)``).  ``^`` binds
   tighter than a unary minus and is right-associative; exponents must be integers.

Limits (refused, exit 2, before any algebra): more than :data:`MAX_LENGTH` characters,
brackets/signs/powers nested deeper than :data:`MAX_DEPTH`, numbers longer than
:data:`MAX_DIGITS` digits, exponents of symbolic bases beyond :data:`MAX_EXPONENT`,
formulas whose expansion could exceed :data:`MAX_MONOMIALS` monomials, and more than
:data:`MAX_SUM_DENOMINATORS` different sums in denominators (each would multiply the
size of the common denominator the comparison needs).

What is substituted (both sides alike)
--------------------------------------
* ``--assume`` values (``TP=2``, ``SP=TP``, ``EP=N/32``): any symbol of the notation, the
  value a formula in the same language.  They always win.
* Derived symbols ``E_token`` (b s N_r / (N CP)) and ``EDP`` are expanded on both sides.
* The paper's conventions, for each symbol the formula does **not** mention and no
  assumption sets: bytes per element (Table 7: ``B_a = 2``, ``B_k = 1``, ``B_w = 2`` ...,
  :data:`symbolic.notation.PAPER_BYTES`), ``d_v = d_h`` (the paper writes d_h for the value
  head dimension), the extension symbols at the values that reproduce the paper
  (``F = 1``, balanced routing; ``EXTENSION_DEFAULTS`` of the registry), ``CP = 1``
  (context parallelism is our extension) and ``ETP = 1`` (the paper's formulas are at
  ETP = 1).  A formula that mentions ``B_a`` keeps ``B_a``
  symbolic on both sides.  See :func:`paper_defaults`.
* Everything else stays symbolic: a term that still has ``TP`` while the formula has
  ``/2`` is not equal, and the report says which symbols to assume.

The bytes of a difference are evaluated at the paper's configuration (Tables 5 and 9:
DeepSeek-v3, b=1, s=4096, DP32 TP2 SP2 PP16 EP8 ETP1 CP1, stage 1's composition
L_d=0, L_m=4), the assumptions taking precedence.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import sympy as sp

from derivations import notation as nt
from symbolic.errors import ConfigError

MAX_LENGTH = 2000      # characters of one formula
MAX_DEPTH = 40         # nesting of brackets, signs and powers
MAX_DIGITS = 30        # digits of one number
MAX_EXPONENT = 8       # |n| in x^n for a symbolic base
MAX_NUMBER_BITS = 4096  # size of a number raised to a power
MAX_MONOMIALS = 1000   # upper bound of the expanded size of a formula (the paper's have about 10)
MAX_FACTORED = 200     # differences with more monomials are shown expanded, not factored
MAX_SUM_DENOMINATORS = 4  # distinct sums in denominators, 1/(b + s) (bring to a common denominator)


def paper_defaults() -> Dict[sp.Symbol, sp.Expr]:
    """The paper's conventions, applied to symbols a formula does not mention (module doc).

    Bytes per element (:data:`symbolic.notation.PAPER_BYTES`), the identities that turn our
    notation into the paper's (:data:`symbolic.notation.PAPER_IDENTITIES`: d_v = d_h, ...),
    the values of extension symbols that reproduce the paper (``EXTENSION_DEFAULTS`` where
    the registry has them), CP = 1 and ETP = 1.
    """
    out: Dict[sp.Symbol, sp.Expr] = {k: sp.Integer(v) for k, v in nt.PAPER_BYTES.items()}
    out.update({k: sp.sympify(v) for k, v in getattr(nt, "EXTENSION_DEFAULTS", {}).items()})
    out.update({k: sp.sympify(v) for k, v in nt.PAPER_IDENTITIES.items()})
    out[nt.CP] = sp.Integer(1)
    out[nt.ETP] = sp.Integer(1)
    return out


class FormulaError(ConfigError):
    """A formula or an assumption that cannot be read (exit 2 in the CLI)."""

    def __init__(self, message: str, constraint: str = "formula"):
        super().__init__(constraint, message)


# ------------------------------------------------------------------------- spellings
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


@lru_cache(maxsize=None)
def spellings() -> Dict[str, str]:
    """Every accepted spelling (normalised) -> the registry name of its symbol."""
    out: Dict[str, str] = {name: name for name in nt.REGISTRY}  # a name always means its own symbol
    for name, info in nt.REGISTRY.items():
        for spelling in (info.latex, *info.aliases):
            out.setdefault(normalise(spelling).replace(" ", ""), name)  # first claim wins
    return out


@lru_cache(maxsize=None)
def _by_first_char() -> Dict[str, Tuple[str, ...]]:
    table: Dict[str, List[str]] = {}
    for key in spellings():
        table.setdefault(key[0], []).append(key)
    return {k: tuple(sorted(v, key=len, reverse=True)) for k, v in table.items()}


def closest_symbols(word: str, n: int = 5) -> List[str]:
    """Registry names (and spellings) closest to ``word``, for error messages."""
    names = list(nt.REGISTRY)
    close = difflib.get_close_matches(word, names, n=n, cutoff=0.4)
    if len(close) < n:
        by_spelling = difflib.get_close_matches(word, list(spellings()), n=n, cutoff=0.5)
        for key in by_spelling:
            name = spellings()[key]
            if name not in close:
                close.append(name)
    if not close:  # a word made of letters: suggest symbols sharing its first letter
        close = [nm for nm in names if nm[0].lower() == word[0].lower()][:n]
    return close[:n]


# ------------------------------------------------------------------------- tokens
@dataclass(frozen=True)
class Token:
    kind: str      # NUM, SYM, OP, LP, RP, FRAC, END
    value: object  # number text, symbol name, operator, bracket
    pos: int

    def show(self) -> str:
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
_OPEN = {"(": ")", "[": "]", "{": "}"}
_UNICODE_OPS = {"\u00d7": "*", "\u00b7": "*", "\u22c5": "*", "\u2212": "-", "\u00f7": "/"}
ALLOWED = ("numbers, symbols of the notation (see `memsym verify --help`), + - * / ^ **, brackets ( ) [ ] { } "
           "and the LaTeX commands \\frac \\cdot \\times \\div \\left \\right and spacing")


def _snippet(text: str, pos: int) -> str:
    return text[max(0, pos - 12):pos + 12].replace("\n", " ")


def strip_label(text: str) -> str:
    """Drop a leading ``M_1^A =`` so the paper's (or the digest's) text can be pasted.

    Only a name that is not itself made of known symbols counts as a label: ``h = s`` is
    refused (``=``), not read as ``s``.
    """
    m = _LABEL.match(text)
    if m and "=" not in text[m.end():]:
        try:
            tokenize(normalise(text[:m.end() - 1]))
        except FormulaError:
            return text[m.end():]
    return text


def tokenize(text: str) -> List[Token]:
    """Tokens of a (normalised) formula; FormulaError names what is not allowed."""
    table = _by_first_char()
    toks: List[Token] = []
    unknown: List[Tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace() or c == "~":
            i += 1
            continue
        if "0" <= c <= "9" or (c == "." and i + 1 < n and "0" <= text[i + 1] <= "9"):
            m = _NUM.match(text, i)
            digits = m.group(0).replace(".", "")
            if len(digits) > MAX_DIGITS:
                raise FormulaError(f"number too long ({len(digits)} digits, at most {MAX_DIGITS}) near "
                                   f"{_snippet(text, i)!r}", "formula-limit")
            toks.append(Token("NUM", m.group(0), i))
            i = m.end()
            continue
        if text.startswith("**", i):
            toks.append(Token("OP", "^", i))
            i += 2
            continue
        if c in "+-*/^":
            toks.append(Token("OP", c, i))
            i += 1
            continue
        if c in _UNICODE_OPS:
            toks.append(Token("OP", _UNICODE_OPS[c], i))
            i += 1
            continue
        if c in _OPEN:
            toks.append(Token("LP", c, i))
            i += 1
            continue
        if c in ")]}":
            toks.append(Token("RP", c, i))
            i += 1
            continue
        if ("a" <= c <= "z") or ("A" <= c <= "Z") or c == "\\":
            match = None
            for key in table.get(c, ()):
                if text.startswith(key, i):
                    match = key
                    break
            if match is not None and not text.startswith("_", i + len(match)):
                toks.append(Token("SYM", spellings()[match], i))
                i += len(match)
                continue
            if c == "\\":
                m = _FRAC_DIGITS.match(text, i)
                if m:  # \frac12
                    toks += [Token("FRAC", None, i), Token("LP", "{", i), Token("NUM", m.group(1), m.start(1)),
                             Token("RP", "}", i), Token("LP", "{", i), Token("NUM", m.group(2), m.start(2)),
                             Token("RP", "}", i)]
                    i = m.end()
                    continue
                m = _CMD.match(text, i)
                if not m:
                    raise FormulaError(f"a lone backslash near {_snippet(text, i)!r}; allowed: {ALLOWED}")
                cmd = m.group(1)
                i = m.end()
                if cmd in _SKIP_CMDS:
                    if cmd in ("left", "right") and i < n and text[i] == ".":
                        i += 1
                    continue
                if cmd in _MUL_CMDS:
                    toks.append(Token("OP", "*", m.start()))
                elif cmd == "div":
                    toks.append(Token("OP", "/", m.start()))
                elif cmd in _FRAC_CMDS:
                    toks.append(Token("FRAC", None, m.start()))
                elif cmd in "{}":
                    toks.append(Token("LP" if cmd == "{" else "RP", cmd, m.start()))
                else:
                    raise FormulaError(f"LaTeX command \\{cmd} is not supported; allowed: {ALLOWED}")
                continue
            m = _WORD.match(text, i)
            start = i
            while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_") and text[start - 1].isascii():
                start -= 1
            ctx = _WORD.match(text, start)
            word = m.group(0)
            unknown.append((word, ctx.group(0) if ctx and ctx.group(0) != word else ""))
            i = m.end()
            continue
        what = {"'": "quotes", '"': "quotes", ".": "attribute access ('.')", "_": "names starting with '_'",
                "=": "'='", ",": "','", ":": "':'", ";": "';'"}.get(c, repr(c))
        raise FormulaError(f"{what} not allowed in a formula (near {_snippet(text, i)!r}); allowed: {ALLOWED}")
    if unknown:
        names, seen = [], set()
        for word, ctx in unknown:
            label = f"{word!r}" + (f" (in {ctx!r})" if ctx else "")
            if label not in seen:
                seen.add(label)
                names.append((label, word))
        close: List[str] = []
        for _, word in names:
            for c in closest_symbols(word):
                if c not in close:
                    close.append(c)
        raise FormulaError(f"unknown name{'s' * (len(names) > 1)} {', '.join(l for l, _ in names)}; "
                           f"closest known symbols: {', '.join(close[:8]) or 'none'} "
                           f"(list them with `memsym verify --help`)", "unknown-symbol")
    return toks


# ------------------------------------------------------------------------- parser
class _Parser:
    """Recursive descent over the tokens, producing sympy objects directly.

    expr   := term (('+'|'-') term)*
    term   := factor (('*'|'/') factor | power)*        (juxtaposition = implicit '*')
    factor := ('+'|'-') factor | power
    power  := atom ('^' factor)?
    atom   := NUM | SYM | '(' expr ')' | '[' expr ']' | '{' expr '}' | FRAC group group

    Every node also carries an upper bound of its expanded size (monomials), so that a
    formula whose expansion would explode is refused before any algebra.
    """

    def __init__(self, toks: List[Token], text: str):
        self.toks = toks + [Token("END", None, len(text))]
        self.text = text
        self.i = 0
        self.depth = 0
        self.warnings: List[str] = []

    def peek(self) -> Token:
        return self.toks[self.i]

    def take(self) -> Token:
        t = self.toks[self.i]
        self.i += 1
        return t

    def fail(self, msg: str, tok: Optional[Token] = None):
        tok = tok or self.peek()
        raise FormulaError(f"{msg} (near {_snippet(self.text, tok.pos)!r})")

    def enter(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FormulaError(f"formula nested too deeply (more than {MAX_DEPTH} levels of brackets, signs or "
                               f"powers)", "formula-limit")

    def leave(self):
        self.depth -= 1

    @staticmethod
    def bound(size: int) -> int:
        if size > MAX_MONOMIALS:
            raise FormulaError(f"formula too large: expanding it could give more than {MAX_MONOMIALS} monomials",
                               "formula-limit")
        return size

    def parse(self):
        if self.peek().kind == "END":
            raise FormulaError("empty formula")
        expr, self.size = self.expr()
        if self.peek().kind != "END":
            t = self.peek()
            if t.kind == "RP":
                self.fail(f"unmatched closing {t.value!r}", t)
            self.fail(f"unexpected {t.show()}", t)
        return expr

    def expr(self):
        node, size = self.term()
        while self.peek().kind == "OP" and self.peek().value in "+-":
            op = self.take().value
            rhs, rsize = self.term()
            node = node + rhs if op == "+" else node - rhs
            size = self.bound(size + rsize)
        return node, size

    def _starts_atom(self, t: Token) -> bool:
        return t.kind in ("NUM", "SYM", "LP", "FRAC")

    def term(self):
        node, size = self.factor()
        last_div = False
        while True:
            t = self.peek()
            if t.kind == "OP" and t.value in "*/":
                self.take()
                rhs, rsize = self.factor()
                if t.value == "/":
                    if rhs == 0:
                        self.fail("division by zero", t)
                    node = node / rhs
                    last_div = True
                else:
                    node = node * rhs
                    last_div = False
            elif self._starts_atom(t):
                rhs, rsize = self.power()
                if last_div:
                    self.warnings.append(
                        f"read {_snippet(self.text, t.pos).strip()!r} with implicit multiplication after '/' as "
                        f"(a/b)*c, left to right; write a/(b c) if you mean the product in the denominator")
                    last_div = False
                node = node * rhs
            else:
                return node, size
            size = self.bound(size * rsize)

    def factor(self):
        t = self.peek()
        if t.kind == "OP" and t.value in "+-":
            self.take()
            self.enter()
            node, size = self.factor()
            self.leave()
            return (-node if t.value == "-" else node), size
        return self.power()

    def power(self):
        base, size = self.atom()
        t = self.peek()
        if t.kind == "OP" and t.value == "^":
            self.take()
            self.enter()
            exp, _ = self.factor()
            self.leave()
            if not (exp.is_Integer):
                self.fail(f"exponents must be integers, got {exp}", t)
            e = int(exp)
            if base.is_Number:
                if base == 0 and e < 0:
                    self.fail("division by zero", t)
                bits = max(abs(sp.Rational(base).p).bit_length(), abs(sp.Rational(base).q).bit_length(), 1)
                if abs(e) * bits > MAX_NUMBER_BITS:
                    raise FormulaError(f"number too large: {base}^{e}", "formula-limit")
                return base ** e, 1
            if abs(e) > MAX_EXPONENT:
                raise FormulaError(f"exponent {e} too large (at most {MAX_EXPONENT} for a symbolic base)",
                                   "formula-limit")
            return base ** e, self.bound(size ** max(abs(e), 1))
        return base, size

    def group(self, what: str):
        t = self.peek()
        if t.kind == "LP":
            return self.atom()
        if t.kind in ("NUM", "SYM"):
            return self.atom()
        self.fail(f"expected the {what} of \\frac in braces, got {t.show()}", t)

    def atom(self):
        t = self.take()
        if t.kind == "NUM":
            return (sp.Integer(t.value) if "." not in t.value else sp.Rational(t.value)), 1
        if t.kind == "SYM":
            return nt.SYMBOLS[t.value], 1
        if t.kind == "LP":
            self.enter()
            node, size = self.expr()
            self.leave()
            close = self.take()
            if close.kind != "RP" or close.value != _OPEN[t.value]:
                self.fail(f"expected {_OPEN[t.value]!r} to close {t.value!r}, got {close.show()}", close)
            return node, size
        if t.kind == "FRAC":
            self.enter()
            num, nsize = self.group("numerator")
            den, dsize = self.group("denominator")
            self.leave()
            if den == 0:
                self.fail("division by zero", t)
            return num / den, self.bound(nsize * dsize)
        if t.kind == "END":
            self.fail("the formula ends too early", t)
        if t.kind == "RP":
            self.fail(f"unexpected closing {t.value!r}", t)
        self.fail(f"unexpected {t.show()}", t)


@dataclass(frozen=True)
class Parsed:
    """A parsed formula: the sympy expression, the symbol names it mentions, warnings."""

    text: str
    expr: sp.Expr
    mentioned: frozenset
    warnings: Tuple[str, ...] = ()


def parse_formula(text: str, max_length: int = MAX_LENGTH) -> Parsed:
    """Read a formula (plain text or LaTeX) into a sympy expression without evaluating it."""
    if not isinstance(text, str):
        raise FormulaError(f"a formula must be text, got {type(text).__name__}")
    if len(text) > max_length:
        raise FormulaError(f"formula too long ({len(text)} characters, at most {max_length})", "formula-limit")
    body = normalise(strip_label(text))
    toks = tokenize(body)
    p = _Parser(toks, body)
    expr = p.parse()
    sums = _sum_denominators(expr)
    if len(sums) > MAX_SUM_DENOMINATORS:
        raise FormulaError(f"formula too large: {len(sums)} different sums in denominators (at most "
                           f"{MAX_SUM_DENOMINATORS}); bring them to a common denominator", "formula-limit")
    size = p.size
    for base in sums:  # a common denominator multiplies every numerator by the other sums
        size = p.bound(size * len(base.args))
    mentioned = frozenset(t.value for t in toks if t.kind == "SYM")
    return Parsed(text, sp.sympify(expr), mentioned, tuple(dict.fromkeys(p.warnings)))


def parse(text: str) -> sp.Expr:
    """The sympy expression of a formula (see :func:`parse_formula`)."""
    return parse_formula(text).expr


# ------------------------------------------------------------------------- assumptions
def _symbol_of(name) -> sp.Symbol:
    if isinstance(name, sp.Symbol):
        if name.name in nt.SYMBOLS and nt.SYMBOLS[name.name] == name:
            return name
        raise FormulaError(f"unknown symbol {name} in an assumption", "assumption")
    key = normalise(str(name).strip()).replace(" ", "")
    if key in spellings():
        return nt.SYMBOLS[spellings()[key]]
    close = closest_symbols(key) if key else []
    raise FormulaError(f"unknown symbol {str(name)!r} in an assumption; closest known symbols: "
                       f"{', '.join(close) or 'none'}", "assumption")


def parse_assumptions(assume) -> Dict[sp.Symbol, sp.Expr]:
    """``{"TP": 2}``, ``["TP=2", "SP=TP"]`` or ``"TP=2 SP=2"`` -> {Symbol: value}.

    A value is a number or a formula in the same safe language (``EP=N/32``).
    """
    if assume is None:
        return {}
    if isinstance(assume, str):
        assume = assume.replace(",", " ").split()
    items: List[Tuple[object, object]] = []
    if isinstance(assume, Mapping):
        items = list(assume.items())
    else:
        for a in assume:
            for piece in str(a).replace(",", " ").split():
                if piece.count("=") != 1:
                    raise FormulaError(f"an assumption must be NAME=VALUE (e.g. TP=2), got {piece!r}", "assumption")
                k, v = piece.split("=")
                items.append((k, v))
    out: Dict[sp.Symbol, sp.Expr] = {}
    for k, v in items:
        sym = _symbol_of(k)
        if isinstance(v, bool):
            raise FormulaError(f"assumption {sym}: expected a number or formula, got {v!r}", "assumption")
        if isinstance(v, (int, Fraction)):
            val = sp.Rational(v.numerator, v.denominator) if isinstance(v, Fraction) else sp.Integer(v)
        elif isinstance(v, sp.Basic):
            val = v
            if not val.free_symbols <= set(nt.SYMBOLS.values()):
                raise FormulaError(f"assumption {sym}: value {v} uses symbols outside the notation", "assumption")
        else:
            text = str(v).strip()
            if not text:
                raise FormulaError(f"assumption {sym}: empty value", "assumption")
            val = parse(text)
        if val.is_number:  # a numeric value must respect the symbol's assumptions (Table 1: sizes > 0)
            if (sym.is_positive and not val.is_positive) or (sym.is_nonnegative and val.is_negative):
                raise FormulaError(f"assumption {sym}={val}: {sym} must be "
                                   f"{'positive' if sym.is_positive else 'non-negative'}", "assumption")
            if sym.is_integer and not val.is_integer:
                raise FormulaError(f"assumption {sym}={val}: {sym} must be an integer", "assumption")
        if sym in out and out[sym] != val:
            raise FormulaError(f"{sym} is assumed twice ({out[sym]} and {val})", "assumption")
        out[sym] = val
    total = 1
    for val in out.values():  # each value multiplies the size of every monomial it enters
        total *= len(sp.Add.make_args(sp.expand(val))) if isinstance(val, sp.Expr) else 1
        if total > MAX_MONOMIALS:
            raise FormulaError(f"assumptions too large: substituting them could give more than {MAX_MONOMIALS} "
                               f"monomials per monomial of the term", "formula-limit")
    return out


def expanded_size(expr, cap: int = 10 ** 9) -> int:
    """An upper bound of the number of monomials of ``expand(expr)`` (capped at ``cap``)."""
    if expr.is_Atom:
        return 1
    if expr.is_Add:
        return min(cap, sum(expanded_size(a, cap) for a in expr.args))
    if expr.is_Mul:
        out = 1
        for a in expr.args:
            out = min(cap, out * expanded_size(a, cap))
        return out
    if expr.is_Pow and expr.exp.is_Integer:
        base = expanded_size(expr.base, cap)
        return 1 if base == 1 else min(cap, base ** min(abs(int(expr.exp)), 64))
    return 1


def _apply(expr: sp.Expr, subs: Mapping) -> sp.Expr:
    """Substitute until nothing changes (assumptions may refer to each other: SP=TP, TP=2)."""
    for _ in range(10):
        new = nt.expand_derived(expr.xreplace(subs))
        if new == expr:
            return new
        expr = new
    raise FormulaError("the assumptions refer to each other in a circle (e.g. TP=SP SP=TP)", "assumption")


# ------------------------------------------------------------------------- result
@dataclass(frozen=True)
class Monomial:
    """One monomial whose coefficient differs between the term and the formula."""

    monomial: sp.Expr
    term_coeff: sp.Rational
    formula_coeff: sp.Rational
    parts: Tuple[str, ...]   # the term's tensors (part keys) that contribute to it

    def to_json(self) -> dict:
        from symbolic.render import expr_latex
        return {"monomial": plain(self.monomial), "latex": expr_latex(self.monomial),
                "term": _num_json(self.term_coeff), "formula": _num_json(self.formula_coeff),
                "parts": list(self.parts)}


def _num_json(x):
    x = sp.Rational(x)
    return int(x) if x.q == 1 else str(x)


def plain(expr) -> str:
    """An expression in typed notation (re-readable by :func:`parse`), in the paper's order."""
    from symbolic.render import paper_order
    return sp.sstr(paper_order(expr), order="none")


@dataclass
class VerifyResult:
    """The verdict of :func:`verify` and everything that explains it.

    equal: the formula equals the term under the assumptions.
    difference: term minus formula, simplified (0 when equal).
    monomials: the monomials whose coefficients differ, with the term's parts carrying them.
    bytes_at_paper: the difference in bytes at the paper's configuration (None if it
        cannot be evaluated); ``value_at_paper`` is the same in the term's unit.
    """

    formula_text: str
    against: str
    term_meaning: str
    provenance: str
    unit: str
    formula: sp.Expr
    term_side: sp.Expr
    formula_side: sp.Expr
    equal: bool
    difference: sp.Expr
    monomials: List[Monomial]
    assumptions: Dict[sp.Symbol, sp.Expr]
    defaults: Dict[sp.Symbol, sp.Expr]
    value_at_paper: Optional[Fraction]
    bytes_at_paper: Optional[Fraction]
    paper_config: str
    explanation: List[str] = field(default_factory=list)
    hints: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    display: Optional[sp.Expr] = None

    @property
    def verdict(self) -> str:
        return "EQUAL" if self.equal else "NOT EQUAL"

    @property
    def exit_code(self) -> int:
        return 0 if self.equal else 1

    @property
    def gib_at_paper(self) -> Optional[float]:
        return None if self.bytes_at_paper is None else float(self.bytes_at_paper) / 2 ** 30

    def _subs_text(self, d: Mapping) -> str:
        return " ".join(f"{k}={plain(v)}" for k, v in sorted(d.items(), key=lambda kv: kv[0].name))

    def to_json(self) -> dict:
        from symbolic.render import expr_latex
        return {
            "equal": self.equal, "verdict": self.verdict, "against": self.against, "provenance": self.provenance,
            "meaning": self.term_meaning, "unit": self.unit, "formula_text": self.formula_text,
            "formula": plain(self.formula), "formula_latex": expr_latex(self.formula),
            "assumptions": {k.name: plain(v) for k, v in self.assumptions.items()},
            "defaults": {k.name: plain(v) for k, v in self.defaults.items()},
            "term_side": plain(self.term_side), "formula_side": plain(self.formula_side),
            "difference": plain(self.difference), "difference_latex": expr_latex(self.difference),
            "difference_expanded": plain(sp.expand(self.difference)),
            "monomials": [m.to_json() for m in self.monomials],
            "paper_config": self.paper_config,
            "value_at_paper": None if self.value_at_paper is None else _frac_json(self.value_at_paper),
            "bytes_at_paper": None if self.bytes_at_paper is None else _frac_json(self.bytes_at_paper),
            "gib_at_paper": self.gib_at_paper,
            "explanation": self.explanation, "hints": self.hints, "warnings": self.warnings,
        }

    def text(self) -> str:
        from symbolic.render import fmt_gib, fmt_int
        lines = [f"memsym verify: {self.verdict}",
                 f"  against    {self.against} ({self.provenance}): {self.term_meaning}"]
        if self.assumptions:
            lines.append(f"  assuming   {self._subs_text(self.assumptions)}")
        if self.defaults:
            lines.append(f"  paper conventions (not mentioned by the formula): {self._subs_text(self.defaults)}")
        lines.append(f"  formula    {plain(self.formula)}")
        if self.display is not None:
            lines.append(f"  term       {plain(self.display)}")
        if self.equal:
            lines.append(f"  both sides = {plain(_closed(self.term_side))}")
        else:
            lines.append(f"  term - formula = {plain(self.difference)}")
            expanded = sp.expand(self.difference)
            if plain(expanded) != plain(self.difference):
                lines.append(f"                 = {plain(expanded)}")
            signs = {m.term_coeff > m.formula_coeff for m in self.monomials}
            if signs == {False}:
                lines.append(f"  (the formula has {plain(-self.difference)} more than the term)")
            elif signs == {True}:
                lines.append(f"  (the formula misses {plain(self.difference)} of the term)")
            if self.monomials:
                w = max(len(plain(m.monomial)) for m in self.monomials)
                w = max(w, 8)
                lines.append(f"  monomials that differ:")
                lines.append(f"    {'monomial':<{w}}  {'term':>10}  {'formula':>10}  term's tensors")
                for m in self.monomials:
                    lines.append(f"    {plain(m.monomial):<{w}}  {str(m.term_coeff):>10}  {str(m.formula_coeff):>10}  "
                                 f"{', '.join(m.parts) or '-'}")
            for e in self.explanation:
                lines.append(f"  {e}")
            lines.append(f"  at the paper's configuration ({self.paper_config}):")
            if self.value_at_paper is None:
                lines.append("    cannot be evaluated (the difference has symbols without a paper value)")
            else:
                b = self.bytes_at_paper
                unit = "" if self.unit == "bytes" else f"{fmt_int(self.value_at_paper)} params = "
                if b == 0:
                    what = "the two agree there, though not for every value of the symbols"
                else:
                    what = f"the formula counts {fmt_int(abs(b))} bytes {'more' if b < 0 else 'fewer'} than the term"
                lines.append(f"    term - formula = {unit}{fmt_int(b)} bytes ({fmt_gib(b, 4)} GiB): {what}")
        for h in self.hints:
            lines.append(f"  hint: {h}")
        for wmsg in self.warnings:
            lines.append(f"  warning: {wmsg}")
        return "\n".join(lines)

    def latex(self) -> str:
        from symbolic.render import expr_latex, fmt_gib, fmt_int
        cond = ", ".join(f"{expr_latex(k)} = {expr_latex(v)}" for k, v in self.assumptions.items())
        lines = [f"% memsym verify: {self.verdict} -- {self.against} ({self.provenance})"]
        if cond:
            lines.append(f"% assuming {cond}")
        lines.append("\\begin{align*}")
        lines.append(f"\\text{{formula}} &= {expr_latex(self.formula)} \\\\")
        if self.display is not None:
            lines.append(f"\\text{{term}} &= {sp.latex(self.display, order='none', symbol_names=nt.latex_names())} \\\\")
        if self.equal:
            lines.append(f"\\text{{term}} - \\text{{formula}} &= 0")
        else:
            lines.append(f"\\text{{term}} - \\text{{formula}} &= {expr_latex(self.difference)} \\\\")
            lines.append(f"&= {expr_latex(sp.expand(self.difference))}")
        lines.append("\\end{align*}")
        if not self.equal:
            if self.monomials:
                lines.append("\\begin{tabular}{lrrl}")
                lines.append("monomial & term & formula & term's tensors \\\\ \\hline")
                for m in self.monomials:
                    parts = ", ".join(m.parts).replace("_", "\\_")
                    lines.append(f"${expr_latex(m.monomial)}$ & ${sp.latex(m.term_coeff)}$ & "
                                 f"${sp.latex(m.formula_coeff)}$ & {parts} \\\\")
                lines.append("\\end{tabular}")
            if self.bytes_at_paper is not None:
                lines.append(f"% at the paper's configuration ({self.paper_config}): term - formula = "
                             f"{fmt_int(self.bytes_at_paper)} bytes ({fmt_gib(self.bytes_at_paper, 4)} GiB)")
        return "\n".join(lines)


def _frac_json(x: Fraction):
    return int(x) if x.denominator == 1 else str(x)


def _closed(expr: sp.Expr) -> sp.Expr:
    return sp.factor_terms(sp.together(sp.expand(expr)))


# ------------------------------------------------------------------------- comparison
def _resolve_term(against, model):
    """(label, expr, term, parts) for a term id, ``id:part`` or ``id:part+part``."""
    from symbolic.term import Term
    from derivations import build
    terms = build(model)
    if isinstance(against, Term):
        return against.id, against, list(against.parts), terms
    if not isinstance(against, str) or not against.strip():
        raise FormulaError(f"--against needs a term id (list them with `memsym terms`), got {against!r}", "term")
    tid, _, keys = against.strip().partition(":")
    try:
        term = terms[tid]
    except KeyError as exc:
        raise FormulaError(str(exc.args[0]), "term") from None
    if not keys:
        return tid, term, list(term.parts), terms
    parts = []
    for key in keys.split("+"):
        try:
            parts.append(term.part(key.strip()))
        except KeyError as exc:
            raise FormulaError(str(exc.args[0]), "term") from None
    return against.strip(), term, parts, terms


def _leaves(parts, terms, prefix="") -> List[Tuple[str, str, str, sp.Expr]]:
    """(key, label, row, expr) of the tensors behind parts, one level into combined terms."""
    out = []
    for p in parts:
        ref = next((t[4:] for t in p.tags if t.startswith("ref:")), None)
        if ref and ref in terms and len(p.num) in (1, 2):
            coef = p.num[0] if len(p.num) == 2 else 1
            for q in terms[ref].parts:
                out.append((f"{prefix}{p.key}.{q.key}", q.label, f"{p.key}.{q.row}" if q.row else "",
                            sp.sympify(coef) * q.expr))
        else:
            out.append((f"{prefix}{p.key}", p.label, p.row, p.expr))
    return out


def paper_substitution(model) -> Tuple[Dict, str]:
    """The paper's configuration (Tables 5 and 9, stage 1) for ``model``."""
    from derivations import config as cfg
    layout, training = cfg.Layout(), cfg.Training()
    comp = cfg.stage(model, layout, 1)
    subs = cfg.substitution(model, layout, training, comp)
    desc = (f"{model.name}, b={training.mbs} s={training.seq} DP{layout.dp} TP{layout.tp} SP{layout.SP} "
            f"PP{layout.pp} EP{layout.ep} ETP{layout.etp} CP{layout.cp}, stage 1 (L_d={comp.dense}, L_m={comp.moe})")
    return subs, desc


def stage_assumptions(stage: int, model=None) -> Dict[sp.Symbol, sp.Expr]:
    """L_d, L_m, e_E, e_H of pipeline stage ``stage`` of the paper's layout (Table 4)."""
    from derivations import config as cfg
    model = _model(model)
    comp = cfg.stage(model, cfg.Layout(), stage)
    return {k: sp.Integer(v) for k, v in comp.values().items()}


def _model(model):
    from derivations import config as cfg
    if model is None:
        return cfg.PRESETS["deepseek-v3"]
    if isinstance(model, str):
        return cfg.load_model(model)
    return model


def verify(formula: str, against, assume=None, model=None, stage: Optional[int] = None) -> VerifyResult:
    """Is ``formula`` equal to the term ``against`` under ``assume``?

    formula: plain text or LaTeX in the paper's notation (``4bsh/2 + 2bs(d_cq + d_c) + ...``).
    against: a term id (``act.mla.layer``), ``id:part`` or ``id:part+part`` (``act.stage:mla``),
        or a Term.
    assume: ``{"TP": 2, "SP": 2}``, ``["TP=2", "SP=2"]`` or ``"TP=2 SP=2"``.
    model: preset name or ModelSpec (decides which terms exist and the paper configuration).
    stage: shorthand for the composition (L_d, L_m, e_E, e_H) of a stage of the paper's layout.

    Raises :class:`FormulaError` (a ConfigError) for input that cannot be read.
    """
    model = _model(model)
    parsed = parse_formula(formula)
    assumptions = {}
    if stage is not None:
        assumptions.update(stage_assumptions(stage, model))
    assumptions.update(parse_assumptions(assume))
    label, term, parts, terms = _resolve_term(against, model)
    term_expr = sp.Add(*[p.expr for p in parts])

    mentioned = {nt.SYMBOLS[n] for n in parsed.mentioned}
    for v in assumptions.values():
        mentioned |= v.free_symbols
    defaults = {k: v for k, v in paper_defaults().items() if k not in mentioned and k not in assumptions}
    subs = dict(defaults)
    subs.update(assumptions)

    lhs = _apply(term_expr, subs)
    rhs = _apply(parsed.expr, subs)
    for side, expr in (("the term", lhs), ("the formula", rhs)):
        if expanded_size(expr, 10 * MAX_MONOMIALS) > MAX_MONOMIALS:
            raise FormulaError(f"too large: after the assumptions, expanding {side} could give more than "
                               f"{MAX_MONOMIALS} monomials", "formula-limit")
    # only defaults that touched something are worth reporting
    raw_syms = nt.expand_derived(term_expr).free_symbols | nt.expand_derived(parsed.expr).free_symbols
    for v in assumptions.values():
        raw_syms |= nt.expand_derived(v).free_symbols
    defaults = {k: v for k, v in defaults.items() if k in raw_syms}

    # Both sides are Laurent polynomials in positive symbols (the terms divide only by
    # parallel degrees and counts): after expansion, equal iff every monomial's coefficient
    # agrees.  Sums in a denominator (a user's 1/(b + s)) need a common denominator.
    lc = sp.expand(lhs).as_coefficients_dict()
    rc = sp.expand(rhs).as_coefficients_dict()
    keys = list(dict.fromkeys(list(lc) + list(rc)))
    dc = {m: sp.Rational(lc.get(m, 0)) - sp.Rational(rc.get(m, 0)) for m in keys}
    dc = {m: c for m, c in dc.items() if c != 0}
    expanded = sp.Add(*[c * m for m, c in dc.items()])
    if expanded == 0:
        equal = True
    elif _sum_denominators(expanded):
        equal = sp.expand(sp.numer(sp.together(expanded))) == 0
    else:
        equal = False
    difference = sp.Integer(0) if equal else (sp.factor_terms(expanded) if len(dc) <= MAX_FACTORED else expanded)

    monomials: List[Monomial] = []
    explanation: List[str] = []
    hints: List[str] = []
    if not equal:
        leaves = _leaves(parts, terms)
        leaf_dicts = [(key, label, row, sp.expand(_apply(e, subs)).as_coefficients_dict())
                      for key, label, row, e in leaves]
        for mono, c in dc.items():
            owners = tuple(k for k, _, _, d in leaf_dicts if d.get(mono, 0) != 0)
            monomials.append(Monomial(mono, sp.Rational(lc.get(mono, 0)), sp.Rational(rc.get(mono, 0)), owners))
        monomials.sort(key=lambda m: _mono_rank(m.monomial))
        explanation = _explain(dc, leaf_dicts)
        lfree, rfree = lhs.free_symbols, rhs.free_symbols
        only_term = sorted((x.name for x in lfree - rfree), key=_order)
        only_formula = sorted((x.name for x in rfree - lfree), key=_order)
        if only_term:
            hints.append(f"the term depends on {', '.join(only_term)}, which the formula does not contain: if the "
                         f"formula is at particular values give them, e.g. --assume "
                         f"{' '.join(n + '=...' for n in only_term)}")
            if {"L_d", "L_m", "e_E", "e_H"} & set(only_term):
                hints.append("for one device of a pipeline stage, --stage N substitutes that stage's L_d, L_m, "
                             "e_E, e_H (stage 1: 4 MoE layers, Table 10); TERM:PART selects parts (act.stage:mla; list "
                             "them with `memsym terms --parts`)")
        if only_formula:
            hints.append(f"the formula has {', '.join(only_formula)}, which the term (after the assumptions) does "
                         f"not contain")

    value_at_paper = bytes_at_paper = None
    try:
        paper, paper_desc = paper_substitution(model)
    except ConfigError as exc:
        paper, paper_desc = None, f"unavailable: {exc}"
    if paper is not None:
        at = paper_defaults()
        at.update(paper)
        at.update(assumptions)
        val = _apply(sp.sympify(difference), {**at}) if not equal else sp.Integer(0)
        val = sp.nsimplify(val) if not val.is_Rational else val
        if val.is_Rational:
            value_at_paper = Fraction(int(val.p), int(val.q))
            bytes_at_paper = value_at_paper * (1 if term.unit == "bytes" else int(paper[nt.B_w]))

    display = None
    try:
        if len(parts) == len(term.parts):
            display = term.display(subs)
        elif len(parts) == 1:
            display = parts[0].display(subs)
    except Exception:  # display is a courtesy; the verdict never depends on it
        display = None

    return VerifyResult(
        formula_text=formula, against=label, term_meaning=term.meaning,
        provenance=term.provenance, unit=term.unit, formula=parsed.expr, term_side=lhs, formula_side=rhs,
        equal=equal, difference=difference, monomials=monomials, assumptions=assumptions, defaults=defaults,
        value_at_paper=value_at_paper, bytes_at_paper=bytes_at_paper, paper_config=paper_desc,
        explanation=explanation, hints=hints, warnings=list(parsed.warnings), display=display)


def _order(name: str) -> tuple:
    return (nt.PAPER_FACTOR_ORDER.index(name) if name in nt.PAPER_FACTOR_ORDER else 99, name)


def _mono_rank(m) -> tuple:
    names = sorted((x.name for x in m.free_symbols), key=_order)
    return tuple(_order(n) for n in names)


def _sum_denominators(expr) -> set:
    return {a.base for a in sp.preorder_traversal(expr) if a.is_Pow and a.exp.is_negative and a.base.is_Add}


def _ratio(d1: Mapping, d2: Mapping):
    """r if the polynomial with coefficients d1 is r times the one with d2, else None."""
    if not d1 or set(d1) != set(d2):
        return None
    ratio = None
    for m, c in d1.items():
        r = sp.Rational(c) / sp.Rational(d2[m])
        if ratio is None:
            ratio = r
        elif r != ratio:
            return None
    return ratio


def _explain(diff: Mapping, leaf_dicts) -> List[str]:
    """Name the term's tensors (display rows, parts) the difference is an integer multiple of."""
    groups: Dict[str, Tuple[List[str], List[str], Dict]] = {}   # display rows (q + k)
    tops: Dict[str, Tuple[List[str], List[str], Dict]] = {}     # parts of a combined term (moe)
    singles = []

    def add(table, name, key, label, d):
        keys, labels, total = table.get(name, ([], [], {}))
        total = dict(total)
        for m, c in d.items():
            total[m] = total.get(m, 0) + c
        table[name] = (keys + [key], labels + [label], {m: c for m, c in total.items() if c != 0})

    for key, label, row, d in leaf_dicts:
        d = {m: c for m, c in d.items() if c != 0}
        if not d:
            continue
        singles.append(([key], [label], d))
        if row:
            add(groups, row, key, label, d)
        if "." in key:
            add(tops, key.split(".")[0], key, label, d)
    tops = {name: ([name], [f"all of {name}"], g[2]) for name, g in tops.items() if len(g[0]) > 1}
    candidates = list(tops.values()) + [g for g in groups.values() if len(g[0]) > 1] + singles
    out, covered = [], set()
    for keys, labels, d in candidates:
        if covered & set(keys) or any(k.split(".")[0] in covered for k in keys):
            continue
        ratio = _ratio(diff, d)
        if ratio is not None and ratio.q == 1:  # a tensor missing, or counted n times
            covered |= set(keys)
            out.append(f"term - formula = {ratio} x ({' + '.join(keys)}) of the term: {'; '.join(labels)}")
            if len(out) >= 3:
                break
    return out
