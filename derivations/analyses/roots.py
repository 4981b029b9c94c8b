"""The integer answer of fit without sympy: the largest b or s with ``(1 + f_frag)(S + A(x)) + M_buf <= M_HBM``.

S does not depend on x and A is a polynomial of degree 1 in b and at most 2 in s: the assembled device's exact
components at four values of x give S and A's coefficients (the fourth checks the degree), and the largest real
root is floored exactly (``math.isqrt``).  Any other shape is handed to ``solve_budget`` (sympy).
"""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from math import floor, isqrt
from typing import Callable, Dict, Optional, Sequence, Tuple

from derivations.assembly import device


def coefficients(model, layout, training, index: int, field: str, step: int) -> Optional[Tuple[Fraction, Dict]]:
    """(S, {power: coefficient of x^power in A}) at device ``index``, exactly, from the components at
    x = step, 2 step, 3 step, 4 step; None when they are not S + a polynomial of degree <= 2 in x."""
    xs = [step * k for k in (1, 2, 3, 4)]
    states, acts = [], []
    for x in xs:
        c = device.components(model, layout, replace(training, **{field: x}), index)
        states.append(Fraction(c["weights"] + c["gradients"] + c["optimizer"]))
        acts.append(Fraction(c["activations"] + c["step"]))  # at the step's peak
    if len(set(states)) != 1:
        return None
    # Newton's divided differences: A(x) = y0 + d1 (x - x0) + d2 (x - x0)(x - x1) + d3 (...)
    d1 = [(acts[i + 1] - acts[i]) / (xs[i + 1] - xs[i]) for i in range(3)]
    d2 = [(d1[i + 1] - d1[i]) / (xs[i + 2] - xs[i]) for i in range(2)]
    d3 = (d2[1] - d2[0]) / (xs[3] - xs[0])
    if d3 != 0:
        return None
    x0, x1 = xs[0], xs[1]
    a2 = d2[0]
    a1 = d1[0] - d2[0] * (x0 + x1)
    a0 = acts[0] - d1[0] * x0 + d2[0] * x0 * x1
    return states[0], {k: a for k, a in ((2, a2), (1, a1), (0, a0)) if a != 0}


def integer(S: Fraction, A: Dict[int, Fraction], f: Fraction, buf, hbm: int, step: int) -> Optional[int]:
    """The largest multiple of ``step`` not above the largest real root of (1 + f)(S + A(x)) + buf = hbm
    (0 when the root is not positive or there is none); None when A is not of degree 1 or 2 with a
    positive leading coefficient (``solve_budget`` then decides)."""
    deg = max(A, default=0)
    if deg not in (1, 2) or A[deg] <= 0:
        return None
    rest = S + A.get(0, 0) - (Fraction(hbm) - Fraction(buf)) / (1 + Fraction(f))  # A(x) + S - budget = 0
    a1 = A.get(1, Fraction(0))
    if deg == 1:
        root = -rest / a1
        fl = floor(root) if root > 0 else 0
    else:
        a2 = A[2]
        disc = a1 * a1 - 4 * a2 * rest
        if disc < 0:
            return 0  # no real root: the model states alone exceed the budget
        fl = _floor_root(a1, a2, disc)
        fl = fl if fl is not None else 0
    return max(0, fl - fl % step)


def _floor_root(a1: Fraction, a2: Fraction, disc: Fraction) -> Optional[int]:
    """floor((-a1 + sqrt(disc)) / (2 a2)) when that root is positive, else None (a2 > 0, disc >= 0)."""
    n, d = disc.numerator, disc.denominator
    lo = Fraction(isqrt(n * d), d)  # sqrt(disc) in [lo, lo + 1/d]
    guess = floor((-a1 + lo) / (2 * a2))

    def above(k: int) -> bool:  # root >= k  <=>  sqrt(disc) >= 2 a2 k + a1
        rhs = 2 * a2 * k + a1
        return rhs <= 0 or disc >= rhs * rhs
    while not above(guess):
        guess -= 1
    while above(guess + 1):
        guess += 1
    root_positive = a1 < 0 or disc > a1 * a1  # -a1 + sqrt(disc) > 0
    return guess if root_positive else None


def largest(model, layout, training, stages: Sequence, hbm: int, over: Dict, field: str, step: int,
            fallback: Callable) -> int:
    """The least over ``stages`` of each stage's largest fitting x; a stage of another shape is solved by
    ``fallback(model, layout, training, stage, field, over, hbm, step)`` (sympy)."""
    f, buf = over["f_frag"], over["M_buf"]
    out = None
    for st in stages:
        got = coefficients(model, layout, training, st.index, field, step)
        value = integer(got[0], got[1], f, buf, hbm, step) if got is not None else None
        if value is not None and not checked(model, layout, training, st.index, field, step, f, buf, hbm, value):
            value = monotone(model, layout, training, st.index, field, step, f, buf, hbm)
        if value is None:
            value = fallback(model, layout, training, st, field, over, hbm, step).integer
        out = value if out is None else min(out, value)
    return out


def _fits(model, layout, training, index, field, x, f, buf, hbm) -> bool:
    c = device.components(model, layout, replace(training, **{field: x}), index)
    return (1 + Fraction(f)) * c["step_total"] + Fraction(buf) <= hbm


def checked(model, layout, training, index, field, step, f, buf, hbm, value) -> bool:
    """Whether ``value`` fits and ``value + step`` does not, exactly (the step's peak, the largest of its
    moments, is a polynomial only piecewise)."""
    return ((value == 0 or _fits(model, layout, training, index, field, value, f, buf, hbm))
            and not _fits(model, layout, training, index, field, value + step, f, buf, hbm))


def monotone(model, layout, training, index, field, step, f, buf, hbm, limit: int = 1 << 40) -> int:
    """The largest multiple of ``step`` that fits, by doubling and bisection (the peak grows with b and s)."""
    fits = lambda k: _fits(model, layout, training, index, field, k * step, f, buf, hbm)  # noqa: E731
    if not fits(1):
        return 0
    lo = 1
    while fits(2 * lo):
        lo *= 2
        if lo * step > limit:
            return lo * step
    hi = 2 * lo  # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo * step
