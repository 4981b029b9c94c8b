"""Tokens -> sympy expression by recursive descent (no ``parse_expr``, no eval), bounded before any algebra.

Implicit multiplication binds like ``*``, left to right (``a/2b`` is (a/2)*b, with a warning); ``^`` binds tighter
than a unary minus, right-associative, integer exponents.  Beyond the limits below a formula is refused
(constraint ``formula-limit``).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import List, Optional, Tuple

import sympy as sp

from ..notation import SYMBOLS
from ..render import paper_order
from .lexer import OPEN, FormulaError, Token, normalise, snippet, strip_label, tokenize

MAX_LENGTH = 2000      # characters of one formula
MAX_DEPTH = 40         # nesting of brackets, signs and powers
MAX_EXPONENT = 8       # |n| in x^n for a symbolic base
MAX_NUMBER_BITS = 4096  # size of a number raised to a power
MAX_MONOMIALS = 1000   # upper bound of the expanded size of a formula
MAX_SUM_DENOMINATORS = 4  # distinct sums in denominators, 1/(b + s) (bring to a common denominator)


def bound(size: int) -> int:
    """``size`` (an upper bound of monomials) if within :data:`MAX_MONOMIALS`, else refused."""
    if size > MAX_MONOMIALS:
        raise FormulaError(f"formula too large: expanding it could give more than {MAX_MONOMIALS} monomials",
                           "formula-limit")
    return size


class _Parser:
    """Recursive descent over the tokens to sympy objects, each node with an upper bound of its expanded size.

    expr   := term (('+'|'-') term)*
    term   := factor (('*'|'/') factor | power)*        (juxtaposition = implicit '*')
    factor := ('+'|'-') factor | power
    power  := atom ('^' factor)?
    atom   := NUM | SYM | '(' expr ')' | '[' expr ']' | '{' expr '}' | FRAC group group
    """

    def __init__(self, toks: List[Token], text: str):
        self.toks = toks + [Token("END", None, len(text))]
        self.text = text
        self.i = 0
        self.depth = 0
        self.size = 0
        self.warnings: List[str] = []

    def peek(self) -> Token:
        return self.toks[self.i]

    def take(self) -> Token:
        t = self.toks[self.i]
        self.i += 1
        return t

    def fail(self, msg: str, tok: Optional[Token] = None):
        tok = tok or self.peek()
        raise FormulaError(f"{msg} (near {snippet(self.text, tok.pos)!r})")

    @contextmanager
    def nested(self):
        """One level deeper (a bracket, a sign or a power), refused past :data:`MAX_DEPTH`."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FormulaError(f"formula nested too deeply (more than {MAX_DEPTH} levels of brackets, signs or "
                               f"powers)", "formula-limit")
        yield
        self.depth -= 1

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
            size = bound(size + rsize)
        return node, size

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
                else:
                    node = node * rhs
                last_div = t.value == "/"
            elif t.kind in ("NUM", "SYM", "LP", "FRAC"):
                rhs, rsize = self.power()
                if last_div:
                    self.warnings.append(
                        f"read {snippet(self.text, t.pos).strip()!r} with implicit multiplication after '/' as "
                        f"(a/b)*c, left to right; write a/(b c) if you mean the product in the denominator")
                    last_div = False
                node = node * rhs
            else:
                return node, size
            size = bound(size * rsize)

    def factor(self):
        t = self.peek()
        if t.kind == "OP" and t.value in "+-":
            self.take()
            with self.nested():
                node, size = self.factor()
            return (-node if t.value == "-" else node), size
        return self.power()

    def power(self):
        base, size = self.atom()
        t = self.peek()
        if not (t.kind == "OP" and t.value == "^"):
            return base, size
        self.take()
        with self.nested():
            exp, _ = self.factor()
        if not exp.is_Integer:
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
        return base ** e, bound(size ** max(abs(e), 1))

    def group(self, what: str):
        t = self.peek()
        if t.kind in ("LP", "NUM", "SYM"):
            return self.atom()
        self.fail(f"expected the {what} of \\frac in braces, got {t.show()}", t)

    def atom(self):
        t = self.take()
        if t.kind == "NUM":
            return (sp.Integer(t.value) if "." not in t.value else sp.Rational(t.value)), 1
        if t.kind == "SYM":
            return SYMBOLS[t.value], 1
        if t.kind == "LP":
            with self.nested():
                node, size = self.expr()
            close = self.take()
            if close.kind != "RP" or close.value != OPEN[t.value]:
                self.fail(f"expected {OPEN[t.value]!r} to close {t.value!r}, got {close.show()}", close)
            return node, size
        if t.kind == "FRAC":
            with self.nested():
                num, nsize = self.group("numerator")
                den, dsize = self.group("denominator")
            if den == 0:
                self.fail("division by zero", t)
            return num / den, bound(nsize * dsize)
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


def sum_denominators(expr) -> set:
    """The sums that appear in a denominator of ``expr`` (``b + s`` in ``1/(b + s)``)."""
    return {a.base for a in sp.preorder_traversal(expr) if a.is_Pow and a.exp.is_negative and a.base.is_Add}


def parse_formula(text: str, max_length: int = MAX_LENGTH, symbols_help: str = "") -> Parsed:
    """Read a formula (plain text or LaTeX) into a sympy expression without evaluating it."""
    if not isinstance(text, str):
        raise FormulaError(f"a formula must be text, got {type(text).__name__}")
    if len(text) > max_length:
        raise FormulaError(f"formula too long ({len(text)} characters, at most {max_length})", "formula-limit")
    body = normalise(strip_label(text))
    toks = tokenize(body, symbols_help)
    p = _Parser(toks, body)
    expr = p.parse()
    sums = sum_denominators(expr)
    if len(sums) > MAX_SUM_DENOMINATORS:
        raise FormulaError(f"formula too large: {len(sums)} different sums in denominators (at most "
                           f"{MAX_SUM_DENOMINATORS}); bring them to a common denominator", "formula-limit")
    size = p.size
    for base in sums:  # a common denominator multiplies every numerator by the other sums
        size = bound(size * len(base.args))
    mentioned = frozenset(t.value for t in toks if t.kind == "SYM")
    return Parsed(text, sp.sympify(expr), mentioned, tuple(dict.fromkeys(p.warnings)))


def parse(text: str, symbols_help: str = "") -> sp.Expr:
    """The sympy expression of a formula (see :func:`parse_formula`)."""
    return parse_formula(text, symbols_help=symbols_help).expr


def plain(expr) -> str:
    """An expression in typed notation (re-readable by :func:`parse`), in the registry's factor order."""
    return sp.sstr(paper_order(expr), order="none")
