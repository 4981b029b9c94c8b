"""A compiled evaluation backend for sweeps: numba loops generated from the same sympy expressions.

:func:`compile` turns an expression (or a tuple of them) and an argument order into a function
of float64 columns, like :func:`symbolic.numeric.compile`, but as one fused loop: sympy's
common-subexpression elimination (``sympy.cse``) and a scalar Python printer write the body,
numba compiles it (``njit``, no fastmath: IEEE operations in the printed order).  The
generated source is a file in the cache (:mod:`symbolic.cache`, ``kernels/<digest>/k.py``, the
digest of the expression's ``srepr``, the argument order and :data:`symbolic.cache.CODE_VERSION`);
numba's own cache (``cache=True``) keeps the machine code beside it, so the compile (about a
second) is paid once per expression, not once per process.  The folder is used only when every
file in it matches an authenticated manifest (:func:`_load`).

Without numba (``pip install memsym[fast]``) the same call returns the lambdified numpy
function evaluated in cache-sized blocks (:func:`symbolic.search.evaluate`): same interface,
the fallback.  Integers below 2^53 come out exact after rounding, as on the numpy path (the
tests check both against :func:`symbolic.numeric.exact`).
"""
from __future__ import annotations

import importlib.util
import sys
from typing import Callable, Dict, Optional, Sequence, Tuple

from . import cache
import hashlib
import os
import stat
import json
import shutil
import tempfile

_LOADED: Dict[Tuple, Callable] = {}


def available() -> bool:
    """True when numba can be imported (the ``fast`` extra)."""
    return importlib.util.find_spec("numba") is not None


def backend() -> str:
    return "numba" if available() else "numpy"


def _printer():
    # lazy: sympy (only this path needs it)
    from sympy.printing.pycode import PythonCodePrinter
    from sympy.printing.precedence import precedence

    class _Scalar(PythonCodePrinter):
        """Scalar float code: x**-1 as 1.0/x, small integer powers as products, rationals as floats."""

        def _print_Pow(self, expr, rational=False):
            base, ex = expr.base, expr.exp
            if ex.is_Integer and 1 <= abs(int(ex)) <= 4:
                b = self.parenthesize(base, precedence(expr), strict=True)
                prod = "*".join([b] * abs(int(ex)))
                return prod if ex > 0 else f"1.0/({prod})"
            return super()._print_Pow(expr, rational=rational)

        def _print_Rational(self, expr):
            return repr(float(expr.p) / float(expr.q)) if expr.q != 1 else f"{int(expr.p)}.0"

        def _print_Integer(self, expr):
            return f"{int(expr)}.0"

    return _Scalar({"fully_qualified_modules": False})


def source(exprs: Sequence, args: Sequence) -> str:
    """The Python source of the numba kernel ``kernel(out_0, ..., out_k, a_0, ..., a_n)``."""
    # lazy: sympy (only this path needs it)
    import sympy as sp
    names = [sp.Symbol(f"a{i}") for i in range(len(args))]
    ren = dict(zip(args, names))
    exprs = [sp.sympify(e).xreplace(ren) for e in exprs]
    reps, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("t"), order="none")
    # one division per row: the symbols under a negative power (the parallel degrees) get their
    # reciprocals from 1/(their product) and prefix/suffix products (a division costs ~10 products)
    inv = sorted({b for e in [e for _, e in reps] + list(reduced) for b, x in
                  (f.as_base_exp() for f in sp.preorder_traversal(e) if isinstance(f, sp.Pow))
                  if x.is_Integer and x < 0 and b in names}, key=lambda b: int(b.name[1:]))
    pre = []
    if len(inv) > 1:
        recip = {b: sp.Symbol(f"r{b.name[1:]}") for b in inv}
        k = len(inv)
        pre.append(("q0", inv[0]))
        for i in range(1, k - 1):
            pre.append((f"q{i}", sp.Symbol(f"q{i - 1}") * inv[i]))
        pre.append(("u", sp.Pow(sp.Symbol(f"q{k - 2}") * inv[k - 1], -1, evaluate=False)))
        # r_{k-1} = u q_{k-2}; walking down: r_i = u * q_{i-1} * (x_{i+1} ... x_{k-1})
        pre.append((recip[inv[k - 1]].name, sp.Symbol("u") * sp.Symbol(f"q{k - 2}")))
        pre.append(("w", sp.Symbol("u") * inv[k - 1]))
        for i in range(k - 2, 0, -1):
            pre.append((recip[inv[i]].name, sp.Symbol("w") * sp.Symbol(f"q{i - 1}")))
            pre.append(("w", sp.Symbol("w") * inv[i]))
        pre.append((recip[inv[0]].name, sp.Symbol("w")))
        sub = {sp.Pow(b, -1): recip[b] for b in inv}
        sub.update({sp.Pow(b, -j): recip[b] ** j for b in inv for j in range(2, 5)})
        reps = [(t, e.xreplace(sub)) for t, e in reps]
        reduced = [e.xreplace(sub) for e in reduced]
    p = _printer()
    outs = [f"out{j}" for j in range(len(reduced))]
    lines = ["import numba", "", "", "@numba.njit(cache=True, fastmath=False, error_model='numpy', boundscheck=False, nogil=True)",
             f"def kernel({', '.join(outs + [str(n) for n in names])}):",
             f"    for i in range({outs[0]}.shape[0]):"]
    lines += [f"        x{i} = a{i}[i]" for i in range(len(names))]
    bare = {n: sp.Symbol(f"x{i}") for i, n in enumerate(names)}
    for t, e in pre:
        lines.append(f"        {t} = {p.doprint(sp.sympify(e).xreplace(bare))}")
    for t, e in reps:
        lines.append(f"        {t} = {p.doprint(e.xreplace(bare))}")
    for o, e in zip(outs, reduced):
        lines.append(f"        {o}[i] = {p.doprint(e.xreplace(bare))}")
    return "\n".join(lines) + "\n"


