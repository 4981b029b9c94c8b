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
    return sorted(d.glob("*.json")) if d.exists() else []


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


def test_a_corrupted_entry_is_ignored_and_rewritten(tmp_path):
    cache = tmp_path / "cache"
    memsym(["estimate"], cache)
    (entry,) = entries(cache)
    entry.write_text('{"stdout": 7')
    p = memsym(["estimate"], cache)
    assert p.returncode == 0 and p.stdout == full(["estimate"], tmp_path)
    assert json.loads(entry.read_text())["stdout"] == p.stdout


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
    monkeypatch.setattr(memo, "_roots", lambda: [str(tree)])
    k0 = memo.key(["estimate"])
    assert k0 == memo.key(["estimate"]) and k0 != memo.key(["estimate", "--tp", "4"])
    (tree / "a.py").write_text("x = 2\n")
    k1 = memo.key(["estimate"])
    assert k1 != k0
    cfg = tmp_path / "c.json"
    cfg.write_text("{}")
    k2, k3 = memo.key(["estimate", "--model", str(cfg)]), memo.key(["estimate", f"--model={cfg}"])
    cfg.write_text("{ }")
    assert memo.key(["estimate", "--model", str(cfg)]) not in (k2, None)
    assert memo.key(["estimate", f"--model={cfg}"]) not in (k3, None)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (memo.MAX_NAMED_BYTES + 1))
    assert memo.key(["estimate", "--model", str(big)]) is None


def test_the_oldest_entries_are_dropped(tmp_path):
    for i in range(5):
        p = tmp_path / f"{i}.json"
        p.write_text("{}")
        os.utime(p, ns=(i * 10 ** 9, i * 10 ** 9))
    memo._evict(str(tmp_path), most=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2.json", "3.json", "4.json"]


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
    assert [json.loads(p.read_text())["stdout"] for p in entries(tmp_path)] == ["text\n"]
