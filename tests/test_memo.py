"""memsym.memo: a repeated `memsym estimate` prints, byte for byte, what the full computation prints
(the expectation is always a run with every cache off), without importing sympy; anything the
output depends on (a named file, a MEMSYM_* variable, the sources) makes a new entry; failures,
special files and main(argv) from Python are never kept."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memsym import memo

ROOT = Path(__file__).resolve().parent.parent


def memsym(args, cache_dir, importtime=False, **env):
    cmd = [sys.executable] + (["-X", "importtime"] if importtime else []) + ["-m", "memsym"] + list(args)
    e = {**os.environ, "MEMSYM_CACHE_DIR": str(cache_dir), **env}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=e, timeout=120)


def entries(cache_dir):
    d = Path(cache_dir) / "output"
    return sorted(d.glob("*.entry")) if d.exists() else []


def payload(entry):
    """The verified JSON of an entry file (symbolic.cache.load, as memsym reads it), or None."""
    from symbolic import cache
    old = os.environ.get("MEMSYM_CACHE_DIR")
    os.environ["MEMSYM_CACHE_DIR"] = str(entry.parent.parent)
    try:
        data = cache.load("output", entry.stem)
    finally:
        if old is None:
            del os.environ["MEMSYM_CACHE_DIR"]
        else:
            os.environ["MEMSYM_CACHE_DIR"] = old
    return None if data is None else json.loads(data)


def past(path):
    """Date ``path`` before this process started (a file edited after that is not keyed: the code
    running may differ from it)."""
    os.utime(path, ns=(10 ** 18, 10 ** 18))


def full(args, tmp_path):
    """The output with every cache off: what the entry must reproduce."""
    p = memsym(args, tmp_path / "off", MEMSYM_CACHE="0")
    assert p.returncode == 0, p.stderr
    return p.stdout


ARGS = ["estimate", "--tp", "4", "--ep", "16", "--dp", "64", "--zero", "1", "--json"]


def test_a_repeated_estimate_prints_the_full_output_without_sympy(tmp_path):
    cache = tmp_path / "cache"
    first = memsym(ARGS, cache)
    assert first.returncode == 0 and len(entries(cache)) == 1
    second = memsym(ARGS, cache, importtime=True)
    assert second.returncode == 0
    assert second.stdout == first.stdout == full(ARGS, tmp_path)
    assert json.loads(second.stdout)["layout"]["tp"] == 4
    imported = [line.split("|")[-1].strip() for line in second.stderr.splitlines() if line.startswith("import time:")]
    assert "memsym.memo" in imported and "sympy" not in imported and "derivations" not in imported


def test_each_command_line_is_its_own_entry(tmp_path):
    cache = tmp_path / "cache"
    a, b = memsym(["estimate"], cache), memsym(["estimate", "--zero", "2"], cache)
    assert len(entries(cache)) == 2 and a.stdout != b.stdout
    assert memsym(["estimate", "--zero", "2"], cache).stdout == b.stdout == full(["estimate", "--zero", "2"], tmp_path)


def test_a_memsym_variable_is_part_of_the_key(tmp_path):
    cache = tmp_path / "cache"
    memsym(["estimate"], cache)
    memsym(["estimate"], cache, MEMSYM_SOMETHING="1")
    assert len(entries(cache)) == 2


def test_a_named_config_file_that_changes_is_read_again(tmp_path):
    cache = tmp_path / "cache"
    src = json.loads((ROOT / "derivations" / "models" / "deepseek-v3.json").read_text())
    path = tmp_path / "config.json"
    args = ["estimate", "--model", str(path), "--pp", "1"]
    path.write_text(json.dumps(src))
    before = memsym(args, cache)
    assert before.returncode == 0, before.stderr
    src["num_hidden_layers"] = src["num_hidden_layers"] - 1
    path.write_text(json.dumps(src))
    after = memsym(args, cache)
    assert after.returncode == 0 and after.stdout != before.stdout
    assert after.stdout == full(args, tmp_path)
    assert len(entries(cache)) == 2


def test_a_failure_is_not_kept(tmp_path):
    cache = tmp_path / "cache"
    p = memsym(["estimate", "--tp", "3"], cache)
    assert p.returncode == 2 and p.stderr.startswith("memsym: error:") and entries(cache) == []
    p = memsym(["estimate", "--help"], cache)
    assert p.returncode == 0 and entries(cache) == []


@pytest.mark.parametrize("tamper", [
    lambda e: e.write_text('{"stdout": 7'),                                    # garbage
    lambda e: e.write_bytes(e.read_bytes().replace(b"6,250,364,928", b"1,250,364,928")),  # a wrong number
    lambda e: e.write_bytes(e.read_bytes()[:-40]),                             # cut short
])
def test_a_tampered_entry_is_deleted_and_recomputed(tmp_path, tamper):
    cache = tmp_path / "cache"
    memsym(["estimate"], cache)
    (entry,) = entries(cache)
    assert b"6,250,364,928" in entry.read_bytes()
    tamper(entry)
    p = memsym(["estimate"], cache)
    assert p.returncode == 0 and p.stdout == full(["estimate"], tmp_path) and "6,250,364,928" in p.stdout
    assert payload(entry)["stdout"] == p.stdout


def test_cache_off_keeps_nothing(tmp_path):
    p = memsym(["estimate"], tmp_path / "cache", MEMSYM_CACHE="0")
    assert p.returncode == 0 and entries(tmp_path / "cache") == []


def test_main_called_from_python_never_reads_or_writes(tmp_path, monkeypatch, capsys):
    from memsym import cli
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path))
    assert cli.main(["estimate"]) == 0
    assert entries(tmp_path) == [] and "memsym estimate:" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["estimate", "--model", "-"], ["estimate", "--model", "/dev/null"],
                                  ["estimate", "--model", "."], ["params"], [], ["--version"]])
def test_command_lines_not_kept(argv, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path))
    assert memo.key(argv) is None


def test_the_key_follows_the_sources_and_the_named_files(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    past(tree / "a.py")
    monkeypatch.setattr(memo, "_roots", lambda: [str(tree)])
    k0 = memo.key(["estimate"])
    assert k0 is not None and k0 == memo.key(["estimate"]) and k0 != memo.key(["estimate", "--tp", "4"])
    (tree / "a.py").write_text("x = 2\n")
    assert memo.key(["estimate"]) is None  # edited under this process: the code running may be the old one
    past(tree / "a.py")
    k1 = memo.key(["estimate"])
    assert k1 not in (k0, None)
    cfg = tmp_path / "c.json"
    cfg.write_text("{}")
    k2, k3 = memo.key(["estimate", "--model", str(cfg)]), memo.key(["estimate", f"--model={cfg}"])
    cfg.write_text("{ }")
    assert memo.key(["estimate", "--model", str(cfg)]) not in (k2, None)
    assert memo.key(["estimate", f"--model={cfg}"]) not in (k3, None)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (memo.MAX_NAMED_BYTES + 1))
    assert memo.key(["estimate", "--model", str(big)]) is None


def test_a_run_that_writes_past_the_text_layer_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path))
    k = memo.key(["estimate"])
    with memo.Recorder(k) as r:
        print("text")
        sys.stdout.buffer  # e.g. binary output the copy would miss
    r.keep()
    assert entries(tmp_path) == []
    with memo.Recorder(k) as r:
        print("text")
    r.keep()
    assert [payload(p)["stdout"] for p in entries(tmp_path)] == ["text\n"]


def test_the_run_parses_the_bytes_its_key_was_made_from(tmp_path, monkeypatch):
    """The key hashes a named config's bytes and the run parses those bytes (symbolic.pinned), not the
    file as it is later: a config rewritten in between can never put B's numbers under A's key."""
    from derivations import config as cfg
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))
    src = json.loads((ROOT / "derivations" / "models" / "deepseek-v3.json").read_text())
    path = tmp_path / "race.json"
    path.write_text(json.dumps(src))
    assert memo.key(["estimate", "--model", str(path)]) is not None
    src["num_attention_heads"] = 64
    path.write_text(json.dumps(src))  # rewritten after the key was made
    assert cfg.load_model(str(path)).n_h == 128


def test_a_config_rewritten_during_runs_never_leaves_the_other_numbers(tmp_path):
    """Many runs on one config while another process swaps its content between A and B: afterwards
    every cached answer for A and for B equals the uncached one."""
    import threading
    import time
    cache = tmp_path / "cache"
    a = json.loads((ROOT / "derivations" / "models" / "deepseek-v3.json").read_text())
    b = dict(a, num_attention_heads=64)
    race = tmp_path / "race.json"
    race.write_text(json.dumps(a))
    stop = threading.Event()

    def swap():
        i = 0
        while not stop.is_set():
            race.write_text(json.dumps(b if i % 2 else a))
            i += 1
            time.sleep(0.003)
    t = threading.Thread(target=swap)
    t.start()
    seqs = [str(2100 + 2 * i) for i in range(6)]
    try:
        for s in seqs:
            memsym(["estimate", "--model", str(race), "--tp", "1", "--seq", s, "--json"], cache)
    finally:
        stop.set()
        t.join()
    for content in (a, b):
        race.write_text(json.dumps(content))
        for s in seqs:
            args = ["estimate", "--model", str(race), "--tp", "1", "--seq", s, "--json"]
            assert memsym(args, cache).stdout == full(args, tmp_path)


def test_an_undecodable_path_is_read_as_the_uncached_run_reads_it(tmp_path):
    """A config in a folder whose name is not UTF-8: the cached run keys it by its bytes, as the full run reads it."""
    folder = os.path.join(os.fsencode(tmp_path), b"a\xffb")
    os.mkdir(folder)
    path = os.path.join(folder, b"config.json")
    with open(path, "wb") as f:
        f.write((ROOT / "tests" / "data" / "tiny" / "config.json").read_bytes())
    args = ["estimate", "--model", os.fsdecode(path), "--dp", "1", "--tp", "1", "--pp", "1", "--ep", "1", "--json"]
    first, second = memsym(args, tmp_path / "cache"), memsym(args, tmp_path / "cache")
    assert first.returncode == second.returncode == 0 and first.stdout == second.stdout == full(args, tmp_path)


def test_a_full_or_closed_stdout_is_one_line_or_nothing(tmp_path):
    """A replay writes to stdout as the full run does: /dev/full is one line, exit 2; a closed stdout, exit 0."""
    cache = tmp_path / "cache"
    memsym(["estimate", "--seq", "1034"], cache)
    env = {**os.environ, "MEMSYM_CACHE_DIR": str(cache)}
    with open("/dev/full", "w") as full_dev:
        p = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--seq", "1034"], stdout=full_dev,
                           stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--seq", "1034"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, timeout=120,
                       preexec_fn=lambda: os.close(1))
    assert p.returncode == 0 and "Traceback" not in p.stderr


def test_a_cache_warning_stays_out_of_an_error_and_out_of_replays(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    p = memsym(["estimate", "--tp", "x"], shared)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "cache not used" not in p.stderr
    p = memsym(["estimate"], shared)
    assert p.returncode == 0 and p.stderr.count("memsym: cache not used") == 1 and p.stderr.count("\n") == 1
