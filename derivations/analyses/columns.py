"""The columns of a search result (derivations/analyses/evaluation.py), some of them lazy."""
from __future__ import annotations

from collections.abc import MutableMapping

import numpy as np


class Columns(MutableMapping):
    """{name: array of one value per configuration}.  Without a schedule most columns repeat a layout's or a
    (ZeRO stage, policy) choice's values: ``lazy`` ({name: (full() -> array, take(idx) -> array)}) builds them
    on first access, and :meth:`take` reads some rows (what ranking and formatting need) without building them."""

    def __init__(self, arrays=(), lazy=(), order=None):
        self._arrays, self._lazy = dict(arrays), dict(lazy)
        self._order = list(order) if order is not None else \
            list(self._arrays) + [k for k in self._lazy if k not in self._arrays]

    def __getitem__(self, key):
        if key not in self._arrays:
            full, _ = self._lazy[key]  # KeyError for an unknown column
            self._arrays[key] = full()
        return self._arrays[key]

    def __setitem__(self, key, value):
        if key not in self._arrays and key not in self._lazy:
            self._order.append(key)
        self._arrays[key] = value
        self._lazy.pop(key, None)

    def set_lazy(self, key, full, take):
        """Make ``key`` a lazy column (``full() -> array``, ``take(idx) -> array``), last unless already a column."""
        if key not in self._arrays and key not in self._lazy:
            self._order.append(key)
        self._arrays.pop(key, None)
        self._lazy[key] = (full, take)

    def __delitem__(self, key):
        if key not in self._arrays and key not in self._lazy:
            raise KeyError(key)
        self._arrays.pop(key, None)
        self._lazy.pop(key, None)
        self._order.remove(key)

    def __contains__(self, key):
        return key in self._arrays or key in self._lazy

    def __iter__(self):
        return iter(list(self._order))

    def __len__(self):
        return len(self._order)

    def take(self, key, idx):
        """``np.asarray(self[key])[idx]`` (values, dtype, shape, IndexError) without building a lazy column for
        an integer, an integer array or list, or a boolean mask (any other index: the column built)."""
        if key in self._arrays:
            return np.asarray(self._arrays[key])[idx]
        lazy = self._lazy[key][1]  # KeyError for an unknown column
        rows = _positions(idx, len(self._arrays["total"])) if "total" in self._arrays else None
        if rows is None:
            return np.asarray(self[key])[idx]
        pos, shape = rows
        out = lazy(pos)
        return out[0] if shape is None else out.reshape(shape)


_INT64 = np.iinfo(np.int64)


def _positions(idx, n: int):
    """``idx`` as numpy reads it to index ``n`` values: (non-negative int64 positions, the result's shape or None
    for a scalar); numpy's IndexError out of range; None for an index of any other kind."""
    if isinstance(idx, (bool, np.bool_)):
        return None  # a new axis, not a row
    if isinstance(idx, (int, np.integer)):
        i = int(idx)
        if not _INT64.min <= i <= _INT64.max:
            return None
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis 0 with size {n}")
        return np.array([i + n if i < 0 else i], dtype=np.int64), None
    if not isinstance(idx, (list, np.ndarray)):
        return None
    a = np.asarray(idx)
    if a.dtype.kind == "b":
        if a.ndim != 1:
            return None
        if len(a) != n:
            raise IndexError(f"boolean index did not match indexed array along axis 0; size of axis is {n} "
                             f"but size of corresponding boolean axis is {len(a)}")
        pos = np.flatnonzero(a)
        return pos, pos.shape
    if a.dtype.kind not in "iu":
        if not (isinstance(idx, list) and a.size == 0):
            return None
        a = a.astype(np.int64)  # [] indexes no row (numpy reads an empty list as integers)
    pos = a.reshape(-1).astype(np.int64, copy=False)  # unsigned wraps as numpy's cast to intp does
    if len(pos):
        lo, hi = pos.min(), pos.max()
        if lo < -n or hi >= n:
            bad = lo if lo < -n else hi
            raise IndexError(f"index {bad} is out of bounds for axis 0 with size {n}")
        if lo < 0:
            pos = np.where(pos < 0, pos + n, pos)
    return pos, (None if a.ndim == 0 else a.shape)


def take(columns, key, idx):
    """``columns[key][idx]``; a :class:`Columns` reads the rows without building a lazy column."""
    return columns.take(key, idx) if isinstance(columns, Columns) else columns[key][idx]
