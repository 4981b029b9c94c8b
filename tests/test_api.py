"""The public API (memsym.api): keywords are the CLI's flags, results equal the CLI's JSON."""
import json
import subprocess
import sys
from pathlib import Path

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


V3 = json.loads((Path(__file__).resolve().parent.parent / "derivations" / "models" / "deepseek-v3.json").read_text())


@pytest.mark.parametrize("fn, kw", [("estimate", dict(tp=1)), ("params", {}), ("fit", dict(hbm="80GiB", tp=1)),
                                    ("compare", dict(tp=1))])
def test_the_spec_given_is_the_spec_evaluated(fn, kw, tmp_path):
    """A ModelSpec changed by hand (dataclasses.replace, from_dict of edited data) is evaluated as
    given: its numbers equal the CLI's for a config.json holding the same change, and differ from
    the preset's (the spec is never re-read by its name or path)."""
    import dataclasses

    from derivations.config.hfconfig import from_dict
    data = dict(V3, num_attention_heads=64, num_key_value_heads=64)
    path = tmp_path / "h64.json"
    path.write_text(json.dumps(data))
    argv = [fn, "--model", str(path)] + [x for k, v in kw.items() for x in (f"--{k}", str(v))]
    want = cli_json(*argv)
    base = memsym.load_model("deepseek-v3")
    by_hand = getattr(memsym, fn)(dataclasses.replace(base, n_h=64), **kw).to_dict()
    from_data = getattr(memsym, fn)(from_dict(data), **kw).to_dict()
    preset = getattr(memsym, fn)(base, **kw).to_dict()
    key = {"estimate": "params", "params": "total", "fit": "root_exact", "compare": "presets"}[fn]
    assert by_hand[key] == from_data[key] == want[key] != preset[key]


def test_a_spec_loaded_from_a_file_does_not_follow_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(V3))
    spec = memsym.load_model(str(path))
    before = memsym.estimate(spec, tp=1).params.total
    path.write_text(json.dumps(dict(V3, num_attention_heads=64, num_key_value_heads=64)))
    assert memsym.estimate(spec, tp=1).params.total == before == memsym.estimate("deepseek-v3", tp=1).params.total
    assert memsym.estimate(str(path), tp=1).params.total != before  # a path is read when it is given


@pytest.mark.parametrize("model", ["-cfg.json", "--tp", "no-such-model", "/nonexistent/config.json"])
def test_a_model_text_that_names_nothing_raises_one_config_error(model):
    with pytest.raises(memsym.ConfigError) as e:
        memsym.estimate(model)
    assert "\n" not in str(e.value) and model in str(e.value)


def test_a_verdict_reads_right_in_python():
    nothing = memsym.estimate(gpu="h800")                 # ZeRO 0 on an H800: does not fit at any end
    assert not any(nothing.to_dict()["fits"].values()) and not nothing.fits and bool(nothing.fits) is False
    everything = memsym.estimate(gpu="h800", zero=3)
    assert all(everything.to_dict()["fits"].values()) and everything.fits
    assert everything.fits.high is True and everything.fits["low"] is True


def test_a_verdict_over_a_range_refuses_to_be_one_bool():
    r = memsym.Verdict("estimate", {"none": True, "low": True, "high": False})
    with pytest.raises(ValueError, match="range"):
        bool(r)
    assert r.low and not r.high


def test_repr_shows_values():
    text = repr(memsym.estimate())
    assert "6,250,364,928" in text and "deepseek-v3" in text and "params.total" in text


