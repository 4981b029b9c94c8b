"""The compiled backend (symbolic.compiled) equals exact evaluation, caches on disk, and falls back to numpy."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from derivations import config as cfg
from derivations import notation as nt
from derivations.assembly import totals
from symbolic import compiled, numeric
from symbolic.search import factored

V3 = cfg.PRESETS["deepseek-v3"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))


def _total(zero=1):
    tr = cfg.Training(zero=zero)
    fixed = {k: v for k, v in cfg.substitution(V3, None, tr).items() if k not in (nt.b, nt.s)}
    expr = nt.expand_derived(totals.device_total(V3, tr).expr).xreplace(fixed)
    return expr, sorted(expr.free_symbols, key=lambda x: x.name)


def _rows(n, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        tp, ep, etp = (int(rng.choice(v)) for v in ([1, 2, 4, 8], [1, 2, 4, 8, 16, 32, 64, 256], [1, 2, 4]))
        cp = int(rng.choice([1, 2, 4]))
        dp = ep * etp * int(rng.integers(1, 9))
        pp = int(rng.integers(1, 62))
        lay = cfg.Layout(dp=dp, tp=tp, pp=pp, ep=ep, etp=etp, cp=cp)
        tr = cfg.Training(zero=1, mbs=int(rng.integers(1, 9)), seq=int(rng.choice([1024, 4096, 16384, 131072])))
        cfg.validate_layout(V3, lay, tr.seq)
        st = cfg.stage(V3, lay, int(rng.integers(0, pp)))
        out.append(cfg.substitution(V3, lay, tr, st))
    return out


@pytest.mark.parametrize("form", ["factored", "plain"])
def test_compiled_equals_exact_below_2_53(form):
    expr, args = _total()
    e = factored(expr) if form == "factored" else expr
    fn = compiled.compile(e, args)
    rows = _rows(300)
    cols = [np.array([float(r[a]) for r in rows]) for a in args]
    got = fn(*cols)
    assert got.shape == (300,)
    checked = 0
    for i, r in enumerate(rows):
        ex = numeric.exact(expr, {a: r[a] for a in args})
        if ex.denominator == 1 and ex < 2 ** 53:
            assert round(float(got[i])) == ex
            checked += 1
        else:
            assert abs(float(got[i]) - float(ex)) <= 1e-12 * float(ex)
    assert checked > 200


def test_tuple_and_broadcasting_like_numpy():
    expr, args = _total()
    fn = compiled.compile((expr, 2 * expr), args)
    base = cfg.substitution(V3, cfg.Layout(), cfg.Training(zero=1), cfg.stage(V3, cfg.Layout(), 1))
    vals = [np.array([1.0, 2.0, 4.0])[:, None] if a == nt.b else float(base[a]) for a in args]
    one, two = fn(*vals)
    assert one.shape == (3, 1)
    ex = [numeric.exact(expr, {**{a: base[a] for a in args}, nt.b: b}) for b in (1, 2, 4)]
    assert [round(x) for x in one[:, 0]] == ex
    assert np.array_equal(two, 2 * one)


def test_missing_argument_is_refused():
    expr, args = _total()
    with pytest.raises(ValueError, match="not in args"):
        compiled.compile(expr, args[1:])


_KERNEL = ("import numpy as np, sys\n"
           "sys.path.insert(0, 'tests')\n"
           "from test_compiled import _total\n"
           "from symbolic import compiled\n"
           "expr, args = _total(zero=2)\n"
           "print(compiled.compile(expr, args)(*[np.ones(4) for _ in args]).tolist())\n")


def _kernel_run(env):
    out = subprocess.run([sys.executable, "-c", _KERNEL], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.skipif(not compiled.available(), reason="numba (the fast extra) not installed")
def test_kernel_folder_is_used_only_as_its_authenticated_manifest_says(tmp_path):
    """The kernel's module and numba's cache files (its index is a pickle) are loaded from the cache
    only when they match the manifest signed after the compile; an edited module or a planted index
    runs nothing and the kernel is compiled again (each run a new process, as a user's would be)."""
    env = {**os.environ, "MEMSYM_CACHE_DIR": str(tmp_path / "cache")}
    first = _kernel_run(env)
    kernels = tmp_path / "cache" / "kernels"
    (folder,) = [p for p in kernels.iterdir() if p.is_dir()]
    manifest = kernels / f"{folder.name}.entry"
    assert manifest.exists() and (folder / "k.py").read_text().startswith("import numba")
    index = list(folder.rglob("*.nbi"))
    assert index, "numba's cache=True wrote no index"
    assert _kernel_run(env) == first  # a warm load
    marker = tmp_path / "ran"
    payload = f"open({str(marker)!r}, 'w').write('x')\n"

    class Planted:
        def __reduce__(self):
            return (exec, (payload,))
    with open(folder / "k.py", "a") as f:
        f.write(payload)
    assert _kernel_run(env) == first and not marker.exists()
    assert payload not in (folder / "k.py").read_text()  # rebuilt
    for p in folder.rglob("*.nbi"):
        p.write_bytes(pickle.dumps(Planted()))
    assert _kernel_run(env) == first and not marker.exists()
    manifest.write_bytes(manifest.read_bytes()[:-3] + b"xx}")  # the manifest itself edited
    for p in folder.rglob("*.nbi"):
        p.write_bytes(pickle.dumps(Planted()))
    assert _kernel_run(env) == first and not marker.exists()


def test_numpy_fallback_without_numba(tmp_path):
    """With numba hidden, compile returns the lambdified numpy path and the same numbers."""
    code = (
        "import sys; sys.modules['numba'] = None\n"
        "import importlib.util as u; real = u.find_spec\n"
        "u.find_spec = lambda n, *a: None if n == 'numba' else real(n, *a)\n"
        "import numpy as np\n"
        "from symbolic import compiled\n"
        "import sympy as sp\n"
        "assert compiled.backend() == 'numpy'\n"
        "x, y = sp.symbols('x y', positive=True)\n"
        "f = compiled.compile(3 * y / x + 1, [x, y])\n"
        "print(f(np.array([1.0, 2.0]), np.array([4.0, 4.0])).tolist())\n")
    env = {**os.environ, "MEMSYM_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[13.0, 7.0]"


_DUMP = ("import sympy as sp\n"
         "from derivations import build, config as cfg\n"
         "t = build(cfg.PRESETS['deepseek-v3'])\n"
         "for tid in sorted(t):\n"
         "    print(tid, sp.srepr(t[tid].expr))\n"
         "from memsym.cli import main\n"
         "main(['estimate', '--json', '--zero', '2', '--recompute', 'full'])\n")


def _dump(env):
    out = subprocess.run([sys.executable, "-c", _DUMP], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_terms_cache_never_changes_a_number_and_survives_corruption(tmp_path):
    env = {**os.environ, "MEMSYM_CACHE_DIR": str(tmp_path)}
    fresh = _dump({**env, "MEMSYM_CACHE": "0"})
    cold = _dump(env)
    files = list((tmp_path / "terms").glob("*.entry"))
    assert len(files) == 1
    warm = _dump(env)
    assert fresh == cold == warm and "act.stage" in fresh
    files[0].write_bytes(b"not a pickle")
    assert _dump(env) == fresh
    assert files[0].read_bytes() != b"not a pickle"  # rebuilt
    data = files[0].read_bytes()
    files[0].write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # one bit of the pickle: the MAC fails
    assert _dump(env) == fresh and files[0].read_bytes() == data
