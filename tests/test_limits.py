"""Limits as data (derivations/config/limits.py): every numeric option and config field has a
documented domain, checked before any work, with a one-line message naming the limit."""
from __future__ import annotations

import argparse

import pytest

from derivations import config as cfg
from derivations.config import limits as L
from memsym.cli import build_parser
from clirun import run  # tests/clirun.py
from memsym.commands import COMMANDS
from memsym.commands import common
from symbolic.errors import ConfigError
from symbolic.search import divisors


def test_every_integer_option_of_every_command_has_a_limit():
    """An integer option without an entry in derivations.limits.OPTIONS would be bounded only
    by MAX_DIGITS: each must have its documented domain."""
    missing = []
    for name in COMMANDS:
        parser = build_parser(only=name)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        for action in sub._actions:
            if getattr(action.type, "__name__", "") in ("positive_int", "nonneg_int", "any_int", "int") \
                    or (action.dest in L.LIST_LENGTHS and action.option_strings):
                if L.option(action.dest) is None:
                    missing.append(f"{name} {action.option_strings}")
    assert not missing, missing


@pytest.mark.parametrize("argv,named", [
    (["search", "--gpus", str(2 ** 20 + 1)], "1048576 = 2^20"),
    (["estimate", "--seq", str(2 ** 24 + 1)], "16777216 = 2^24"),
    (["estimate", "--mbs", str(2 ** 16 + 1)], "65536 = 2^16"),
    (["estimate", "--dp", str(2 ** 20 + 1)], "2^20"),
    (["estimate", "--pp", "10001"], "10000 = 10^4"),
    (["estimate", "--stage", "10000"], "0..9999"),
    (["estimate", "--seq", "9" * 40], "2^24"),
    (["estimate", "--schedule", "1f1b", "--microbatches", str(2 ** 20 + 1)], "2^20"),
    (["search", "--gpus", "64", "--mbs", ",".join(map(str, range(1, 18)))], "at most 16"),
    (["search", "--gpus", "64", "--mbs", "1,2,4", "--seq", "4096,8192"], "at most 4"),
    (["search", "--gpus", "64", "--hbm", "99999TiB"], "at most"),
    (["search", "--gpus", "64", "--zero", "4"], "0..3"),
    (["estimate", "--layers-per-stage", ",".join(["1"] * 10001)], "at most 10000"),
    (["estimate", "--imbalance", "1e99999999"], "imbalance"),
    (["estimate", "--imbalance", "2000000"], "at most 1e6"),
])
def test_out_of_domain_options_exit_2_naming_the_limit(capsys, argv, named):
    code, out, err = run(capsys, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert named in err, err


@pytest.mark.parametrize("text", ["\u0663", "\uff11\uff16", "1_000", "\u00b2", "0x10", "3.0", " ", "", "\u0661\u0666"])
def test_only_ascii_digits_are_integers(capsys, text):
    for argv in (["estimate", "--dp", text], ["search", "--gpus", text], ["estimate", "--zero", text],
                 ["search", "--gpus", "8", "--mbs", text], ["verify", "bsh", "--against", "act.mla.layer",
                                                            "--stage", text]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and ("ASCII" in err or "comma-separated" in err), (argv, err)


def test_limits_at_the_edge_are_accepted(capsys):
    assert run(capsys, "estimate", "--seq", str(2 ** 24), "--attention", "flash", "--json")[0] == 0
    assert run(capsys, "params", "--pp", "61")[0] == 0


def test_type_functions_bound_digits_before_converting():
    with pytest.raises(argparse.ArgumentTypeError, match="at most 18"):
        common.positive_int("9" * 10000)  # never converted (Python's int() would refuse above 4300 digits)
    assert common.positive_int("+16") == 16 and common.nonneg_int("0") == 0
    assert common.int_list("4,4,4") == (4, 4, 4)
    with pytest.raises(argparse.ArgumentTypeError, match="twice"):
        common.int_list("4,4", unique=True)


@pytest.mark.parametrize("argv,named", [
    (["estimate", "--recompute", "custom:norm,norm"], "named twice"),
    (["estimate", "--bytes-per-param", "distributed", "--zero", "0"], "contradicts"),
    (["estimate", "--conventions", "megatron", "--zero", "0"], "contradicts"),
    (["search", "--gpus", "64", "--mbs", "1,1"], "twice"),
    (["search", "--gpus", "64", "--zero", "1,1"], "twice"),
])
def test_conflicting_or_redundant_options_are_refused(capsys, argv, named):
    code, _, err = run(capsys, *argv)
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1, err


def test_bytes_per_param_distributed_still_raises_zero_when_zero_is_not_typed(capsys):
    import json
    code, out, err = run(capsys, "estimate", "--bytes-per-param", "distributed", "--json")
    assert code == 0, err
    assert json.loads(out)["training"]["zero"] >= 1


def test_the_python_api_is_bounded_too():
    m = cfg.load_model("deepseek-v3")
    with pytest.raises(ConfigError, match="2\\^20"):
        cfg.validate_layout(m, cfg.Layout(dp=2 ** 21))
    with pytest.raises(ConfigError, match="2\\^24"):
        cfg.validate_training(cfg.Training(seq=10 ** 30))
    with pytest.raises(ConfigError, match="10\\^6"):
        cfg.validate_training(cfg.Training(imbalance=10 ** 7))
    with pytest.raises(ConfigError, match="named twice"):
        cfg.parse_recompute("custom:norm,norm")


def test_search_refuses_huge_gpu_counts_at_once():
    from derivations.analyses import search as S
    m = cfg.load_model("deepseek-v3")
    with pytest.raises(ConfigError):
        S.enumerate_layouts(m, 2 ** 61 - 1)
    with pytest.raises(ConfigError, match="seq"):
        S.enumerate_layouts(m, 64, seqs=(10 ** 30,))


def test_divisors_are_bounded():
    assert divisors(720720)[-1] == 720720 and len(divisors(720720)) == 240
    with pytest.raises(ConfigError):
        divisors(2 ** 61 - 1)


def test_limit_messages_name_the_domain():
    lim = L.OPTIONS["gpus"]
    assert "1..1048576 = 2^20" in lim.message("--gpus", 2 ** 21)
    with pytest.raises(ConfigError) as exc:
        lim.check(2 ** 21, "--gpus")
    assert exc.value.constraint == "limit.gpus"
    assert L.FIELDS["num_hidden_layers"].high == 10 ** 4 and L.FIELDS["hidden_size"].high == 2 ** 24
