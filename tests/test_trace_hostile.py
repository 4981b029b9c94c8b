"""``memsym trace`` given hostile input: the config is read by estimate's bounded reader and
validated as estimate validates it before torch is imported (memsym/trace/inputs.py), so a
device, a FIFO, a list, a llama config, a missing or negative dimension, a directory, a missing
file or a symlink loop each exits 2 with one line on stderr, within 10 s and 1 GiB (measured on
the child: ``getrusage(RUSAGE_CHILDREN)`` in a fresh wrapper process).  A record (``--record``)
is TOML in which every user string is a TOML string (memsym/trace/records.py): read back with
tomllib, nothing is injected and every value is what was given.

The config cases need no torch (nothing is built); the one that traces is marked ``trace`` and
needs the extra (CI sets MEMSYM_REQUIRE_TRACE: it cannot skip)."""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsym.trace import records

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "tiny" / "config.json"
BASE = json.loads(TINY.read_text())
SECONDS, RSS_KIB = 10, 1 << 20

#: Runs argv[1:] with a 10 s timeout and prints its exit code, stderr, wall time and peak RSS (the
#: wrapper's only child, so RUSAGE_CHILDREN is the child's own).  A hang (a FIFO opened) is a timeout.
WRAPPER = r"""
import json, resource, subprocess, sys, time
t = time.monotonic()
try:
    p = subprocess.run(sys.argv[1:], capture_output=True, timeout=%d,
                       stdin=subprocess.DEVNULL)
    rc, err = p.returncode, p.stderr
except subprocess.TimeoutExpired as exc:
    rc, err = "timeout", exc.stderr or b""
print(json.dumps({"rc": rc, "stderr": err.decode("utf-8", "replace"), "seconds": time.monotonic() - t,
                  "rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
""" % SECONDS


def _measured(argv):
    """{rc, stderr, seconds, rss_kib} of ``python -m memsym <argv>`` in a fresh wrapper."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", WRAPPER, sys.executable, "-m", "memsym", *argv],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=4 * SECONDS)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _config(path: Path, **changes) -> Path:
    data = dict(BASE)
    for k, v in changes.items():
        if v is _DROP:
            data.pop(k)
        else:
            data[k] = v
    path.write_text(json.dumps(data))
    return path


_DROP = object()


def _hostile(tmp: Path):
    """(name, --model, what the line must say) of every hostile config."""
    fifo = tmp / "fifo.json"
    os.mkfifo(fifo)                                   # opened for reading, it would block for ever
    (tmp / "list.json").write_text("[1, 2, 3]")
    (tmp / "empty-dir").mkdir()
    os.symlink(tmp / "loop-b", tmp / "loop-a")
    os.symlink(tmp / "loop-a", tmp / "loop-b")
    return [
        ("dev-zero", "/dev/zero", "character device"),
        ("fifo", str(fifo), "FIFO"),
        ("list", str(tmp / "list.json"), "JSON object, got array"),
        ("llama", str(_config(tmp / "llama.json", model_type="llama")), "model_type"),
        ("no-hidden", str(_config(tmp / "no-hidden.json", hidden_size=_DROP)), "hidden_size"),
        ("negative-layers", str(_config(tmp / "negative.json", num_hidden_layers=-3)), "num_hidden_layers"),
        ("directory", str(tmp / "empty-dir"), "No such file"),
        ("nonexistent", str(tmp / "nonexistent.json"), "No such file"),
        ("symlink-loop", str(tmp / "loop-a"), "symbolic link loop"),
        ("nan", str(_config(tmp / "nan.json", rms_norm_eps=float("nan"))), "rms_norm_eps"),
        ("too-big", str(_config(tmp / "big.json", hidden_size=8192, vocab_size=100000)), "MAX_PARAMS"),
        ("not-silu", str(_config(tmp / "gelu.json", hidden_act="gelu")), "hidden_act"),
    ]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return _hostile(tmp_path_factory.mktemp("hostile"))


#: The config is read and checked before the framework matters: mcore is run on a few cases only.
MCORE_CASES = ("dev-zero", "fifo", "llama", "negative-layers")


@pytest.mark.parametrize("framework", ["transformers", "mcore"])
def test_every_hostile_config_exits_2_in_one_line_quickly_and_small(hostile, framework):
    slowest, largest = 0.0, 0
    for name, model, said in hostile:
        if framework == "mcore" and name not in MCORE_CASES:
            continue
        got = _measured(["trace", "--framework", framework, "--model", model, "--seq", "64"])
        lines = got["stderr"].strip().splitlines()
        assert got["rc"] == 2, (name, got)
        assert len(lines) == 1 and "Traceback" not in got["stderr"], (name, got["stderr"])
        assert said in lines[0], (name, lines[0])
        assert got["seconds"] < SECONDS and got["rss_kib"] < RSS_KIB, (name, got)
        slowest, largest = max(slowest, got["seconds"]), max(largest, got["rss_kib"])
    print(f"{framework}: slowest {slowest:.2f} s, largest {largest / 1024:.0f} MiB")


def test_a_refused_config_never_imports_torch(hostile):
    """The checks come before the implementation: python -X importtime lists every module imported."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for _, model, _ in (hostile[0], hostile[3]):                   # /dev/zero; llama, parsed whole
        p = subprocess.run([sys.executable, "-X", "importtime", "-m", "memsym", "trace", "--model", model],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=SECONDS * 3)
        assert p.returncode == 2
        imported = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
        assert not {m for m in imported if m.split(".")[0] in ("torch", "transformers", "megatron")}, model


