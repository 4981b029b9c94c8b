"""Exact numbers as JSON and text, without sympy (integers and ``fractions.Fraction``).

:func:`as_number` is what every ``--json`` prints for a byte count (an int when integral, else the
nearest float); :func:`as_exact` keeps a rational exact (``"p/q"``).  A sympy number is accepted
(duck-typed through its ``p`` and ``q``), so :mod:`symbolic.numeric` re-exports these."""
from __future__ import annotations

from fractions import Fraction


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
    """A JSON number for an exact value: an int when integral, else the nearest float."""
    x = _fraction(x)
    return int(x) if x.denominator == 1 else float(x)
