"""memsym compare: presets side by side and the waterfall of assumptions between them."""
import json
import os
import subprocess
import sys
from fractions import Fraction

import pytest

from derivations.analyses.compare import QUANTITIES, waterfall
from derivations.assembly.conventions import ORDER, with_preset
from derivations.assembly.device import estimate
from derivations import config as cfg
from memsym.cli import main

V3 = cfg.PRESETS["deepseek-v3"]



def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("model,layout,training", [
    (V3, cfg.Layout(), cfg.Training()),
    (V3, cfg.Layout(), cfg.Training(recompute="full", zero=2)),
    (V3, cfg.Layout(dp=16, tp=4, ep=16, sp=1), cfg.Training(mbs=2, seq=8192)),
    (cfg.PRESETS["deepseek-v2-lite"], cfg.Layout(dp=8, tp=2, pp=4, ep=8), cfg.Training()),
])
@pytest.mark.parametrize("end", ["megatron", "modelzoo"])
def test_waterfall_sums_exactly_to_the_difference(model, layout, training, end):
    fall, first, last = waterfall(model, layout, training, end, mtp=True)
    for q in QUANTITIES:
        steps = sum((s.delta[q] for s in fall.steps), Fraction(0))
        assert steps == fall.last[q] - fall.first[q], q
    # the ends are the presets' own estimates
    assert last.bytes == estimate(model, layout, with_preset(training, end, mtp=True)).bytes
    assert first.bytes == estimate(model, layout, with_preset(training, "paper")).bytes
    # one switch per step, in the fixed order, only those that differ
    names = [s.name for s in fall.steps]
    assert names == [n for n in ORDER if n in names] and len(set(names)) == len(names)
    if end == "modelzoo":
        assert names[-1] == "inventory"


def test_paper_to_modelzoo_names_routed_tokens_and_attention_largest():
    fall, _, _ = waterfall(V3, cfg.Layout(), cfg.Training(), "modelzoo")
    assert fall.first["activations_per_layer"] == 6167789568 and fall.last["activations_per_layer"] == 1203765248
    assert fall.largest("activations_per_layer")[:2] == ["attention", "routed_tokens"]
    step = {s.name: s for s in fall.steps}
    assert step["routed_tokens"].delta["activations_per_layer"] > 0 > step["attention"].delta["activations_per_layer"]
    assert step["inventory"].delta["states"] == 0  # ModelZoo's list is an activation accounting


def test_compare_json_matches_the_issue(capsys):
    d = run_json(capsys, "compare", "--mtp")
    assert list(d["presets"]) == ["paper", "megatron", "modelzoo"]
    meg = d["presets"]["megatron"]
    assert meg["params"] == 7579073152 and meg["bytes"]["states"] == 55649283312
    assert d["presets"]["paper"]["bytes"]["activations_per_layer"] == 6167789568
    assert d["presets"]["modelzoo"]["bytes"]["activations_per_layer"] == 1203765248
    zoo = d["waterfalls"]["modelzoo"]
    assert zoo["largest"]["activations_per_layer"][:2] == ["attention", "routed_tokens"]
    total = sum(s["delta"]["activations_per_layer"] for s in zoo["steps"])
    assert total == zoo["end"]["activations_per_layer"] - zoo["start"]["activations_per_layer"]
    assert d["order"] == list(ORDER)


def test_compare_text(capsys):
    assert main(["compare", "--zero", "1"]) == 0
    out = capsys.readouterr().out
    assert "waterfall paper -> modelzoo" in out and "per-tensor inventory" in out and "attention kernel" in out
    assert "40.45 GiB" in out  # the paper's ZeRO-1 model states (Table 8: 40.5 GB)


def test_compare_plot_is_deterministic_and_checked(tmp_path):
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    for path in (a, b):
        assert main(["compare", "--json", "--plot", str(path)]) == 0
    assert a.read_bytes() == b.read_bytes() and b"<svg" in a.read_bytes()
    bad = tmp_path / "missing" / "w.svg"
    p = subprocess.run([sys.executable, "-m", "memsym", "compare", "--plot", str(bad)], capture_output=True,
                       text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr and not os.path.exists(bad)


def test_compare_loads_no_sympy():
    """The waterfall and ``memsym compare`` run the generated evaluators (derivations.assembly.device.estimate)
    with the switches of derivations.config.switches: sympy is never imported (the report's implementations
    table is computed this way too)."""
    code = ("import sys, io, contextlib; from memsym.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['compare']) == 0\n"
            "from derivations import config as cfg\n"
            "from derivations.analyses.compare import waterfall\n"
            "waterfall(cfg.load_model('deepseek-v3'), cfg.Layout(), cfg.Training(), 'mcore', stage=1)\n"
            "print('sympy' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False"]
