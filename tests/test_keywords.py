"""Keywords -> a command's namespace (memsym/commands/keywords.py), checked against argparse itself:
the namespace argparse builds from the equivalent command line, and argparse's own error messages."""
from __future__ import annotations

import random

import pytest

import memsym
from memsym.cli import build_parser, main
from memsym.commands.keywords import namespace

#: Values each option may take (valid ones), drawn at random below.
VALUES = {
    "dp": [1, 2, 8, 64], "tp": [1, 2, 4], "pp": [1, 2, 4, 16], "ep": [1, 8, 32], "etp": [1, 2], "cp": [1, 2],
    "sp": [1, 2], "layers_per_stage": [(30, 31), (61,)], "stage": [0, 1, 3], "zero": [0, 1, 2, 3],
    "recompute": ["none", "full", "selective", "custom:norm,mla_up"], "attention": ["eager", "flash"],
    "mbs": [1, 2, 5], "seq": [1024, 4096], "imbalance": ["1", "1.25", "3/2"], "schedule": ["1f1b", "dualpipe"],
    "microbatches": [4, 64], "vpp": [2, 3], "act_dtype": ["bf16", "fp32"], "fp8_activations": [True, False],
    "conventions": ["megatron", "mcore", "transformers"], "kernels": ["local", "te"], "mtp": [True, False],
    "recipe": ["deepseek-v3", "paper"], "swiglu": ["fused", "separate"], "bytes_per_param": ["distributed", "paper"],
    "hbm": ["80GiB", "141GB"], "model": ["deepseek-v2-lite", "deepseek-v3"],
}


def _argv(options):
    out = ["estimate"]
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            out.append(flag)
        elif v is not False:
            out += [flag, ",".join(map(str, v)) if isinstance(v, tuple) else str(v)]
    return out


@pytest.mark.parametrize("seed", range(40))
def test_the_namespace_is_argparses(seed):
    rng = random.Random(seed)
    keys = rng.sample(sorted(VALUES), rng.randint(0, 9))
    options = {k: rng.choice(VALUES[k]) for k in keys}
    want = build_parser("estimate").parse_args(_argv(options))
    got = namespace("estimate", options)
    w, g = vars(want), vars(got)
    assert g.pop("_explicit", set()) == w.pop("_explicit", set())
    assert {k: v for k, v in g.items() if k != "run"} == {k: v for k, v in w.items() if k != "run"}


@pytest.mark.parametrize("key, value", [
    ("mbs", "0"), ("mbs", "x"), ("tp", "\u0663"), ("zero", "5"), ("attention", "fast"), ("hbm", "80"),
    ("imbalance", "0.5"), ("recompute", "custom:nope"), ("layers_per_stage", "1,,2"), ("seq", "9" * 40),
    ("conventions", "nope"), ("act_dtype", "int3"),
])
def test_a_bad_keyword_says_what_the_command_line_says(capsys, key, value):
    with pytest.raises(SystemExit) as code:
        main(_argv({key: value}))
    assert code.value.code == 2
    cli = capsys.readouterr().err.strip()
    with pytest.raises(memsym.ConfigError) as err:
        memsym.estimate(**{key: value})
    assert "argument" in cli and cli.split("argument", 1)[1] == str(err.value).split("argument", 1)[1]


def test_flags_take_booleans_and_unknown_keywords_are_type_errors():
    with pytest.raises(memsym.ConfigError, match="is a flag"):
        memsym.estimate(mtp=1)
    with pytest.raises(TypeError, match="unexpected keyword 'mbss'"):
        memsym.estimate(mbss=2)
    with pytest.raises(memsym.ConfigError, match="required: --gpus"):
        namespace("search", {})


def test_a_boolean_for_an_option_with_a_value_is_refused_and_a_path_object_is_a_path(tmp_path):
    with pytest.raises(memsym.ConfigError, match="argument --dp: takes a value, not False"):
        memsym.estimate(dp=False)
    import pathlib
    from derivations.config.presets import preset_path
    got = memsym.estimate(pathlib.Path(preset_path("deepseek-v2-lite")), pp=1, ep=8, dp=8, tp=1).params.total
    assert got == memsym.estimate("deepseek-v2-lite", pp=1, ep=8, dp=8, tp=1).params.total