# ----------------------------------------------------------------------------- options
@pytest.fixture()
def run(run_trace):
    return run_trace


@pytest.mark.parametrize("argv,said", [
    (("--seq", "-5"), "--seq"),
    (("--mbs", "-1"), "--mbs"),
    (("--seq", "0"), "--seq"),
    (("--model",), "--model"),
    (("--seq", "-80GiB"), "--seq"),
    (("--record", "-x"), "--record"),
    (("--unexplained", "-x"), "--unexplained"),
    (("--unexplained", "why"), "--record"),
    (("--change", "what moved"), "--change describes a record"),
    (("--swiglu", "fused"), "--swiglu"),
    (("--framework", "mcore", "--aux-loss", "x"), "--aux-loss"),
    (("--framework", "mcore", "--router-dtype", "fp16"), "--router-dtype"),
    (("--framework", "jax"), "--framework"),
    (("--recompute", "selective"), "--recompute"),
    (("--recompute", "full\n[x]"), "--recompute"),
    (("--framework", "mcore", "--recompute", "custom:bogus"), "--recompute"),
    (("--framework", "mcore", "--attention", "sdpa"), "--attention"),
    (("--framework", "mcore", "--experts", "grouped"), "--experts"),
    (("--attention", "flash"), "--attention flash"),
    (("--conventions", "nope"), "--conventions"),
    (("--mbs", "64", "--seq", "1024"), "MAX_TOKENS"),
    (("--seq", "8192"), "MAX_SCORE_ELEMENTS"),
    (("--record", "/nonexistent-folder/r.toml"), "does not exist"),
    (("--fake", "--step"), "--fake --step"),
])
def test_bad_options_exit_2_in_one_line_naming_them(run, argv, said):
    model = () if argv == ("--model",) else ("--model", str(TINY))
    code, err = run(*model, *argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], err


def test_a_record_that_is_a_directory_or_cannot_hold_the_path(run, tmp_path):
    code, err = run("--model", str(TINY), "--record", str(tmp_path))
    assert code == 2 and "is a directory" in err and len(err.strip().splitlines()) == 1
    odd = tmp_path / os.fsdecode(b"caf\xe9.json")              # a Latin-1 byte: no Unicode character
    shutil.copy(TINY, odd)
    code, err = run("--model", str(odd), "--record", str(tmp_path / "r.toml"))
    assert code == 2 and "--model" in err and "TOML" in err and len(err.strip().splitlines()) == 1, err


