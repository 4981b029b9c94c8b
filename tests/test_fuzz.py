"""Fuzzing the command line (every input bounded): command lines generated from each command's argparse
definition (valid and invalid values, extreme integers, unicode digits, hostile paths,
conflicting options), run in-process through ``memsym.cli.main``.

Every run must exit 0, 2, or 1 where 1 is a verdict (verify: not equal; reproduce: a
disagreement), print no traceback, print exactly one error line on exit 2, and finish within
10 s.  The CI run is derandomised (a fixed sequence of examples); ``MEMSYM_FUZZ_N=20000`` (or
``MEMSYM_FUZZ_EXAMPLES``) runs a longer one.  Every subcommand is drawn; report, page and trace lines are only
generated with a bad value (a trace would run for minutes, a page for seconds) and always point at a temporary
folder; searches use small GPU counts (the limits bound the rest).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from derivations.config import limits as L
from memsym.cli import build_parser, main

EXAMPLES = int(os.environ.get("MEMSYM_FUZZ_N", os.environ.get("MEMSYM_FUZZ_EXAMPLES", "2000")))
#: Commands and how often each is drawn (fit and report are slow when valid: drawn less).
WEIGHTS = {"estimate": 24, "params": 10, "terms": 3, "verify": 16, "search": 12, "compare": 8, "sensitivity": 6,
           "fit": 3, "reproduce": 5, "report": 4, "runs": 3, "page": 2, "trace": 3}
#: Commands drawn only with a value that fails before any work (a valid one runs for seconds or minutes).
FAILING = {"report", "page", "trace"}
#: 1 is a verdict for these commands only.
VERDICT = {"verify", "reproduce"}

INT_BAD = ["", " ", "-1", "0", "+0", "-0", "1_000", "0x10", "3.0", "1e3", "\u0663", "\uff11\uff16", "\u216b", "\u00b2",
           "abc", "9" * 19, "9" * 5000, str(2 ** 63), str(-2 ** 63), "1,2", "nan", "inf", "1\x00", "\u20131", "4 4"]
TEXT_BAD = ["", " ", "\x00", "\udcff", "a" * 5000, "\u202e", "--", "-", "%s%n", "\n", "\u0663"]


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser(only=name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.fixture(scope="module")
def catalogue():
    """{command: [(option string or None for a positional, action)]}."""
    out = {}
    for name in WEIGHTS:
        p = _subparser(name)
        out[name] = [(a.option_strings[-1] if a.option_strings else None, a) for a in p._actions
                     if not isinstance(a, (argparse._HelpAction, argparse._VersionAction))]
    return out


def _ints(limit, small_gpus=False):
    valid = st.integers(1, 64) if limit is None else st.sampled_from(
        sorted({limit.low, limit.high, min(limit.high, 2), min(limit.high, 4), min(limit.high, 16)}))
    if small_gpus:
        valid = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256])
    edges = st.nothing() if limit is None or small_gpus else st.sampled_from([limit.low - 1, limit.high + 1])
    huge = st.sampled_from([L.GPUS + 1, 10 ** 30, 2 ** 64, -(10 ** 30)]) if small_gpus else \
        st.integers(-(2 ** 70), 2 ** 70)
    return st.one_of(valid.map(str), edges.map(str), huge.map(str), st.sampled_from(INT_BAD),
                     st.integers(-3, 300).filter(lambda x: not small_gpus or x <= 256).map(str))


def _int_lists(limit, small=False):
    item = st.integers(1, 4096) if not small else st.sampled_from([1, 2, 4, 8, 512, 1024, 4096, 8192])
    good = st.lists(item, min_size=1, max_size=6).map(lambda xs: ",".join(map(str, xs)))
    bad = st.sampled_from(["", ",", "1,,2", "1,2,", "\u0663,4", "1,1", ",".join(["1"] * 20000), "0,1", "-1",
                           "9" * 30, "4," + str(10 ** 30), "1;2"])
    return st.one_of(good, bad)


def _strings(dest, tmp):
    from derivations.config.presets import PRESET_NAMES
    by_dest = {
        "model": list(PRESET_NAMES) + ["nope", "/dev/zero", "/dev/null", "/dev/urandom", str(tmp / "good.json"),
                                       str(tmp / "bad.json"), str(tmp / "deep.json"), str(tmp / "loop"),
                                       str(tmp / "missing.json"), "x.json", "/", "/proc/self/status", "/etc/passwd"],
        "hbm": ["80GiB", "1B", "0GiB", "80", "1e9GiB", "999999999999TiB", "80gib", "\uff18\uff10GiB", "nan GiB",
                "141GB", "0.5GiB", "1" * 60 + "GiB"],
        "gpu": ["h100", "H100", "a100-80gb", "nope", "mi300x"],
        "out": [str(tmp / "out"), "/dev/null", "/", str(tmp / "good.json")],
        "csv": [str(tmp / "rows.csv"), str(tmp / "nodir" / "rows.csv"), "/", str(tmp)],
        "plot": ["/", str(tmp / "nodir" / "p.png"), str(tmp / "p.txt"), str(tmp)],
        "data": [str(tmp / "bad.json"), "/dev/zero", str(tmp / "missing.toml"), "/", str(tmp / "deep.toml"),
                 str(tmp / "big.toml"), str(tmp / "bin.toml")],
        "formula": ["bsh", "-bsh", "4bsh/2", "b**s**h", "s^999999", "(((", "2^2^2^2^2^2", "\\frac{a}{b}", "9" * 5000,
                    "x" * 10000, "-", "5b n_h s^2/2", "bsh/0", "E", "d_cq d_c", "-2bs", "2^1100*b", "-2^1100*b*s"],
        "against": ["act.mla.layer", "act.stage:moe", "act.stage:mla+moe", "nope", "act.stage:", "params.mla"],
        "assume": ["TP=2", "SP=TP", "TP=0", "X=1", "TP=\u0663", "TP", "=", "b=10**100", "s=s+1", "EP=N/32"],
        "wrt": ["s", "b,s", "nope", "s,s", "h,h_E,N", "DP"],
        "recompute": ["none", "full", "selective", "custom:norm", "custom:norm,norm", "custom:", "custom:nope",
                      "full:norm", "none,full", "custom:norm,mla_up"],
        "formats": ["md", "tex,md", "nope", "md,md", "pdf"],
        "imbalance": ["1", "1.5", "0.5", "1e6", "1e7", "3/2", "1/0", "\u0663", "nan", "1e99999999", "-1", "2e-1"],
    }
    values = by_dest.get(dest)
    if values is None:
        return st.one_of(st.text(max_size=12), st.sampled_from(TEXT_BAD))
    return st.one_of(st.sampled_from(values), st.sampled_from(TEXT_BAD))


def _value(command, dest, action, tmp):
    name = getattr(action.type, "__name__", "")
    if action.choices is not None and dest not in ("formats",):
        return st.one_of(st.sampled_from([str(c) for c in action.choices]), st.sampled_from(["nope", "", "\u0663"]))
    if "int_list" in name or (name == "<lambda>" and dest in L.LIST_LENGTHS):
        return _int_lists(L.option(dest), small=command == "search")
    if name in ("positive_int", "nonneg_int", "any_int", "int"):
        return _ints(L.option(dest), small_gpus=(command == "search" and dest == "gpus"))
    return _strings(dest, tmp)


CONFLICTS = [["--bytes-per-param", "distributed", "--zero", "0"], ["--latex", "--json"],
             ["--recompute", "custom:norm,norm"], ["--microbatches", "4"], ["--vpp", "2", "--schedule", "1f1b"],
             ["--sp", "1", "--tp", "2"], ["--recipe", "deepseek-v3", "--zero", "0"],
             ["--conventions", "megatron", "--zero", "0"], ["--stage", "3", "--all-stages"],
             ["--hbm", "80GiB", "--gpu", "h100"], ["--schedule", "interleaved", "--vpp", "1"],
             ["--fp8-activations", "--act-dtype", "fp8"], ["--layers-per-stage", "4,4", "--pp", "2"]]


@st.composite
def command_lines(draw, catalogue, tmp):
    command = draw(st.sampled_from([c for c, w in WEIGHTS.items() for _ in range(w)]))
    actions = catalogue[command]
    argv = [command]
    must_fail = command in FAILING or (command == "reproduce" and draw(st.booleans()))
    for opt, action in actions:
        if opt is None:  # a positional (verify's formula)
            argv.append(draw(_value(command, action.dest, action, tmp)))
        elif action.required:
            argv += [opt, draw(_value(command, action.dest, action, tmp))]
    optional = [(o, a) for o, a in actions if o is not None and not a.required
                and not (command == "reproduce" and o == "--out")]  # a valid reproduce --out runs the report
    for opt, action in draw(st.lists(st.sampled_from(optional), max_size=4)):
        if action.nargs == 0:
            argv.append(opt)
        elif action.nargs in ("+", "*"):
            argv += [opt] + draw(st.lists(_value(command, action.dest, action, tmp), min_size=1, max_size=3))
        else:
            argv += [opt, draw(_value(command, action.dest, action, tmp))]
    options = {o for o, _ in actions} | {s for _, a in actions for s in a.option_strings}
    if draw(st.integers(0, 3)) == 0:
        pair = draw(st.sampled_from(CONFLICTS))
        if all(not x.startswith("--") or x in options for x in pair):
            argv += pair
    if command == "report":  # every report line fails before any work (a bad --seq), in a temporary folder
        argv += ["--out", str(tmp / "out"), "--format", "md", "--seq", "\u0663"]
    elif command == "page":  # likewise (a model that is no config.json), into a temporary folder
        argv += ["--out", str(tmp / "page"), "--model", "/dev/zero"]
    elif command == "trace":  # a size no trace takes: refused before torch is imported
        argv += ["--seq", "\u0663"]
    elif must_fail:
        argv += ["--out", str(tmp / "out"), "--data", "/dev/zero"]
    return argv


def run(argv):
    """(exit code, stdout, stderr, seconds) of ``memsym argv`` in this process."""
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, out.getvalue(), err.getvalue(), time.monotonic() - start


PROGRESS = re.compile(r"^memsym (report|search|reproduce): (?!error)")


def check(argv, code, out, err, seconds):
    shown = " ".join(repr(a) if len(a) < 60 else repr(a[:40]) + "..." for a in argv)
    assert "Traceback" not in err, f"traceback for memsym {shown}:\n{err[-2000:]}"
    allowed = {0, 2} | ({1} if argv[0] in VERDICT else set())
    assert code in allowed, f"exit {code} for memsym {shown}: {err[-500:]}"
    if code == 2:
        lines = [ln for ln in err.splitlines() if ln.strip() and not PROGRESS.match(ln)]
        assert len(lines) == 1, f"exit 2 without exactly one error line for memsym {shown}: {err[-1000:]!r}"
    assert seconds < 10, f"memsym {shown} took {seconds:.1f} s"


@pytest.fixture(scope="module")
def hostile_tmp(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    from derivations.config.presets import preset_path
    (tmp / "good.json").write_bytes(open(preset_path("deepseek-v2-lite"), "rb").read())
    (tmp / "bad.json").write_text('{"model_type": "deepseek_v3", "hidden_size": ')
    (tmp / "deep.json").write_text("[" * 100000 + "]" * 100000)
    (tmp / "deep.toml").write_text("a = " + "[" * 600 + "]" * 600 + "\n")
    (tmp / "big.toml").write_text("schema = " + "9" * 5000 + "\n")
    (tmp / "bin.toml").write_bytes(bytes(range(256)) * 4)
    (tmp / "p.txt").write_text("")
    os.symlink(tmp / "loop", tmp / "loop")
    return tmp


def test_fuzz_command_lines(catalogue, hostile_tmp, monkeypatch):
    monkeypatch.chdir(hostile_tmp)  # a report without --out would land here, never in the package
    seen = {"cases": 0}

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    @given(argv=command_lines(catalogue, hostile_tmp))
    def fuzz(argv):
        seen["cases"] += 1
        check(argv, *run(argv))

    fuzz()
    assert seen["cases"] >= min(EXAMPLES, 2000)
    assert not (hostile_tmp / "memsym-report").exists() or (hostile_tmp / "memsym-report").is_dir()


@pytest.mark.parametrize("argv", [
    ["search", "--gpus", "2305843009213693951"], ["search", "--gpus", str(10 ** 30)],
    ["search", "--gpus", str(2 ** 40)],
    ["search", "--gpus", "1024", "--mbs", ",".join(map(str, range(1, 200)))],
    ["search", "--gpus", "1024", "--seq", str(10 ** 30)], ["search", "--gpus", "1024", "--mbs", str(10 ** 30)],
    ["estimate", "--seq", str(10 ** 30)], ["estimate", "--model", "/dev/zero"], ["estimate", "--model", "/dev/urandom"],
    ["search", "--gpus", "\u0663"], ["search", "--gpus", "\uff11\uff16"], ["estimate", "--dp", "\u0663"],
    ["estimate", "--recompute", "custom:norm,norm"], ["estimate", "--bytes-per-param", "distributed", "--zero", "0"],
])
def test_the_issues_examples_exit_2_with_one_line(argv):
    code, out, err, seconds = run(argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)
    assert seconds < 10


def test_verify_reads_a_leading_minus_as_the_formula():
    code, out, err, _ = run(["verify", "-bsh", "--against", "act.mla.layer", "--json"])
    assert code == 1 and json.loads(out)["equal"] is False, err
    code, out, err, _ = run(["verify", "-2bs", "--against", "act.mla.layer"])
    assert code == 1, err