def _files(folder: str) -> Optional[Dict[str, str]]:
    """{relative path: sha256} of every file under ``folder``; None when it holds anything but
    regular files and folders (a link, a FIFO) or cannot be read."""
    out = {}
    for d, dirs, names in os.walk(folder):
        for name in dirs + names:
            st = os.lstat(os.path.join(d, name))
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)) or st.st_uid != os.geteuid():
                return None
        for name in names:
            with open(os.path.join(d, name), "rb") as f:
                out[os.path.relpath(os.path.join(d, name), folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _load(src: str, digest: str, n_out: int, n_in: int, use_cache: bool = True):
    """The kernel of ``src``: its module and numba's machine code (``cache=True``: numba's index and
    data files beside it) in the cache folder ``kernels/<digest>/``, used only when every file there
    matches the authenticated manifest written after the last compile (:func:`symbolic.cache.load`):
    numba unpickles its index, so a file nobody authenticated is never left for it to read.
    Otherwise the folder is emptied, the kernel compiled (on empty columns) and the manifest signed,
    all under a lock (``kernels/.lock``: concurrent first runs do not pull a folder from under each
    other) and umask 077 (numba's files private too).  Without a usable cache, a private temporary
    folder removed at exit (compiled every process)."""
    # lazy: numpy (only this path needs it)
    import atexit
    import fcntl

    import numpy as np
    kernels = cache.private_dir("kernels") if use_cache else None
    if kernels is None:
        folder = tempfile.mkdtemp(prefix="memsym-kernel-")
        atexit.register(shutil.rmtree, folder, True)
        with open(os.path.join(folder, "k.py"), "w") as f:
            f.write(src)
        return _import(folder, digest)
    folder = os.path.join(kernels, digest)
    lock = os.open(os.path.join(kernels, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    old_umask = os.umask(0o077)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = cache.load("kernels", digest)
        try:
            listed = json.loads(data) if data is not None else None
        except ValueError:
            listed = None
        if (isinstance(listed, dict) and os.path.isdir(folder) and not os.path.islink(folder)
                and listed == _files(folder) and listed.get("k.py") == _sha(src)):
            return _import(folder, digest)
        shutil.rmtree(folder, ignore_errors=True)
        if os.path.lexists(folder):  # not a folder we can empty (a file, a link): use none
            raise OSError(f"{folder} is not a kernel folder")
        os.mkdir(folder, 0o700)
        fd = os.open(os.path.join(folder, "k.py"), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(src)
        kernel = _import(folder, digest)
        kernel(*[np.empty(0) for _ in range(n_out + n_in)])  # compile now: numba writes its cache files
        files = _files(folder)
        if files is not None:
            cache.store("kernels", digest, json.dumps(files, sort_keys=True).encode())
        return kernel
    finally:
        os.umask(old_umask)
        os.close(lock)


def _import(folder: str, digest: str):
    name = f"memsym_kernel_{digest}"
    spec = importlib.util.spec_from_file_location(name, os.path.join(folder, "k.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod.kernel


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def compile(obj, args: Sequence) -> Callable:
    """A function of ``args`` (float64 columns of one length, or scalars) computing ``obj`` (an
    expression or a tuple of them, as for :func:`symbolic.numeric.compile`), compiled once and
    cached in the process and on disk.  Returns an array, or a tuple of arrays for a tuple."""
    # lazy: sympy, numpy (only this path needs it)
    import sympy as sp

    from .notation import SYMBOLS, expand_derived
    syms = tuple(SYMBOLS[a] if isinstance(a, str) else a for a in args)
    expr = expand_derived(getattr(obj, "expr", obj))
    many = isinstance(expr, (sp.Tuple, tuple, list))
    exprs = tuple(expr) if many else (expr,)
    key = (tuple(exprs), syms, backend())
    fn = _LOADED.get(key)
    if fn is not None:
        return fn
    missing = set().union(*[sp.sympify(e).free_symbols for e in exprs]) - set(syms)
    if missing:
        raise ValueError(f"compile: expression depends on {sorted(map(str, missing))} not in args")
    if not available():
        from .numeric import compile as numpy_compile
        from .search import evaluate
        f = numpy_compile(sp.Tuple(*exprs) if many else expr, syms)
        fn = lambda *vals: evaluate(f, vals)
    else:
        import numpy as np
        src = source(exprs, syms)
        digest = cache.key(sp.srepr(sp.Tuple(*exprs)), sp.srepr(sp.Tuple(*syms)), src, _numba_version())
        k = len(exprs)
        try:
            kernel = _load(src, digest, k, len(syms))
        except OSError:  # the cache folder could not be used: compile in a private temporary folder
            kernel = _load(src, digest, k, len(syms), use_cache=False)

        def fn(*vals):
            arrs = [np.asarray(v, dtype=np.float64) for v in vals]
            shape = np.broadcast_shapes(*[a.shape for a in arrs])
            flat = [np.ascontiguousarray(np.broadcast_to(a, shape)).reshape(-1) for a in arrs]
            outs = [np.empty(flat[0].shape[0] if flat else 1) for _ in range(k)]
            kernel(*outs, *flat)
            outs = [o.reshape(shape) for o in outs]
            return tuple(outs) if many else outs[0]
        fn.kernel = kernel
    _LOADED[key] = fn
    return fn


def _numba_version() -> str:
    # lazy: numpy, numba (optional; only this path needs it)
    import numba
    return numba.__version__