def test_report_at_pp1_needs_no_stage(tmp_path):
    p = subprocess.run([sys.executable, "-m", "memsym", "report", "--model", "deepseek-v2-lite", "--dp", "8", "--tp",
                        "1", "--pp", "1", "--ep", "8", "--out", str(tmp_path / "r"), "--format", "md"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "stage 0" in (tmp_path / "r" / "report.md").read_text()


@pytest.mark.parametrize("change", [dict(h=-7168), dict(h=7168.5), dict(N_r=257), dict(v=-1), dict(h=0),
                                    dict(moe_layer_freq=0), dict(l=0), dict(h="7168"), dict(h=True),
                                    dict(fp8_block=[128, 128]), dict(first_k_dense=62)])
def test_a_spec_built_by_hand_is_validated_as_a_config_is(change):
    import dataclasses
    with pytest.raises(memsym.ConfigError) as e:
        memsym.estimate(dataclasses.replace(memsym.load_model("deepseek-v3"), **change))
    assert "\n" not in str(e.value)


def test_a_preset_changed_by_hand_is_not_called_the_preset():
    import dataclasses
    m = memsym.load_model("deepseek-v3")
    assert memsym.estimate(dataclasses.replace(m, n_h=64), tp=1).model != "deepseek-v3"
    assert memsym.estimate(dataclasses.replace(m), tp=1).model == "deepseek-v3"


@pytest.mark.parametrize("a, b", [("--recipe deepseek-v3", "--conventions transformers"),
                                  ("--recipe deepseek-v3", "--conventions mcore"),
                                  ("--recipe paper", "--conventions modelzoo")])
def test_recipe_and_conventions_give_one_answer_in_any_order(a, b):
    """An option typed wins, then the recipe's, then the conventions preset's (options resolved
    once): the order they are typed in changes nothing, on the command line or in the API."""
    first, second = cli_json("estimate", *a.split(), *b.split()), cli_json("estimate", *b.split(), *a.split())
    assert first == second
    kw = {x.split()[0][2:]: x.split()[1] for x in (a, b)}
    assert memsym.estimate(**kw).to_dict() == memsym.estimate(**dict(reversed(list(kw.items())))).to_dict() == first


def test_the_api_refuses_what_the_command_line_refuses():
    with pytest.raises(memsym.ConfigError, match="contradicts"):
        memsym.estimate(zero=0, bytes_per_param="distributed")
    with pytest.raises(memsym.ConfigError, match="2\\^50"):
        memsym.fit(hbm="1000000TiB")
    with pytest.raises(memsym.ConfigError, match="pairs"):
        memsym.search(gpus=64, hbm="80GiB", mbs=[1, 2, 3, 4, 5], seq=[1024, 2048])


def test_every_default_is_the_command_lines():
    assert memsym.sensitivity().to_dict() == cli_json("sensitivity")


def test_a_verdict_iterates_and_compares_as_verdicts():
    none, every = memsym.estimate(gpu="h800"), memsym.estimate(gpu="h800", zero=3)
    assert not any(none.fits) and not all(none.fits) and all(every.fits)
    assert none.fits == False and every.fits == True  # noqa: E712  (what a user writes)
    assert every.fits.to_dict() == {"none": True, "low": True, "high": True}


def test_a_model_changed_by_its_caller_never_reaches_the_preset():
    """load_model gives a copy of its own: forcing a field of the frozen spec (as the review did) changes that copy
    only, and the preset every later call reads is the published one (N = 256 routed experts)."""
    import memsym
    before = memsym.estimate("deepseek-v3").to_dict()
    spec = memsym.load_model("deepseek-v3")
    object.__setattr__(spec, "N", 2 ** 40)
    assert memsym.load_model("deepseek-v3").N == 256
    assert memsym.estimate("deepseek-v3").to_dict() == before


def test_results_copy_and_pickle():
    import copy
    import pickle

    import memsym
    r = memsym.estimate("deepseek-v3", gpu="h800")
    for other in (copy.copy(r), copy.deepcopy(r), pickle.loads(pickle.dumps(r))):
        assert other.to_dict() == r.to_dict() and other.params.total == r.params.total
    fits = r.fits
    assert copy.deepcopy(fits) == fits and pickle.loads(pickle.dumps(fits)) == fits


def test_the_term_registry_copies_and_pickles():
    """A frozen registry is a value: copy and deepcopy give it back (they raised TypeError through dict's own
    copy path), pickle round-trips it."""
    import copy
    import pickle

    import memsym
    terms = memsym.terms()
    assert copy.copy(terms) is terms and copy.deepcopy(terms) is terms
    assert list(pickle.loads(pickle.dumps(terms))) == list(terms)
