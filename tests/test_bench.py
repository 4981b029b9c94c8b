"""The benchmark's evaluation part runs, is exact on every path, and keeps its JSON keys."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_eval_is_exact_and_reports_every_path():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import bench
    finally:
        sys.path.remove(os.path.join(ROOT, "benchmarks"))
    r = bench.bench_eval(2000, 1)  # asserts every path against symbolic.numeric.exact
    assert r["exact_checked"] > 100
    assert {"floor", "numpy", "numpy_one_call", "numpy_unfactored", "hand_numpy"} == set(r["ns"])
    assert all(s["median"] > 0 for s in r["ns"].values())


def test_json_keys_are_the_acceptance_contract():
    src = open(os.path.join(ROOT, "benchmarks", "bench.py")).read()
    for k in ("floor_ns", "compiled_ns", "compiled_to_floor", "numpy_ns", "search_1024_s", "search_16384_s",
              "report_s", "cold_start_ratio"):
        assert f'"{k}"' in src