# ----------------------------------------------------------------------------- records as TOML
HOSTILE_TEXT = 'a"b\\c\nd = 1\n[config]\npath = "evil"\t\x01\x7f\u2028\u00e9\U0001f600 #'


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",))))
def test_toml_string_reads_back_as_the_text(text):
    assert tomllib.loads(f"k = {records.toml_string(text)}\n") == {"k": text}
    assert tomllib.loads(f"{records.toml_key(text)} = 1\n") == {text: 1}


def test_toml_string_refuses_a_lone_surrogate():
    with pytest.raises(ValueError, match="not a Unicode character"):
        records.toml_string(os.fsdecode(b"caf\xe9"))


def _out(model: str, recompute: str = "none"):
    """A trace result (memsym/trace/compare.py result) with hostile strings, no torch."""
    layers = [{"layer": 0, "kind": "dense", "bytes": 10}, {"layer": 1, "kind": "moe", "bytes": 20}]
    return {"settings": {"framework": "transformers", "model": model, "mbs": 1, "seq": 64, "act_dtype": "bf16",
                         "attention": "eager", "experts": "loop", "recompute": recompute},
            "versions": {"torch": "2.13.0", HOSTILE_TEXT: "1\n[x]"},
            "measured": {"activations_by_layer": layers, "activations_outside_layers": 5,
                         "families": {HOSTILE_TEXT: {"bytes": 7, "count": 1}, "mla.q": {"bytes": 3, "count": 2}}},
            "predicted": {"conventions": "transformers", "activations_by_layer": [dict(r, bytes=1) for r in layers],
                          "activations_outside_layers": 2}}


def test_a_record_keeps_every_user_string_as_data():
    out = _out("/tmp/" + HOSTILE_TEXT + "/config.json", recompute=HOSTILE_TEXT)
    rec = tomllib.loads(records.to_toml(out, unexplained=HOSTILE_TEXT, sha256_of_config="0" * 64))
    assert set(rec) == {"command", "framework", "config", "settings", "versions", "measured", "unexplained"}
    assert rec["config"] == {"path": out["settings"]["model"], "sha256": "0" * 64}
    assert rec["settings"] == {k: v for k, v in out["settings"].items() if k not in ("framework", "model")}
    assert rec["versions"] == out["versions"]
    assert rec["unexplained"] == {"why": HOSTILE_TEXT, "preset": "transformers", "by_layer": [9, 19],
                                  "outside_layers": 3}
    assert rec["measured"]["families"] == {HOSTILE_TEXT: 7, "mla.q": 3}
    argv = shlex.split(rec["command"])
    assert argv[argv.index("--model") + 1] == out["settings"]["model"]
    assert argv[argv.index("--recompute") + 1] == HOSTILE_TEXT


# ----------------------------------------------------------------------------- a real trace (torch)
def _have_torch():
    from memsym.trace import missing
    return missing("transformers") is None


@pytest.mark.trace
@pytest.mark.skipif(not _have_torch(), reason="needs pip install 'memsym[trace]'")
def test_trace_record_of_a_hostile_path_round_trips(tmp_path):
    folder = tmp_path / 'a"b\\c\nd = 1\n[x]\t\x01\u00e9'
    folder.mkdir()
    config = folder / "config.json"
    shutil.copy(TINY, config)
    record = tmp_path / "rec\nevil = 1.toml"
    why = 'why"\ninjected = 1\n[config]\npath = "evil"'
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "memsym", "trace", "--model", str(config), "--seq", "64", "--json",
                        "--record", str(record), "--unexplained", why], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    rec = tomllib.loads(record.read_text(encoding="utf-8"))
    assert set(rec) == {"command", "framework", "config", "settings", "versions", "measured", "unexplained"}
    assert rec["config"] == {"path": str(config), "sha256": hashlib.sha256(config.read_bytes()).hexdigest()}
    assert rec["unexplained"]["why"] == why
    assert rec["measured"]["activations_by_layer"] == out["measured"]["activations_by_layer"]
    assert rec["settings"]["recompute"] == "none" and rec["versions"] == out["versions"]
    argv = shlex.split(rec["command"])
    assert argv[argv.index("--model") + 1] == str(config)


