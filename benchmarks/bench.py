"""Benchmarks of memsym's evaluation paths, searches, report and cold start; one run, interleaved.

Alternatives run interleaved (so load hits them alike), reported as median and range.  (a) The per-device total
of N random valid DeepSeek-v3 configurations, ns each: the floor (numpy reading the 12 inputs, writing their sum),
the engine's numpy path (JSON key "compiled"), one call, unfactored, and tests/independent.py's hand formula, every
path asserted exact; (b) subprocesses: ``import sympy``, a new ``estimate``, ``search --gpus 8|1024|16384``, ``fit``;
(c) without --quick, ``report`` of the paper's configuration and of new ones.  Timings are printed, never asserted.

    python benchmarks/bench.py [--points N] [--repeat R] [--quick] [--json]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)                          # this checkout's symbolic/, derivations/, memsym/
sys.path.insert(0, os.path.join(ROOT, "tests"))   # the independent hand formula (tests/independent.py)

import independent  # noqa: E402
import numpy as np  # noqa: E402
from derivations import config as cfg, notation as nt  # noqa: E402
from derivations.assembly import totals  # noqa: E402
from symbolic.numeric import compile as numpy_compile, exact, factored  # noqa: E402
from symbolic.search import evaluate  # noqa: E402

OUT = sys.stdout


def say(*a):
    print(*a, file=OUT, flush=True)


def interleaved(fns, repeat, warm=True):
    """{name: [seconds per repetition]}, the functions run one after another in each repetition."""
    if warm:
        for fn in fns.values():
            fn()
    times = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return times


def stats(ts, scale=1.0):
    xs = [t * scale for t in ts]
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def run_cmd(cmd, env=None):
    def go():
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env, cwd=ROOT)
    return go


def random_configurations(model, n, seed=0):
    """n random valid configurations as int64 columns (a sample checked by validate_layout)."""
    rng = np.random.default_rng(seed)
    divs = lambda m, cap: [d for d in range(1, min(m, cap) + 1) if m % d == 0]
    tp = rng.choice(np.array([t for t in divs(model.n_h, 64) if model.h_F % t == 0]), n)
    ep = rng.choice(np.array(divs(model.N, 64)), n)
    etp = rng.choice(np.array(divs(model.h_E, 8)), n)
    cp = rng.choice(np.array([1, 2, 4, 8]), n)
    g = np.gcd(tp * cp, ep * etp)
    dp = (ep * etp // g) * rng.integers(1, 5, n)
    pp = rng.integers(1, min(model.l, 32) + 1, n)
    s = rng.choice(np.array([1024, 2048, 4096, 8192, 16384]), n)
    b = rng.integers(1, 9, n)
    idx = (rng.random(n) * pp).astype(np.int64)
    comp = np.zeros((n, 4), dtype=np.int64)
    for p in range(1, int(pp.max()) + 1):
        tab = np.array([(x.dense, x.moe, int(x.embedding), int(x.head)) for x in cfg.stages(model, cfg.Layout(pp=p))])
        m = pp == p
        comp[m] = tab[idx[m]]
    cols = {"DP": dp, "TP": tp, "SP": tp, "EP": ep, "ETP": etp, "CP": cp, "b": b, "s": s,
            "L_d": comp[:, 0], "L_m": comp[:, 1], "e_E": comp[:, 2], "e_H": comp[:, 3], "PP": pp}
    for i in range(0, n, max(1, n // 200)):
        lay = cfg.Layout(dp=int(dp[i]), tp=int(tp[i]), pp=int(pp[i]), ep=int(ep[i]), etp=int(etp[i]), cp=int(cp[i]))
        cfg.validate_layout(model, lay, int(s[i]))
    return cols


HAND_ARGS = ("DP", "TP", "SP", "EP", "ETP", "CP", "b", "s", "L_d", "L_m", "e_E", "e_H")
ZERO = 1  # the benchmarked total: ZeRO 1 (os), no recomputation, eager attention, Table 7 bytes


def touch(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11):
    """The floor: the 12 inputs read and one output written (their sum), as numpy does it."""
    return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11


def bench_eval(points, repeat):
    model = cfg.PRESETS["deepseek-v3"]
    dims = independent.MODELS["deepseek-v3"]  # tests/independent.py's hand-copied dimensions, not memsym's preset
    training = cfg.Training(zero=ZERO)
    fixed = {k: v for k, v in cfg.substitution(model, None, training).items() if k not in (nt.b, nt.s)}
    expr = nt.expand_derived(totals.device_total(model, training).expr).xreplace(fixed)
    args = sorted(expr.free_symbols, key=lambda x: x.name)
    assert sorted(a.name for a in args) == sorted(HAND_ARGS), args
    fexpr = factored(expr)
    t0 = time.perf_counter()
    fn = numpy_compile(fexpr, args)
    t_numpy_compile = time.perf_counter() - t0
    plain = numpy_compile(expr, args)
    cols = random_configurations(model, points)
    vals = [np.ascontiguousarray(cols[a.name], dtype=np.float64) for a in args]
    hand_cols = [np.ascontiguousarray(cols[k], dtype=np.float64) for k in HAND_ARGS]
    hand = functools.partial(independent.total_numpy, dims, zero=ZERO)
    fns = {"floor": lambda: evaluate(touch, vals), "numpy": lambda: evaluate(fn, vals),
           "numpy_one_call": lambda: fn(*vals), "numpy_unfactored": lambda: evaluate(plain, vals),
           "hand_numpy": lambda: evaluate(hand, hand_cols)}
    results = {k: f() for k, f in fns.items() if k != "floor"}
    # exactness: the terms (exact) equal the independent formula (exact), and every path rounds to them
    checked = 0
    for i in range(0, points, max(1, points // 200)):
        row = {k: int(cols[k][i]) for k in cols}
        ex = exact(expr, {**fixed, **{a: row[a.name] for a in args}})
        by_hand = independent.per_device(dims, zero=ZERO, **{k: row[k] for k in HAND_ARGS})["total"]
        assert ex == by_hand, f"the terms and the hand formula disagree at {row}: {ex} != {by_hand}"
        if ex.denominator == 1 and ex < 2 ** 53:
            for name, r in results.items():
                assert round(float(r[i])) == ex, (name, i, float(r[i]), ex)
            checked += 1
    times = interleaved(fns, repeat)
    return {"points": points, "exact_checked": checked, "numpy_compile_s": t_numpy_compile,
            "ns": {k: stats(v, 1e9 / points) for k, v in times.items()}}


def bench_wall(a, memsym, res):
    """Part (b): the commands' wall times, interleaved, into ``res``; returns the functions."""
    cmds = {"import sympy": [sys.executable, "-c", "import sympy"],
            "search 8": memsym + ["search", "--gpus", "8", "--hbm", "80GiB"],
            "search 1024": memsym + ["search", "--gpus", "1024", "--hbm", "80GiB"],
            "search 16384": memsym + ["search", "--gpus", "16384", "--hbm", "80GiB"],
            "fit": memsym + ["fit", "--hbm", "80GiB"]}
    n = a.repeat if not a.quick else 2
    fns = {k: run_cmd(c) for k, c in cmds.items()}
    fresh = tempfile.mkdtemp(prefix="memsym-bench-home-")
    calls = iter(range(1, 10 ** 6))
    # a command line not run before (--mbs k), a fresh HOME
    fns["estimate, new"] = lambda: run_cmd(memsym + ["estimate", "--mbs", str(next(calls))],
                                           dict(os.environ, HOME=fresh))()
    t = {k: stats(v) for k, v in interleaved(fns, n).items()}
    say(f"(b) wall time, {n} interleaved repetitions after one warm-up: median [min-max] s")
    say("    (estimate, new: a command line not run before, a fresh HOME; search's evaluators are printed: nothing is "
        "compiled or replayed)")
    for k, s in t.items():
        say(f"    {k:<14} {s['median']:6.3f} [{s['min']:.3f}-{s['max']:.3f}]")
    m = {k: s["median"] for k, s in t.items()}
    new = m["estimate, new"]  # a full estimate; search 8 is the search's own floor (its imports, almost no work)
    res.update({"cold_start_ratio": new / m["import sympy"], "search_1024_s": m["search 1024"],
                "search_16384_s": m["search 16384"], "search_8_s": m["search 8"], "search_16384_to_8":
                m["search 16384"] / m["search 8"], "search_16384_to_estimate": m["search 16384"] / new,
                "search_1024_to_estimate": m["search 1024"] / new, "fit_to_estimate": m["fit"] / new, "wall": t})
    say(f"    a new estimate / import sympy = {res['cold_start_ratio']:.2f} (goal <= 1.2); search 16384 = "
        f"{res['search_16384_s']:.2f} s (goal < 1), {res['search_16384_to_estimate']:.2f}x a new estimate "
        "(goal <= 1.5)")
    say(f"    search 1024 = {res['search_1024_to_estimate']:.2f}x a new estimate; fit = {res['fit_to_estimate']:.2f}x "
        f"(its closed forms are sympy's solve)")
    say(f"    search 16384 = {res['search_16384_to_8']:.2f}x search 8, its floor: the same imports, almost no work "
        f"(goal <= 1.5)")
    return fns


