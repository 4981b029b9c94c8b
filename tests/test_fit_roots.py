"""fit's integer answer without sympy (derivations/analyses/roots.py) against sympy's closed-form solve
(derivations/analyses/sensitivity.py ``solve_budget``, fit's full answer), and its exact floor of a root."""
import os
import subprocess
import sys
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings, strategies as st

from derivations import config as cfg
from derivations.analyses import fit, roots

V3 = cfg.PRESETS["deepseek-v3"]
GiB = 2 ** 30
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = [
    (V3, cfg.Layout(), cfg.Training(), 80 * GiB, "mbs", None),
    (V3, cfg.Layout(), cfg.Training(zero=3, recompute="full"), 80 * GiB, "mbs", None),
    (V3, cfg.Layout(), cfg.Training(zero=1), 141 * 10 ** 9, "seq", None),
    (V3, cfg.Layout(dp=16, tp=4, cp=2), cfg.Training(zero=3, recompute="selective"), 80 * GiB, "seq", None),
    (V3, cfg.Layout(), cfg.Training(zero=2, schedule="interleaved", vpp=2, microbatches=32), 80 * GiB, "seq", None),
    (V3, cfg.Layout(), cfg.Training(zero=3, recompute="full", schedule="1f1b"), 80 * GiB, "mbs", 15360),
    (cfg.PRESETS["deepseek-v2-lite"], cfg.Layout(dp=2, tp=1, pp=1, ep=2, etp=1), cfg.Training(), 24 * GiB, "seq",
     None),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}-{c[4]}-{c[2].zero}-{c[2].recompute}")
def test_integer_answer_equals_the_closed_form_solve(case):
    model, layout, training, hbm, solve, gb = case
    for end in ("high", "low", "none"):
        full = fit.solve(model, layout, training, hbm, solve, None, end, global_batch=gb)["answer"]
        assert fit.solve(model, layout, training, hbm, solve, None, end, global_batch=gb, answer_only=True) == \
            {"answer": full}, end


def _brute(a2, a1, rest, step):
    """The largest multiple of ``step`` k >= 0 with a2 k^2 + a1 k + rest <= 0, by walking (a2 >= 0)."""
    best, k = 0, step
    while a2 * k * k + a1 * k + rest <= 0:
        best, k = k, k + step
    return best


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40), st.integers(-400, 400), st.integers(-5000, 50), st.integers(1, 4),
       st.integers(1, 7))
def test_integer_is_the_largest_fitting_multiple(a2, a1, rest, den, step):
    """The exact floor of the largest root (math.isqrt) is the largest multiple that fits, quadratic or linear."""
    # fit's domain: either the model states fit (rest <= 0) or the activations grow with x (a1 >= 0); with
    # rest > 0 and a1 < 0 the fitting multiples need not start at 0, and the walk below would stop early
    assume(rest <= 0 or a1 >= 0)
    A = {2: Fraction(a2, den), 1: Fraction(a1, den)}
    A = {k: v for k, v in A.items() if v}
    got = roots.integer(Fraction(rest, den), A, Fraction(0), 0, 0, step)
    assert got == _brute(Fraction(a2, den), Fraction(a1, den), Fraction(rest, den), step)
    if a1 > 0:
        lin = roots.integer(Fraction(rest, den), {1: Fraction(a1, den)}, Fraction(0), 0, 0, step)
        assert lin == _brute(0, Fraction(a1, den), Fraction(rest, den), step)


def test_answer_only_imports_no_sympy():
    code = ("import sys\n"
            "from derivations import config as cfg\n"
            "from derivations.analyses import fit\n"
            "m = cfg.PRESETS['deepseek-v3']\n"
            "for solve in ('mbs', 'seq'):\n"
            "    for end in ('high', 'low', 'none'):\n"
            "        fit.solve(m, cfg.Layout(), cfg.Training(zero=3), 80 * 2 ** 30, solve, None, end, "
            "answer_only=True)\nprint('sympy' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"
