"""The vectorised search kernel (no model): divisors of a lattice, a factored form of an expression that
evaluates with few array operations, and blocked evaluation of lambdified functions.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

#: The largest integer :func:`divisors` factors (trial division: below 2^12 steps).
DIVISORS_UP_TO = 1 << 24


def divisors(n: int, limit: int = DIVISORS_UP_TO) -> List[int]:
    """The positive divisors of ``n``, ascending; ConfigError when ``n`` is above ``limit``
    (bounded work whatever the input)."""
    if not 0 < n <= limit:
        # lazy: modules this module's importers do not need (loaded only on this path)
        from .errors import ConfigError
        raise ConfigError("limit.divisors", f"divisors of {n if n < 10 ** 24 else 'a huge number'}: "
                                            f"only integers in 1..{limit} are factored")
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def _monomials(e, recip: Dict):
    """(coefficient, {symbol or reciprocal dummy: power}) of each term of the expanded ``e``, or
    None when a term is not a product of integer powers of symbols."""
    # lazy: sympy (only this path needs it)
    import sympy as sp
    monomials = []
    for t in sp.Add.make_args(e):
        c, rest = t.as_coeff_Mul()
        powers: Dict = {}
        for f in sp.Mul.make_args(rest):
            base, ex = f.as_base_exp()
            if not (base.is_Symbol and ex.is_Integer):
                return None
            if ex < 0:
                base = recip.setdefault(base, sp.Dummy("r_" + base.name, positive=True))
            powers[base] = powers.get(base, 0) + abs(int(ex))
        monomials.append((c, powers))
    return monomials


def _share_sums(monomials, sums: Dict):
    """Monomials equal but for one variable (same coefficient) share a sum dummy:
    640 b s^2 (L_d + L_m)/(CP TP); ``sums`` maps the summed symbols to their dummy."""
    # lazy: sympy (only this path needs it)
    import sympy as sp
    while True:
        groups: Dict = {}
        for i, (c, p) in enumerate(monomials):
            for x, q in p.items():
                if q == 1:
                    rest = frozenset((k, v) for k, v in p.items() if k != x)
                    groups.setdefault((c, rest), []).append((i, x))
        best = max(groups.items(), key=lambda kv: (len(kv[1]), -min(i for i, _ in kv[1])), default=None)
        if best is None or len(best[1]) < 2:
            return monomials
        (c, rest), members = best
        names = tuple(sorted((x for _, x in members), key=lambda k: k.name))
        sym = sums.setdefault(names, sp.Dummy("sum_" + "_".join(k.name for k in names), positive=True))
        drop = {i for i, _ in members}
        rest = sorted(rest, key=lambda kv: kv[0].name)  # a frozenset's order follows string hashes: fix it
        monomials = [m for i, m in enumerate(monomials) if i not in drop] + [(c, {**dict(rest), sym: 1})]


def _nest(items, back: Dict):
    """Greedy multivariate Horner: factor out the symbol shared by the most monomials, recursively, built
    unevaluated (sympy would distribute 2 (x + y)) with the sums and reciprocals put back (``back``)."""
    # lazy: sympy (only this path needs it)
    import sympy as sp

    def product(factors):
        factors = [f for f in factors if f != 1]
        if not factors:
            return sp.Integer(1)
        return factors[0] if len(factors) == 1 else sp.Mul(*factors, evaluate=False)

    def total(terms):
        return terms[0] if len(terms) == 1 else sp.Add(*terms, evaluate=False)

    count: Dict = {}
    for _, p in items:
        for x in p:
            count[x] = count.get(x, 0) + 1
    if not count:
        return sp.Add(*[c for c, _ in items])
    x = max(count, key=lambda k: (count[k], k.name))
    if count[x] == 1:
        return total([product([c] + [back.get(k, k) if q == 1 else sp.Pow(back.get(k, k), q) for k, q in p.items()])
                      for c, p in items])
    inner, rest = [], []
    for c, p in items:
        if x in p:
            q = dict(p)
            q[x] -= 1
            if not q[x]:
                del q[x]
            inner.append((c, q))
        else:
            rest.append((c, p))
    head = product([back.get(x, x), _nest(inner, back)])
    return total([head, _nest(rest, back)]) if rest else head


def factored(expr):
    """The same rational function in a form that evaluates with few array operations: a polynomial in the
    symbols and their reciprocals, monomials differing in one variable sharing a sum (``c (L_d + L_m)``), nested
    by multivariate Horner.  A tuple element by element; anything else as is."""
    # lazy: sympy (only this path needs it)
    import sympy as sp
    if isinstance(expr, (sp.Tuple, tuple, list)):
        return sp.Tuple(*[factored(e) for e in expr])
    recip: Dict = {}
    monomials = _monomials(sp.expand(expr), recip)
    if monomials is None:
        return expr
    sums: Dict = {}
    monomials = _share_sums(monomials, sums)
    back = {r: 1 / x for x, r in recip.items()}
    back.update({d: sp.Add(*names) for names, d in sums.items()})
    return _nest(monomials, back) if monomials else sp.Integer(0)


def evaluate(fn, values: Sequence, chunk: int = 1 << 14):
    """``fn(*values)`` (element-wise numpy) in blocks of ``chunk`` rows (axis 0) whose temporaries stay in the CPU
    cache; scalars and arrays of other lengths are passed whole."""
    # lazy: numpy (only this path needs it)
    import numpy as np
    n = max((np.shape(v)[0] for v in values if np.ndim(v)), default=0)
    if n <= chunk:
        return fn(*values)
    out = None
    for i in range(0, n, chunk):
        args = [v[i:i + chunk] if np.ndim(v) and np.shape(v)[0] == n else v for v in values]
        part = fn(*args)
        many = isinstance(part, (tuple, list))
        parts = part if many else (part,)
        if out is None:
            shape = np.broadcast_shapes(*[np.shape(a) for a in args])
            out = [np.empty((n,) + shape[1:]) for _ in parts]
        for o, p in zip(out, parts):
            o[i:i + chunk] = p
    return tuple(out) if many else out[0]


