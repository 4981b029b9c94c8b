"""One assembly, printed: the per-device total and peak (derivations/assembly/device_terms.py) is the
expression list both the command line (derivations/generated, exact Python) and the page (JavaScript
over BigInt rationals) evaluate.  The printed Python and JavaScript come from the same expressions;
each evaluates them as sympy does; and in a browser the page's printed assembly equals the command
line's at random inputs of every variant and at random configurations of every schedule."""
from __future__ import annotations

import random
from fractions import Fraction
from importlib import import_module
from pathlib import Path

import pytest
import sympy as sp

from derivations import evaluate as ev
from derivations.assembly import device_terms as dt
from memsym.page import data as page_data
from symbolic.codegen import python

ROOT = Path(__file__).resolve().parent.parent


def _random_inputs(rng):
    """Exact values of every input of the assembly (rationals too: in-flight counts are)."""
    return {name: Fraction(rng.randint(0, 10 ** 12), rng.choice([1, 1, 2, 3, 7])) for name in dt.inputs()}


def _sympy(mtp, full, holds, inputs):
    """The assembly of a variant evaluated by sympy, name by name."""
    subs = {sp.Symbol(k, nonnegative=True): sp.Rational(v.numerator, v.denominator) for k, v in inputs.items()}
    out = {}
    for name, expr in dt.assembly(mtp, full, holds):
        val = expr.xreplace({s: subs[sp.Symbol(s.name, nonnegative=True)] for s in expr.free_symbols})
        out[name] = Fraction(int(val.p), int(val.q))
        subs[sp.Symbol(name, nonnegative=True)] = val
    return out


def test_no_hand_written_assembly_in_the_page():
    """The page has no assembly of its own (issue "Architecture II": one assembly, printed; what
    ``git grep estimateStage -- templates`` checks, read from the files so that it holds outside a checkout)."""
    for path in sorted((ROOT / "templates").rglob("*")):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert not any(w in text for w in ("estimateStage", "actStage", "DATA.composition")), path


def test_the_generated_python_is_printed_from_the_expressions():
    """The generated Python module's ``device`` lines (which the page runs, in JavaScript) are the printer's output
    of device_terms.assembly, variant by variant, name by name."""
    source = (ROOT / "derivations" / "generated" / f"{ev.FAMILY}.py").read_text(encoding="utf-8")
    generated = import_module(f"derivations.generated.{ev.FAMILY}")
    body = lambda fn: source.split(f"def {fn}(v):\n", 1)[1].split("    return ", 1)[0].splitlines()
    assert page_data.device(page_data.Pool())["kinds"] == dt.KINDS
    for key, mtp, full, holds in dt.variants():
        want = dt.assembly(mtp, full, holds)
        lines = body(generated.DEVICE[(mtp, full, holds)].__name__) + body("_device_common")
        assert lines == [f'    v["{name}"] = {python(expr)}' for name, expr in want], key


@pytest.mark.parametrize("key, mtp, full, holds", dt.variants())
def test_generated_python_evaluates_the_expressions(key, mtp, full, holds):
    rng = random.Random(key)
    for _ in range(5):
        inputs = _random_inputs(rng)
        got = ev.device(mtp, full, holds, inputs)
        want = _sympy(mtp, full, holds, inputs)
        assert {k: Fraction(got[k]) for k in want} == want


# ----------------------------------------------------------------------------- the browser
# (the fixtures page and browser are tests/conftest.py's)
def test_browser_assembly_equals_the_python_one(browser, page):
    """Every variant's JavaScript (the generated module's, memsym/page/pyjs.py) at random exact inputs: the
    generated Python's numbers."""
    browser.get(page.as_uri())
    rng = random.Random(2026)
    for key, mtp, full, holds in dt.variants():
        for _ in range(3):
            inputs = _random_inputs(rng)
            got = browser.execute_script("""
                const inputs = {};
                for (const [k, v] of Object.entries(arguments[1])) inputs[k] = Q.parse(v);
                const out = ASSEMBLY.deepseek.device(...arguments[0], inputs);
                return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, Q.str(v)]));""",
                                         [mtp, full, holds], {k: str(v) for k, v in inputs.items()})
            want = ev.device(mtp, full, holds, inputs)
            names = [name for name, _ in dt.assembly(mtp, full, holds)]
            assert {k: Fraction(got[k]) for k in names} == {k: Fraction(want[k]) for k in names}, key


SCHEDULED = [None, "1f1b", "zb", "interleaved", "dualpipe"]


def test_random_scheduled_configurations_in_the_browser(browser, page):
    """Random configurations of every schedule (micro-batches, V, stage, MTP, recomputation): every byte
    the page shows equals the command line's estimate, the peaks included."""
    from derivations import config as cfg
    from derivations.assembly.device import estimate
    from memsym.cli import build_parser
    from memsym.commands import common
    from test_page import _argv, _dom_exact, _reset
    rng = random.Random(7)
    done = tries = 0
    while done < 10 and tries < 200:
        tries += 1
        schedule = SCHEDULED[done % len(SCHEDULED)]
        pp = rng.choice([2, 4, 8])
        controls = [("tp", rng.choice([1, 2])), ("pp", pp), ("ep", rng.choice([1, 8])), ("zero", rng.choice([0, 1, 3])),
                    ("recompute", rng.choice(["none", "full", "selective"])), ("schedule", schedule),
                    ("mtp", rng.random() < 0.4), ("mtp_activations", rng.choice(["none", "last-stage"]))]
        if schedule is not None and rng.random() < 0.6:
            controls.append(("microbatches", rng.choice([2, 4, 8, 16, 32])))
        if schedule == "interleaved" and rng.random() < 0.7:
            controls.append(("vpp", rng.choice([2, 3, 4])))
        if rng.random() < 0.5:
            controls.append(("stage", rng.randrange(pp)))
        args = build_parser("estimate").parse_args(["estimate", *_argv(controls)])
        common.finish(args)
        try:
            c = common.configuration(args)
            exact = estimate(c.model, c.layout, c.training, c.stage)
        except cfg.ConfigError:
            continue
        _reset(browser, page)
        browser.execute_script("""
            for (const [k, v] of arguments[0]) { const el = document.getElementById('opt-' + k);
              if (el.type === 'checkbox') el.checked = !!v; else el.value = v === null ? '' : String(v); }
            update();""", controls)
        assert not browser.find_element("id", "error").text, controls
        assert int(browser.find_element("id", "v-stage").get_attribute("data-index")) == exact.stage.index
        keys = ["weights", "gradients", "optimizer", "activations", "total", "activations_per_layer"]
        keys += ["activations_per_microbatch"] if schedule else []
        for k in keys:
            assert _dom_exact(browser, f"bytes-{k}") == exact.bytes[k], (controls, k)
        for end in ("low", "high"):
            assert _dom_exact(browser, f"peak-{end}") == exact.overheads[end]["peak"], (controls, end)
        done += 1
    assert done == 10
