"""The public API (memsym.api): keywords are the CLI's flags, results equal the CLI's JSON."""
import json
import subprocess
import sys

import pytest

import memsym

GiB = 2 ** 30


def cli_json(*argv):
    p = subprocess.run([sys.executable, "-m", "memsym", *argv, "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_estimate_fields_are_the_papers_table_6_and_8():
    r = memsym.estimate("deepseek-v3", dp=32, tp=2, pp=16, ep=8, zero=1)
    assert r.params.total == 6_250_364_928          # Table 6 (the paper prints 6.25B)
    assert r.params.non_moe == 429_719_552
    assert r.bytes.optimizer == 5_928_075_264        # Table 8, ZeRO-1: 12 B x P_n / 32 + 12 B x P_m / 8 ... exact
    assert r["bytes"]["weights"] == 12_500_729_856
    assert r.to_dict() == cli_json("estimate", "--zero", "1")


@pytest.mark.parametrize("fn, kw, argv", [
    ("estimate", dict(recompute="full", mbs=2, conventions="modelzoo"),
     ["estimate", "--recompute", "full", "--mbs", "2", "--conventions", "modelzoo"]),
    ("estimate", dict(fp8_activations=True, layers_per_stage=[5] * 11 + [6] * 1, pp=12),
     ["estimate", "--fp8-activations", "--layers-per-stage", ",".join(["5"] * 11 + ["6"]), "--pp", "12"]),
    ("params", dict(accounting="checkpoint"), ["params", "--accounting", "checkpoint"]),
    ("fit", dict(hbm="80GiB", zero=1, solve="seq"), ["fit", "--hbm", "80GiB", "--zero", "1", "--solve", "seq"]),
    ("search", dict(gpus=64, hbm="80GiB"), ["search", "--gpus", "64", "--hbm", "80GiB"]),
    ("sensitivity", dict(wrt="s,TP"), ["sensitivity", "--wrt", "s,TP"]),
    ("compare", dict(), ["compare"]),
])
def test_results_equal_the_cli_json(fn, kw, argv):
    assert getattr(memsym, fn)(**kw).to_dict() == cli_json(*argv)


def test_verify_and_terms():
    v = memsym.verify("4bsh/2 + 2bs(d_cq + d_c) + 4bs(d_h + d_hr)n_h/2 + 2bs d_h n_h/2 + 5b n_h s^2/2 "
                      "+ 2bs d_h n_h/2 + bsh/2", "act.mla.layer", assume={"TP": 2, "SP": 2})
    assert v.to_dict()["equal"] is True
    t = memsym.terms("deepseek-v3")["act.mla.layer"]
    assert t._repr_latex_().startswith("$\\displaystyle")


def test_bad_input_raises_config_error_and_unknown_keyword_type_error():
    with pytest.raises(memsym.ConfigError, match="TP=3 must divide n_h=128"):
        memsym.estimate(tp=3)
    with pytest.raises(TypeError, match="unexpected keyword 'tensor_parallel'"):
        memsym.estimate(tensor_parallel=2)


def test_results_render_in_jupyter():
    r = memsym.estimate()
    assert "| `params.total` | 6,250,364,928 |" in r._repr_markdown_()
    assert "<table>" in r._repr_html_() and "6,250,364,928" in r._repr_html_()


def test_import_is_light():
    code = "import sys, memsym; memsym.__version__; print('sympy' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split()
    assert out == ["False", "False"]
    for argv in (["--version"], ["--help"]):
        code = ("import sys; from memsym.cli import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
                "print('sympy' in sys.modules, 'numpy' in sys.modules, file=sys.stderr)" % argv)
        err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stderr.split()
        assert err[-2:] == ["False", "False"], argv