if os.environ.get("MEMSYM_REQUIRE_TRACE"):  # CI with the extra: the trace test must run, not skip
    assert _have_torch(), "MEMSYM_REQUIRE_TRACE is set but the trace extra is not installed"


def test_a_records_changes_are_kept_and_nothing_else_is_overwritten(tmp_path, run):
    """trace --record FILE keeps the changes of the record at FILE (memsym/trace/records.py changes_of); anything
    else there (a symbolic link, a FIFO or device, an oversized, non-UTF-8 or non-TOML file, a file that is not a
    record, a changes entry that is not a list of strings) is refused before the trace, in one line, and left as
    it was: rewriting it would destroy it or drop the record's history.  A FIFO is never read (no blocking)."""
    import os
    from memsym.trace.records import changes_of
    rec = tmp_path / "r.toml"
    rec.write_text('command = "x"\nchanges = ["first", "second \\"quoted\\""]\n[measured]\nactivations_outside_layers '
                   '= 1\n')
    assert changes_of(str(rec)) == ["first", 'second "quoted"']
    assert changes_of(str(tmp_path / "absent")) == []
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.toml"
    link.symlink_to(rec)
    bad = {"fifo": (fifo, "not a regular file"), "link": (link, "symbolic link")}
    for name, text in (("toml", "changes = ["), ("notrecord", 'title = "my notes"\n'),
                       ("odd", 'command = "x"\nchanges = ["ok", 3]\n[measured]\n')):
        (tmp_path / name).write_text(text)
        bad[name] = (tmp_path / name, "not a record" if name != "odd" else "not a list of strings")
    (tmp_path / "latin1").write_bytes(b"command = '\xe9'\n")
    bad["latin1"] = (tmp_path / "latin1", "not a record")
    (tmp_path / "big").write_text('command = "x"\n#' + "z" * (5 << 20))
    bad["big"] = (tmp_path / "big", "at most")
    for name, (path, said) in bad.items():
        with pytest.raises(ValueError, match=said):
            changes_of(str(path))
        before = os.lstat(path)
        code, err = run("--model", str(TINY), "--mbs", "1", "--seq", "64", "--record", str(path), "--change", "c")
        assert code == 2 and len(err.strip().splitlines()) == 1 and "not overwritten" in err, (name, err)
        after = os.lstat(path)
        assert (after.st_ino, after.st_mode, after.st_size) == (before.st_ino, before.st_mode, before.st_size), name
    assert rec.read_text().startswith('command = "x"')       # the link's target untouched


def test_a_megatron_record_made_before_its_settings_were_options_is_predicted_as_it_ran():
    """A Megatron-Core record without swiglu/router_dtype/aux_loss in its settings (made before they were
    options) ran Megatron-Core's defaults (unfused, activation, none), not the recipes' defaults of today."""
    import tomllib
    from memsym.trace import records
    rec = tomllib.loads((ROOT / "paper" / "traces" / "mcore-tiny-b2-s512-bf16.toml").read_text())
    assert rec["settings"]["swiglu"] == "unfused"
    old = dict(rec, settings={k: v for k, v in rec["settings"].items() if k not in records.MCORE_SETTING_KEYS})
    assert records.settings_of(old)["aux_loss"] == "none"
    assert records.predict(old)["activations_by_layer"] == rec["measured"]["activations_by_layer"]
