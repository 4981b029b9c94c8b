"""The vectorised search kernel (no model): divisors of a lattice and blocked evaluation of lambdified functions
(the factored form they compile: :func:`symbolic.numeric.factored`).
"""
from __future__ import annotations

from typing import List, Sequence

from .errors import ConfigError

#: The largest integer :func:`divisors` factors (trial division: below 2^12 steps).
DIVISORS_UP_TO = 1 << 24


def divisors(n: int, limit: int = DIVISORS_UP_TO) -> List[int]:
    """The positive divisors of ``n``, ascending; ConfigError when ``n`` is above ``limit``
    (bounded work whatever the input)."""
    if not 0 < n <= limit:
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