def main(argv=None) -> int:
    global OUT
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", type=int, default=10 ** 6)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="10^4 points, 3 repetitions, no report: a smoke run for CI")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON on stdout (text on stderr)")
    a = p.parse_args(argv)
    if a.quick:
        a.points, a.repeat = 10 ** 4, 3
    if a.json:
        OUT = sys.stderr
    memsym = [sys.executable, "-m", "memsym"]  # run in ROOT: this checkout's memsym
    res = {"quick": a.quick}

    r = bench_eval(a.points, a.repeat)
    ns = r["ns"]
    say(f"(a) per-device total (ZeRO 1, no recomputation), {r['points']:,} random valid configurations, "
        f"{a.repeat} interleaved repetitions; ns per configuration: median [min-max]")
    say(f"    lambdify {r['numpy_compile_s']:.2f} s")
    labels = {"floor": "floor (numpy: read 12 inputs, write 1)",
              "numpy": "numpy, factored, blocks (engine)", "numpy_one_call": "numpy, factored, one call",
              "numpy_unfactored": "numpy, unfactored terms, blocks", "hand_numpy": "hand-written numpy, blocks"}
    floor = ns["floor"]["median"]
    for k, lab in labels.items():
        s = ns[k]
        say(f"    {lab:<48} {s['median']:7.1f} [{s['min']:.1f}-{s['max']:.1f}]  {s['median'] / floor:5.2f}x floor")
    say(f"    exact: every path rounds to symbolic.numeric.exact at {r['exact_checked']} sampled configurations, "
        f"and the terms equal the independent formula exactly")
    # "compiled": the contract's key for memsym's compiled form, the numpy one
    res.update({"floor_ns": floor, "compiled_ns": ns["numpy"]["median"], "numpy_ns": ns["numpy"]["median"],
                "hand_numpy_ns": ns["hand_numpy"]["median"], "compiled_to_floor": ns["numpy"]["median"] / floor,
                "numpy_to_hand": ns["numpy"]["median"] / ns["hand_numpy"]["median"], "eval": r})
    say(f"    numpy / floor = {res['compiled_to_floor']:.2f} (goal <= 2.5); "
        f"numpy / hand numpy = {res['numpy_to_hand']:.2f}")

    fns = bench_wall(a, memsym, res)

    res["report_s"] = None
    if not a.quick:
        # nothing kept on disk (issue 42): the paper's configuration, then new ones (another --seq each)
        with tempfile.TemporaryDirectory() as tmp:
            rep = run_cmd(memsym + ["report", "--format", "tex,md,html", "--out", tmp])
            rt = stats(interleaved({"report": rep}, 3, warm=False)["report"])
        res["report_s"] = rt["median"]
        res["report"] = rt
        say(f"(c) memsym report --format tex,md,html: {rt['median']:.2f} s [{rt['min']:.2f}-{rt['max']:.2f}] "
            f"(goal <= 10 s on 2 quiet cores)")
        seqs = iter(range(4104, 10 ** 6, 8))  # s divisible by SP CP

        def report_new():
            with tempfile.TemporaryDirectory() as out:
                run_cmd(memsym + ["report", "--format", "tex,md,html", "--seq", str(next(seqs)), "--out", out])()
        rn = {k: stats(v) for k, v in interleaved({"report, new": report_new,
                                                   "estimate, new": fns["estimate, new"]}, 3).items()}
        res["report_new_s"] = rn["report, new"]["median"]
        res["report_new_to_estimate"] = rn["report, new"]["median"] / rn["estimate, new"]["median"]
        say(f"    a new configuration: {res['report_new_s']:.2f} s [{rn['report, new']['min']:.2f}-"
            f"{rn['report, new']['max']:.2f}] (goal <= 10 s), {res['report_new_to_estimate']:.2f}x a new estimate")
    if a.json:
        print(json.dumps(res, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
