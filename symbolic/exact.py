"""Exact numbers (ints, Fractions or sympy Rationals) as the JSON values and thousands-separated and GiB texts
every command prints, without sympy."""
from __future__ import annotations

from fractions import Fraction
from typing import Optional

from .units import GiB


def _fraction(x) -> Fraction:
    if hasattr(x, "p") and hasattr(x, "q") and not isinstance(x, (int, Fraction)):  # a sympy Rational
        return Fraction(int(x.p), int(x.q))
    return Fraction(x)


def as_exact(x):
    """A JSON value for an exact rational: an int when integral, else the text ``"p/q"`` (None stays None)."""
    if x is None:
        return None
    x = _fraction(x)
    return int(x) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def exact_text(x) -> str:
    """An exact rational as text: ``"123"`` or ``"p/q"``."""
    return str(as_exact(x))


def as_number(x):
    """A JSON number for an exact value: an int when integral, else the nearest float (the exact ``"p/q"`` text
    beyond a float's range)."""
    x = _fraction(x)
    if x.denominator == 1:
        return int(x)
    try:
        return float(x)
    except OverflowError:
        return as_exact(x)


def fixed(x, decimals: int) -> str:
    """``x`` to ``decimals`` places with thousands separators: float formatting within 2^53, exact (half to even)
    beyond."""
    x = _fraction(x)
    if abs(x) < 2 ** 53:
        return f"{float(x):,.{decimals}f}"
    q = round(x * 10 ** decimals)
    whole, frac = divmod(abs(q), 10 ** decimals)
    return ("-" if x < 0 else "") + f"{whole:,}" + (f".{frac:0{decimals}d}" if decimals else "")


def fmt_int(x) -> str:
    """Exact number with thousands separators (a non-integral rational to 3 decimals)."""
    x = _fraction(x)
    if x.denominator == 1:
        return f"{x.numerator:,}"
    return fixed(x, 3)


def count(n, one: str, many: Optional[str] = None) -> str:
    """``n`` with thousands separators and the noun in the number it takes: '1 file', '2 files'."""
    return f"{fmt_int(n)} {one if n == 1 else (many or one + 's')}"


def fmt_gib(nbytes, decimals: int = 2) -> str:
    """Bytes as GiB (2^30), ``decimals`` places, thousands separators."""
    return fixed(_fraction(nbytes) / GiB, decimals)
