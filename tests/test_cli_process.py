"""The ``memsym`` process with its caches on prints what a run with every cache off prints (the
expectation), whatever happens around it: a config rewritten during runs, a path that is not UTF-8,
a full or closed stdout, an unusable cache folder (its warning never makes an error two lines)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def memsym(args, cache_dir, importtime=False, **env):
    cmd = [sys.executable] + (["-X", "importtime"] if importtime else []) + ["-m", "memsym"] + list(args)
    e = {**os.environ, "MEMSYM_CACHE_DIR": str(cache_dir), **env}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=e, timeout=120)


def full(args, tmp_path):
    """The output with every cache off: what a cached run must print."""
    p = memsym(args, tmp_path / "off", MEMSYM_CACHE="0")
    assert p.returncode == 0, p.stderr
    return p.stdout


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

def test_a_cache_warning_stays_out_of_an_error(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    p = memsym(["search", "--gpus", "x"], shared)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "cache not used" not in p.stderr
    p = memsym(["fit", "--hbm", "80GiB"], shared)  # (fit keeps the built terms; search's kernels are generated)
    assert p.returncode == 0 and p.stderr.count("memsym: cache not used") == 1 and p.stderr.count("\n") == 1


def test_report_progress_and_file_lines_stay_one_line_each(tmp_path):
    """An --out folder whose name holds a line break cannot split or forge a progress line or a
    written file's line: every stderr line is memsym's, every stdout line one file that exists."""
    out = tmp_path / "a\nmemsym report: done"
    r = memsym(["report", "--format", "md", "--out", str(out)], tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    err = r.stderr.splitlines()
    assert err and all(line.startswith("memsym report: ") for line in err), err
    assert not any(line == "memsym report: done" for line in err)
    files = r.stdout.splitlines()
    assert files and all("\\n" in line for line in files)
    assert (out / "report.md").is_file()


def test_help_and_version_load_no_cache_and_no_maths(tmp_path):
    """``memsym --help`` stays instant: no cache (hmac, pickle), no sympy or numpy imported."""
    for argv in (["--help"], ["--version"]):
        p = memsym(argv, tmp_path / "cache", importtime=True)
        assert p.returncode == 0
        loaded = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if "|" in line}
        assert loaded and not loaded & {"symbolic.cache", "hmac", "pickle", "sympy", "numpy"}, argv


def test_estimate_loads_no_cache_and_no_sympy(tmp_path):
    """A new estimate is computed from the generated evaluators: no sympy, and no cache module (it uses
    none; its warning deferral is symbolic/notices.py)."""
    p = memsym(["estimate", "--mbs", "3", "--json"], tmp_path / "cache", importtime=True)
    assert p.returncode == 0
    loaded = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if "|" in line}
    assert "derivations.evaluate" in loaded and not loaded & {"symbolic.cache", "sympy"}
